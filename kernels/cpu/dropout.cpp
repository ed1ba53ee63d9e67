// Dropout masks from the counter-based RNG, and the residual additions they gate.
#include "kernels/cpu/ops.h"
#include "kernels/rng.h"

namespace adacc::cpu {

void dropout_mask(const KernelContext& ctx, unsigned char* mask, long n, float p, unsigned long long key) {
#pragma omp parallel for schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) mask[i] = rng_uniform(key, static_cast<std::uint64_t>(i)) >= p ? 1 : 0;
}

void residual_dropout_forward(const KernelContext& ctx, Act out_act, ConstAct residual_act, ConstAct inp_act,
                              const unsigned char* mask, float p, long n) {
    float* out = out_act.as<float>();
    const float* residual = residual_act.as<float>();
    const float* inp = inp_act.as<float>();
    if (!mask) {
#pragma omp parallel for simd schedule(static) num_threads(team(ctx))
        for (long i = 0; i < n; ++i) out[i] = residual[i] + inp[i];
        return;
    }
    const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for simd schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) out[i] = residual[i] + (mask[i] ? inp[i] * scale : 0.0f);
}

void residual_dropout_backward(const KernelContext& ctx, Act dinp_act, ConstAct dout_act, const unsigned char* mask,
                               float p, long n) {
    float* dinp = dinp_act.as<float>();
    const float* dout = dout_act.as<float>();
    const float scale = mask ? 1.0f / (1.0f - p) : 1.0f;
#pragma omp parallel for simd schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) dinp[i] = (!mask || mask[i]) ? dout[i] * scale : 0.0f;
}

void dropout_forward(const KernelContext& ctx, Act out_act, ConstAct inp_act, const unsigned char* mask, float p,
                     long n) {
    float* out = out_act.as<float>();
    const float* inp = inp_act.as<float>();
    const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for simd schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) out[i] = mask[i] ? inp[i] * scale : 0.0f;
}

}  // namespace adacc::cpu
