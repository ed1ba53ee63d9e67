// Dropout masks from the counter-based RNG of kernels/rng.h (the same mix64 / rng_uniform the CPU
// twin runs, compiled as device code), and the residual additions they gate, elementwise.
//
// The mask is the CPU's bit for bit: element i's bit is a pure function of (key, i). The scale
// 1 / (1 - p) is computed on the host exactly as kernels/cpu/dropout.cpp computes it, and the
// products are rounded before the addition (__fmul_rn: never contracted into an FMA), as the
// CPU's vectorised loops do, so the outputs are the CPU's bit for bit too. Activations are of
// type T (float or bf16): loaded to fp32, computed as in fp32, rounded once on store, so a bf16
// output is the fp32 output rounded to bf16. The activations move 16 bytes at a time
// (kernels/cuda/cuda_common.cuh: load_pack, store_pack).
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/rng.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 256;

// 16 mask bytes per thread, one 128-bit store where the mask is aligned and the pack whole.
__global__ void dropout_mask_kernel(unsigned char* mask, long n, float p, unsigned long long key, bool aligned) {
    constexpr int P = kPack<unsigned char>;
    const long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * P;
    if (i >= n) return;
    Pack<unsigned char> bytes;
    for (int j = 0; j < P; ++j)
        bytes.v[j] = i + j < n && rng_uniform(key, static_cast<std::uint64_t>(i + j)) >= p ? 1 : 0;
    if (aligned && i + P <= n) {
        store_whole_pack(mask + i, bytes);
    } else {
        for (int j = 0; j < P && i + j < n; ++j) mask[i + j] = bytes.v[j];
    }
}

// mask null: out = residual + inp. One pack of kPack elements per thread (cuda_common.cuh).
template <typename T>
__global__ void residual_dropout_forward_kernel(T* out, const T* residual, const T* inp, const unsigned char* mask,
                                                float scale, long n, bool aligned) {
    const long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * kPack<T>;
    if (i >= n) return;
    float r[kPack<T>], x[kPack<T>];
    load_pack(r, residual, i, n, aligned);
    load_pack(x, inp, i, n, aligned);
    for (int j = 0; j < kPack<T> && i + j < n; ++j) r[j] = residual_dropout(r[j], x[j], mask, i + j, scale);
    store_pack(out, i, n, r, aligned);
}

// out = inp * mask * scale (mask null: scale 1, every element kept). In place allowed: each
// thread reads its pack before writing it.
template <typename T>
__global__ void dropout_scale_kernel(T* out, const T* inp, const unsigned char* mask, float scale, long n,
                                     bool aligned) {
    const long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * kPack<T>;
    if (i >= n) return;
    float x[kPack<T>];
    load_pack(x, inp, i, n, aligned);
    for (int j = 0; j < kPack<T> && i + j < n; ++j) x[j] = (!mask || mask[i + j]) ? x[j] * scale : 0.0f;
    store_pack(out, i, n, x, aligned);
}

// out = inp * mask * scale on activations of one dtype, the launch behind the two kernels below.
void launch_dropout_scale(const KernelContext& ctx, const char* kernel, Act out_act, ConstAct inp_act,
                          const unsigned char* mask, float scale, long n) {
    const DType type = activation_type(kernel, {out_act, inp_act});
    if (n == 0) return;
    with_activation_type(type, kernel, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* out = device_ptr<T>(out_act);
        const T* inp = device_ptr<T>(inp_act);
        ADACC_LAUNCH(dropout_scale_kernel<T>, ceil_div(n, kThreads * kPack<T>), kThreads, 0, ctx.stream)
        (out, inp, mask, scale, n, packs_aligned({out, inp}));
    });
    check_launch(kernel);
}

}  // namespace

void dropout_mask(const KernelContext& ctx, unsigned char* mask, long n, float p, unsigned long long key) {
    if (n == 0) return;
    ADACC_LAUNCH(dropout_mask_kernel, ceil_div(n, kThreads * kPack<unsigned char>), kThreads, 0, ctx.stream)
    (mask, n, p, key, packs_aligned({mask}));
    check_launch("dropout_mask");
}

void residual_dropout_forward(const KernelContext& ctx, Act out_act, ConstAct residual_act, ConstAct inp_act,
                              const unsigned char* mask, float p, long n) {
    const DType type = activation_type("residual_dropout_forward", {out_act, residual_act, inp_act});
    if (n == 0) return;
    const float scale = dropout_scale(mask, p);
    with_activation_type(type, "residual_dropout_forward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* out = device_ptr<T>(out_act);
        const T *residual = device_ptr<T>(residual_act), *inp = device_ptr<T>(inp_act);
        ADACC_LAUNCH(residual_dropout_forward_kernel<T>, ceil_div(n, kThreads * kPack<T>), kThreads, 0, ctx.stream)
        (out, residual, inp, mask, scale, n, packs_aligned({out, residual, inp}));
    });
    check_launch("residual_dropout_forward");
}

// The residual branch's gradient is dout itself; dinp = dout * mask / (1 - p).
void residual_dropout_backward(const KernelContext& ctx, Act dinp_act, ConstAct dout_act, const unsigned char* mask,
                               float p, long n) {
    launch_dropout_scale(ctx, "residual_dropout_backward", dinp_act, dout_act, mask, dropout_scale(mask, p), n);
}

void dropout_forward(const KernelContext& ctx, Act out_act, ConstAct inp_act, const unsigned char* mask, float p,
                     long n) {
    // The CPU twin requires a mask; null keeps all.
    launch_dropout_scale(ctx, "dropout_forward", out_act, inp_act, mask, dropout_scale(mask, p), n);
}

}  // namespace adacc::cuda
