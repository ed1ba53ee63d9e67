// LayerNorm over the channel dimension (eps 1e-5, biased variance, as GPT-2).
#include <cmath>

#include "kernels/cpu/ops.h"

namespace adacc::cpu {

void layernorm_forward(const KernelContext& ctx, Act out_act, float* mean, float* rstd, ConstAct inp_act,
                       ConstAct weight_act, ConstAct bias_act, int N, int C) {
    float* out = out_act.as<float>();
    const float* inp = inp_act.as<float>();
    const float *weight = weight_act.as<float>(), *bias = bias_act.as<float>();
#pragma omp parallel for num_threads(team(ctx))
    for (int i = 0; i < N; ++i) {
        const float* x = inp + static_cast<long>(i) * C;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < C; ++c) sum += x[c];
        const float m = sum / C;
        float var = 0.0f;
#pragma omp simd reduction(+ : var)
        for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
        const float s = 1.0f / std::sqrt(var / C + 1e-5f);
        float* o = out + static_cast<long>(i) * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
        mean[i] = m;
        rstd[i] = s;
    }
}

// Two passes so that no two threads write the same address: rows in parallel for dinp, then
// channel blocks in parallel for dweight / dbias (each thread sums its channels over all rows).
void layernorm_backward(const KernelContext& ctx, Act dinp_act, float* dweight, float* dbias, ConstAct dout_act,
                        ConstAct inp_act, ConstAct weight_act, const float* mean, const float* rstd, int N, int C) {
    float* dinp = dinp_act.as<float>();
    const float* weight = weight_act.as<float>();
    const float* dout = dout_act.as<float>();
    const float* inp = inp_act.as<float>();
#pragma omp parallel for num_threads(team(ctx))
    for (int i = 0; i < N; ++i) {
        const float* x = inp + static_cast<long>(i) * C;
        const float* d = dout + static_cast<long>(i) * C;
        float* dx = dinp + static_cast<long>(i) * C;
        const float m = mean[i], s = rstd[i];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
        for (int c = 0; c < C; ++c) {
            const float dnorm = weight[c] * d[c];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * (x[c] - m) * s;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
#pragma omp simd
        for (int c = 0; c < C; ++c) {
            const float norm = (x[c] - m) * s;
            dx[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
#pragma omp parallel for num_threads(team(ctx))
    for (int c0 = 0; c0 < C; c0 += 32) {
        const int c1 = c0 + 32 < C ? c0 + 32 : C;
        for (int i = 0; i < N; ++i) {
            const float* x = inp + static_cast<long>(i) * C;
            const float* d = dout + static_cast<long>(i) * C;
            const float m = mean[i], s = rstd[i];
            for (int c = c0; c < c1; ++c) {
                dweight[c] += (x[c] - m) * s * d[c];
                dbias[c] += d[c];
            }
        }
    }
}

// The CPU runs residual adds and layernorms as two kernels (a fused pass would gain it nothing), so
// the twin of the device's fused kernel is the two kernels it fuses, run in turn.
void residual_layernorm_forward(const KernelContext& ctx, Act sum, Act out, float* mean, float* rstd, ConstAct residual,
                                ConstAct inp, const unsigned char* mask, float p, ConstAct weight, ConstAct bias, int N,
                                int C) {
    residual_dropout_forward(ctx, sum, residual, inp, mask, p, static_cast<long>(N) * C);
    layernorm_forward(ctx, out, mean, rstd, sum, weight, bias, N, C);
}

}  // namespace adacc::cpu
