// Token + position embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:], and its backward.
//
// The backward scatters rows of dout into dwte by token id, and a token may repeat. Atomics would
// make the order of the additions (and so the rounding) depend on timing; instead the positions
// are sorted by (token id, position) and one thread per channel walks each token's run of
// positions in increasing order. That is exactly the CPU twin's order (kernels/cpu/encoder.cpp
// adds positions b*T+t in increasing order into each (row, channel)), so dwte and dwpe are bit
// for bit the CPU's. A bf16 dout (and the forward's bf16 embeddings) widen exactly to fp32, so
// that holds in bf16 too (against the CPU run on the same values as floats).
#include <stdexcept>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSortThreads = 128;
// Blocks that stride over the sorted positions in the dwte kernel (times the channel chunks): a
// fixed count, enough to fill the SMs without launching one mostly idle block per position.
constexpr int kWalkBlocks = 1024;

// One block per position (b, t), threads striding over the channels: coalesced, and no 64-bit
// division per element. out and the embeddings are of type T (float or bf16); the sum is the
// CPU's fp32 sum of the embeddings' values, rounded once when T is bf16.
template <typename T>
__global__ void encoder_forward_kernel(T* out, const int* tokens, const T* wte, const T* wpe, int T_len, int C) {
    const int bt = blockIdx.x;
    const T* e = wte + static_cast<long>(tokens[bt]) * C;
    const T* p = wpe + static_cast<long>(bt % T_len) * C;
    T* o = out + static_cast<long>(bt) * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = from_f32<T>(to_f32(e[c]) + to_f32(p[c]));
}

// order[rank] = position, where rank is the position's index among all N positions sorted by
// (token id, position). The key (id << 32 | position) is unique per position, so the ranks are a
// permutation and the scatter writes every slot once. O(N^2) comparisons, from shared-memory
// tiles of keys that every thread of the block reads at the same address (broadcast): ~3e8
// comparisons at N = 16384, tens of microseconds.
__global__ void encoder_sort_positions_kernel(int* order, const int* tokens, int N) {
    __shared__ unsigned long long tile[kSortThreads];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long key =
        i < N ? (static_cast<unsigned long long>(static_cast<unsigned>(tokens[i])) << 32) | static_cast<unsigned>(i)
              : 0ull;
    int rank = 0;
    for (int j0 = 0; j0 < N; j0 += kSortThreads) {
        const int j = j0 + threadIdx.x;
        tile[threadIdx.x] =
            j < N ? (static_cast<unsigned long long>(static_cast<unsigned>(tokens[j])) << 32) | static_cast<unsigned>(j)
                  : ~0ull;  // sorts after every real key: never counted
        __syncthreads();
        const int count = N - j0 < kSortThreads ? N - j0 : kSortThreads;
        for (int k = 0; k < count; ++k) rank += tile[k] < key;
        __syncthreads();
    }
    if (i < N) order[rank] = i;
}

// dwte[v, c] += dout[p, c] for each position p with token v, in increasing p. Blocks stride over
// the sorted positions; the first position of each token's run walks the whole run, one thread
// per channel (grid.y chunks the channels), so every (row, channel) has exactly one writer.
template <typename T>
__global__ void encoder_dwte_kernel(float* dwte, const T* dout, const int* tokens, const int* order, int N, int C) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    for (int s = blockIdx.x; s < N; s += gridDim.x) {
        const int v = tokens[order[s]];
        if (s > 0 && tokens[order[s - 1]] == v) continue;  // not the run's first position
        float* row = dwte + static_cast<long>(v) * C;
        float acc = row[c];
        for (int k = s; k < N; ++k) {
            const int p = order[k];
            if (tokens[p] != v) break;
            acc += to_f32(dout[static_cast<long>(p) * C + c]);
        }
        row[c] = acc;
    }
}

// dwpe[t, c] += dout[b, t, c] for b = 0, 1, ..., one thread per (t, c): coalesced over c.
template <typename T>
__global__ void encoder_dwpe_kernel(float* dwpe, const T* dout, int B, int T_len, int C) {
    const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
    const long tc = static_cast<long>(T_len) * C;
    if (i >= tc) return;
    float acc = dwpe[i];
    for (int b = 0; b < B; ++b) acc += to_f32(dout[b * tc + i]);
    dwpe[i] = acc;
}

}  // namespace

void encoder_forward(const KernelContext& ctx, Act out_act, const int* tokens, ConstAct wte, ConstAct wpe, int B,
                     int T, int C) {
    const DType type = activation_type("encoder_forward", {out_act, wte, wpe});
    if (B * T == 0 || C == 0) return;
    // The activation type is Elem here: T is the sequence length.
    with_activation_type(type, "encoder_forward", [&](auto tag) {
        using Elem = typename decltype(tag)::type;
        ADACC_LAUNCH(encoder_forward_kernel<Elem>, B * T, kThreads, 0, ctx.stream)(
            device_ptr<Elem>(out_act), tokens, device_ptr<Elem>(wte), device_ptr<Elem>(wpe), T, C);
    });
    check_launch("encoder_forward");
}

void encoder_backward(const KernelContext& ctx, float* dwte, float* dwpe, ConstAct dout_act, const int* tokens, int B,
                      int T, int C) {
    const int N = B * T;
    if (N == 0 || C == 0) return;
    if (static_cast<std::size_t>(N) * sizeof(int) > ctx.reduction_scratch_bytes)
        throw std::invalid_argument("encoder_backward: B*T positions exceed the reduction scratch");
    int* order = static_cast<int*>(ctx.reduction_scratch);
    ADACC_LAUNCH(encoder_sort_positions_kernel, ceil_div(N, kSortThreads), kSortThreads, 0, ctx.stream)(order, tokens,
                                                                                                        N);
    check_launch("encoder_backward (sort)");
    const dim3 walk_grid(N < kWalkBlocks ? N : kWalkBlocks, ceil_div(C, kThreads));
    const long tc = static_cast<long>(T) * C;
    // The activation type is Elem here: T is the sequence length.
    with_activation_type(dout_act.dtype(), "encoder_backward", [&](auto tag) {
        using Elem = typename decltype(tag)::type;
        const Elem* dout = device_ptr<Elem>(dout_act);
        ADACC_LAUNCH(encoder_dwte_kernel<Elem>, walk_grid, kThreads, 0, ctx.stream)(dwte, dout, tokens, order, N, C);
        check_launch("encoder_backward (dwte)");
        ADACC_LAUNCH(encoder_dwpe_kernel<Elem>, ceil_div(tc, kThreads), kThreads, 0, ctx.stream)(dwpe, dout, B, T, C);
        check_launch("encoder_backward (dwpe)");
    });
}

}  // namespace adacc::cuda
