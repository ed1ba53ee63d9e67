// AdamW (PyTorch's update order, decoupled weight decay) elementwise, and the global gradient
// norm as a two-pass fixed-order reduction in double. The norm stays in device memory: AdamW
// reads it there for clipping and the non-finite skip, so a step queues without a host sync.
//
// adamw_update runs the CPU twin's formula (kernels/cpu/adamw.cpp) operation for operation. The
// CPU build (GCC, -march=native, whose default -ffp-contract=fast fuses a * b + c) computes the
// moment updates and the parameter step as four FMAs; they are written here as explicit fmaf, the
// bias corrections and 1 - beta are computed on the host with the CPU's expressions, and nothing
// else is left for the device compiler to contract, so a build whose CPU twin fuses the same way
// gets the CPU's parameters bit for bit (and any build matches within a few ulp).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/grad_clip.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 256;
// Blocks of the first global_norm pass: a fixed count (a function of n only, never of the
// device), each striding over the tensor, so the partials and their order are always the same.
constexpr int kSumBlocks = 1024;
constexpr int kSumThreads = 256;

// The clipping factor is the CPU twin's (kernels/grad_clip.h), evaluated per thread from the norm
// in memory (IEEE division on both backends, so the same float). One pack of 4 floats per thread
// (kernels/cuda/cuda_common.cuh): 128-bit loads and stores of the fp32 state where aligned.
__global__ void adamw_kernel(float* params, __nv_bfloat16* working, const float* grads, float* m, float* v, long n,
                             float lr, float beta1, float beta2, float one_minus_beta1, float one_minus_beta2,
                             float bias1, float bias2, float eps, float weight_decay, float grad_clip,
                             const float* norm, bool aligned) {
    constexpr int P = kPack<float>;
    const long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * P;
    const float total_norm = *norm;
    if (i >= n || !isfinite(total_norm)) return;
    const float grad_scale = clip_scale(grad_clip, total_norm);
    float p[P], g[P], mi[P], vi[P];
    load_pack(p, params, i, n, aligned);
    load_pack(g, grads, i, n, aligned);
    load_pack(mi, m, i, n, aligned);
    load_pack(vi, v, i, n, aligned);
    for (int j = 0; j < P; ++j) {
        const float gj = g[j] * grad_scale;
        mi[j] = fmaf(beta1, mi[j], one_minus_beta1 * gj);
        vi[j] = fmaf(beta2, vi[j], one_minus_beta2 * gj * gj);
        const float update = (mi[j] / bias1) / (sqrtf(vi[j] / bias2) + eps);
        p[j] = fmaf(-lr, fmaf(weight_decay, p[j], update), p[j]);  // p - lr * (update + weight_decay * p)
    }
    store_pack(m, i, n, mi, aligned);
    store_pack(v, i, n, vi, aligned);
    store_pack(params, i, n, p, aligned);
    if (working)
        for (int j = 0; j < P && i + j < n; ++j) working[i + j] = __float2bfloat16_rn(p[j]);
}

// Block-wide sum in double (block size a multiple of 32); the result is valid in thread 0.
__device__ inline double block_sum_double(double v) {
    __shared__ double partials[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) partials[warp] = v;
    __syncthreads();
    v = lane < warps ? partials[lane] : 0.0;
    return warp_sum(v);
}

// partials[block] = sum of x[i]^2 over the packs of 4 floats at i = 4 (block * blockDim +
// thread + k * gridDim * blockDim), each pack's elements in order: 128-bit loads where x is
// aligned, and an order that depends on n alone.
__global__ void norm_partial_kernel(double* partials, const float* x, long n, bool aligned) {
    constexpr int P = kPack<float>;
    double acc = 0.0;
    const long stride = static_cast<long>(gridDim.x) * blockDim.x * P;
    for (long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * P; i < n; i += stride) {
        float v[P];
        load_pack(v, x, i, n, aligned);
        for (int j = 0; j < P; ++j) {  // past n: 0, adds nothing
            const double xi = v[j];
            acc += xi * xi;
        }
    }
    acc = block_sum_double(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// *norm = sqrt(sum of the partials), one block, in a fixed order.
__global__ void norm_final_kernel(float* norm, const double* partials, int count) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
    acc = block_sum_double(acc);
    if (threadIdx.x == 0) *norm = static_cast<float>(sqrt(acc));
}

}  // namespace

void adamw_update(const KernelContext& ctx, float* params, Act working, const float* grads, float* m, float* v, long n,
                  float lr, float beta1, float beta2, float eps, float weight_decay, float grad_clip, const float* norm,
                  int t) {
    if (n == 0) return;
    // On the host, with the CPU twin's expressions, so both backends divide by the same values.
    const float bias1 = 1.0f - std::pow(beta1, static_cast<float>(t));
    const float bias2 = 1.0f - std::pow(beta2, static_cast<float>(t));
    __nv_bfloat16* working_bf16 = device_ptr<__nv_bfloat16>(working);
    ADACC_LAUNCH(adamw_kernel, ceil_div(n, kThreads * kPack<float>), kThreads, 0, ctx.stream)
    (params, working_bf16, grads, m, v, n, lr, beta1, beta2, 1.0f - beta1, 1.0f - beta2, bias1, bias2, eps,
     weight_decay, grad_clip, norm, packs_aligned({params, grads, m, v}));
    check_launch("adamw_update");
}

void global_norm(const KernelContext& ctx, float* norm, const float* x, long n) {
    if ((kSumBlocks + 1) * sizeof(double) > ctx.reduction_scratch_bytes)
        throw std::invalid_argument("global_norm: the reduction scratch is too small");
    const unsigned blocks = n == 0 ? 1u : std::min<unsigned>(ceil_div(n, kSumThreads * kPack<float>), kSumBlocks);
    double* partials = static_cast<double*>(ctx.reduction_scratch);
    ADACC_LAUNCH(norm_partial_kernel, blocks, kSumThreads, 0, ctx.stream)(partials, x, n, packs_aligned({x}));
    check_launch("global_norm (partials)");
    ADACC_LAUNCH(norm_final_kernel, 1, kSumThreads, 0, ctx.stream)(norm, partials, static_cast<int>(blocks));
    check_launch("global_norm (final)");
}

}  // namespace adacc::cuda
