// Token + position embedding.
#include "kernels/cpu/ops.h"

namespace adacc::cpu {

void encoder_forward(const KernelContext& ctx, Act out_act, const int* tokens, ConstAct wte_act, ConstAct wpe_act, int B,
                     int T, int C) {
    float* out = out_act.as<float>();
    const float *wte = wte_act.as<float>(), *wpe = wpe_act.as<float>();
#pragma omp parallel for collapse(2) num_threads(team(ctx))
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t) {
            float* o = out + (static_cast<long>(b) * T + t) * C;
            const float* e = wte + static_cast<long>(tokens[b * T + t]) * C;
            const float* p = wpe + static_cast<long>(t) * C;
#pragma omp simd
            for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
        }
}

// Rows of dwte are scattered by token id, so two positions may hit the same row: run serially
// over tokens but parallel over channels, which is race-free and deterministic.
void encoder_backward(const KernelContext& ctx, float* dwte, float* dwpe, ConstAct dout_act, const int* tokens, int B,
                      int T, int C) {
    const float* dout = dout_act.as<float>();
#pragma omp parallel for num_threads(team(ctx))
    for (int c0 = 0; c0 < C; c0 += 64) {
        const int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int b = 0; b < B; ++b)
            for (int t = 0; t < T; ++t) {
                const float* d = dout + (static_cast<long>(b) * T + t) * C;
                float* e = dwte + static_cast<long>(tokens[b * T + t]) * C;
                float* p = dwpe + static_cast<long>(t) * C;
                for (int c = c0; c < c1; ++c) {
                    e[c] += d[c];
                    p[c] += d[c];
                }
            }
    }
}

}  // namespace adacc::cpu
