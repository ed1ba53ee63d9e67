// Fused classifier: log-softmax + cross-entropy over the first V of Vp columns, one block per row.
// The row's max and sum of exp(x - max) come from one read (an online softmax: each thread keeps
// a running max and a sum rescaled whenever the max grows), then, when dloss != 0, a second sweep
// overwrites the logits with dlogits = (softmax - onehot) * dloss and zeroes the padded columns.
// The first sweep keeps what it read in the block's shared memory and the second reads it from
// there, so the logits cross DRAM once each way (before, the second sweep read them again: three
// passes over a chunk's logits, 268 MB at GPT-2's vocabulary in bf16). The cache holds the row's
// first `cached` columns, all of them where the row fits the block's shared memory (bf16 always:
// Vp <= 65536 is 128 KiB; fp32 up to ~58k columns); the second sweep reads the rest from the row
// again.
// Both sweeps move 16 bytes at a time (kernels/cuda/cuda_common.cuh: load_pack, store_pack).
// The reductions are fixed butterflies and one shared broadcast, so every thread uses the same
// (max, sum) and the result does not depend on timing.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 512;  // ~100 columns per thread at V = 50257
// Two blocks an SM at GPT-2's vocabulary in bf16 (2 x 100.6 KB of cache), so at most 64
// registers a thread.
constexpr int kBlocksPerSm = 2;
// Packs a thread loads before it uses the first: with two blocks an SM, 64 KB in flight per SM,
// enough to keep DRAM busy while the exps of the packs already loaded are computed.
constexpr int kLoadsInFlight = 4;
constexpr int kLossThreads = 1024;

// The running (max, sum) pair after merging (m2, s2) into (m, s); an empty side has max -inf.
__device__ inline void merge_softmax(float& m, float& s, float m2, float s2) {
    const float top = fmaxf(m, m2);
    if (top == -INFINITY) return;  // both empty
    s = (m == -INFINITY ? 0.0f : s * expf(m - top)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - top));
    m = top;
}

// The kernel's static shared memory: the warps' partial (max, sum) and the row's.
struct RowStatistics {
    float partial_max[32], partial_sum[32];
    float max, sum;
};

// Logits of type T (float or bf16), loaded to fp32; the math is fp32, the losses are fp32, and
// the dlogits are rounded once to T when they overwrite the row. `cached`: how many of the row's
// first columns the dynamic shared memory holds, a multiple of kPack<T>, at most V rounded up.
template <typename T>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    fused_classifier_kernel(T* logits, float* losses, const int* targets, int V, int Vp, float dloss, int cached,
                            bool aligned) {
    __shared__ RowStatistics stats;
    ADACC_DYNAMIC_SHARED(Pack<T>, cache);  // cache[j / P] holds columns [j, j + P) for j < cached
    T* row = logits + static_cast<long>(blockIdx.x) * Vp;
    const int target = targets[blockIdx.x];
    // Read before any thread of the block overwrites the row (after the barriers below).
    const float target_logit = threadIdx.x == 0 ? to_f32(row[target]) : 0.0f;

    // Thread t owns the packs of P columns at t P, t P + stride, ...: each pack's max first, one
    // rescale of the running sum when it grows, then the pack's exps. The packs are loaded
    // kLoadsInFlight at a time and used in that order; each goes to the cache as it was read,
    // and only the thread that cached a pack reads it back.
    constexpr int P = kPack<T>;
    const int stride = blockDim.x * P;
    float m = -INFINITY, s = 0.0f;
    for (int first = threadIdx.x * P; first < V; first += kLoadsInFlight * stride) {
        Pack<T> packs[kLoadsInFlight];
        ADACC_UNROLL
        for (int u = 0; u < kLoadsInFlight; ++u) packs[u] = load_raw_pack(row, first + u * stride, V, aligned);
        ADACC_UNROLL
        for (int u = 0; u < kLoadsInFlight; ++u) {
            const int j = first + u * stride;
            if (j >= V) break;
            if (j < cached) cache[j / P] = packs[u];
            float x[P];
            unpack(x, packs[u]);
            float top = -INFINITY;
            for (int k = 0; k < P && j + k < V; ++k) top = fmaxf(top, x[k]);
            if (top > m) {
                s = m == -INFINITY ? 0.0f : s * expf(m - top);
                m = top;
            }
            for (int k = 0; k < P && j + k < V; ++k) s += expf(x[k] - m);
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        merge_softmax(m, s, m2, s2);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) {
        stats.partial_max[warp] = m;
        stats.partial_sum[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < warps ? stats.partial_max[lane] : -INFINITY;
        s = lane < warps ? stats.partial_sum[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
            merge_softmax(m, s, m2, s2);
        }
        // One lane's pair for everyone: lanes of a butterfly may differ in the last bit where
        // the compiler contracts a merge into an FMA, and every element must see the same sum.
        if (lane == 0) {
            stats.max = m;
            stats.sum = s;
        }
    }
    __syncthreads();
    const float maxv = stats.max, sum = stats.sum;
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) - (target_logit - maxv);
    if (dloss == 0.0f) return;
    const float scale = dloss / sum;
    for (int j = threadIdx.x * P; j < Vp; j += stride) {
        float d[P] = {};  // past V: padded columns, written as 0
        if (j < cached)
            unpack(d, cache[j / P]);
        else if (j < V)
            load_pack(d, row, j, V, aligned);
        for (int k = 0; k < P; ++k) {
            float v = 0.0f;
            if (j + k < V) {
                v = expf(d[k] - maxv) * scale;
                if (j + k == target) v -= dloss;
            }
            d[k] = v;
        }
        store_pack(row, j, Vp, d, aligned);
    }
}

// How many of a row's first columns fused_classifier_kernel<T> caches: whole packs of the first V
// columns, as many as the device's shared memory per block holds beside the kernel's own.
template <typename T>
int cached_columns(int V) {
    const long shared_bytes = static_cast<long>(shared_memory_per_block("fused_classifier"));
    constexpr long P = kPack<T>;
    constexpr long statistics_bytes = (sizeof(RowStatistics) + 15) / 16 * 16;  // the cache starts 16-byte aligned
    const long fit = (shared_bytes - statistics_bytes) / static_cast<long>(sizeof(Pack<T>));
    const long whole_row = ceil_div(V, P);
    return static_cast<int>((fit < whole_row ? (fit > 0 ? fit : 0) : whole_row) * P);
}

// One block: each thread sums a fixed stride of the losses in double, then a fixed butterfly (its
// 1024 threads allow at most 64 registers each, which the bounds hold ptxas to).
__global__ void __launch_bounds__(kLossThreads)
    loss_accumulate_kernel(float* total, const float* losses, int n, double divisor, bool accumulate) {
    __shared__ double partials[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) acc += losses[i];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    acc = warp_sum(acc);
    if (lane == 0) partials[warp] = acc;
    __syncthreads();
    if (warp != 0) return;
    acc = warp_sum(lane < static_cast<int>(blockDim.x / 32) ? partials[lane] : 0.0);
    if (lane == 0) *total = static_cast<float>((accumulate ? static_cast<double>(*total) : 0.0) + acc / divisor);
}

}  // namespace

void fused_classifier(const KernelContext& ctx, Act logits_act, float* losses, const int* targets, int N, int V, int Vp,
                      float dloss) {
    if (N == 0) return;
    with_activation_type(logits_act.dtype(), "fused_classifier", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* logits = device_ptr<T>(logits_act);
        const bool aligned = Vp % kPack<T> == 0 && packs_aligned({logits});  // every row starts aligned
        const int cached = dloss != 0.0f ? cached_columns<T>(V) : 0;         // no second sweep: nothing to cache
        const std::size_t cache_bytes = static_cast<std::size_t>(cached) * sizeof(T);
        const void* kernel = reinterpret_cast<const void*>(&fused_classifier_kernel<T>);
        allow_dynamic_shared(kernel, cache_bytes, "fused_classifier");
        // kBlocksPerSm blocks' caches need most of the SM's shared memory, more than an even split
        // with L1 leaves; the kernel reads each row from DRAM once, so L1 has nothing to hold.
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   cudaSharedmemCarveoutMaxShared),
              "fused_classifier");
        ADACC_LAUNCH(fused_classifier_kernel<T>, N, kThreads, cache_bytes, ctx.stream)
        (logits, losses, targets, V, Vp, dloss, cached, aligned);
    });
    check_launch("fused_classifier");
}

void loss_accumulate(const KernelContext& ctx, float* total, const float* losses, int n, double divisor,
                     bool accumulate) {
    ADACC_LAUNCH(loss_accumulate_kernel, 1, kLossThreads, 0, ctx.stream)(total, losses, n, divisor, accumulate);
    check_launch("loss_accumulate");
}

}  // namespace adacc::cuda
