// Every CPU kernel's backward against central finite differences of its forward, on random
// shapes (odd sizes, T = 1, dimensions that are not multiples of 8). The scalar checked is
// L = sum(out * w) for a random w, accumulated in double; the analytic gradient comes from the
// backward kernel fed dout = w. Error measure: ||g - g_fd|| / ||g_fd|| per input tensor, which
// must be < 1e-3 in float32 (the bar).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/gelu_math.h"
#include "kernels/rng.h"
#include "kernels/vector_math.h"

namespace adacc::cpu {
namespace {

const KernelContext kCtx = default_context();  // OpenMP's default team, no scratch

using Vec = std::vector<float>;

Vec random_vec(std::size_t n, std::mt19937& gen, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    Vec v(n);
    for (auto& x : v) x = d(gen);
    return v;
}

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (std::size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
    return s;
}

// Central differences of L(input) = dot(forward(), w) with respect to every element of `input`.
Vec finite_difference(Vec& input, const std::function<Vec()>& forward, const Vec& w, float h = 1e-3f) {
    Vec g(input.size());
    for (std::size_t i = 0; i < input.size(); ++i) {
        const float saved = input[i];
        input[i] = saved + h;
        const double up = dot(forward(), w);
        input[i] = saved - h;
        const double down = dot(forward(), w);
        input[i] = saved;
        g[i] = static_cast<float>((up - down) / (2.0 * h));
    }
    return g;
}

double relative_error(const Vec& analytic, const Vec& numeric) {
    double diff = 0, ref = 0;
    for (std::size_t i = 0; i < analytic.size(); ++i) {
        diff += (analytic[i] - numeric[i]) * static_cast<double>(analytic[i] - numeric[i]);
        ref += static_cast<double>(numeric[i]) * numeric[i];
    }
    return std::sqrt(diff / std::max(ref, 1e-30));
}

constexpr double kTolerance = 1e-3;

struct Shape {
    int B, T, C, NH;
};
const Shape kShapes[] = {{2, 3, 5, 1}, {1, 1, 12, 3}, {3, 7, 9, 3}, {2, 5, 16, 4}, {1, 11, 6, 2}};

class KernelGradTest : public ::testing::TestWithParam<Shape> {
protected:
    std::mt19937 gen{1234};
};

TEST_P(KernelGradTest, Encoder) {
    const auto [B, T, C, NH] = GetParam();
    const int V = 7;
    std::vector<int> tokens(B * T);
    for (auto& t : tokens) t = static_cast<int>(gen() % V);
    Vec wte = random_vec(V * C, gen), wpe = random_vec(T * C, gen), w = random_vec(B * T * C, gen);
    auto fwd = [&] {
        Vec out(B * T * C);
        encoder_forward(kCtx, out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
        return out;
    };
    Vec dwte(wte.size()), dwpe(wpe.size());
    encoder_backward(kCtx, dwte.data(), dwpe.data(), w.data(), tokens.data(), B, T, C);
    EXPECT_LT(relative_error(dwte, finite_difference(wte, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(dwpe, finite_difference(wpe, fwd, w)), kTolerance);
}

TEST_P(KernelGradTest, LayerNorm) {
    const auto [B, T, C, NH] = GetParam();
    const int N = B * T;
    Vec x = random_vec(N * C, gen), weight = random_vec(C, gen), bias = random_vec(C, gen), w = random_vec(N * C, gen);
    Vec mean(N), rstd(N);
    auto fwd = [&] {
        Vec out(N * C);
        layernorm_forward(kCtx, out.data(), mean.data(), rstd.data(), x.data(), weight.data(), bias.data(), N, C);
        return out;
    };
    fwd();
    Vec dx(N * C, 0.0f), dweight(C), dbias(C);
    layernorm_backward(kCtx, dx.data(), dweight.data(), dbias.data(), w.data(), x.data(), weight.data(), mean.data(),
                       rstd.data(), N, C);
    EXPECT_LT(relative_error(dx, finite_difference(x, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(dweight, finite_difference(weight, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(dbias, finite_difference(bias, fwd, w)), kTolerance);
}

TEST_P(KernelGradTest, Matmul) {
    const auto [B, T, C, NH] = GetParam();
    const int N = B * T, OC = 3 * C + 1;
    Vec x = random_vec(N * C, gen), weight = random_vec(OC * C, gen), bias = random_vec(OC, gen),
        w = random_vec(N * OC, gen);
    auto fwd = [&] {
        Vec out(N * OC);
        matmul_forward(kCtx, out.data(), x.data(), weight.data(), bias.data(), N, C, OC);
        return out;
    };
    Vec dx(N * C), dweight(OC * C, 0.0f), dbias(OC, 0.0f);
    matmul_backward(kCtx, dx.data(), dweight.data(), dbias.data(), w.data(), x.data(), weight.data(), N, C, OC, true);
    EXPECT_LT(relative_error(dx, finite_difference(x, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(dweight, finite_difference(weight, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(dbias, finite_difference(bias, fwd, w)), kTolerance);
    // Overwriting (a step's first micro-batch) gives exactly what accumulating into zeros gives.
    Vec dweight2(OC * C, 123.0f), dbias2(OC, -7.0f);
    matmul_backward(kCtx, dx.data(), dweight2.data(), dbias2.data(), w.data(), x.data(), weight.data(), N, C, OC,
                    false);
    EXPECT_EQ(dweight2, dweight);
    EXPECT_EQ(dbias2, dbias);
}

// The MLP with GELU in its matmuls (matmul_gelu_forward, matmul_dgelu_backward), checked as one
// function y = fcproj(gelu(fc(x))) of x and both layers' parameters; its GELU width H the next
// multiple of kGeluEpilogueColumns above 4C. The fused kernels compute what matmul then gelu (and
// matmul_backward then gelu_backward) compute, bit for bit: the CPU graph without the fusion gives
// the same training.
TEST_P(KernelGradTest, MatmulsWithGeluInTheEpilogue) {
    const auto [B, T, C, NH] = GetParam();
    const int N = B * T, H = (4 * C + kGeluEpilogueColumns - 1) / kGeluEpilogueColumns * kGeluEpilogueColumns;
    Vec x = random_vec(N * C, gen), w1 = random_vec(H * C, gen, 0.5f), b1 = random_vec(H, gen),
        w2 = random_vec(C * H, gen, 0.5f), b2 = random_vec(C, gen), w = random_vec(N * C, gen);
    Vec pre(N * H), act(N * H);
    auto fwd = [&] {
        Vec y(N * C);
        matmul_gelu_forward(kCtx, act.data(), pre.data(), x.data(), w1.data(), b1.data(), N, C, H);
        matmul_forward(kCtx, y.data(), act.data(), w2.data(), b2.data(), N, H, C);
        return y;
    };
    fwd();
    Vec dpre(N * H), dx(N * C), dw1(H * C), db1(H), dw2(C * H), db2(C);
    matmul_dgelu_backward(kCtx, dpre.data(), dw2.data(), db2.data(), w.data(), act.data(), pre.data(), w2.data(), N, H,
                          C, false);
    matmul_backward(kCtx, dx.data(), dw1.data(), db1.data(), dpre.data(), x.data(), w1.data(), N, C, H, false);
    EXPECT_LT(relative_error(dx, finite_difference(x, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(dw1, finite_difference(w1, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(db1, finite_difference(b1, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(dw2, finite_difference(w2, fwd, w)), kTolerance);

    fwd();
    Vec pre2(N * H), act2(N * H), dact(N * H), dw2b(C * H), db2b(C);
    matmul_forward(kCtx, pre2.data(), x.data(), w1.data(), b1.data(), N, C, H);
    gelu_forward(kCtx, act2.data(), pre2.data(), static_cast<long>(N) * H);
    EXPECT_EQ(pre2, pre);
    EXPECT_EQ(act2, act);
    matmul_backward(kCtx, dact.data(), dw2b.data(), db2b.data(), w.data(), act.data(), w2.data(), N, H, C, false);
    gelu_backward(kCtx, dact.data(), pre.data(), dact.data(), static_cast<long>(N) * H);
    EXPECT_EQ(dact, dpre);
    EXPECT_EQ(dw2b, dw2);
    EXPECT_EQ(db2b, db2);
}

// Attention = softmax then dropout(att) @ v, checked as one function of qkv, with and without a
// dropout mask, plus the probabilities alone.
void check_attention(const Shape& s, std::mt19937& gen, bool with_dropout) {
    const auto [B, T, C, NH] = s;
    const int N = B * T;
    const float p = with_dropout ? 0.3f : 0.0f;
    Vec qkv = random_vec(N * 3 * C, gen), w = random_vec(N * C, gen);
    std::vector<unsigned char> mask(static_cast<std::size_t>(B) * NH * T * T);
    dropout_mask(kCtx, mask.data(), static_cast<long>(mask.size()), p, rng_key(1, 2, 3, 4, 5));
    const unsigned char* m = with_dropout ? mask.data() : nullptr;
    Vec att(mask.size());
    auto fwd = [&] {
        Vec out(N * C);
        attention_softmax_forward(kCtx, att.data(), qkv.data(), B, T, C, NH);
        attention_value_forward(kCtx, out.data(), att.data(), m, p, qkv.data(), B, T, C, NH);
        return out;
    };
    fwd();
    Vec datt(att.size()), dqkv(qkv.size());
    attention_value_backward(kCtx, datt.data(), dqkv.data(), w.data(), att.data(), m, p, qkv.data(), B, T, C, NH);
    attention_softmax_backward(kCtx, dqkv.data(), datt.data(), att.data(), qkv.data(), B, T, C, NH);
    EXPECT_LT(relative_error(dqkv, finite_difference(qkv, fwd, w)), kTolerance);

    // Causal structure: zero above the diagonal, rows sum to one.
    for (int row = 0; row < B * NH * T; ++row) {
        const int t = row % T;
        double sum = 0;
        for (int t2 = 0; t2 < T; ++t2) {
            if (t2 > t) {
                EXPECT_EQ(att[static_cast<std::size_t>(row) * T + t2], 0.0f);
            }
            sum += att[static_cast<std::size_t>(row) * T + t2];
        }
        EXPECT_NEAR(sum, 1.0, 1e-5);
    }
}

TEST_P(KernelGradTest, Attention) { check_attention(GetParam(), gen, false); }
TEST_P(KernelGradTest, AttentionWithDropout) { check_attention(GetParam(), gen, true); }

// Fused attention (attention_fused.cpp) as one function of qkv, with and without dropout: its
// backward against finite differences of its own forward, and both against the materialized
// kernels fed the dropout mask the same key draws (relative L2 1e-5: only rounding order
// differs, the online softmax's rescaling among it); lse against a float64 log-sum-exp.
void check_fused_attention(const Shape& s, std::mt19937& gen, bool with_dropout) {
    const auto [B, T, C, NH] = s;
    const int N = B * T, hs = C / NH;
    const float p = with_dropout ? 0.3f : 0.0f;
    const unsigned long long key = rng_key(1, 2, 3, 4, 5);
    Vec qkv = random_vec(N * 3 * C, gen), w = random_vec(N * C, gen);
    Vec lse(static_cast<std::size_t>(B) * NH * T);
    auto fwd = [&] {
        Vec out(N * C);
        attention_fused_forward(kCtx, out.data(), lse.data(), qkv.data(), B, T, C, NH, p, key);
        return out;
    };
    const Vec atty = fwd();
    Vec dqkv(qkv.size(), 7.0f);  // every entry must be written
    attention_fused_backward(kCtx, dqkv.data(), w.data(), qkv.data(), atty.data(), lse.data(), B, T, C, NH, p, key);
    EXPECT_LT(relative_error(dqkv, finite_difference(qkv, fwd, w)), kTolerance);

    std::vector<unsigned char> mask(static_cast<std::size_t>(B) * NH * T * T);
    dropout_mask(kCtx, mask.data(), static_cast<long>(mask.size()), p, key);
    const unsigned char* m = with_dropout ? mask.data() : nullptr;
    Vec att(mask.size()), ref_atty(N * C), datt(att.size()), ref_dqkv(qkv.size());
    attention_softmax_forward(kCtx, att.data(), qkv.data(), B, T, C, NH);
    attention_value_forward(kCtx, ref_atty.data(), att.data(), m, p, qkv.data(), B, T, C, NH);
    attention_value_backward(kCtx, datt.data(), ref_dqkv.data(), w.data(), att.data(), m, p, qkv.data(), B, T, C, NH);
    attention_softmax_backward(kCtx, ref_dqkv.data(), datt.data(), att.data(), qkv.data(), B, T, C, NH);
    EXPECT_LT(relative_error(atty, ref_atty), 1e-5);
    EXPECT_LT(relative_error(dqkv, ref_dqkv), 1e-5);

    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t) {
                std::vector<double> scores;
                double most = -INFINITY;
                for (int j = 0; j <= t; ++j) {
                    double sc = 0;
                    for (int i = 0; i < hs; ++i)
                        sc += double(qkv[(static_cast<std::size_t>(b) * T + t) * 3 * C + h * hs + i]) *
                              qkv[(static_cast<std::size_t>(b) * T + j) * 3 * C + C + h * hs + i];
                    scores.push_back(sc / std::sqrt(double(hs)));
                    most = std::max(most, scores.back());
                }
                double sum = 0;
                for (double sc : scores) sum += std::exp(sc - most);
                EXPECT_NEAR(lse[(static_cast<std::size_t>(b) * NH + h) * T + t], most + std::log(sum), 1e-5);
            }
}

TEST_P(KernelGradTest, FusedAttention) { check_fused_attention(GetParam(), gen, false); }
TEST_P(KernelGradTest, FusedAttentionWithDropout) { check_fused_attention(GetParam(), gen, true); }
// T = 130: three key tiles of 64, so the online softmax rescales its running sums.
TEST(FusedAttention, RescalesAcrossKeyTiles) {
    std::mt19937 gen(77);
    check_fused_attention({1, 130, 8, 2}, gen, true);
}

TEST_P(KernelGradTest, Gelu) {
    const auto [B, T, C, NH] = GetParam();
    const long n = static_cast<long>(B) * T * C * 4;
    Vec x = random_vec(n, gen, 2.0f), w = random_vec(n, gen);
    auto fwd = [&] {
        Vec out(n);
        gelu_forward(kCtx, out.data(), x.data(), n);
        return out;
    };
    Vec dx(n);
    gelu_backward(kCtx, dx.data(), x.data(), w.data(), n);
    EXPECT_LT(relative_error(dx, finite_difference(x, fwd, w)), kTolerance);
}

TEST_P(KernelGradTest, ResidualDropout) {
    const auto [B, T, C, NH] = GetParam();
    const long n = static_cast<long>(B) * T * C;
    const float p = 0.25f;
    Vec residual = random_vec(n, gen), x = random_vec(n, gen), w = random_vec(n, gen);
    std::vector<unsigned char> mask(n);
    dropout_mask(kCtx, mask.data(), n, p, rng_key(9, 8, 7, 6, 5));
    auto fwd = [&] {
        Vec out(n);
        residual_dropout_forward(kCtx, out.data(), residual.data(), x.data(), mask.data(), p, n);
        return out;
    };
    Vec dx(n);
    residual_dropout_backward(kCtx, dx.data(), w.data(), mask.data(), p, n);
    EXPECT_LT(relative_error(dx, finite_difference(x, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(w, finite_difference(residual, fwd, w)), kTolerance);  // identity branch
}

// The residual addition fused with the layernorm of its sum (CUDA's forward runs each residual add
// with the layernorm after it so), checked as one function (sum, out) of the residual, the branch
// and the layernorm's parameters, with the backward of the plain ops that backward runs:
// layernorm_backward adds into the sum's gradient, which is the residual's, then
// residual_dropout_backward gives the branch's. Its outputs are the two kernels' bit for bit.
TEST_P(KernelGradTest, ResidualLayernorm) {
    const auto [B, T, C, NH] = GetParam();
    const int N = B * T;
    const long n = static_cast<long>(N) * C;
    const float p = 0.25f;
    Vec residual = random_vec(n, gen), branch = random_vec(n, gen), weight = random_vec(C, gen),
        bias = random_vec(C, gen), w = random_vec(2 * n, gen);
    std::vector<unsigned char> mask(n);
    dropout_mask(kCtx, mask.data(), n, p, rng_key(9, 8, 7, 6, 4));
    Vec mean(N), rstd(N);
    auto fwd = [&] {  // sum, then out
        Vec y(2 * n);
        residual_layernorm_forward(kCtx, y.data(), y.data() + n, mean.data(), rstd.data(), residual.data(),
                                   branch.data(), mask.data(), p, weight.data(), bias.data(), N, C);
        return y;
    };
    const Vec y = fwd();
    Vec sum(n), out(n), pair_mean(N), pair_rstd(N);
    residual_dropout_forward(kCtx, sum.data(), residual.data(), branch.data(), mask.data(), p, n);
    layernorm_forward(kCtx, out.data(), pair_mean.data(), pair_rstd.data(), sum.data(), weight.data(), bias.data(), N,
                      C);
    EXPECT_EQ(Vec(y.begin(), y.begin() + n), sum);
    EXPECT_EQ(Vec(y.begin() + n, y.end()), out);
    EXPECT_EQ(mean, pair_mean);
    EXPECT_EQ(rstd, pair_rstd);

    Vec dsum(w.begin(), w.begin() + n), dout(w.begin() + n, w.end()), dbranch(n), dweight(C), dbias(C);
    layernorm_backward(kCtx, dsum.data(), dweight.data(), dbias.data(), dout.data(), sum.data(), weight.data(),
                       mean.data(), rstd.data(), N, C);
    residual_dropout_backward(kCtx, dbranch.data(), dsum.data(), mask.data(), p, n);
    EXPECT_LT(relative_error(dsum, finite_difference(residual, fwd, w)), kTolerance);  // the residual's: dsum's
    EXPECT_LT(relative_error(dbranch, finite_difference(branch, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(dweight, finite_difference(weight, fwd, w)), kTolerance);
    EXPECT_LT(relative_error(dbias, finite_difference(bias, fwd, w)), kTolerance);
}

TEST_P(KernelGradTest, FusedClassifier) {
    const auto [B, T, C, NH] = GetParam();
    const int N = B * T, V = 5 * C + 3, Vp = (V + 7) / 8 * 8 + 8;
    Vec logits = random_vec(static_cast<std::size_t>(N) * Vp, gen, 2.0f);
    std::vector<int> targets(N);
    for (auto& t : targets) t = static_cast<int>(gen() % V);
    // L = mean loss = sum(losses * 1/N). Per-token losses are float, so a larger step keeps
    // their rounding (~1e-7 of a loss near log V) small next to the differences.
    const Vec mean_weights(N, 1.0f / N);
    auto fwd = [&] {
        Vec copy = logits, losses(N);
        fused_classifier(kCtx, copy.data(), losses.data(), targets.data(), N, V, Vp, 0.0f);
        return losses;
    };
    Vec dlogits = logits, losses(N);
    fused_classifier(kCtx, dlogits.data(), losses.data(), targets.data(), N, V, Vp, 1.0f / N);
    EXPECT_LT(relative_error(dlogits, finite_difference(logits, fwd, mean_weights, 1e-2f)), kTolerance);
    for (int i = 0; i < N; ++i)
        for (int j = V; j < Vp; ++j) EXPECT_EQ(dlogits[static_cast<std::size_t>(i) * Vp + j], 0.0f);
}

INSTANTIATE_TEST_SUITE_P(RandomShapes, KernelGradTest, ::testing::ValuesIn(kShapes));

// The loss itself against a float64 log-softmax.
TEST(FusedClassifier, LossMatchesDoubleReference) {
    std::mt19937 gen(7);
    const int N = 4, V = 37, Vp = 48;
    Vec logits = random_vec(N * Vp, gen, 3.0f), losses(N);
    std::vector<int> targets = {0, 36, 5, 17};
    Vec copy = logits;
    fused_classifier(kCtx, copy.data(), losses.data(), targets.data(), N, V, Vp, 0.0f);
    for (int i = 0; i < N; ++i) {
        double sum = 0;
        for (int j = 0; j < V; ++j) sum += std::exp(static_cast<double>(logits[i * Vp + j]));
        EXPECT_NEAR(losses[i], std::log(sum) - logits[i * Vp + targets[i]], 1e-5);
    }
}

// Clipping on the device: a norm of 2 against grad_clip 1 scales the gradients by 0.5.
TEST(AdamW, MatchesDoubleReference) {
    std::mt19937 gen(3);
    const long n = 37;
    Vec p = random_vec(n, gen), g = random_vec(n, gen), m = random_vec(n, gen, 0.1f), v(n);
    for (auto& x : v) x = std::abs(random_vec(1, gen, 0.1f)[0]);
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, clip = 1.0f, norm = 2.0f, scale = 0.5f;
    const int t = 3;
    Vec p2 = p, m2 = m, v2 = v;
    std::vector<bf16> working(n);
    adamw_update(kCtx, p2.data(), working.data(), g.data(), m2.data(), v2.data(), n, lr, b1, b2, eps, wd, clip, &norm,
                 t);
    for (long i = 0; i < n; ++i) {
        const double gi = static_cast<double>(g[i]) * scale;
        const double mi = b1 * static_cast<double>(m[i]) + (1 - b1) * gi;
        const double vi = b2 * static_cast<double>(v[i]) + (1 - b2) * gi * gi;
        const double mhat = mi / (1 - std::pow(b1, t)), vhat = vi / (1 - std::pow(b2, t));
        const double expected = p[i] - lr * (mhat / (std::sqrt(vhat) + eps) + wd * p[i]);
        EXPECT_NEAR(m2[i], mi, 1e-6);
        EXPECT_NEAR(v2[i], vi, 1e-6);
        EXPECT_NEAR(p2[i], expected, 1e-6 * (1 + std::abs(expected)));
        EXPECT_EQ(working[i].bits, to_bf16(p2[i]).bits) << "the bf16 working copy is the updated parameter, rounded";
    }
}

// Below the clip the gradients pass unscaled; a non-finite norm leaves parameters and moments.
TEST(AdamW, ClipsOnlyAboveTheClipAndSkipsANonFiniteNorm) {
    std::mt19937 gen(4);
    const long n = 19;
    const Vec p = random_vec(n, gen), g = random_vec(n, gen);
    auto step = [&](float clip, float norm, float grad_factor) {
        Vec params = p, grads = g, m(n), v(n);
        for (float& x : grads) x *= grad_factor;
        adamw_update(kCtx, params.data(), nullptr, grads.data(), m.data(), v.data(), n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.0f,
                     clip, &norm, 1);
        return std::make_pair(params, m);
    };
    EXPECT_EQ(step(1.0f, 0.5f, 1.0f), step(0.0f, 0.5f, 1.0f)) << "norm below the clip: no scaling";
    EXPECT_EQ(step(1.0f, 4.0f, 1.0f).second, step(0.0f, 4.0f, 0.25f).second) << "norm 4, clip 1: gradients x 0.25";
    for (float bad : {NAN, INFINITY}) {
        const auto [params, m] = step(1.0f, bad, 1.0f);
        EXPECT_EQ(params, p) << "norm " << bad;
        EXPECT_EQ(m, Vec(n, 0.0f)) << "norm " << bad;
    }
}

TEST(GlobalNorm, MatchesDoubleLoop) {
    std::mt19937 gen(5);
    Vec x = random_vec(100003, gen);
    double expected = 0;
    for (float v : x) expected += static_cast<double>(v) * v;
    float norm = -1.0f;
    global_norm(kCtx, &norm, x.data(), static_cast<long>(x.size()));
    EXPECT_NEAR(norm, std::sqrt(expected), 1e-6 * std::sqrt(expected));
    global_norm(kCtx, &norm, x.data(), 0);
    EXPECT_EQ(norm, 0.0f);
}

TEST(LossAccumulate, SumsInDoubleAndAccumulates) {
    std::mt19937 gen(6);
    const Vec a = random_vec(1001, gen), b = random_vec(77, gen);
    double sa = 0, sb = 0;
    for (float x : a) sa += x;
    for (float x : b) sb += x;
    float total = 123.0f;
    loss_accumulate(kCtx, &total, a.data(), static_cast<int>(a.size()), 4.0, false);
    EXPECT_EQ(total, static_cast<float>(sa / 4.0));
    loss_accumulate(kCtx, &total, b.data(), static_cast<int>(b.size()), 4.0, true);
    EXPECT_EQ(total, static_cast<float>(static_cast<double>(static_cast<float>(sa / 4.0)) + sb / 4.0));
}

// to_bf16 against brute force: the nearest of the two bf16 neighbours (in double), ties to the
// even one; NaN stays NaN, infinities and signed zeros stay.
TEST(Bf16, RoundsToNearestEven) {
    std::mt19937 gen(8);
    std::uniform_int_distribution<std::uint32_t> bits;
    auto as_float = [](std::uint32_t u) {
        float f;
        std::memcpy(&f, &u, 4);
        return f;
    };
    for (int i = 0; i < 200000; ++i) {
        std::uint32_t u = bits(gen);
        if (i % 7 == 0) u = (u & 0xffff0000u) | 0x8000u;  // exact ties
        const float x = as_float(u);
        const bf16 r = to_bf16(x);
        if (std::isnan(x)) {
            EXPECT_TRUE(std::isnan(to_float(r)));
            continue;
        }
        if (std::isinf(x)) continue;  // below
        // The neighbours toward and away from zero; past the largest bf16 the next one is infinity,
        // which rounding treats as 2^128 (the next power of the exponent).
        const float lo = as_float(u & 0xffff0000u), hi = as_float((u & 0xffff0000u) + 0x10000u);
        const double hi_value = std::isinf(hi) && !std::isinf(x) ? std::copysign(std::ldexp(1.0, 128), x) : hi;
        const double dlo = std::fabs(double(x) - lo), dhi = std::fabs(double(x) - hi_value);
        const bool lo_even = ((u >> 16) & 1u) == 0;
        const float want = dlo < dhi || (dlo == dhi && lo_even) ? lo : hi;
        EXPECT_EQ(to_float(r), want) << std::hex << u;
    }
    EXPECT_EQ(to_float(to_bf16(-0.0f)), -0.0f);
    EXPECT_TRUE(std::signbit(to_float(to_bf16(-0.0f))));
    EXPECT_EQ(to_float(to_bf16(INFINITY)), INFINITY);
}

// Bounds derived from the algorithms in kernels/vector_math.h, valid with and without FMA: a
// fused multiply-add rounds once where a multiply and an add round twice, so counting every
// operation as rounded covers both. gamma(n) = n u / (1 - n u), u = 2^-24 (Higham, Thm 3.1).
double gamma_n(int n) {
    const double nu = n * std::ldexp(1.0, -24);
    return nu / (1 - nu);
}

// exp_approx(x) = 2^n p(r), r = x - n (C1 - C2) ~ x - n ln2, p(r) = 1 + r + r^2 q(r). Relative
// error: r is off by dr (n C1 and x - n C1 are exact: n C1 has <= 16 bits and the difference is a
// multiple of ulp(x) below 1/2; adding n C2 rounds twice; C1 - C2 misses ln2), p misses e^r by
// sum |c_i - 1/i!| |r|^i plus the Taylor tail, evaluating p rounds each monomial d times (1, 2,
// 5, 7, ..., 14 for 1, r, r^2, ..., r^7), and 2^n is exact for normal results.
double exp_approx_relative_bound() {
    const double u = std::ldexp(1.0, -24), ln2 = std::log(2.0);
    const float c1 = 0.693359375f, c2 = 2.12194440e-4f;
    const float coef[6] = {5.0000001201e-1f, 1.6666665459e-1f, 4.1665795894e-2f,
                           8.3334519073e-3f, 1.3981999507e-3f, 1.9875691500e-4f};  // of r^2 .. r^7
    const int depth[6] = {5, 7, 9, 11, 13, 14}, n_max = 127;                       // |n| for |x| <= 88.3
    // n is the integer nearest x log2(e) up to the float rounding of x * 1.4427f (< 1e-5 in n).
    const double r_max = ln2 * (0.5 + 1e-5);
    const double dr = n_max * std::fabs(double(c1) - c2 - ln2) + u * n_max * c2 + u * (r_max + 1e-6);
    const double r = r_max + dr;
    double approx = 0, eval = gamma_n(1) + gamma_n(2) * r, power = r * r, factorial = 2;
    for (int i = 0; i < 6; ++i, power *= r, factorial *= i + 2) {
        approx += std::fabs(coef[i] - 1 / factorial) * power;
        eval += gamma_n(depth[i]) * coef[i] * power;
    }
    for (int i = 8; i < 20; ++i, power *= r, factorial *= i) approx += power / factorial;
    return (1 + (approx + eval) / std::exp(-r)) * std::exp(dr) - 1;
}

// tanh_approx(x) = 1 - q', q' = 2 / (1 + E) with E = exp_approx(2x) (2x exact; exp_approx clamps
// its argument to [-87.3, 88.3]) within exp_rel of e^clamp(2x), the sum and the quotient rounded
// once each; 1 - q' then rounds by at most u/2 (exact for q' in [1/2, 2] by Sterbenz, in (1/2, 1]
// otherwise). So |tanh_approx(x) - tanh(x)| <= max |q' - 2 / (1 + e^2x)| + u/2.
double tanh_approx_bound(float x, double exp_rel) {
    const double u = std::ldexp(1.0, -24);
    const double e = std::exp(double(std::min(std::max(2.0f * x, -87.3f), 88.3f)));
    const double q = 2 / (1 + std::exp(2.0 * x));
    const double q_lo = 2 / ((1 + e * (1 + exp_rel)) * (1 + u)) * (1 - u);
    const double q_hi = 2 / ((1 + e * (1 - exp_rel)) * (1 - u)) * (1 + u);
    return std::max(std::fabs(q_lo - q), std::fabs(q_hi - q)) + u / 2;
}

// The vectorisable exp and tanh against libm in double, over the range the kernels use, within
// those bounds (exp about 4.1u, tanh about 5u at worst).
TEST(VectorMath, ExpAndTanhMatchLibm) {
    const double exp_rel = exp_approx_relative_bound();
    EXPECT_LT(exp_rel, 5 * std::ldexp(1.0, -24)) << "the derivation above";
    double worst_exp = 0, worst_tanh = 0;  // error / bound
    for (float x = -87.0f; x < 88.0f; x += 0.00731f) {
        worst_exp = std::max(worst_exp, std::abs(exp_approx(x) - std::exp(double(x))) / std::exp(double(x)) / exp_rel);
        worst_tanh =
            std::max(worst_tanh, std::abs(tanh_approx(x) - std::tanh(double(x))) / tanh_approx_bound(x, exp_rel));
    }
    EXPECT_LE(worst_exp, 1.0);
    EXPECT_LE(worst_tanh, 1.0);
    EXPECT_EQ(exp_approx(-200.0f) < 1e-37f, true);
    EXPECT_EQ(tanh_approx(50.0f), 1.0f);
    EXPECT_EQ(tanh_approx(-50.0f), -1.0f);
}

TEST(DropoutMask, RegeneratesBitForBitAndKeepsAboutOneMinusP) {
    const long n = 200001;
    std::vector<unsigned char> a(n), b(n), c(n);
    const auto key = rng_key(42, 7, 0, 3, 5);
    dropout_mask(kCtx, a.data(), n, 0.1f, key);
    dropout_mask(kCtx, b.data(), n, 0.1f, key);
    dropout_mask(kCtx, c.data(), n, 0.1f, rng_key(42, 8, 0, 3, 5));
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
    long kept = 0;
    for (auto m : a) kept += m;
    EXPECT_NEAR(static_cast<double>(kept) / n, 0.9, 0.005);
}

}  // namespace
}  // namespace adacc::cpu
