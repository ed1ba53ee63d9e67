// LayerNorm over the channel dimension (eps 1e-5, biased variance, as GPT-2), one warp per row.
//
// The forward computes mean and rstd as the CPU twin does (kernels/cpu/layernorm.cpp: the mean,
// then the mean of (x - mean)^2, rstd = 1 / sqrt(var + 1e-5)); only the summation order differs.
// The backward writes dinp row by row and sums dweight / dbias over all rows without atomics:
// each block owns a group of rows, accumulates its rows' contributions in shared memory (one
// slice per warp), and writes one partial per channel into ctx.reduction_scratch; a second kernel
// adds the groups' partials in group order. Every sum has a fixed order, so the result does not
// depend on timing.
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr int kForwardThreads = 256;  // 8 rows per block: 2048 blocks at N = 16384
constexpr int kMaxBackwardWarps = 4;
// Rows each backward block (row group) owns: 512 groups at N = 16384, several blocks per SM. More
// groups than the other reductions' kReductionRowGroups (kernels/cuda/device_sizes.h) because the
// row pass (dinp) runs in the same blocks and must fill the GPU; the partials stay small (3 MiB).
constexpr int kRowsPerGroup = 32;
constexpr int kFinalThreads = 256;
constexpr std::size_t kSharedLimit = 48 * 1024;

// Activations (out, inp) and the parameters of type T; mean and rstd are fp32, and so is the math.
template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                                         const T* bias, int N, int C) {
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: no shuffle loses a lane
    const T* x = inp + static_cast<long>(row) * C;
    float sum = 0.0f;
    for (int c = lane; c < C; c += 32) sum += to_f32(x[c]);
    const float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float d = to_f32(x[c]) - m;
        var += d * d;
    }
    const float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    T* o = out + static_cast<long>(row) * C;
    for (int c = lane; c < C; c += 32) o[c] = from_f32<T>((to_f32(x[c]) - m) * s * to_f32(weight[c]) + to_f32(bias[c]));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// One block per row group [g * rows_per_group, ...): warp w takes the group's rows w, w + warps,
// ... For each row it adds dinp and accumulates (x - mean) * rstd * dout and dout into its own
// shared slice (lane l owns channels l, l + 32, ...), then the block sums the slices in warp
// order into partials[g] (dweight) and partials[groups + g] (dbias), C floats each.
template <typename T>
__global__ void layernorm_backward_rows_kernel(T* dinp, float* partials, const T* dout, const T* inp,
                                               const T* weight, const float* mean, const float* rstd, int N,
                                               int C, int rows_per_group) {
    ADACC_DYNAMIC_SHARED(float, shared);  // [warps][2][C]: dweight then dbias of each warp
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    float* my_dweight = shared + static_cast<long>(warp) * 2 * C;
    float* my_dbias = my_dweight + C;
    for (int c = lane; c < C; c += 32) {
        my_dweight[c] = 0.0f;
        my_dbias[c] = 0.0f;
    }
    const int row_begin = blockIdx.x * rows_per_group;
    const int row_end = row_begin + rows_per_group < N ? row_begin + rows_per_group : N;
    for (int row = row_begin + warp; row < row_end; row += warps) {
        const long offset = static_cast<long>(row) * C;
        const T* x = inp + offset;
        const T* d = dout + offset;
        const float m = mean[row], s = rstd[row];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = lane; c < C; c += 32) {
            const float dnorm = to_f32(weight[c]) * to_f32(d[c]);
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * (to_f32(x[c]) - m) * s;
        }
        dnorm_mean = warp_sum(dnorm_mean) / C;
        dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
        T* dx = dinp + offset;
        for (int c = lane; c < C; c += 32) {
            const float dc = to_f32(d[c]);
            const float norm = (to_f32(x[c]) - m) * s;
            const float grad = (to_f32(weight[c]) * dc - dnorm_mean - norm * dnorm_norm_mean) * s;
            dx[c] = from_f32<T>(to_f32(dx[c]) + grad);  // accumulates: in fp32, rounded once
            my_dweight[c] += norm * dc;
            my_dbias[c] += dc;
        }
    }
    __syncthreads();
    const int groups = gridDim.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float dw = 0.0f, db = 0.0f;
        for (int w = 0; w < warps; ++w) {
            dw += shared[static_cast<long>(w) * 2 * C + c];
            db += shared[static_cast<long>(w) * 2 * C + C + c];
        }
        partials[static_cast<long>(blockIdx.x) * C + c] = dw;
        partials[static_cast<long>(groups + blockIdx.x) * C + c] = db;
    }
}

// dweight[c] += sum of the groups' partials in group order (dbias likewise), one thread per channel.
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* partials, int groups,
                                                 int C) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float dw = 0.0f, db = 0.0f;
    for (int g = 0; g < groups; ++g) {
        dw += partials[static_cast<long>(g) * C + c];
        db += partials[static_cast<long>(groups + g) * C + c];
    }
    dweight[c] += dw;
    dbias[c] += db;
}

}  // namespace

void layernorm_forward(const KernelContext& ctx, Act out_act, float* mean, float* rstd, ConstAct inp_act,
                       ConstAct weight, ConstAct bias, int N, int C) {
    const DType type = activation_type("layernorm_forward", {out_act, inp_act, weight, bias});
    if (N == 0) return;
    constexpr int rows_per_block = kForwardThreads / 32;
    with_activation_type(type, "layernorm_forward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        ADACC_LAUNCH(layernorm_forward_kernel<T>, ceil_div(N, rows_per_block), kForwardThreads, 0, ctx.stream)(
            device_ptr<T>(out_act), mean, rstd, device_ptr<T>(inp_act), device_ptr<T>(weight), device_ptr<T>(bias), N, C);
    });
    check_launch("layernorm_forward");
}

void layernorm_backward(const KernelContext& ctx, Act dinp_act, float* dweight, float* dbias, ConstAct dout_act,
                        ConstAct inp_act, ConstAct weight, const float* mean, const float* rstd, int N, int C) {
    const DType type = activation_type("layernorm_backward", {dinp_act, dout_act, inp_act, weight});
    if (N == 0 || C == 0) return;
    // Each warp's two shared slices take 8 C bytes; as many warps as fit in 48 KiB, up to 4.
    const std::size_t slice_bytes = 2 * static_cast<std::size_t>(C) * sizeof(float);
    const int warps = kSharedLimit / slice_bytes < kMaxBackwardWarps ? static_cast<int>(kSharedLimit / slice_bytes)
                                                                      : kMaxBackwardWarps;
    if (warps == 0) throw std::invalid_argument("layernorm_backward: C > 6144 does not fit in shared memory");
    // Row groups: one per kRowsPerGroup rows, fewer (with more rows each) when their partials,
    // 2 C floats per group, would exceed the reduction scratch. A function of N and C only.
    const std::size_t max_groups = ctx.reduction_scratch_bytes / slice_bytes;
    if (max_groups == 0) throw std::invalid_argument("layernorm_backward: C too large for the reduction scratch");
    std::size_t groups = ceil_div(N, kRowsPerGroup);
    if (groups > max_groups) groups = max_groups;
    const int rows_per_group = static_cast<int>(ceil_div(N, groups));
    groups = ceil_div(N, rows_per_group);
    float* partials = static_cast<float*>(ctx.reduction_scratch);
    with_activation_type(type, "layernorm_backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        ADACC_LAUNCH(layernorm_backward_rows_kernel<T>, groups, warps * 32, warps * slice_bytes, ctx.stream)(
            device_ptr<T>(dinp_act), partials, device_ptr<T>(dout_act), device_ptr<T>(inp_act), device_ptr<T>(weight),
            mean, rstd, N, C, rows_per_group);
    });
    check_launch("layernorm_backward (rows)");
    ADACC_LAUNCH(layernorm_backward_params_kernel, ceil_div(C, kFinalThreads), kFinalThreads, 0, ctx.stream)(
        dweight, dbias, partials, static_cast<int>(groups), C);
    check_launch("layernorm_backward (dweight, dbias)");
}

}  // namespace adacc::cuda
