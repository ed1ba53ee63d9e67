// Causal self-attention without the T x T probabilities (kernels/cpu/attention_fused.cpp is the
// twin; the same algorithm). A block of 8 warps owns 8 consecutive rows of one (b, h), a warp
// per row; the block walks the rows' keys (or, for dk and dv, queries) in tiles of kTile rows
// that its threads load together into shared memory as fp32, so each K and V row is read from
// global memory once per block instead of once per row. Within a warp the lanes split the head's
// channels (lane i holds channels i, i + 32, ...; hs <= 32 * kMaxChannelsPerLane), a score q.k
// is a warp_sum of the lanes' partial dots, and every lane then holds the same score, so the
// online softmax runs in registers. Forward: per query row over keys 0..t (a running max and
// sum, the output rescaled when the max grows), lse saved. Backward in two kernels, each warp
// owning the rows it writes (no atomics, a fixed order: deterministic): one per query row writes
// dq; one per key row writes dk and dv, re-deriving each query's D = datty . atty (computed once
// per tile, shared) and probability exp(s - lse). Dropout: the RNG draw the materialized path's
// mask holds for the same element.
//
// Element types: qkv, atty, datty and dqkv have the model's dtype (E, f32 or bf16); loads go
// through to_f32, the arithmetic is fp32, stores round once with from_f32. lse is fp32.
#include <cmath>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/rng.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps per block, a row each
constexpr int kRowsPerBlock = kThreads / 32;
constexpr int kMaxChannelsPerLane = 8;  // hs <= 256
constexpr int kTile = 16;               // rows per shared-memory tile: 2 x 16 x 256 floats = 32 KiB at most

struct Geometry {
    int B, T, C, NH, hs;
    float scale;  // 1 / sqrt(hs)
    __host__ __device__ long rows() const { return static_cast<long>(B) * NH * T; }
    // qkv offsets of (b, t, h)'s q (k and v follow at + C, + 2C); atty's (and datty's).
    __device__ long qkv_at(int b, int t, int h) const { return (static_cast<long>(b) * T + t) * 3L * C + h * hs; }
    __device__ long y_at(int b, int t, int h) const { return (static_cast<long>(b) * T + t) * C + h * hs; }
};

// The rows a block owns: block (bh, y) holds rows first .. last of (b, h) = (bh / NH, bh % NH),
// warp w row t = first + w (inactive past T: it still meets the block's barriers); row is the
// attention matrix's row (b*NH + h)*T + t.
struct BlockRows {
    int b, h, first, last, t, lane;
    bool active;
    long row;
};
__device__ inline BlockRows block_rows(const Geometry& g) {
    const int bh = blockIdx.x, first = blockIdx.y * kRowsPerBlock, t = first + threadIdx.x / 32;
    return {bh / g.NH, bh % g.NH, first, min(g.T - 1, first + kRowsPerBlock - 1), t, static_cast<int>(threadIdx.x % 32),
            t < g.T, static_cast<long>(bh) * g.T + t};
}

// Rows [j0, j0 + n) of `base` (rows `stride` elements apart, hs channels each) into tile[n][hs]
// as fp32, by every thread of the block; the caller synchronises before reading it.
template <typename E>
__device__ inline void load_tile(float* tile, const E* base, long stride, int j0, int n, int hs) {
    for (int i = threadIdx.x; i < n * hs; i += blockDim.x) {
        const int j = i / hs, c = i % hs;
        tile[i] = to_f32(base[(j0 + j) * stride + c]);
    }
}

__device__ inline float keep_factor(unsigned long long key, long row, int T, int t2, float p) {
    if (p <= 0.0f) return 1.0f;
    return rng_uniform(key, static_cast<std::uint64_t>(row * T + t2)) >= p ? 1.0f / (1.0f - p) : 0.0f;
}

// The lane's channels of a row of hs values at `x` (fp32, zero beyond hs).
template <typename E>
__device__ inline void load_lane(float (&out)[kMaxChannelsPerLane], const E* x, int hs, int lane) {
    for (int c = 0; c < kMaxChannelsPerLane; ++c) {
        const int i = lane + 32 * c;
        out[c] = i < hs ? to_f32(x[i]) : 0.0f;
    }
}

// Stores the lane's channels of `v` (times `scale`) into a row of hs values at `x`.
template <typename E>
__device__ inline void store_lane(E* x, const float (&v)[kMaxChannelsPerLane], float scale, int hs, int lane) {
    for (int c = 0; c < kMaxChannelsPerLane; ++c) {
        const int i = lane + 32 * c;
        if (i < hs) x[i] = from_f32<E>(v[c] * scale);
    }
}

template <typename E>
__device__ inline float warp_dot(const float (&a)[kMaxChannelsPerLane], const E* x, int hs, int lane) {
    float s = 0.0f;
    for (int c = 0; c < kMaxChannelsPerLane; ++c) {
        const int i = lane + 32 * c;
        if (i < hs) s += a[c] * to_f32(x[i]);
    }
    return warp_sum(s);
}

// Keys j0 .. j0 + n - 1 of one (b, h) (`keys`: its k of row 0) and their values into the
// block's tiles, ready for every warp to read.
template <typename E>
__device__ inline void load_keys_and_values(float* ks, float* vs, const E* keys, const Geometry& g, int j0, int n) {
    load_tile(ks, keys, 3L * g.C, j0, n, g.hs);
    load_tile(vs, keys + g.C, 3L * g.C, j0, n, g.hs);
    __syncthreads();
}

template <typename E>
__global__ void fused_forward_kernel(E* atty, float* lse, const E* qkv, Geometry g, float p, unsigned long long key) {
    ADACC_DYNAMIC_SHARED(float, shared);
    float *ks = shared, *vs = shared + kTile * g.hs;  // a tile of keys, then its values
    const BlockRows r = block_rows(g);
    float q[kMaxChannelsPerLane], y[kMaxChannelsPerLane] = {};
    if (r.active) load_lane(q, qkv + g.qkv_at(r.b, r.t, r.h), g.hs, r.lane);
    float m = -INFINITY, l = 0.0f;
    const E* keys = qkv + g.qkv_at(r.b, 0, r.h) + g.C;
    for (int j0 = 0; j0 <= r.last; j0 += kTile) {
        const int n = min(kTile, r.last + 1 - j0);
        load_keys_and_values(ks, vs, keys, g, j0, n);
        for (int j = 0; r.active && j < n && j0 + j <= r.t; ++j) {
            const float s = warp_dot(q, ks + j * g.hs, g.hs, r.lane) * g.scale;
            const float m_new = fmaxf(m, s);
            const float rescale = expf(m - m_new), e = expf(s - m_new);
            l = l * rescale + e;
            const float a = e * keep_factor(key, r.row, g.T, j0 + j, p);
            const float* v = vs + j * g.hs;
            for (int c = 0; c < kMaxChannelsPerLane; ++c) {
                const int i = r.lane + 32 * c;
                y[c] = y[c] * rescale + (i < g.hs ? a * v[i] : 0.0f);
            }
            m = m_new;
        }
        __syncthreads();  // every warp is done with the tile before the next overwrites it
    }
    if (!r.active) return;
    store_lane(atty + g.y_at(r.b, r.t, r.h), y, 1.0f / l, g.hs, r.lane);
    if (r.lane == 0) lse[r.row] = m + logf(l);
}

// dq of query row t: sum_j ds_j k_j, ds_j = p_j (dp_j - D) / sqrt(hs).
template <typename E>
__global__ void fused_backward_dq_kernel(E* dqkv, const E* datty, const E* qkv, const E* atty, const float* lse,
                                         Geometry g, float p, unsigned long long key) {
    ADACC_DYNAMIC_SHARED(float, shared);
    float *ks = shared, *vs = shared + kTile * g.hs;
    const BlockRows r = block_rows(g);
    float q[kMaxChannelsPerLane], dy[kMaxChannelsPerLane], dq[kMaxChannelsPerLane] = {};
    float D = 0.0f, row_lse = 0.0f;
    if (r.active) {
        load_lane(q, qkv + g.qkv_at(r.b, r.t, r.h), g.hs, r.lane);
        load_lane(dy, datty + g.y_at(r.b, r.t, r.h), g.hs, r.lane);
        D = warp_dot(dy, atty + g.y_at(r.b, r.t, r.h), g.hs, r.lane);
        row_lse = lse[r.row];
    }
    const E* keys = qkv + g.qkv_at(r.b, 0, r.h) + g.C;
    for (int j0 = 0; j0 <= r.last; j0 += kTile) {
        const int n = min(kTile, r.last + 1 - j0);
        load_keys_and_values(ks, vs, keys, g, j0, n);
        for (int j = 0; r.active && j < n && j0 + j <= r.t; ++j) {
            const float* k = ks + j * g.hs;
            const float prob = expf(warp_dot(q, k, g.hs, r.lane) * g.scale - row_lse);
            const float dprob = warp_dot(dy, vs + j * g.hs, g.hs, r.lane) * keep_factor(key, r.row, g.T, j0 + j, p);
            const float ds = prob * (dprob - D) * g.scale;
            for (int c = 0; c < kMaxChannelsPerLane; ++c) {
                const int i = r.lane + 32 * c;
                if (i < g.hs) dq[c] += ds * k[i];
            }
        }
        __syncthreads();
    }
    if (r.active) store_lane(dqkv + g.qkv_at(r.b, r.t, r.h), dq, 1.0f, g.hs, r.lane);
}

// dk and dv of key row j: over queries t >= j, dk += ds_t q_t and dv += p_t keep_t dy_t. The
// block's tile of queries holds q, dy and, computed once for the tile, each query's D and lse.
template <typename E>
__global__ void fused_backward_dkv_kernel(E* dqkv, const E* datty, const E* qkv, const E* atty, const float* lse,
                                          Geometry g, float p, unsigned long long key) {
    ADACC_DYNAMIC_SHARED(float, shared);
    float *qs = shared, *dys = qs + kTile * g.hs, *Ds = dys + kTile * g.hs, *lses = Ds + kTile;
    const BlockRows r = block_rows(g);  // r.t is this warp's key row j
    const int warp = threadIdx.x / 32;
    const long head_row = r.row - r.t;  // the attention matrix's row of (b, h, 0)
    float k[kMaxChannelsPerLane], v[kMaxChannelsPerLane], dk[kMaxChannelsPerLane] = {}, dv[kMaxChannelsPerLane] = {};
    if (r.active) {
        load_lane(k, qkv + g.qkv_at(r.b, r.t, r.h) + g.C, g.hs, r.lane);
        load_lane(v, qkv + g.qkv_at(r.b, r.t, r.h) + 2 * g.C, g.hs, r.lane);
    }
    for (int t0 = r.first; t0 < g.T; t0 += kTile) {
        const int n = min(kTile, g.T - t0);
        load_tile(qs, qkv + g.qkv_at(r.b, 0, r.h), 3L * g.C, t0, n, g.hs);
        load_tile(dys, datty + g.y_at(r.b, 0, r.h), g.C, t0, n, g.hs);
        __syncthreads();
        for (int i = warp; i < n; i += kRowsPerBlock) {  // D = dy . atty of each query, a warp each
            float dyl[kMaxChannelsPerLane];
            load_lane(dyl, dys + i * g.hs, g.hs, r.lane);
            const float D = warp_dot(dyl, atty + g.y_at(r.b, t0 + i, r.h), g.hs, r.lane);
            if (r.lane == 0) {
                Ds[i] = D;
                lses[i] = lse[head_row + t0 + i];
            }
        }
        __syncthreads();
        for (int i = 0; r.active && i < n; ++i) {
            if (t0 + i < r.t) continue;  // queries before the key do not see it
            const float *q = qs + i * g.hs, *dy = dys + i * g.hs;
            float dyl[kMaxChannelsPerLane];
            load_lane(dyl, dy, g.hs, r.lane);
            const float prob = expf(warp_dot(k, q, g.hs, r.lane) * g.scale - lses[i]);
            const float keep = keep_factor(key, head_row + t0 + i, g.T, r.t, p);
            const float dprob = warp_dot(v, dy, g.hs, r.lane) * keep;
            const float ds = prob * (dprob - Ds[i]) * g.scale;
            for (int c = 0; c < kMaxChannelsPerLane; ++c) {
                const int idx = r.lane + 32 * c;
                if (idx >= g.hs) continue;
                dk[c] += ds * q[idx];
                dv[c] += prob * keep * dyl[c];
            }
        }
        __syncthreads();
    }
    if (!r.active) return;
    store_lane(dqkv + g.qkv_at(r.b, r.t, r.h) + g.C, dk, 1.0f, g.hs, r.lane);
    store_lane(dqkv + g.qkv_at(r.b, r.t, r.h) + 2 * g.C, dv, 1.0f, g.hs, r.lane);
}

Geometry geometry(const char* kernel, int B, int T, int C, int NH) {
    const int hs = C / NH;
    if (hs > 32 * kMaxChannelsPerLane)
        throw std::invalid_argument(std::string(kernel) + ": head size " + std::to_string(hs) + " above " +
                                    std::to_string(32 * kMaxChannelsPerLane));
    return {B, T, C, NH, hs, 1.0f / sqrtf(static_cast<float>(hs))};
}

// A block per 8 rows of each (b, h); two tiles of kTile rows of hs floats each.
dim3 grid(const Geometry& g) { return dim3(static_cast<unsigned>(g.B * g.NH), ceil_div(g.T, kRowsPerBlock)); }
std::size_t tile_bytes(const Geometry& g) { return 2 * std::size_t{kTile} * g.hs * sizeof(float); }

}  // namespace

void attention_fused_forward(const KernelContext& ctx, Act atty_act, float* lse, ConstAct qkv_act, int B, int T,
                             int C, int NH, float dropout_p, unsigned long long key) {
    const DType type = activation_type("attention_fused_forward", {qkv_act, atty_act});
    with_activation_type(type, "attention_fused_forward", [&](auto tag) {
        using E = typename decltype(tag)::type;
        const Geometry g = geometry("attention_fused_forward", B, T, C, NH);
        if (g.rows() <= 0) return;
        ADACC_LAUNCH(fused_forward_kernel<E>, grid(g), kThreads, tile_bytes(g), ctx.stream)
        (device_ptr<E>(atty_act), lse, device_ptr<E>(qkv_act), g, dropout_p, key);
        check_launch("attention_fused_forward");
    });
}

void attention_fused_backward(const KernelContext& ctx, Act dqkv_act, ConstAct datty_act, ConstAct qkv_act,
                              ConstAct atty_act, const float* lse, int B, int T, int C, int NH, float dropout_p,
                              unsigned long long key) {
    const DType type = activation_type("attention_fused_backward", {dqkv_act, datty_act, qkv_act, atty_act});
    with_activation_type(type, "attention_fused_backward", [&](auto tag) {
        using E = typename decltype(tag)::type;
        const Geometry g = geometry("attention_fused_backward", B, T, C, NH);
        if (g.rows() <= 0) return;
        E* dqkv = device_ptr<E>(dqkv_act);
        const E *datty = device_ptr<E>(datty_act), *qkv = device_ptr<E>(qkv_act), *atty = device_ptr<E>(atty_act);
        ADACC_LAUNCH(fused_backward_dq_kernel<E>, grid(g), kThreads, tile_bytes(g), ctx.stream)
        (dqkv, datty, qkv, atty, lse, g, dropout_p, key);
        check_launch("attention_fused_backward (dq)");
        ADACC_LAUNCH(fused_backward_dkv_kernel<E>, grid(g), kThreads, tile_bytes(g) + 2 * kTile * sizeof(float),
                     ctx.stream)
        (dqkv, datty, qkv, atty, lse, g, dropout_p, key);
        check_launch("attention_fused_backward (dk, dv)");
    });
}

}  // namespace adacc::cuda
