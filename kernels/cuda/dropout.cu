// Dropout masks from the counter-based RNG of kernels/rng.h (the same mix64 / rng_uniform the CPU
// twin runs, compiled as device code), and the residual additions they gate, elementwise.
//
// The mask is the CPU's bit for bit: element i's bit is a pure function of (key, i). The scale
// 1 / (1 - p) is computed on the host exactly as kernels/cpu/dropout.cpp computes it, and the
// products are rounded before the addition (__fmul_rn: never contracted into an FMA), as the
// CPU's vectorised loops do, so the outputs are the CPU's bit for bit too.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/rng.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void dropout_mask_kernel(unsigned char* mask, long n, float p, unsigned long long key) {
    const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    mask[i] = rng_uniform(key, static_cast<std::uint64_t>(i)) >= p ? 1 : 0;
}

// Activations of type T (float for now; a bf16 variant converts in the loads and stores only).
// mask null: out = residual + inp.
template <typename T>
__global__ void residual_dropout_forward_kernel(T* out, const T* residual, const T* inp, const unsigned char* mask,
                                                float scale, long n) {
    const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float r = static_cast<float>(residual[i]), x = static_cast<float>(inp[i]);
    if (!mask) out[i] = static_cast<T>(r + x);
    else out[i] = static_cast<T>(r + (mask[i] ? __fmul_rn(x, scale) : 0.0f));
}

// out = inp * mask * scale (mask null: scale 1, every element kept). In place allowed: each
// thread reads its element before writing it.
template <typename T>
__global__ void dropout_scale_kernel(T* out, const T* inp, const unsigned char* mask, float scale, long n) {
    const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = static_cast<T>((!mask || mask[i]) ? static_cast<float>(inp[i]) * scale : 0.0f);
}

}  // namespace

void dropout_mask(const KernelContext& ctx, unsigned char* mask, long n, float p, unsigned long long key) {
    if (n == 0) return;
    ADACC_LAUNCH(dropout_mask_kernel, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(mask, n, p, key);
    check_launch("dropout_mask");
}

void residual_dropout_forward(const KernelContext& ctx, Act out_act, ConstAct residual_act, ConstAct inp_act,
                              const unsigned char* mask, float p, long n) {
    float* out = out_act.as<float>();
    const float* residual = residual_act.as<float>();
    const float* inp = inp_act.as<float>();
    if (n == 0) return;
    const float scale = mask ? 1.0f / (1.0f - p) : 1.0f;
    ADACC_LAUNCH(residual_dropout_forward_kernel<float>, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(
        out, residual, inp, mask, scale, n);
    check_launch("residual_dropout_forward");
}

// The residual branch's gradient is dout itself; dinp = dout * mask / (1 - p).
void residual_dropout_backward(const KernelContext& ctx, Act dinp_act, ConstAct dout_act, const unsigned char* mask,
                               float p, long n) {
    float* dinp = dinp_act.as<float>();
    const float* dout = dout_act.as<float>();
    if (n == 0) return;
    const float scale = mask ? 1.0f / (1.0f - p) : 1.0f;
    ADACC_LAUNCH(dropout_scale_kernel<float>, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(dinp, dout, mask, scale,
                                                                                                n);
    check_launch("residual_dropout_backward");
}

void dropout_forward(const KernelContext& ctx, Act out_act, ConstAct inp_act, const unsigned char* mask, float p,
                     long n) {
    float* out = out_act.as<float>();
    const float* inp = inp_act.as<float>();
    if (n == 0) return;
    const float scale = mask ? 1.0f / (1.0f - p) : 1.0f;  // the CPU twin requires a mask; null keeps all
    ADACC_LAUNCH(dropout_scale_kernel<float>, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(out, inp, mask, scale, n);
    check_launch("dropout_forward");
}

}  // namespace adacc::cuda
