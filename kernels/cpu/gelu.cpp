// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include "kernels/cpu/ops.h"
#include "kernels/vector_math.h"

namespace adacc::cpu {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
}

void gelu_forward(const KernelContext& ctx, Act out_act, ConstAct inp_act, long n) {
    float* out = out_act.as<float>();
    const float* inp = inp_act.as<float>();
#pragma omp parallel for simd schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) {
        const float x = inp[i];
        out[i] = 0.5f * x * (1.0f + tanh_approx(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
    }
}

void gelu_backward(const KernelContext& ctx, Act dinp_act, ConstAct inp_act, ConstAct dout_act, long n) {
    float* dinp = dinp_act.as<float>();
    const float* inp = inp_act.as<float>();
    const float* dout = dout_act.as<float>();
#pragma omp parallel for simd schedule(static) num_threads(team(ctx))
    for (long i = 0; i < n; ++i) {
        const float x = inp[i];
        const float u = kSqrt2OverPi * (x + 0.044715f * x * x * x);
        const float th = tanh_approx(u);
        const float sech2 = 1.0f - th * th;
        const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
}

}  // namespace adacc::cpu
