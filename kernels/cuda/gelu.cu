// GELU, tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise.
// Activations of type T (float or bf16): loaded to fp32, computed in fp32, rounded once on store,
// moved 16 bytes at a time (kernels/cuda/cuda_common.cuh: load_pack, store_pack).
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/gelu_math.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 256;

// The one GELU formula (kernels/gelu_math.h) with the library's expf: tanh as 1 - 2 / (1 + e^(2u)),
// as the CPU twin computes it, so both backends round the same way where tanh saturates.
struct LibraryExp {
    __device__ float operator()(float v) const { return expf(v); }
};
__device__ inline float gelu(float x) { return gelu_value(x, LibraryExp{}); }
__device__ inline float gelu_slope(float x) { return gelu_derivative(x, LibraryExp{}); }

// One pack of kPack elements per thread (cuda_common.cuh): 128-bit loads and stores where aligned.
template <typename T>
__global__ void gelu_forward_kernel(T* out, const T* inp, long n, bool aligned) {
    const long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * kPack<T>;
    if (i >= n) return;
    float x[kPack<T>];
    load_pack(x, inp, i, n, aligned);
    for (int j = 0; j < kPack<T>; ++j) x[j] = gelu(x[j]);
    store_pack(out, i, n, x, aligned);
}

// dinp may alias dout: each thread reads its pack before writing it.
template <typename T>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, long n, bool aligned) {
    const long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * kPack<T>;
    if (i >= n) return;
    float x[kPack<T>], d[kPack<T>];
    load_pack(x, inp, i, n, aligned);
    load_pack(d, dout, i, n, aligned);
    for (int j = 0; j < kPack<T>; ++j) d[j] = gelu_slope(x[j]) * d[j];
    store_pack(dinp, i, n, d, aligned);
}

}  // namespace

void gelu_forward(const KernelContext& ctx, Act out_act, ConstAct inp_act, long n) {
    const DType type = activation_type("gelu_forward", {out_act, inp_act});
    if (n == 0) return;
    with_activation_type(type, "gelu_forward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* out = device_ptr<T>(out_act);
        const T* inp = device_ptr<T>(inp_act);
        ADACC_LAUNCH(gelu_forward_kernel<T>, ceil_div(n, kThreads * kPack<T>), kThreads, 0, ctx.stream)
        (out, inp, n, packs_aligned({out, inp}));
    });
    check_launch("gelu_forward");
}

void gelu_backward(const KernelContext& ctx, Act dinp_act, ConstAct inp_act, ConstAct dout_act, long n) {
    const DType type = activation_type("gelu_backward", {dinp_act, inp_act, dout_act});
    if (n == 0) return;
    with_activation_type(type, "gelu_backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* dinp = device_ptr<T>(dinp_act);
        const T *inp = device_ptr<T>(inp_act), *dout = device_ptr<T>(dout_act);
        ADACC_LAUNCH(gelu_backward_kernel<T>, ceil_div(n, kThreads * kPack<T>), kThreads, 0, ctx.stream)
        (dinp, inp, dout, n, packs_aligned({dinp, inp, dout}));
    });
    check_launch("gelu_backward");
}

}  // namespace adacc::cuda
