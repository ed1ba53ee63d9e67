// Causal self-attention that never stores the T x T probabilities (FlashAttention's algorithm,
// the CPU twin of kernels/cuda/attention_fused.cu). Per (batch, head) in parallel, per query row:
// the keys are visited in tiles of kKeyTile with an online softmax (a running max m and sum l,
// the output accumulated unnormalised and rescaled by exp(m_old - m_new) when the max grows);
// the row's lse = m + log(l) is saved for backward, which recomputes each probability as
// exp(s - lse). Attention dropout keeps a probability with the RNG draw the materialized path's
// mask holds for the same element, so both paths drop the same entries.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/rng.h"
#include "kernels/vector_math.h"

namespace adacc::cpu {
namespace {

constexpr int kKeyTile = 64;

struct Heads {
    long row_stride;  // 3C: qkv rows are [q | k | v]
    int C, hs;
    const float* q(const float* qkv, int b, int t, int T, int h) const {
        return qkv + (static_cast<long>(b) * T + t) * row_stride + h * hs;
    }
    const float* k(const float* qkv, int b, int t, int T, int h) const { return q(qkv, b, t, T, h) + C; }
    const float* v(const float* qkv, int b, int t, int T, int h) const { return q(qkv, b, t, T, h) + 2 * C; }
};

inline float dot(const float* a, const float* b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

// The dropout factor of probability (row, t2): 1 / (1 - p) when kept, 0 when dropped (1 without dropout).
inline float keep_factor(unsigned long long key, long row, int T, int t2, float p) {
    if (p <= 0.0f) return 1.0f;
    return rng_uniform(key, static_cast<std::uint64_t>(row * T + t2)) >= p ? 1.0f / (1.0f - p) : 0.0f;
}

}  // namespace

void attention_fused_forward(const KernelContext& ctx, Act atty_act, float* lse, ConstAct qkv_act, int B, int T,
                             int C, int NH, float dropout_p, unsigned long long key) {
    float* atty = atty_act.as<float>();
    const float* qkv = qkv_act.as<float>();
    const Heads hd{3L * C, C, C / NH};
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd.hs));
#pragma omp parallel num_threads(team(ctx))
    {
        float s[kKeyTile];
#pragma omp for collapse(2)
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < NH; ++h)
                for (int t = 0; t < T; ++t) {
                    const long row = (static_cast<long>(b) * NH + h) * T + t;
                    const float* q = hd.q(qkv, b, t, T, h);
                    float* y = atty + (static_cast<long>(b) * T + t) * C + h * hd.hs;
                    for (int i = 0; i < hd.hs; ++i) y[i] = 0.0f;
                    float m = -INFINITY, l = 0.0f;
                    for (int j0 = 0; j0 <= t; j0 += kKeyTile) {
                        const int n = std::min(kKeyTile, t + 1 - j0);
                        float tile_max = -INFINITY;
                        for (int j = 0; j < n; ++j) {
                            s[j] = dot(q, hd.k(qkv, b, j0 + j, T, h), hd.hs) * scale;
                            tile_max = s[j] > tile_max ? s[j] : tile_max;
                        }
                        const float m_new = tile_max > m ? tile_max : m;
                        const float rescale = exp_approx(m - m_new);  // 0 on the first tile (m = -inf)
                        l *= rescale;
                        for (int i = 0; i < hd.hs; ++i) y[i] *= rescale;
                        for (int j = 0; j < n; ++j) {
                            const float e = exp_approx(s[j] - m_new);
                            l += e;
                            const float a = e * keep_factor(key, row, T, j0 + j, dropout_p);
                            if (a == 0.0f) continue;
                            const float* v = hd.v(qkv, b, j0 + j, T, h);
#pragma omp simd
                            for (int i = 0; i < hd.hs; ++i) y[i] += a * v[i];
                        }
                        m = m_new;
                    }
                    const float inv = 1.0f / l;
                    for (int i = 0; i < hd.hs; ++i) y[i] *= inv;
                    lse[row] = m + std::log(l);
                }
    }
}

void attention_fused_backward(const KernelContext& ctx, Act dqkv_act, ConstAct datty_act, ConstAct qkv_act,
                              ConstAct atty_act, const float* lse, int B, int T, int C, int NH, float dropout_p,
                              unsigned long long key) {
    float* dqkv = dqkv_act.as<float>();
    const float* datty = datty_act.as<float>();
    const float* qkv = qkv_act.as<float>();
    const float* atty = atty_act.as<float>();
    const Heads hd{3L * C, C, C / NH};
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd.hs));
#pragma omp parallel for collapse(2) num_threads(team(ctx))
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            // This head's q, k and v columns of dqkv belong to this iteration alone.
            for (int t = 0; t < T; ++t) {
                float* d = dqkv + (static_cast<long>(b) * T + t) * hd.row_stride + h * hd.hs;
                for (int i = 0; i < hd.hs; ++i) d[i] = d[i + C] = d[i + 2 * C] = 0.0f;
            }
            for (int t = 0; t < T; ++t) {
                const long row = (static_cast<long>(b) * NH + h) * T + t;
                const float* q = hd.q(qkv, b, t, T, h);
                const float* dy = datty + (static_cast<long>(b) * T + t) * C + h * hd.hs;
                const float* y = atty + (static_cast<long>(b) * T + t) * C + h * hd.hs;
                float* dq = dqkv + (static_cast<long>(b) * T + t) * hd.row_stride + h * hd.hs;
                const float D = dot(dy, y, hd.hs);  // sum_j p_j dp_j
                for (int j = 0; j <= t; ++j) {
                    const float* k = hd.k(qkv, b, j, T, h);
                    const float* v = hd.v(qkv, b, j, T, h);
                    float* dk = dqkv + (static_cast<long>(b) * T + j) * hd.row_stride + h * hd.hs + C;
                    float* dv = dk + C;
                    const float prob = exp_approx(dot(q, k, hd.hs) * scale - lse[row]);
                    const float keep = keep_factor(key, row, T, j, dropout_p);
                    const float dprob = dot(dy, v, hd.hs) * keep;  // d(loss)/d(p) before dropout
                    const float ds = prob * (dprob - D) * scale;   // d(loss)/d(score), times 1/sqrt(hs)
                    const float a = prob * keep;
#pragma omp simd
                    for (int i = 0; i < hd.hs; ++i) {
                        dv[i] += a * dy[i];
                        dq[i] += ds * k[i];
                        dk[i] += ds * q[i];
                    }
                }
            }
        }
}

}  // namespace adacc::cpu
