// Causal self-attention with materialised T x T probabilities (the tape saves them or not).
// Loops are per (batch, head) in parallel; inner loops run over contiguous head channels or
// keys so they vectorise. qkv rows are [q | k | v], head h at columns h*hs .. (h+1)*hs.
#include <cmath>

#include "kernels/cpu/ops.h"
#include "kernels/vector_math.h"

namespace adacc::cpu {
namespace {

struct HeadView {
    long row_stride;  // 3C
    int hs;
    const float* q(const float* qkv, int b, int t, int T, int h) const {
        return qkv + (static_cast<long>(b) * T + t) * row_stride + h * hs;
    }
};

inline float dot(const float* a, const float* b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

inline float keep_scale(const unsigned char* mask, long idx, float p) {
    return mask ? (mask[idx] ? 1.0f / (1.0f - p) : 0.0f) : 1.0f;
}

}  // namespace

void attention_softmax_forward(const KernelContext& ctx, Act att_act, ConstAct qkv_act, int B, int T, int C, int NH) {
    float* att = att_act.as<float>();
    const float* qkv = qkv_act.as<float>();
    const HeadView hv{3L * C, C / NH};
    const float scale = 1.0f / std::sqrt(static_cast<float>(hv.hs));
#pragma omp parallel for collapse(2) num_threads(team(ctx))
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t) {
                const float* q = hv.q(qkv, b, t, T, h);
                float* row = att + ((static_cast<long>(b) * NH + h) * T + t) * T;
                float maxv = -INFINITY;
                for (int t2 = 0; t2 <= t; ++t2) {
                    row[t2] = dot(q, hv.q(qkv, b, t2, T, h) + C, hv.hs) * scale;
                    maxv = row[t2] > maxv ? row[t2] : maxv;
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; ++t2) {
                    row[t2] = exp_approx(row[t2] - maxv);
                    sum += row[t2];
                }
                const float inv = 1.0f / sum;
                for (int t2 = 0; t2 <= t; ++t2) row[t2] *= inv;
                for (int t2 = t + 1; t2 < T; ++t2) row[t2] = 0.0f;
            }
}

void attention_value_forward(const KernelContext& ctx, Act atty_act, ConstAct att_act, const unsigned char* mask,
                             float dropout_p, ConstAct qkv_act, int B, int T, int C, int NH) {
    float* atty = atty_act.as<float>();
    const float* att = att_act.as<float>();
    const float* qkv = qkv_act.as<float>();
    const HeadView hv{3L * C, C / NH};
#pragma omp parallel for collapse(2) num_threads(team(ctx))
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t) {
                const long row = ((static_cast<long>(b) * NH + h) * T + t) * T;
                float* y = atty + (static_cast<long>(b) * T + t) * C + h * hv.hs;
                for (int i = 0; i < hv.hs; ++i) y[i] = 0.0f;
                for (int t2 = 0; t2 <= t; ++t2) {
                    const float a = att[row + t2] * keep_scale(mask, row + t2, dropout_p);
                    const float* v = hv.q(qkv, b, t2, T, h) + 2 * C;
#pragma omp simd
                    for (int i = 0; i < hv.hs; ++i) y[i] += a * v[i];
                }
            }
}

void attention_value_backward(const KernelContext& ctx, Act datt_act, Act dqkv_act, ConstAct datty_act, ConstAct att_act,
                              const unsigned char* mask, float dropout_p, ConstAct qkv_act, int B, int T,
                              int C, int NH) {
    float* datt = datt_act.as<float>();
    float* dqkv = dqkv_act.as<float>();
    const float* datty = datty_act.as<float>();
    const float* att = att_act.as<float>();
    const float* qkv = qkv_act.as<float>();
    const HeadView hv{3L * C, C / NH};
#pragma omp parallel for collapse(2) num_threads(team(ctx))
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            // dv[t2] = sum_t a[t, t2] * dy[t]: zero this head's v columns, then accumulate.
            for (int t2 = 0; t2 < T; ++t2) {
                float* dv = dqkv + (static_cast<long>(b) * T + t2) * hv.row_stride + h * hv.hs + 2 * C;
                for (int i = 0; i < hv.hs; ++i) dv[i] = 0.0f;
            }
            for (int t = 0; t < T; ++t) {
                const long row = ((static_cast<long>(b) * NH + h) * T + t) * T;
                const float* dy = datty + (static_cast<long>(b) * T + t) * C + h * hv.hs;
                for (int t2 = 0; t2 <= t; ++t2) {
                    const float s = keep_scale(mask, row + t2, dropout_p);
                    const float* v = hv.q(qkv, b, t2, T, h) + 2 * C;
                    datt[row + t2] = dot(dy, v, hv.hs) * s;
                    float* dv = dqkv + (static_cast<long>(b) * T + t2) * hv.row_stride + h * hv.hs + 2 * C;
                    const float a = att[row + t2] * s;
#pragma omp simd
                    for (int i = 0; i < hv.hs; ++i) dv[i] += a * dy[i];
                }
                for (int t2 = t + 1; t2 < T; ++t2) datt[row + t2] = 0.0f;
            }
        }
}

void attention_softmax_backward(const KernelContext& ctx, Act dqkv_act, Act datt_act, ConstAct att_act,
                                ConstAct qkv_act, int B, int T, int C, int NH) {
    float* dqkv = dqkv_act.as<float>();
    float* datt = datt_act.as<float>();
    const float* att = att_act.as<float>();
    const float* qkv = qkv_act.as<float>();
    const HeadView hv{3L * C, C / NH};
    const float scale = 1.0f / std::sqrt(static_cast<float>(hv.hs));
#pragma omp parallel for collapse(2) num_threads(team(ctx))
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h) {
            for (int t = 0; t < T; ++t) {
                float* dq = dqkv + (static_cast<long>(b) * T + t) * hv.row_stride + h * hv.hs;
                for (int i = 0; i < hv.hs; ++i) dq[i] = dq[i + C] = 0.0f;  // q and k columns
            }
            for (int t = 0; t < T; ++t) {
                const long row = ((static_cast<long>(b) * NH + h) * T + t) * T;
                const float* a = att + row;
                const float* da = datt + row;
                const float* q = hv.q(qkv, b, t, T, h);
                float* dq = dqkv + (static_cast<long>(b) * T + t) * hv.row_stride + h * hv.hs;
                const float weighted = dot(a, da, t + 1);  // sum_j a_j da_j
                for (int t2 = 0; t2 <= t; ++t2) {
                    // d(pre-softmax score) = a (da - sum a da), times the 1/sqrt(hs) scale.
                    const float dscore = a[t2] * (da[t2] - weighted) * scale;
                    const float* k = hv.q(qkv, b, t2, T, h) + C;
                    float* dk = dqkv + (static_cast<long>(b) * T + t2) * hv.row_stride + h * hv.hs + C;
#pragma omp simd
                    for (int i = 0; i < hv.hs; ++i) {
                        dq[i] += dscore * k[i];
                        dk[i] += dscore * q[i];
                    }
                }
            }
        }
}

}  // namespace adacc::cpu
