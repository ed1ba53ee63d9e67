// AdamW (Loshchilov & Hutter; PyTorch's update order) and the global gradient norm.
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/grad_clip.h"

namespace adacc::cpu {

void global_norm(const KernelContext& ctx, float* norm, const float* x, long n) {
    double total = 0.0;
#pragma omp parallel for simd reduction(+ : total) schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
    *norm = static_cast<float>(std::sqrt(total));
}

void adamw_update(const KernelContext& ctx, float* params, Act working, const float* grads, float* m, float* v, long n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float grad_clip, const float* norm,
                  int t) {
    if (!std::isfinite(*norm)) return;
    const float grad_scale = clip_scale(grad_clip, *norm);
    const float bias1 = 1.0f - std::pow(beta1, static_cast<float>(t));
    const float bias2 = 1.0f - std::pow(beta2, static_cast<float>(t));
    bf16* working_bf16 = working.as<bf16>();
#pragma omp parallel for simd schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) {
        const float g = grads[i] * grad_scale;
        const float mi = beta1 * m[i] + (1.0f - beta1) * g;
        const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        const float update = (mi / bias1) / (std::sqrt(vi / bias2) + eps);
        params[i] -= lr * (update + weight_decay * params[i]);
    }
    if (working_bf16) {
#pragma omp parallel for schedule(static) num_threads(team(ctx))
        for (long i = 0; i < n; ++i) working_bf16[i] = to_bf16(params[i]);
    }
}

}  // namespace adacc::cpu
