// LayerNorm over the channel dimension (eps 1e-5, biased variance, as GPT-2), one warp per row.
//
// The forward computes mean and rstd as the CPU twin does (kernels/cpu/layernorm.cpp: the mean,
// then the mean of (x - mean)^2, rstd = 1 / sqrt(var + 1e-5)); only the summation order differs.
// residual_layernorm_forward (on CUDA, each residual add with the layernorm after it) adds the
// residual, stores the sum and layernorms it in the same warp pass, with the plain forward's sums
// in its order: its outputs are residual_dropout_forward's and layernorm_forward's bit for bit.
// Lane l of a row's warp owns the packs of kPack channels at l kPack, l kPack + 32 kPack, ...
// (kernels/cuda/cuda_common.cuh), moved as 128-bit loads and stores where the rows are aligned.
//
// The backward makes two passes over a row (its two sums, then dinp) but reads x and dout from
// global memory once: each lane keeps its packs in registers in between (rows up to C = 2048 in
// bf16, 1024 in fp32; wider rows reread them, the same values in the same order). While a warp
// works on a row, the next row it takes is prefetched into L2 (cuda_common.cuh, prefetch_row_l2).
// It sums dweight / dbias over all rows without atomics: each block owns a group of rows,
// accumulates its rows' contributions in shared memory (one slice per warp), and writes one
// partial per channel into ctx.reduction_scratch; sum_group_partials (cuda_common.cuh) adds the
// groups' partials in a fixed order. Every sum's order depends on N and C alone, so the result
// depends neither on timing nor on alignment.
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr int kForwardThreads = 256;  // 8 rows per block: 2048 blocks at N = 16384
constexpr int kMaxBackwardWarps = 4;
// Rows each backward block (row group) owns: 512 groups at N = 16384, several blocks per SM: the
// row pass (dinp) runs in the same blocks and must fill the GPU; the partials stay small (3 MiB).
constexpr int kRowsPerGroup = 32;

// Channels a warp's pass over a row covers per step: 32 lanes of one pack each.
template <typename T>
inline constexpr int kRowStep = 32 * kPack<T>;
// The most packs of x and dout a backward lane holds in registers (64 registers): rows up to
// C = 2048 in bf16, 1024 in fp32. Wider rows take the two-pass fallback.
constexpr int kMaxRegisterSteps = 8;
// Blocks of 4 warps each SM must hold (a register cap for ptxas): 4 (128 registers a thread) up to
// 4 steps, which hold C = 768 and 1024 in bf16 without spilling; 2 for 8 steps, which would
// spill under 128.
template <int Steps>
inline constexpr int kMinBackwardBlocks = Steps <= 4 ? 4 : 2;
// Calls launch(std::integral_constant<int, Steps>{}) with the register steps a row of C channels
// takes, chosen by C alone: the fewest of 2, 4 or kMaxRegisterSteps packs a lane that hold it
// (fewer registers, more warps resident), else 0, the fallback that rereads the row.
template <typename T, typename Launch>
void with_register_steps(int C, Launch&& launch) {
    const int steps = static_cast<int>(ceil_div(C, kRowStep<T>));
    if (steps <= 2)
        launch(std::integral_constant<int, 2>{});
    else if (steps <= 4)
        launch(std::integral_constant<int, 4>{});
    else if (steps <= kMaxRegisterSteps)
        launch(std::integral_constant<int, kMaxRegisterSteps>{});
    else
        launch(std::integral_constant<int, 0>{});
}

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

// A forward row's steps over lane's pack of channels [c, c + P), shared by both forward kernels so
// that a row's statistics and outputs are the same sums in the same order from the same values.
// Their products and sums are written as the explicit fmaf a compiler could contract them into, so
// no compiler (nvcc, or the emulation's host compiler) contracts one kernel's and not the other's.
// The mean's terms: every element of the pack (past C: zeros, which add 0).
template <int P>
__device__ inline void add_to_sum(float& sum, const float (&v)[P]) {
    for (int j = 0; j < P; ++j) sum += v[j];
}
// The variance's terms (x - mean)^2 of the channels before C.
template <int P>
__device__ inline void add_to_variance(float& var, const float (&v)[P], float m, int c, int C) {
    for (int j = 0; j < P && c + j < C; ++j) {
        const float d = v[j] - m;
        var = fmaf(d, d, var);
    }
}
__device__ inline float row_rstd(float var, int C) { return 1.0f / sqrtf(warp_sum(var) / C + 1e-5f); }
// The pack's outputs, in place of its inputs.
template <int P>
__device__ inline void normalize(float (&v)[P], const float (&w)[P], const float (&b)[P], float m, float s) {
    for (int j = 0; j < P; ++j) v[j] = fmaf((v[j] - m) * s, w[j], b[j]);
}

// The rest of a row's forward once lane's share of the row's sum, `total`, is known: the mean, the
// variance, the outputs into o and the row's mean and rstd. The lane's packs of the input row x come
// from registers (held, Steps > 0) or are reread from x (Steps = 0), the same values either way.
template <typename T, int Steps>
__device__ inline void layernorm_row_from_sum(T* o, float* mean, float* rstd, int row, const T* x,
                                              const Pack<T> (&held)[Steps > 0 ? Steps : 1], float total,
                                              const T* weight, const T* bias, int C, int lane, bool aligned) {
    constexpr int P = kPack<T>;
    const int steps = Steps > 0 ? Steps : (C + kRowStep<T> - 1) / kRowStep<T>;
    const float m = warp_sum(total) / C;
    float var = 0.0f;
    ADACC_UNROLL
    for (int k = 0; k < steps; ++k) {
        const int c = lane * P + k * kRowStep<T>;
        if (c >= C) continue;
        float v[P];
        if constexpr (Steps > 0)
            unpack(v, held[k]);
        else
            load_pack(v, x, c, C, aligned);
        add_to_variance(var, v, m, c, C);
    }
    const float s = row_rstd(var, C);
    ADACC_UNROLL
    for (int k = 0; k < steps; ++k) {
        const int c = lane * P + k * kRowStep<T>;
        if (c >= C) continue;
        float v[P], w[P], b[P];
        if constexpr (Steps > 0)
            unpack(v, held[k]);
        else
            load_pack(v, x, c, C, aligned);
        load_pack(w, weight, c, C, aligned);
        load_pack(b, bias, c, C, aligned);
        normalize(v, w, b, m, s);
        store_pack(o, c, C, v, aligned);
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
}

// Activations (out, inp) and the parameters of type T; mean and rstd are fp32, and so is the math.
// `aligned`: every row starts 16-byte aligned (the pointers are, and C is a multiple of kPack).
// A training forward runs it for the first block's ln1 alone (the others come with the residual
// add before them, residual_layernorm_forward); recomputes and timed forwards run it too. It
// rereads the row, from cache, rather than holding it in registers.
template <typename T>
__global__ void layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight, const T* bias,
                                         int N, int C, bool aligned) {
    constexpr int P = kPack<T>;
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: no shuffle loses a lane
    const long offset = static_cast<long>(row) * C;
    const T* x = inp + offset;
    float total = 0.0f;
    for (int c = lane * P; c < C; c += kRowStep<T>) {
        float v[P];
        load_pack(v, x, c, C, aligned);
        add_to_sum(total, v);
    }
    const Pack<T> none[1] = {};
    layernorm_row_from_sum<T, 0>(out + offset, mean, rstd, row, x, none, total, weight, bias, C, lane, aligned);
}

// residual_dropout_forward_kernel (kernels/cuda/dropout.cu) and layernorm_forward_kernel in one
// pass over each row, by its warp: lane l adds its packs of the residual and the masked branch
// (residual_dropout), rounds them to T and stores them as sum, then layernorms those rounded values
// exactly as layernorm_forward_kernel does after reading them back. With Steps > 0 (C <= Steps *
// kRowStep) the lane keeps its Steps packs of the sum in registers; Steps = 0, for wider rows,
// rereads them from sum, where it wrote them. Either way the row is read from global memory once.
template <typename T, int Steps>
__global__ void residual_layernorm_forward_kernel(T* sum, T* out, float* mean, float* rstd, const T* residual,
                                                  const T* inp, const unsigned char* mask, float scale, const T* weight,
                                                  const T* bias, int N, int C, bool aligned) {
    constexpr int P = kPack<T>;
    const int lane = threadIdx.x % 32;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;  // the whole warp leaves together: no shuffle loses a lane
    const long offset = static_cast<long>(row) * C;
    const T *r_row = residual + offset, *b_row = inp + offset;
    const unsigned char* m_row = mask ? mask + offset : nullptr;
    T* x = sum + offset;  // the row's sum: the layernorm's input
    const int steps = Steps > 0 ? Steps : (C + kRowStep<T> - 1) / kRowStep<T>;
    Pack<T> held[Steps > 0 ? Steps : 1];
    float total = 0.0f;
    ADACC_UNROLL
    for (int k = 0; k < steps; ++k) {
        const int c = lane * P + k * kRowStep<T>;
        if (c >= C) continue;
        float r[P], b[P], v[P];
        load_pack(r, r_row, c, C, aligned);
        load_pack(b, b_row, c, C, aligned);
        Pack<T> p;  // past C: zeros, as load_pack reads them
        for (int j = 0; j < P; ++j)
            p.v[j] = from_f32<T>(c + j < C ? residual_dropout(r[j], b[j], m_row, c + j, scale) : 0.0f);
        store_raw_pack(x, c, C, p, aligned);
        if constexpr (Steps > 0) held[k] = p;
        unpack(v, p);
        add_to_sum(total, v);
    }
    layernorm_row_from_sum<T, Steps>(out + offset, mean, rstd, row, x, held, total, weight, bias, C, lane, aligned);
}

// The two passes of a row's backward over the pack of lane's channels [c, c + P), shared by both
// row paths below so that they compute the same values in the same order.
// Pass 1 adds the pack's terms of the two row sums (past C: weight and dout are 0, so it adds 0).
template <int P>
__device__ inline void add_row_sums(float& dnorm_sum, float& dnorm_norm_sum, const float (&w)[P], const float (&dv)[P],
                                    const float (&xv)[P], float m, float s) {
    for (int j = 0; j < P; ++j) {
        const float dnorm = w[j] * dv[j];
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * (xv[j] - m) * s;
    }
}
// Pass 2 adds the pack's dinp into g and its dweight / dbias terms into the warp's shared slices.
template <typename T>
__device__ inline void add_pack_grads(float (&g)[kPack<T>], float* my_dweight, float* my_dbias,
                                      const float (&w)[kPack<T>], const float (&dv)[kPack<T>],
                                      const float (&xv)[kPack<T>], float m, float s, float dnorm_mean,
                                      float dnorm_norm_mean, int c, int lane, int C) {
    constexpr int P = kPack<T>;
    const int base = c - lane * P + lane;  // slot(c + j) = base + j * 32
    for (int j = 0; j < P && c + j < C; ++j) {
        const float norm = (xv[j] - m) * s;
        g[j] += (w[j] * dv[j] - dnorm_mean - norm * dnorm_norm_mean) * s;  // accumulates: rounded once
        my_dweight[base + j * 32] += norm * dv[j];
        my_dbias[base + j * 32] += dv[j];
    }
}

// The backward of one row by its warp. With Steps > 0 (C <= Steps * kRowStep) lane l holds its
// Steps packs of x and dout in registers between the two passes, so the row is read from global
// memory once; Steps = 0 is the fallback for wider rows, whose second pass rereads x and dout.
// Either way the same values are added in the same order.
template <typename T, int Steps>
__device__ inline void layernorm_backward_row(T* dx, float* my_dweight, float* my_dbias, const T* d, const T* x,
                                              const T* weight, float m, float s, int C, int lane, bool aligned) {
    constexpr int P = kPack<T>;
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    if constexpr (Steps > 0) {
        Pack<T> xp[Steps], dp[Steps];
        ADACC_UNROLL  // the packs stay in registers
            for (int k = 0; k < Steps; ++k) {
            const int c = lane * P + k * kRowStep<T>;
            if (c >= C) continue;
            xp[k] = load_raw_pack(x, c, C, aligned);
            dp[k] = load_raw_pack(d, c, C, aligned);
            float w[P], dv[P], xv[P];
            load_pack(w, weight, c, C, aligned);
            unpack(dv, dp[k]);
            unpack(xv, xp[k]);
            add_row_sums(dnorm_mean, dnorm_norm_mean, w, dv, xv, m, s);
        }
        dnorm_mean = warp_sum(dnorm_mean) / C;
        dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
        ADACC_UNROLL
        for (int k = 0; k < Steps; ++k) {
            const int c = lane * P + k * kRowStep<T>;
            if (c >= C) continue;
            float w[P], dv[P], xv[P], g[P];
            load_pack(w, weight, c, C, aligned);
            unpack(dv, dp[k]);
            unpack(xv, xp[k]);
            load_pack(g, dx, c, C, aligned);
            add_pack_grads<T>(g, my_dweight, my_dbias, w, dv, xv, m, s, dnorm_mean, dnorm_norm_mean, c, lane, C);
            store_pack(dx, c, C, g, aligned);
        }
    } else {
        for (int c = lane * P; c < C; c += kRowStep<T>) {
            float w[P], dv[P], xv[P];
            load_pack(w, weight, c, C, aligned);
            load_pack(dv, d, c, C, aligned);
            load_pack(xv, x, c, C, aligned);
            add_row_sums(dnorm_mean, dnorm_norm_mean, w, dv, xv, m, s);
        }
        dnorm_mean = warp_sum(dnorm_mean) / C;
        dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
        for (int c = lane * P; c < C; c += kRowStep<T>) {
            float w[P], dv[P], xv[P], g[P];
            load_pack(w, weight, c, C, aligned);
            load_pack(dv, d, c, C, aligned);
            load_pack(xv, x, c, C, aligned);
            load_pack(g, dx, c, C, aligned);
            add_pack_grads<T>(g, my_dweight, my_dbias, w, dv, xv, m, s, dnorm_mean, dnorm_norm_mean, c, lane, C);
            store_pack(dx, c, C, g, aligned);
        }
    }
}

// One block per row group [g * rows_per_group, ...): warp w takes the group's rows w, w + warps,
// ... For each row it adds dinp and accumulates (x - mean) * rstd * dout and dout into its own
// shared slice (see slot), then the block sums the slices in warp order into partials[g]
// (dweight) and partials[groups + g] (dbias), C floats each.
template <typename T, int Steps>
__global__ void __launch_bounds__(kMaxBackwardWarps * 32, kMinBackwardBlocks<Steps>)
    layernorm_backward_rows_kernel(T* dinp, float* partials, const T* dout, const T* inp, const T* weight,
                                   const float* mean, const float* rstd, int N, int C, int padded, int rows_per_group,
                                   bool aligned) {
    ADACC_DYNAMIC_SHARED(float, shared);  // [warps][2][padded]: dweight then dbias of each warp
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int i = threadIdx.x; i < warps * 2 * padded; i += blockDim.x) shared[i] = 0.0f;
    __syncthreads();
    float* my_dweight = shared + static_cast<long>(warp) * 2 * padded;
    float* my_dbias = my_dweight + padded;
    const int row_begin = blockIdx.x * rows_per_group;
    const int row_end = row_begin + rows_per_group < N ? row_begin + rows_per_group : N;
    // A row waits on memory for x and dout, then, after its sums, for dinp. So the warp asks for
    // its first row's dinp, and for each next row's three, into L2 while it works on a row: those
    // waits are then for L2, and DRAM streams the rows ahead.
    if (row_begin + warp < row_end) prefetch_row_l2(dinp + static_cast<long>(row_begin + warp) * C, C, lane);
    for (int row = row_begin + warp; row < row_end; row += warps) {
        const long offset = static_cast<long>(row) * C;
        if (row + warps < row_end) {
            const long next = offset + static_cast<long>(warps) * C;
            prefetch_row_l2(inp + next, C, lane);
            prefetch_row_l2(dout + next, C, lane);
            prefetch_row_l2(dinp + next, C, lane);
        }
        layernorm_backward_row<T, Steps>(dinp + offset, my_dweight, my_dbias, dout + offset, inp + offset, weight,
                                         mean[row], rstd[row], C, lane, aligned);
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

void residual_layernorm_forward(const KernelContext& ctx, Act sum_act, Act out_act, float* mean, float* rstd,
                                ConstAct residual_act, ConstAct inp_act, const unsigned char* mask, float p,
                                ConstAct weight, ConstAct bias, int N, int C) {
    const DType type =
        activation_type("residual_layernorm_forward", {sum_act, out_act, residual_act, inp_act, weight, bias});
    if (N == 0) return;
    constexpr int rows_per_block = kForwardThreads / 32;
    const float scale = dropout_scale(mask, p);
    with_activation_type(type, "residual_layernorm_forward", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T *sum = device_ptr<T>(sum_act), *out = device_ptr<T>(out_act);
        const T *residual = device_ptr<T>(residual_act), *inp = device_ptr<T>(inp_act);
        const T *w = device_ptr<T>(weight), *b = device_ptr<T>(bias);
        const bool aligned = C % kPack<T> == 0 && packs_aligned({sum, out, residual, inp, w, b});
        with_register_steps<T>(C, [&](auto steps_tag) {
            constexpr int S = decltype(steps_tag)::value;
            ADACC_LAUNCH((residual_layernorm_forward_kernel<T, S>), ceil_div(N, rows_per_block), kForwardThreads, 0,
                         ctx.stream)
            (sum, out, mean, rstd, residual, inp, mask, scale, w, b, N, C, aligned);
        });
    });
    check_launch("residual_layernorm_forward");
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
        const int warps = kDefaultDynamicShared / slice_bytes < kMaxBackwardWarps
                              ? static_cast<int>(kDefaultDynamicShared / slice_bytes)
                              : kMaxBackwardWarps;
        if (warps == 0)
            throw std::invalid_argument("layernorm_backward: C = " + std::to_string(C) +
                                        " does not fit in shared memory (at most 6144 channels)");
        T* dinp = device_ptr<T>(dinp_act);
        const T *dout = device_ptr<T>(dout_act), *inp = device_ptr<T>(inp_act), *w = device_ptr<T>(weight);
        const bool aligned = C % kPack<T> == 0 && packs_aligned({dinp, dout, inp, w});
        with_register_steps<T>(C, [&](auto steps_tag) {
            constexpr int S = decltype(steps_tag)::value;
            ADACC_LAUNCH((layernorm_backward_rows_kernel<T, S>), groups, warps * 32, warps * slice_bytes, ctx.stream)
            (dinp, partials, dout, inp, w, mean, rstd, N, C, padded, rows_per_group, aligned);
        });
    });
    check_launch("layernorm_backward (rows)");
    const int group_count = static_cast<int>(groups);
    sum_group_partials(ctx, dweight, partials, group_count, C, true, "layernorm_backward (dweight)");
    sum_group_partials(ctx, dbias, partials + groups * C, group_count, C, true, "layernorm_backward (dbias)");
}

}  // namespace adacc::cuda
