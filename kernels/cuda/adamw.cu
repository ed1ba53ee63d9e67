// AdamW (PyTorch's update order, decoupled weight decay) elementwise, and the sum of squares of
// the gradients (the global norm's) as a two-pass fixed-order reduction in double.
//
// adamw_update runs the CPU twin's formula (kernels/cpu/adamw.cpp) operation for operation. The
// CPU build (GCC, -march=native, whose default -ffp-contract=fast fuses a * b + c) computes the
// moment updates and the parameter step as four FMAs; they are written here as explicit fmaf, the
// bias corrections and 1 - beta are computed on the host with the CPU's expressions, and nothing
// else is left for the device compiler to contract, so a build whose CPU twin fuses the same way
// gets the CPU's parameters bit for bit (and any build matches within a few ulp).
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 256;
// Blocks of the first sum_of_squares pass: a fixed count (a function of n only, never of the
// device), each striding over the tensor, so the partials and their order are always the same.
constexpr int kSumBlocks = 1024;
constexpr int kSumThreads = 256;

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, long n, float lr, float beta1,
                             float beta2, float one_minus_beta1, float one_minus_beta2, float bias1, float bias2,
                             float eps, float weight_decay, float grad_scale) {
    const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = grads[i] * grad_scale;
    const float mi = fmaf(beta1, m[i], one_minus_beta1 * g);
    const float vi = fmaf(beta2, v[i], one_minus_beta2 * g * g);
    m[i] = mi;
    v[i] = vi;
    const float update = (mi / bias1) / (sqrtf(vi / bias2) + eps);
    const float p = params[i];
    params[i] = fmaf(-lr, fmaf(weight_decay, p, update), p);  // p - lr * (update + weight_decay * p)
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

// partials[block] = sum of x[i]^2 over i = block * blockDim + thread + k * gridDim * blockDim.
__global__ void sum_of_squares_partial_kernel(double* partials, const float* x, long n) {
    double acc = 0.0;
    const long stride = static_cast<long>(gridDim.x) * blockDim.x;
    for (long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double xi = x[i];
        acc += xi * xi;
    }
    acc = block_sum_double(acc);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// result[0] = sum of the partials, one block, in a fixed order.
__global__ void sum_of_squares_final_kernel(double* result, const double* partials, int count) {
    double acc = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
    acc = block_sum_double(acc);
    if (threadIdx.x == 0) result[0] = acc;
}

}  // namespace

void adamw_update(const KernelContext& ctx, float* params, const float* grads, float* m, float* v, long n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    if (n == 0) return;
    // On the host, with the CPU twin's expressions, so both backends divide by the same values.
    const float bias1 = 1.0f - std::pow(beta1, static_cast<float>(t));
    const float bias2 = 1.0f - std::pow(beta2, static_cast<float>(t));
    ADACC_LAUNCH(adamw_kernel, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(
        params, grads, m, v, n, lr, beta1, beta2, 1.0f - beta1, 1.0f - beta2, bias1, bias2, eps, weight_decay,
        grad_scale);
    check_launch("adamw_update");
}

// Returns to the host, so it synchronises ctx.stream: a later change should keep the norm on the
// device (the clip scale computed by a kernel and read by adamw_update) to drop this round trip.
double sum_of_squares(const KernelContext& ctx, const float* x, long n) {
    if (n == 0) return 0.0;
    if ((kSumBlocks + 1) * sizeof(double) > ctx.reduction_scratch_bytes)
        throw std::invalid_argument("sum_of_squares: the reduction scratch is too small");
    const unsigned blocks = ceil_div(n, kSumThreads) < static_cast<unsigned>(kSumBlocks) ? ceil_div(n, kSumThreads)
                                                                                         : kSumBlocks;
    double* partials = static_cast<double*>(ctx.reduction_scratch);
    double* result = partials + kSumBlocks;
    ADACC_LAUNCH(sum_of_squares_partial_kernel, blocks, kSumThreads, 0, ctx.stream)(partials, x, n);
    check_launch("sum_of_squares (partials)");
    ADACC_LAUNCH(sum_of_squares_final_kernel, 1, kSumThreads, 0, ctx.stream)(result, partials,
                                                                             static_cast<int>(blocks));
    check_launch("sum_of_squares (final)");
    double total = 0.0;
    check(cudaMemcpyAsync(&total, result, sizeof(double), cudaMemcpyDeviceToHost, stream_of(ctx)),
          "sum_of_squares: cudaMemcpyAsync");
    check(cudaStreamSynchronize(stream_of(ctx)), "sum_of_squares: cudaStreamSynchronize");
    return total;
}

}  // namespace adacc::cuda
