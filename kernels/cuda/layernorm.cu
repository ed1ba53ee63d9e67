// LayerNorm over the channel dimension (eps 1e-5, biased variance, as GPT-2), one warp per row.
//
// The forward computes mean and rstd as the CPU twin does (kernels/cpu/layernorm.cpp: the mean,
// then the mean of (x - mean)^2, rstd = 1 / sqrt(var + 1e-5)); only the summation order differs.
// Lane l of a row's warp owns the packs of kPack channels at l kPack, l kPack + 32 kPack, ...
// (kernels/cuda/cuda_common.cuh), moved as 128-bit loads and stores where the rows are aligned.
//
// The backward makes two loops over a row (its two sums, then dinp), the second rereading the
// x and dout the first has just brought into the cache. It sums dweight / dbias over all rows
// without atomics: each block owns a group of rows, accumulates its rows' contributions in
// shared memory (one slice per warp), and writes one partial per channel into
// ctx.reduction_scratch; a second kernel adds the groups' partials, 32 channels by 32 strided
// sets of groups per block, in a fixed order. Every sum's order depends on N and C alone, so the
// result depends neither on timing nor on alignment.
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
// The partials' sum: 32 channels (a warp's coalesced 128 bytes) by 32 lanes of groups per block.
constexpr int kParamChannels = 32;
constexpr int kParamGroupLanes = 32;
constexpr std::size_t kSharedLimit = 48 * 1024;

// Channels a warp's pass over a row covers per step: 32 lanes of one pack each.
template <typename T>
inline constexpr int kRowStep = 32 * kPack<T>;

// A warp's shared slice of C channels, padded to whole steps, stores channel c at the slot that
// makes lane l's j-th element of a step land at word j * 32 + l: the 32 lanes hit 32 banks.
template <typename T>
int padded_channels(int C) {
    return (C + kRowStep<T> - 1) / kRowStep<T> * kRowStep<T>;
}
template <typename T>
__device__ inline int slot(int c) {
    const int step = c / kRowStep<T>, within = c % kRowStep<T>;
    return step * kRowStep<T> + (within % kPack<T>)*32 + within / kPack<T>;
}

// Activations (out, inp) and the parameters of type T; mean and rstd are fp32, and so is the math.
// `aligned`: every row starts 16-byte aligned (the pointers are, and C is a multiple of kPack).
template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                                         int N, int C, bool aligned) {
    constexpr int P = kPack<T>;
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: no shuffle loses a lane
    const T* x = inp + static_cast<long>(row) * C;
    float sum = 0.0f;
    for (int c = lane * P; c < C; c += 32 * P) {
        float v[P];
        load_pack(v, x, c, C, aligned);
        for (int j = 0; j < P; ++j) sum += v[j];  // past C: zeros
    }
    const float m = warp_sum(sum) / C;
    float var = 0.0f;
    for (int c = lane * P; c < C; c += 32 * P) {
        float v[P];
        load_pack(v, x, c, C, aligned);
        for (int j = 0; j < P && c + j < C; ++j) {
            const float d = v[j] - m;
            var += d * d;
        }
    }
    const float s = 1.0f / sqrtf(warp_sum(var) / C + 1e-5f);
    T* o = out + static_cast<long>(row) * C;
    for (int c = lane * P; c < C; c += 32 * P) {
        float v[P], w[P], b[P];
        load_pack(v, x, c, C, aligned);
        load_pack(w, weight, c, C, aligned);
        load_pack(b, bias, c, C, aligned);
        for (int j = 0; j < P; ++j) v[j] = (v[j] - m) * s * w[j] + b[j];
        store_pack(o, c, C, v, aligned);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// One block per row group [g * rows_per_group, ...): warp w takes the group's rows w, w + warps,
// ... For each row it adds dinp and accumulates (x - mean) * rstd * dout and dout into its own
// shared slice (see slot), then the block sums the slices in warp order into partials[g]
// (dweight) and partials[groups + g] (dbias), C floats each.
template <typename T>
__global__ void layernorm_backward_rows_kernel(T* dinp, float* partials, const T* dout, const T* inp, const T* weight,
                                               const float* mean, const float* rstd, int N, int C, int padded,
                                               int rows_per_group, bool aligned) {
    constexpr int P = kPack<T>;
    ADACC_DYNAMIC_SHARED(float, shared);  // [warps][2][padded]: dweight then dbias of each warp
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int i = threadIdx.x; i < warps * 2 * padded; i += blockDim.x) shared[i] = 0.0f;
    __syncthreads();
    float* my_dweight = shared + static_cast<long>(warp) * 2 * padded;
    float* my_dbias = my_dweight + padded;
    const int row_begin = blockIdx.x * rows_per_group;
    const int row_end = row_begin + rows_per_group < N ? row_begin + rows_per_group : N;
    for (int row = row_begin + warp; row < row_end; row += warps) {
        const long offset = static_cast<long>(row) * C;
        const T* x = inp + offset;
        const T* d = dout + offset;
        const float m = mean[row], s = rstd[row];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = lane * P; c < C; c += 32 * P) {
            float w[P], dv[P], xv[P];
            load_pack(w, weight, c, C, aligned);
            load_pack(dv, d, c, C, aligned);
            load_pack(xv, x, c, C, aligned);
            for (int j = 0; j < P; ++j) {  // past C: weight and dout read 0, so dnorm adds 0
                const float dnorm = w[j] * dv[j];
                dnorm_mean += dnorm;
                dnorm_norm_mean += dnorm * (xv[j] - m) * s;
            }
        }
        dnorm_mean = warp_sum(dnorm_mean) / C;
        dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
        T* dx = dinp + offset;
        for (int c = lane * P; c < C; c += 32 * P) {
            float w[P], dv[P], xv[P], g[P];
            load_pack(w, weight, c, C, aligned);
            load_pack(dv, d, c, C, aligned);
            load_pack(xv, x, c, C, aligned);
            load_pack(g, dx, c, C, aligned);
            const int base = c - lane * P + lane;  // slot(c + j) = base + j * 32
            for (int j = 0; j < P && c + j < C; ++j) {
                const float norm = (xv[j] - m) * s;
                g[j] += (w[j] * dv[j] - dnorm_mean - norm * dnorm_norm_mean) * s;  // accumulates: rounded once
                my_dweight[base + j * 32] += norm * dv[j];
                my_dbias[base + j * 32] += dv[j];
            }
            store_pack(dx, c, C, g, aligned);
        }
    }
    __syncthreads();
    const int groups = gridDim.x;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        const int k = slot<T>(c);
        float dw = 0.0f, db = 0.0f;
        for (int w = 0; w < warps; ++w) {
            dw += shared[static_cast<long>(w) * 2 * padded + k];
            db += shared[static_cast<long>(w) * 2 * padded + padded + k];
        }
        partials[static_cast<long>(blockIdx.x) * C + c] = dw;
        partials[static_cast<long>(groups + blockIdx.x) * C + c] = db;
    }
}

// dweight (blockIdx.y 0) or dbias (1) += the sum of the groups' partials. Thread (lane g, channel
// c) of a block adds groups g, g + 32, ... in order, then one thread per channel adds the 32 lane
// sums in lane order: a fixed order, with enough loads in flight to stream the partials.
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* partials, int groups,
                                                 int C) {
    __shared__ float sums[kParamGroupLanes][kParamChannels + 1];  // +1: no bank conflicts down a column
    const int channel = threadIdx.x % kParamChannels, lane = threadIdx.x / kParamChannels;
    const int c = blockIdx.x * kParamChannels + channel;
    const float* part = partials + static_cast<long>(blockIdx.y) * groups * C;
    float acc = 0.0f;
    if (c < C)
        for (int g = lane; g < groups; g += kParamGroupLanes) acc += part[static_cast<long>(g) * C + c];
    sums[lane][channel] = acc;
    __syncthreads();
    if (lane != 0 || c >= C) return;
    float total = 0.0f;
    for (int l = 0; l < kParamGroupLanes; ++l) total += sums[l][channel];
    (blockIdx.y == 0 ? dweight : dbias)[c] += total;
}

}  // namespace

void layernorm_forward(const KernelContext& ctx, Act out_act, float* mean, float* rstd, ConstAct inp_act,
                       ConstAct weight, ConstAct bias, int N, int C) {
    const DType type = activation_type("layernorm_forward", {out_act, inp_act, weight, bias});
    if (N == 0) return;
    constexpr int rows_per_block = kForwardThreads / 32;
    with_activation_type(type, "layernorm_forward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* out = device_ptr<T>(out_act);
        const T *inp = device_ptr<T>(inp_act), *w = device_ptr<T>(weight), *b = device_ptr<T>(bias);
        const bool aligned = C % kPack<T> == 0 && packs_aligned({out, inp, w, b});
        ADACC_LAUNCH(layernorm_forward_kernel<T>, ceil_div(N, rows_per_block), kForwardThreads, 0, ctx.stream)
        (out, mean, rstd, inp, w, b, N, C, aligned);
    });
    check_launch("layernorm_forward");
}

void layernorm_backward(const KernelContext& ctx, Act dinp_act, float* dweight, float* dbias, ConstAct dout_act,
                        ConstAct inp_act, ConstAct weight, const float* mean, const float* rstd, int N, int C) {
    const DType type = activation_type("layernorm_backward", {dinp_act, dout_act, inp_act, weight});
    if (N == 0 || C == 0) return;
    // Row groups: one per kRowsPerGroup rows, fewer (with more rows each) when their partials,
    // 2 C floats per group, would exceed the reduction scratch. A function of N and C only.
    const std::size_t partial_bytes = 2 * static_cast<std::size_t>(C) * sizeof(float);
    const std::size_t max_groups = ctx.reduction_scratch_bytes / partial_bytes;
    if (max_groups == 0) throw std::invalid_argument("layernorm_backward: C too large for the reduction scratch");
    std::size_t groups = ceil_div(N, kRowsPerGroup);
    if (groups > max_groups) groups = max_groups;
    const int rows_per_group = static_cast<int>(ceil_div(N, groups));
    groups = ceil_div(N, rows_per_group);
    float* partials = static_cast<float*>(ctx.reduction_scratch);
    with_activation_type(type, "layernorm_backward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        // Each warp's two shared slices take 8 bytes a (padded) channel; as many warps as fit in
        // 48 KiB, up to 4.
        const int padded = padded_channels<T>(C);
        const std::size_t slice_bytes = 2 * static_cast<std::size_t>(padded) * sizeof(float);
        const int warps = kSharedLimit / slice_bytes < kMaxBackwardWarps ? static_cast<int>(kSharedLimit / slice_bytes)
                                                                         : kMaxBackwardWarps;
        if (warps == 0)
            throw std::invalid_argument("layernorm_backward: C = " + std::to_string(C) +
                                        " does not fit in shared memory (at most 6144 channels)");
        T* dinp = device_ptr<T>(dinp_act);
        const T *dout = device_ptr<T>(dout_act), *inp = device_ptr<T>(inp_act), *w = device_ptr<T>(weight);
        const bool aligned = C % kPack<T> == 0 && packs_aligned({dinp, dout, inp, w});
        ADACC_LAUNCH(layernorm_backward_rows_kernel<T>, groups, warps * 32, warps * slice_bytes, ctx.stream)
        (dinp, partials, dout, inp, w, mean, rstd, N, C, padded, rows_per_group, aligned);
    });
    check_launch("layernorm_backward (rows)");
    const dim3 params_grid(ceil_div(C, kParamChannels), 2);
    ADACC_LAUNCH(layernorm_backward_params_kernel, params_grid, kParamChannels * kParamGroupLanes, 0, ctx.stream)
    (dweight, dbias, partials, static_cast<int>(groups), C);
    check_launch("layernorm_backward (dweight, dbias)");
}

}  // namespace adacc::cuda
