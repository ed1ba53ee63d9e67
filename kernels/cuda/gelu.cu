// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr int kThreads = 256;

// tanh as the CPU twin computes it (kernels/vector_math.h), 1 - 2 / (1 + e^(2u)), so both
// backends round the same way where tanh saturates (the derivative's 1 - tanh^2 cancels there).
__device__ inline float tanh_via_exp(float u) { return 1.0f - 2.0f / (1.0f + expf(2.0f * u)); }

__global__ void gelu_forward_kernel(float* out, const float* inp, long n) {
    const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanh_via_exp(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

// dinp may alias dout: each thread reads its element before writing it.
__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, long n) {
    const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = inp[i];
    const float th = tanh_via_exp(kSqrt2OverPi * (x + 0.044715f * x * x * x));
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
}

}  // namespace

void gelu_forward(const KernelContext& ctx, Act out_act, ConstAct inp_act, long n) {
    float* out = out_act.as<float>();
    const float* inp = inp_act.as<float>();
    if (n == 0) return;
    ADACC_LAUNCH(gelu_forward_kernel, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(out, inp, n);
    check_launch("gelu_forward");
}

void gelu_backward(const KernelContext& ctx, Act dinp_act, ConstAct inp_act, ConstAct dout_act, long n) {
    float* dinp = dinp_act.as<float>();
    const float* inp = inp_act.as<float>();
    const float* dout = dout_act.as<float>();
    if (n == 0) return;
    ADACC_LAUNCH(gelu_backward_kernel, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(dinp, inp, dout, n);
    check_launch("gelu_backward");
}

}  // namespace adacc::cuda
