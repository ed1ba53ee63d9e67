// Token + position embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:], and its backward.
//
// The backward scatters rows of dout into dwte by token id, and a token may repeat. Atomics would
// make the order of the additions (and so the rounding) depend on timing; instead the positions
// are sorted by (token id, position) and one thread per channel walks each token's run of
// positions in increasing order. That is exactly the CPU twin's order (kernels/cpu/encoder.cpp
// adds positions b*T+t in increasing order into each (row, channel)), so dwte and dwpe are bit
// for bit the CPU's. A bf16 dout (and the forward's bf16 embeddings) widen exactly to fp32, so
// that holds in bf16 too (against the CPU run on the same values as floats).
//
// On a GPU the sort is CUB's radix sort of the token ids with the positions as values: a radix
// sort is stable, so equal ids keep increasing positions. The SIMT emulation cannot compile CUB
// (device code of its own), so there a simple O(n^2) ranking kernel gives the same order. The
// sort's buffers live in ctx.reduction_scratch; when B*T positions do not fit, they are sorted
// and walked in chunks of consecutive positions, which adds them in the same order (a chunk's
// partial sums pass through dwte in fp32, exactly).
#include <stdexcept>

#ifndef ADACC_SIMT_EMULATION
#include <cub/device/device_radix_sort.cuh>
#endif

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 256;
// Blocks that stride over the sorted positions in the dwte kernel (times the channel chunks): a
// fixed count, enough to fill the SMs without launching one mostly idle block per position.
constexpr int kWalkBlocks = 1024;
// Positions of a token's run whose dout loads the dwte walk issues together.
constexpr int kWalkBatch = 8;

// Threads of a forward block: one pack (kernels/cuda/cuda_common.cuh) of channels each, up to
// kThreads, rounded up to whole warps.
template <typename T>
int pack_threads(int C) {
    const int threads = (C + kPack<T> - 1) / kPack<T>;
    return threads >= kThreads ? kThreads : (threads + 31) / 32 * 32;
}

// One block per position (b, t), each thread a pack of channels: coalesced, and no 64-bit
// division per element. out and the embeddings are of type T (float or bf16); the sum is the
// CPU's fp32 sum of the embeddings' values, rounded once when T is bf16. `aligned`: every row
// starts 16-byte aligned (the pointers are, and C is a multiple of kPack).
template <typename T>
__global__ void encoder_forward_kernel(T* out, const int* tokens, const T* wte, const T* wpe, int T_len, int C,
                                       bool aligned) {
    constexpr int P = kPack<T>;
    const int bt = blockIdx.x;
    const T* e = wte + static_cast<long>(tokens[bt]) * C;
    const T* p = wpe + static_cast<long>(bt % T_len) * C;
    T* o = out + static_cast<long>(bt) * C;
    for (int c = threadIdx.x * P; c < C; c += blockDim.x * P) {
        float x[P], y[P];
        load_pack(x, e, c, C, aligned);
        load_pack(y, p, c, C, aligned);
        for (int j = 0; j < P; ++j) x[j] += y[j];
        store_pack(o, c, C, x, aligned);
    }
}

// The P fp32 values p[c .. c + P) (those at or past C: 0), as float packs where aligned; and
// their store. P is a whole number of float packs (4 or 8).
template <int P>
__device__ inline void load_floats(float (&out)[P], const float* p, long c, long C, bool aligned) {
    for (int h = 0; h < P; h += kPack<float>) {
        float part[kPack<float>];
        load_pack(part, p, c + h, C, aligned);
        for (int j = 0; j < kPack<float>; ++j) out[h + j] = part[j];
    }
}
template <int P>
__device__ inline void store_floats(float* p, long c, long C, const float (&in)[P], bool aligned) {
    for (int h = 0; h < P; h += kPack<float>) {
        float part[kPack<float>];
        for (int j = 0; j < kPack<float>; ++j) part[j] = in[h + j];
        store_pack(p, c + h, C, part, aligned);
    }
}

// The chunk's positions base, base + 1, ...: the values the sort carries along with the tokens.
__global__ void encoder_positions_kernel(int* positions, int base, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) positions[i] = base + i;
}

#ifdef ADACC_SIMT_EMULATION
constexpr int kSortThreads = 128;

// The emulation's stand-in for CUB's stable radix sort of n (key, value) pairs: rank = the pair's
// index among them sorted by (key, index), keys_out[rank] = its key, values_out[rank] = its value.
// The (key << 32 | index) keys are unique, so the ranks are a permutation. O(n^2) comparisons
// from shared-memory tiles: fine for the emulation's small tests, far too slow for a GPU's batch.
__global__ void encoder_sort_positions_kernel(int* keys_out, int* values_out, const int* keys, const int* values,
                                              int n) {
    __shared__ unsigned long long tile[kSortThreads];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    auto key = [&](int j) {
        return (static_cast<unsigned long long>(static_cast<unsigned>(keys[j])) << 32) | static_cast<unsigned>(j);
    };
    const unsigned long long mine = i < n ? key(i) : 0ull;
    int rank = 0;
    for (int j0 = 0; j0 < n; j0 += kSortThreads) {
        const int j = j0 + threadIdx.x;
        tile[threadIdx.x] = j < n ? key(j) : ~0ull;  // sorts after every real key: never counted
        __syncthreads();
        const int count = n - j0 < kSortThreads ? n - j0 : kSortThreads;
        for (int k = 0; k < count; ++k) rank += tile[k] < mine;
        __syncthreads();
    }
    if (i < n) {
        keys_out[rank] = keys[i];
        values_out[rank] = values[i];
    }
}
#endif

// dwte[v, c] += dout[p, c] for each position p of the chunk with token v, in increasing p, from
// the chunk's sorted tokens and positions. Blocks stride over the sorted positions; the first
// position of each token's run walks the whole run, one thread per pack of channels (grid.y
// chunks the channels), so every (row, channel) has exactly one writer. The run is read
// kWalkBatch positions at a time, their loads in flight together, and added in order: a frequent
// token's long run is then not one dependent load after another.
template <typename T>
__global__ void encoder_dwte_kernel(float* dwte, const T* dout, const int* sorted, const int* order, int n, int C,
                                    bool aligned) {
    constexpr int P = kPack<T>;
    const int c = (blockIdx.y * blockDim.x + threadIdx.x) * P;
    if (c >= C) return;
    for (int s = blockIdx.x; s < n; s += gridDim.x) {
        const int v = sorted[s];
        if (s > 0 && sorted[s - 1] == v) continue;  // not the run's first position
        float* row = dwte + static_cast<long>(v) * C;
        float acc[P];
        load_floats(acc, row, c, C, aligned);
        for (int k = s, in_run = kWalkBatch; in_run == kWalkBatch; k += kWalkBatch) {
            float values[kWalkBatch][P];
            in_run = 0;  // the run is contiguous: its positions in this batch are a prefix
            for (int j = 0; j < kWalkBatch; ++j) {
                const bool in = k + j < n && sorted[k + j] == v;
                if (in) load_pack(values[j], dout + static_cast<long>(order[k + j]) * C, c, C, aligned);
                in_run += in;
            }
            for (int j = 0; j < kWalkBatch; ++j)
                if (j < in_run)
                    for (int q = 0; q < P; ++q) acc[q] += values[j][q];
        }
        store_floats(row, c, C, acc, aligned);
    }
}

// dwpe[t, c] += dout[b, t, c] for b = 0, 1, ..., one thread per pack of (t, c): coalesced.
template <typename T>
__global__ void encoder_dwpe_kernel(float* dwpe, const T* dout, int B, int T_len, int C, bool aligned) {
    constexpr int P = kPack<T>;
    const long i = (static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x) * P;
    const long tc = static_cast<long>(T_len) * C;
    if (i >= tc) return;
    float acc[P];
    load_floats(acc, dwpe, i, tc, aligned);
    for (int b = 0; b < B; ++b) {
        float d[P];
        load_pack(d, dout + b * tc, i, tc, aligned);
        for (int j = 0; j < P; ++j) acc[j] += d[j];
    }
    store_floats(dwpe, i, tc, acc, aligned);
}

}  // namespace

void encoder_forward(const KernelContext& ctx, Act out_act, const int* tokens, ConstAct wte, ConstAct wpe, int B, int T,
                     int C) {
    const DType type = activation_type("encoder_forward", {out_act, wte, wpe});
    if (B * T == 0 || C == 0) return;
    // The activation type is Elem here: T is the sequence length.
    with_activation_type(type, "encoder_forward", [&](auto tag) {
        using Elem = typename decltype(tag)::type;
        Elem* out = device_ptr<Elem>(out_act);
        const Elem *e = device_ptr<Elem>(wte), *p = device_ptr<Elem>(wpe);
        const bool aligned = C % kPack<Elem> == 0 && packs_aligned({out, e, p});
        ADACC_LAUNCH(encoder_forward_kernel<Elem>, B * T, pack_threads<Elem>(C), 0, ctx.stream)
        (out, tokens, e, p, T, C, aligned);
    });
    check_launch("encoder_forward");
}

namespace {

// The sort's buffers in ctx.reduction_scratch for a chunk of `chunk` positions: the positions in
// order, the sorted tokens and their positions, then CUB's temporary storage.
struct SortBuffers {
    int* positions;
    int* sorted;
    int* order;
    void* temp;
    std::size_t temp_bytes;
};

// CUB wants its temporary storage aligned as cudaMalloc's (256 bytes).
constexpr std::size_t kTempAlignment = 256;
std::size_t align_up(std::size_t bytes) { return (bytes + kTempAlignment - 1) / kTempAlignment * kTempAlignment; }

std::size_t sort_temp_bytes(const KernelContext& ctx, int n) {
#ifdef ADACC_SIMT_EMULATION
    (void)ctx, (void)n;
    return 0;
#else
    std::size_t bytes = 0;
    check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const unsigned*>(nullptr),
                                          static_cast<unsigned*>(nullptr), static_cast<const int*>(nullptr),
                                          static_cast<int*>(nullptr), n, 0, 32, stream_of(ctx)),
          "encoder_backward (sort size)");
    return bytes;
#endif
}

std::size_t sort_bytes(const KernelContext& ctx, int chunk) {
    return align_up(3 * sizeof(int) * static_cast<std::size_t>(chunk)) + sort_temp_bytes(ctx, chunk);
}

// The most positions (up to N) whose sort fits in the reduction scratch: 12 bytes a position and
// CUB's ~8 (its alternate keys and values), so all B*T positions up to ~800k, fewer beyond.
int sort_chunk(const KernelContext& ctx, int N) {
    int chunk = N;
    while (chunk > 0 && sort_bytes(ctx, chunk) > ctx.reduction_scratch_bytes) chunk -= chunk / 8 > 0 ? chunk / 8 : 1;
    if (chunk == 0)
        throw std::invalid_argument("encoder_backward: the reduction scratch cannot hold one position's sort");
    return chunk;
}

SortBuffers sort_buffers(const KernelContext& ctx, int chunk) {
    int* ints = static_cast<int*>(ctx.reduction_scratch);
    const std::size_t n = static_cast<std::size_t>(chunk);
    const std::size_t temp_offset = align_up(3 * sizeof(int) * n);
    return {ints, ints + n, ints + 2 * n, static_cast<char*>(ctx.reduction_scratch) + temp_offset,
            ctx.reduction_scratch_bytes - temp_offset};
}

// Positions base .. base + n - 1 sorted by (token id, position) into buf.sorted and buf.order.
void sort_positions(const KernelContext& ctx, const SortBuffers& buf, const int* tokens, int base, int n) {
    ADACC_LAUNCH(encoder_positions_kernel, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(buf.positions, base, n);
    check_launch("encoder_backward (positions)");
#ifdef ADACC_SIMT_EMULATION
    ADACC_LAUNCH(encoder_sort_positions_kernel, ceil_div(n, kSortThreads), kSortThreads, 0, ctx.stream)
    (buf.sorted, buf.order, tokens + base, buf.positions, n);
    check_launch("encoder_backward (sort)");
#else
    // Token ids are nonnegative: as unsigned keys they sort as the ids. All 32 bits, because the
    // kernel is not told the vocabulary size (a fourth 8-bit pass over a few MiB: microseconds).
    std::size_t temp_bytes = buf.temp_bytes;
    check(cub::DeviceRadixSort::SortPairs(buf.temp, temp_bytes, reinterpret_cast<const unsigned*>(tokens + base),
                                          reinterpret_cast<unsigned*>(buf.sorted), buf.positions, buf.order, n, 0, 32,
                                          stream_of(ctx)),
          "encoder_backward (sort)");
#endif
}

}  // namespace

void encoder_backward(const KernelContext& ctx, float* dwte, float* dwpe, ConstAct dout_act, const int* tokens, int B,
                      int T, int C) {
    const int N = B * T;
    if (N == 0 || C == 0) return;
    if (!ctx.reduction_scratch) throw std::invalid_argument("encoder_backward: no reduction scratch for the sort");
    const int chunk = sort_chunk(ctx, N);
    const SortBuffers buf = sort_buffers(ctx, chunk);
    const long tc = static_cast<long>(T) * C;
    // The activation type is Elem here: T is the sequence length.
    with_activation_type(dout_act.dtype(), "encoder_backward", [&](auto tag) {
        using Elem = typename decltype(tag)::type;
        const Elem* dout = device_ptr<Elem>(dout_act);
        const bool aligned = C % kPack<Elem> == 0 && packs_aligned({dout, dwte, dwpe});
        const int threads = pack_threads<Elem>(C);
        for (int base = 0; base < N; base += chunk) {
            const int n = N - base < chunk ? N - base : chunk;
            sort_positions(ctx, buf, tokens, base, n);
            const dim3 walk_grid(n < kWalkBlocks ? n : kWalkBlocks, ceil_div(C, threads * kPack<Elem>));
            ADACC_LAUNCH(encoder_dwte_kernel<Elem>, walk_grid, threads, 0, ctx.stream)
            (dwte, dout, buf.sorted, buf.order, n, C, aligned);
            check_launch("encoder_backward (dwte)");
        }
        ADACC_LAUNCH(encoder_dwpe_kernel<Elem>, ceil_div(tc, kThreads * kPack<Elem>), kThreads, 0, ctx.stream)
        (dwpe, dout, B, T, C, aligned);
        check_launch("encoder_backward (dwpe)");
    });
}

}  // namespace adacc::cuda
