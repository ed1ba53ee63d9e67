// Fused classifier: log-softmax + cross-entropy over the first V of Vp columns, one block per row.
// The row's max and sum of exp(x - max) come from one read (an online softmax: each thread keeps
// a running max and a sum rescaled whenever the max grows), then, when dloss != 0, a second sweep,
// backwards, overwrites the logits with dlogits = (softmax - onehot) * dloss and zeroes the padded
// columns.
// Both sweeps move 16 bytes at a time (kernels/cuda/cuda_common.cuh: load_pack, store_pack).
// The reductions are fixed butterflies and one shared broadcast, so every thread uses the same
// (max, sum) and the result does not depend on timing.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 512;  // ~100 columns per thread at V = 50257
constexpr int kLossThreads = 1024;

// The running (max, sum) pair after merging (m2, s2) into (m, s); an empty side has max -inf.
__device__ inline void merge_softmax(float& m, float& s, float m2, float s2) {
    const float top = fmaxf(m, m2);
    if (top == -INFINITY) return;  // both empty
    s = (m == -INFINITY ? 0.0f : s * expf(m - top)) + (m2 == -INFINITY ? 0.0f : s2 * expf(m2 - top));
    m = top;
}

// Logits of type T (float or bf16), loaded to fp32; the math is fp32, the losses are fp32, and
// the dlogits are rounded once to T when they overwrite the row.
template <typename T>
__global__ void fused_classifier_kernel(T* logits, float* losses, const int* targets, int V, int Vp, float dloss,
                                        bool aligned) {
    __shared__ float partial_max[32], partial_sum[32];
    __shared__ float row_max, row_sum;
    T* row = logits + static_cast<long>(blockIdx.x) * Vp;
    const int target = targets[blockIdx.x];
    // Read before any thread of the block overwrites the row (after the barriers below).
    const float target_logit = threadIdx.x == 0 ? to_f32(row[target]) : 0.0f;

    // Thread t owns the packs of kPack columns at t kPack, (t + blockDim) kPack, ...: each
    // pack's max first, one rescale of the running sum when it grows, then the pack's exps.
    constexpr int P = kPack<T>;
    float m = -INFINITY, s = 0.0f;
    for (int j = threadIdx.x * P; j < V; j += blockDim.x * P) {
        float x[P];
        load_pack(x, row, j, V, aligned);
        float top = -INFINITY;
        for (int k = 0; k < P && j + k < V; ++k) top = fmaxf(top, x[k]);
        if (top > m) {
            s = m == -INFINITY ? 0.0f : s * expf(m - top);
            m = top;
        }
        for (int k = 0; k < P && j + k < V; ++k) s += expf(x[k] - m);
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
        merge_softmax(m, s, m2, s2);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    if (lane == 0) {
        partial_max[warp] = m;
        partial_sum[warp] = s;
    }
    __syncthreads();
    if (warp == 0) {
        m = lane < warps ? partial_max[lane] : -INFINITY;
        s = lane < warps ? partial_sum[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            const float m2 = __shfl_xor_sync(0xffffffffu, m, offset), s2 = __shfl_xor_sync(0xffffffffu, s, offset);
            merge_softmax(m, s, m2, s2);
        }
        // One lane's pair for everyone: lanes of a butterfly may differ in the last bit where
        // the compiler contracts a merge into an FMA, and every element must see the same sum.
        if (lane == 0) {
            row_max = m;
            row_sum = s;
        }
    }
    __syncthreads();
    const float maxv = row_max, sum = row_sum;
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) - (target_logit - maxv);
    if (dloss == 0.0f) return;
    const float scale = dloss / sum;
    // The second sweep goes from the row's end back to its start (llm.c's two sweeps also run in
    // opposite directions): the packs the first sweep read last are the likeliest to be still in
    // cache. Each element's dlogit depends on nothing else, so the order changes no result.
    const int stride = blockDim.x * P, first = threadIdx.x * P;
    const int last = first < Vp ? first + (Vp - 1 - first) / stride * stride : first - stride;
    for (int j = last; j >= first; j -= stride) {
        float d[P];
        load_pack(d, row, j, Vp, aligned);
        for (int k = 0; k < P; ++k) {
            float v = 0.0f;  // padded columns
            if (j + k < V) {
                v = expf(d[k] - maxv) * scale;
                if (j + k == target) v -= dloss;
            }
            d[k] = v;
        }
        store_pack(row, j, Vp, d, aligned);
    }
}

// One block: each thread sums a fixed stride of the losses in double, then a fixed butterfly.
__global__ void loss_accumulate_kernel(float* total, const float* losses, int n, double divisor, bool accumulate) {
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
        ADACC_LAUNCH(fused_classifier_kernel<T>, N, kThreads, 0, ctx.stream)
        (logits, losses, targets, V, Vp, dloss, aligned);
    });
    check_launch("fused_classifier");
}

void loss_accumulate(const KernelContext& ctx, float* total, const float* losses, int n, double divisor,
                     bool accumulate) {
    ADACC_LAUNCH(loss_accumulate_kernel, 1, kLossThreads, 0, ctx.stream)(total, losses, n, divisor, accumulate);
    check_launch("loss_accumulate");
}

}  // namespace adacc::cuda
