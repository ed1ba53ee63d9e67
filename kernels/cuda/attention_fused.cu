// Causal self-attention without the T x T probabilities (kernels/cpu/attention_fused.cpp is the
// twin; the same algorithm). One warp per row: the lanes split the head's channels (lane i holds
// channels i, i + 32, ...; hs <= 32 * kMaxChannelsPerLane), a score q.k is a warp_sum of the
// lanes' partial dots, and every lane then holds the same score, so the online softmax runs in
// registers. Forward: a warp per query row over keys 0..t (a running max and sum, the output
// rescaled when the max grows), lse saved. Backward in two kernels, each warp owning the rows it
// writes (no atomics, a fixed order: deterministic): a warp per query row writes dq; a warp per
// key row writes dk and dv, re-deriving each query's D = datty . atty and probability
// exp(s - lse). Dropout: the RNG draw the materialized path's mask holds for the same element.
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

struct Geometry {
    int B, T, C, NH, hs;
    float scale;  // 1 / sqrt(hs)
    __host__ __device__ long rows() const { return static_cast<long>(B) * NH * T; }
    // Row r = (b*NH + h)*T + t of the attention matrix; qkv offsets of its q, k, v; atty's.
    __device__ long qkv_at(int b, int t, int h) const { return (static_cast<long>(b) * T + t) * 3L * C + h * hs; }
    __device__ long y_at(int b, int t, int h) const { return (static_cast<long>(b) * T + t) * C + h * hs; }
};

// The row this warp owns: its index (b*NH + h)*T + t, that split, and the thread's lane.
struct WarpRow {
    long row;
    int b, h, t, lane;
};
__device__ inline WarpRow warp_row(const Geometry& g) {
    const long row = static_cast<long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    return {row, static_cast<int>(row / g.T / g.NH), static_cast<int>(row / g.T % g.NH), static_cast<int>(row % g.T),
            static_cast<int>(threadIdx.x % 32)};
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

template <typename E>
__global__ void fused_forward_kernel(E* atty, float* lse, const E* qkv, Geometry g, float p, unsigned long long key) {
    const auto [row, b, h, t, lane] = warp_row(g);
    if (row >= g.rows()) return;  // whole warps only
    float q[kMaxChannelsPerLane], y[kMaxChannelsPerLane] = {};
    load_lane(q, qkv + g.qkv_at(b, t, h), g.hs, lane);
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= t; ++j) {
        const float s = warp_dot(q, qkv + g.qkv_at(b, j, h) + g.C, g.hs, lane) * g.scale;
        const float m_new = fmaxf(m, s);
        const float rescale = expf(m - m_new), e = expf(s - m_new);
        l = l * rescale + e;
        const float a = e * keep_factor(key, row, g.T, j, p);
        const E* v = qkv + g.qkv_at(b, j, h) + 2 * g.C;
        for (int c = 0; c < kMaxChannelsPerLane; ++c) {
            const int i = lane + 32 * c;
            y[c] = y[c] * rescale + (i < g.hs ? a * to_f32(v[i]) : 0.0f);
        }
        m = m_new;
    }
    store_lane(atty + g.y_at(b, t, h), y, 1.0f / l, g.hs, lane);
    if (lane == 0) lse[row] = m + logf(l);
}

// dq of query row t: sum_j ds_j k_j, ds_j = p_j (dp_j - D) / sqrt(hs).
template <typename E>
__global__ void fused_backward_dq_kernel(E* dqkv, const E* datty, const E* qkv, const E* atty, const float* lse,
                                         Geometry g, float p, unsigned long long key) {
    const auto [row, b, h, t, lane] = warp_row(g);
    if (row >= g.rows()) return;
    float q[kMaxChannelsPerLane], dy[kMaxChannelsPerLane], dq[kMaxChannelsPerLane] = {};
    load_lane(q, qkv + g.qkv_at(b, t, h), g.hs, lane);
    load_lane(dy, datty + g.y_at(b, t, h), g.hs, lane);
    const float D = warp_dot(dy, atty + g.y_at(b, t, h), g.hs, lane);
    for (int j = 0; j <= t; ++j) {
        const E* k = qkv + g.qkv_at(b, j, h) + g.C;
        const float prob = expf(warp_dot(q, k, g.hs, lane) * g.scale - lse[row]);
        const float dprob = warp_dot(dy, k + g.C, g.hs, lane) * keep_factor(key, row, g.T, j, p);
        const float ds = prob * (dprob - D) * g.scale;
        for (int c = 0; c < kMaxChannelsPerLane; ++c) {
            const int i = lane + 32 * c;
            if (i < g.hs) dq[c] += ds * to_f32(k[i]);
        }
    }
    store_lane(dqkv + g.qkv_at(b, t, h), dq, 1.0f, g.hs, lane);
}

// dk and dv of key row j: over queries t >= j, dk += ds_t q_t and dv += p_t keep_t dy_t.
template <typename E>
__global__ void fused_backward_dkv_kernel(E* dqkv, const E* datty, const E* qkv, const E* atty, const float* lse,
                                          Geometry g, float p, unsigned long long key) {
    const auto [krow, b, h, j, lane] = warp_row(g);  // a key row
    if (krow >= g.rows()) return;
    float k[kMaxChannelsPerLane], v[kMaxChannelsPerLane], dk[kMaxChannelsPerLane] = {}, dv[kMaxChannelsPerLane] = {};
    load_lane(k, qkv + g.qkv_at(b, j, h) + g.C, g.hs, lane);
    load_lane(v, qkv + g.qkv_at(b, j, h) + 2 * g.C, g.hs, lane);
    for (int t = j; t < g.T; ++t) {
        const long row = krow - j + t;  // the query row t of the same (b, h)
        const E* q = qkv + g.qkv_at(b, t, h);
        const E* dy = datty + g.y_at(b, t, h);
        float dyl[kMaxChannelsPerLane];
        load_lane(dyl, dy, g.hs, lane);
        const float D = warp_dot(dyl, atty + g.y_at(b, t, h), g.hs, lane);
        const float prob = expf(warp_dot(k, q, g.hs, lane) * g.scale - lse[row]);
        const float keep = keep_factor(key, row, g.T, j, p);
        const float dprob = warp_dot(v, dy, g.hs, lane) * keep;
        const float ds = prob * (dprob - D) * g.scale;
        for (int c = 0; c < kMaxChannelsPerLane; ++c) {
            const int i = lane + 32 * c;
            if (i >= g.hs) continue;
            dk[c] += ds * to_f32(q[i]);
            dv[c] += prob * keep * dyl[c];
        }
    }
    store_lane(dqkv + g.qkv_at(b, j, h) + g.C, dk, 1.0f, g.hs, lane);
    store_lane(dqkv + g.qkv_at(b, j, h) + 2 * g.C, dv, 1.0f, g.hs, lane);
}

Geometry geometry(const char* kernel, int B, int T, int C, int NH) {
    const int hs = C / NH;
    if (hs > 32 * kMaxChannelsPerLane)
        throw std::invalid_argument(std::string(kernel) + ": head size " + std::to_string(hs) + " above " +
                                    std::to_string(32 * kMaxChannelsPerLane));
    return {B, T, C, NH, hs, 1.0f / sqrtf(static_cast<float>(hs))};
}

}  // namespace

void attention_fused_forward(const KernelContext& ctx, Act atty_act, float* lse, ConstAct qkv_act, int B, int T,
                             int C, int NH, float dropout_p, unsigned long long key) {
    const DType type = activation_type("attention_fused_forward", {qkv_act, atty_act});
    with_activation_type(type, "attention_fused_forward", [&](auto tag) {
        using E = typename decltype(tag)::type;
        const Geometry g = geometry("attention_fused_forward", B, T, C, NH);
        if (g.rows() <= 0) return;
        ADACC_LAUNCH(fused_forward_kernel<E>, ceil_div(g.rows(), kRowsPerBlock), kThreads, 0, ctx.stream)
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
        ADACC_LAUNCH(fused_backward_dq_kernel<E>, ceil_div(g.rows(), kRowsPerBlock), kThreads, 0, ctx.stream)
        (dqkv, datty, qkv, atty, lse, g, dropout_p, key);
        check_launch("attention_fused_backward (dq)");
        ADACC_LAUNCH(fused_backward_dkv_kernel<E>, ceil_div(g.rows(), kRowsPerBlock), kThreads, 0, ctx.stream)
        (dqkv, datty, qkv, atty, lse, g, dropout_p, key);
        check_launch("attention_fused_backward (dk, dv)");
    });
}

}  // namespace adacc::cuda
