// cuDNN's fused attention (model.attention = "cudnn", kernels/cuda/attention_cudnn.cpp) against the
// CPU: without dropout against its twin, the fused kernel (kernels/cpu/attention_fused.cpp), in
// bf16 (cuDNN's SDPA has no fp32: the backend refuses it, checked too), forward (atty, lse) and
// backward (all of dqkv, NaN-filled first so every entry must be written). With dropout cuDNN draws
// its own Philox mask, not this project's RNG, so: the same key recomputes the same bytes; the
// mask, read out of the output of a probe (q = k = 0, v one-hot: atty[t][c] is keep(t, c) / ((t + 1)
// (1 - p)), so every entry of the mask shows), keeps the expected fraction; and with that mask the
// materialized CPU kernels (kernels/cpu/attention.cpp, which take a mask) give cuDNN's forward and
// backward on real data. cuDNN runs only on a GPU: under the SIMT emulation, or where cuDNN does
// not load, every test skips saying why.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/device_sizes.h"
#include "kernels/cuda/ops.h"
#include "kernels/rng.h"
#include "src/cuda/cuda_device.h"
#include "src/engine/backend.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

#define ADACC_REQUIRE_CUDNN()                                                                             \
    do {                                                                                                  \
        ADACC_REQUIRE_CUDA_DEVICE();                                                                      \
        if (running_under_emulation())                                                                    \
            GTEST_SKIP() << "cuDNN's attention cannot run under the SIMT emulation (its kernels are GPU " \
                            "binaries): skipped; test_cuda_device runs it on a GPU";                      \
        const std::string cudnn = ::adacc::cudnn_problem();                                               \
        if (!cudnn.empty()) GTEST_SKIP() << "cuDNN unavailable (" << cudnn << "): skipped";               \
    } while (0)

struct Shape {
    int B, T, C, NH;
};
// hs = 64 (GPT-2's), 128 (the largest cuDNN's backward takes on every architecture) and 32; T a
// multiple of cuDNN's 64-row tiles, and 40 and 100, which end inside one (cuDNN 9 masks the rest).
const Shape kShapes[] = {{2, 64, 128, 2}, {1, 128, 256, 2}, {2, 40, 96, 3}, {1, 100, 64, 1}};

// The bounds, per element, from the inputs (u = 2^-24, fp32's unit roundoff; ub = 2^-8, bf16's;
// gamma(n) = n u / (1 - n u), Higham's bound on a sum of n products in fp32 in any order). cuDNN's
// SDPA computes as FlashAttention-2 on tensor cores: the scores s = scale q.k in fp32 from the
// bf16 inputs (their products are exact in fp32), exp through ex2.approx (relative error at most
// 2^-22 by the PTX ISA, on an argument multiplied by log2(e): its rounding is one more u |arg|),
// the row sum l in fp32, and the probabilities rounded to bf16 (relative ub each) for the second
// GEMM, whose sum is fp32; outputs are stored as bf16 (ub). Backward likewise rounds P (for dV) and
// dS = P (dP - D) (for dQ and dK) to bf16 before their GEMMs. So the bf16 roundings give ub times
// the sum of the magnitudes of a result's terms, and everything fp32 (both sides: the CPU twin's
// exp_approx is within 5u, tests/test_kernels.cpp) gives a smaller term of the same form, derived
// as in tests/cuda/test_cuda_attention_fused.cpp.
constexpr double kU = 1.0 / (1 << 24), kUb = 1.0 / 256, kDevExp = 1.0 / (1 << 22), kCpuExp = 5 * kU;
double gamma(long n) { return n * kU / (1 - n * kU); }

::testing::AssertionResult all_within(const std::vector<float>& got, const std::vector<float>& want,
                                      const std::vector<double>& limit) {
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(double(got[i]) - want[i]) <= limit[i]) && bad++ == 0) first = i;
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ; first at " << first
                                         << ": got " << got[first] << ", want " << want[first] << ", bound "
                                         << limit[first];
}

std::vector<float> nans(std::size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

std::string describe(const Shape& s, float p) {
    return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
           " NH=" + std::to_string(s.NH) + (p > 0 ? " dropout " + std::to_string(p) : "");
}

// The reference: without a mask the fused CPU kernel; with one (B x NH x T x T bytes, 1 = keep)
// the materialized CPU kernels, which take it. Forward writes y and lse (lse from the fused kernel
// in both cases: the materialized path keeps none, and a mask does not change it).
struct Reference {
    std::vector<float> y, lse, dqkv;
};
Reference cpu_reference(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dy,
                        const std::vector<unsigned char>* mask, float p, bool bf16_y) {
    const auto [B, T, C, NH] = s;
    const std::size_t N = std::size_t(B) * T;
    Reference r{std::vector<float>(N * C), std::vector<float>(N * NH), std::vector<float>(N * 3 * C)};
    const KernelContext& ctx = cpu::default_context();
    cpu::attention_fused_forward(ctx, r.y.data(), r.lse.data(), qkv.data(), B, T, C, NH, 0.0f, 0);
    if (!mask) {
        const auto yr = bf16_y ? representable<bf16>(r.y) : r.y;
        cpu::attention_fused_backward(ctx, r.dqkv.data(), dy.data(), qkv.data(), yr.data(), r.lse.data(), B, T, C, NH,
                                      0.0f, 0);
        return r;
    }
    std::vector<float> att(std::size_t(B) * NH * T * T), datt(att.size());
    cpu::attention_softmax_forward(ctx, att.data(), qkv.data(), B, T, C, NH);
    cpu::attention_value_forward(ctx, r.y.data(), att.data(), mask->data(), p, qkv.data(), B, T, C, NH);
    cpu::attention_value_backward(ctx, datt.data(), r.dqkv.data(), dy.data(), att.data(), mask->data(), p, qkv.data(),
                                  B, T, C, NH);
    cpu::attention_softmax_backward(ctx, r.dqkv.data(), datt.data(), att.data(), qkv.data(), B, T, C, NH);
    return r;
}

// Bounds for cuDNN's bf16 y, lse and dqkv against the reference (see kU's comment). keep(row, j)
// is the dropout factor of probability j of row (b, h, t): 1 without dropout, 0 or 1/(1-p) with.
struct Limits {
    std::vector<double> y, lse, dqkv;
};
template <typename Keep>
Limits bounds(const Shape& s, const std::vector<float>& qkv, const std::vector<float>& dy, const Reference& ref,
              Keep keep) {
    const auto [B, T, C, NH] = s;
    const int hs = C / NH;
    const std::size_t N = std::size_t(B) * T;
    const double scale = 1.0 / std::sqrt(double(hs));
    Limits L{std::vector<double>(N * C, 0.0), std::vector<double>(N * NH, 0.0), std::vector<double>(N * 3 * C, 0.0)};
    auto q_at = [&](int b, int t, int h) { return (std::size_t(b) * T + t) * 3 * C + std::size_t(h) * hs; };
    auto y_at = [&](int b, int t, int h) { return (std::size_t(b) * T + t) * C + std::size_t(h) * hs; };
    std::vector<double> sc(T), sigma(T);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t) {
                const std::size_t row = (std::size_t(b) * NH + h) * T + t;
                // Exact scores, their fp32 error bound sigma_j (gamma(hs + 1): the dot and the scale), D the
                // row's largest, R its range of magnitudes.
                double D = 0, R = 0, m = -INFINITY, l = 0;
                for (int j = 0; j <= t; ++j) {
                    const float *q = &qkv[q_at(b, t, h)], *k = &qkv[q_at(b, j, h) + C];
                    double v = 0, a = 0;
                    for (int i = 0; i < hs; ++i) v += double(q[i]) * k[i], a += std::fabs(double(q[i]) * k[i]);
                    sc[j] = scale * v, sigma[j] = gamma(hs + 1) * scale * a;
                    D = std::max(D, sigma[j]), R = std::max(R, std::fabs(sc[j])), m = std::max(m, sc[j]);
                }
                for (int j = 0; j <= t; ++j) l += std::exp(sc[j] - m);
                // theta: the relative error of each unnormalised probability and of l on one side: the
                // scores (e^(2D)), the exps (the larger of the two sides' constants, once for the
                // probability and once per rescale of the running sums as the max grows: T + 1 at
                // most; their arguments' roundings 4u of twice the range R), the T-term sum of l.
                const double theta = std::exp(2 * D + 4 * kU * 2 * R) *
                                         std::pow(1 + std::max(kDevExp, kCpuExp), T + 1) * (1 + gamma(T + 1)) -
                                     1;
                // y = sum_j P_j keep_j v_j: fp32 part 2 theta / (1 - theta) per side, both sides; cuDNN's bf16 P
                // ub; the sum's own rounding gamma(T).
                const double fp32 = 2 * (2 * theta / (1 - theta) + gamma(T + 1));
                for (int j = 0; j <= t; ++j) {
                    const double P = std::exp(sc[j] - m) / l * keep(row, j);
                    for (int i = 0; i < hs; ++i)
                        L.y[y_at(b, t, h) + i] +=
                            (kUb * (1 + theta) + fp32) * P * std::fabs(qkv[q_at(b, j, h) + 2 * C + i]);
                }
                // lse = m + log l: the scores (D), l (theta), the log (lg2.approx: 2^-22 absolute in log2, so
                // below 2^-22 ln 2 after the conversion, within kDevExp), and the final sum (u |lse|); both sides.
                L.lse[row] = 2 * (D - std::log(1 - theta) + kDevExp + kU * (std::fabs(m + std::log(l)) + 1));

                // Backward, exact given these inputs: P_j = e^(s_j - lse), Dt = dy.y, dp_j = keep_j dy.v_j,
                // ds_j = P_j (dp_j - Dt) scale. pi: P's relative error (score, exp); ex: dp_j - Dt's absolute
                // error (the two fp32 dots); e_ds: ds_j's, fp32 (as the fused test derives it).
                const float *dyt = &dy[y_at(b, t, h)], *yt = &ref.y[y_at(b, t, h)], *qt = &qkv[q_at(b, t, h)];
                double Dt = 0, Dt_abs = 0;
                for (int i = 0; i < hs; ++i) Dt += double(dyt[i]) * yt[i], Dt_abs += std::fabs(double(dyt[i]) * yt[i]);
                // D uses the reference's y where cuDNN reads the rounded one: add their difference's effect.
                double Dt_y = 0;
                for (int i = 0; i < hs; ++i)
                    Dt_y += std::fabs(double(dyt[i])) * (L.y[y_at(b, t, h) + i] + kUb * std::fabs(yt[i]));
                const double lse = m + std::log(l);
                for (int j = 0; j <= t; ++j) {
                    const float *kj = &qkv[q_at(b, j, h) + C], *vj = kj + C;
                    const double kp = keep(row, j), P = std::exp(sc[j] - lse);
                    double dp = 0, dp_abs = 0;
                    for (int i = 0; i < hs; ++i)
                        dp += double(dyt[i]) * vj[i], dp_abs += std::fabs(double(dyt[i]) * vj[i]);
                    const double x = kp * dp - Dt;
                    const double ex =
                        (gamma(hs + 1) * kp * dp_abs + gamma(hs + 1) * Dt_abs) * (1 + kU) + kU * std::fabs(x) + Dt_y;
                    // P from the saved lse, itself off by L.lse / 2 on the reference side and cuDNN's own.
                    // (the exponent's roundings: 4u of |s|, |lse| and sigma, whichever way it is formed)
                    const double pi =
                        (1 + std::max(kDevExp, kCpuExp)) *
                            std::exp(sigma[j] + L.lse[row] + 4 * kU * (std::fabs(sc[j]) + std::fabs(lse) + sigma[j])) -
                        1;
                    const double ds = std::fabs(P * x * scale);
                    const double e_ds =
                        2 * scale * P * ((pi * (std::fabs(x) + ex) + ex) * (1 + gamma(2)) + gamma(2) * std::fabs(x));
                    const double a = P * kp, e_a = 2 * a * (pi + gamma(1) * (1 + pi));
                    // cuDNN's bf16 dS and P (ub of each, errors included), then the T-term fp32 sums.
                    const double w_ds = e_ds + kUb * (ds + e_ds) + gamma(T + 1) * (ds + e_ds) * (1 + kUb);
                    const double w_a = e_a + kUb * (a + e_a) + gamma(T + 1) * (a + e_a) * (1 + kUb);
                    for (int i = 0; i < hs; ++i) {
                        L.dqkv[q_at(b, t, h) + i] += w_ds * std::fabs(kj[i]);          // dq_t
                        L.dqkv[q_at(b, j, h) + C + i] += w_ds * std::fabs(qt[i]);      // dk_j
                        L.dqkv[q_at(b, j, h) + 2 * C + i] += w_a * std::fabs(dyt[i]);  // dv_j
                    }
                }
            }
    // The bf16 stores of y and dqkv: ub of the stored value, at most (1 + ub) times the reference's plus the bound.
    for (std::size_t i = 0; i < L.y.size(); ++i) L.y[i] += kUb * (std::fabs(ref.y[i]) + L.y[i]) * (1 + kUb);
    for (std::size_t i = 0; i < L.dqkv.size(); ++i) L.dqkv[i] += kUb * (std::fabs(ref.dqkv[i]) + L.dqkv[i]) * (1 + kUb);
    return L;
}

struct DeviceResult {
    std::vector<float> y, lse, dqkv;
    std::vector<bf16> y_bits, dqkv_bits;
    std::vector<float> lse_bits;
};

// cuDNN's forward and then backward (from `y_in`, the output backward reads, and lse_in) on the
// device; backward with cuDNN's deterministic algorithm or its default one (training.deterministic).
DeviceResult run_cudnn(const CudaTestContext& test_ctx, const Shape& s, const std::vector<float>& qkv,
                       const std::vector<float>& dy, const std::vector<float>& y_in, const std::vector<float>& lse_in,
                       float p, unsigned long long key, bool deterministic = true) {
    const auto [B, T, C, NH] = s;
    KernelContext ctx = test_ctx.get();
    ctx.deterministic = deterministic;
    const std::size_t N = std::size_t(B) * T;
    DeviceArray<bf16> g_qkv(device_values<bf16>(qkv)), g_y(device_values<bf16>(nans(N * C)));
    DeviceArray<float> g_lse(nans(N * NH));
    cuda::attention_cudnn_forward(ctx, g_y.get(), g_lse.get(), g_qkv.get(), B, T, C, NH, p, key);
    DeviceArray<bf16> g_yin(device_values<bf16>(y_in)), g_dy(device_values<bf16>(dy)),
        g_dqkv(device_values<bf16>(nans(N * 3 * C)));
    DeviceArray<float> g_lse_in(lse_in);
    cuda::attention_cudnn_backward(ctx, g_dqkv.get(), g_dy.get(), g_qkv.get(), g_yin.get(), g_lse_in.get(), B, T, C, NH,
                                   p, key);
    test_ctx.synchronize();
    DeviceResult r;
    r.y_bits = g_y.download();
    r.dqkv_bits = g_dqkv.download();
    r.lse_bits = g_lse.download();
    r.y = host_values(r.y_bits);
    r.dqkv = host_values(r.dqkv_bits);
    r.lse = r.lse_bits;
    return r;
}

std::string graphs_built(const CudaTestContext& ctx) {
    return cuda::dnn_describe(static_cast<const cuda::DnnContext*>(ctx.get().dnn));
}

// Both backward algorithms: the bounds hold for the fp32 sums in any order (gamma of the length).
TEST(CudnnAttention, MatchesTheFusedCpuKernelInBf16) {
    ADACC_REQUIRE_CUDNN();
    CudaTestContext ctx;
    for (const Shape& s : kShapes) {
        const std::size_t N = std::size_t(s.B) * s.T;
        const auto qkv = representable<bf16>(random_floats(N * 3 * s.C, 11, -2.0f, 2.0f));
        const auto dy = representable<bf16>(random_floats(N * s.C, 12));
        const Reference ref = cpu_reference(s, qkv, dy, nullptr, 0.0f, true);
        const Limits L = bounds(s, qkv, dy, ref, [](std::size_t, int) { return 1.0; });
        for (const bool deterministic : {true, false}) {
            // Backward reads the reference's y (rounded as the device holds it) and lse, as the fused test does.
            const DeviceResult got =
                run_cudnn(ctx, s, qkv, dy, representable<bf16>(ref.y), ref.lse, 0.0f, 0, deterministic);
            const std::string what = describe(s, 0) + (deterministic ? "" : " (not deterministic)");
            EXPECT_TRUE(all_within(got.y, ref.y, L.y)) << what << ": atty";
            EXPECT_TRUE(all_within(got.lse, ref.lse, L.lse)) << what << ": lse";
            EXPECT_TRUE(all_within(got.dqkv, ref.dqkv, L.dqkv)) << what << ": dqkv";
        }
    }
    std::printf("%s", graphs_built(ctx).c_str());
}

// The workspace cuDNN's graphs grow to is at most what the memory accounting reserves for the shape
// (kernels/cuda/device_sizes.h), on the table's shapes and a gpt-117m-like one at T = 1024 where
// the deterministic B H T^2 term dominates, for both backward algorithms; each shape in a context
// of its own, whose workspace is that shape's.
TEST(CudnnAttention, TheWorkspaceIsWithinWhatTheAccountingReserves) {
    ADACC_REQUIRE_CUDNN();
    std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
    shapes.push_back({4, 1024, 768, 12});
    for (const bool deterministic : {true, false})
        for (const Shape& s : shapes) {
            CudaTestContext ctx;
            const std::size_t N = std::size_t(s.B) * s.T;
            const auto qkv = representable<bf16>(random_floats(N * 3 * s.C, 11, -2.0f, 2.0f));
            const auto dy = representable<bf16>(random_floats(N * s.C, 12));
            run_cudnn(ctx, s, qkv, dy, std::vector<float>(N * s.C), std::vector<float>(N * s.NH), 0.0f, 0,
                      deterministic);
            const std::size_t used = cuda::dnn_device_bytes(static_cast<const cuda::DnnContext*>(ctx.get().dnn));
            const std::size_t reserved = cuda::cudnn_attention_device_bytes(s.B, s.NH, s.T, s.C / s.NH, deterministic);
            const std::string what = describe(s, 0) + (deterministic ? "" : " (not deterministic)");
            EXPECT_LE(used, reserved) << what << "\n" << graphs_built(ctx);
            std::printf("%s: workspace %zu bytes, reserved %zu\n", what.c_str(), used, reserved);
        }
}

// The same key gives the same bytes (forward: a recomputed atty equals the saved one; backward with
// cuDNN's deterministic algorithm); another key gives another mask.
TEST(CudnnAttention, DropoutRecomputesBitForBit) {
    ADACC_REQUIRE_CUDNN();
    CudaTestContext ctx;
    const Shape s{2, 64, 128, 2};
    const std::size_t N = std::size_t(s.B) * s.T;
    const float p = 0.1f;
    const unsigned long long key = rng_key(7, 3, 1, 4, 2), other = rng_key(7, 4, 1, 4, 2);
    const auto qkv = representable<bf16>(random_floats(N * 3 * s.C, 21, -2.0f, 2.0f));
    const auto dy = representable<bf16>(random_floats(N * s.C, 22));
    const Reference ref = cpu_reference(s, qkv, dy, nullptr, 0.0f, true);
    const auto y_in = representable<bf16>(ref.y);
    const DeviceResult a = run_cudnn(ctx, s, qkv, dy, y_in, ref.lse, p, key);
    const DeviceResult b = run_cudnn(ctx, s, qkv, dy, y_in, ref.lse, p, key);
    EXPECT_TRUE(all_equal_bytes(b.y_bits, a.y_bits)) << "atty recomputed with the same key";
    EXPECT_TRUE(all_equal_bytes(b.lse_bits, a.lse_bits)) << "lse recomputed with the same key";
    const std::string built = graphs_built(ctx);
    std::printf("%s", built.c_str());
    if (built.find("NOT deterministic") == std::string::npos)
        EXPECT_TRUE(all_equal_bytes(b.dqkv_bits, a.dqkv_bits)) << "dqkv with the same key (deterministic backward)";
    else
        std::printf(
            "cuDNN has no deterministic backward for this shape: dqkv may differ in its last bits run to run\n");
    const DeviceResult c = run_cudnn(ctx, s, qkv, dy, y_in, ref.lse, p, other);
    EXPECT_FALSE(all_equal_bytes(c.y_bits, a.y_bits)) << "another key draws the same dropout mask";
}

// The mask cuDNN draws for `key`, read from a probe: q = k = 0 makes row t's probabilities 1/(t+1),
// and v_j = e_j (hs >= T) puts probability j of row t, times keep / (1 - p), in atty[t][j].
// Returns B x NH x T x T bytes (1 = keep), and checks the probe's values on the way.
std::vector<unsigned char> probe_mask(const CudaTestContext& ctx, const Shape& s, float p, unsigned long long key) {
    const auto [B, T, C, NH] = s;
    const int hs = C / NH;
    const std::size_t N = std::size_t(B) * T;
    std::vector<float> qkv(N * 3 * C, 0.0f);
    for (int b = 0; b < B; ++b)
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < NH; ++h) qkv[(std::size_t(b) * T + t) * 3 * C + 2 * C + std::size_t(h) * hs + t] = 1.0f;
    const std::vector<float> dy(N * C, 0.0f);
    const DeviceResult r =
        run_cudnn(ctx, s, qkv, dy, std::vector<float>(N * C, 0.0f), std::vector<float>(N * NH, 0.0f), p, key);
    std::vector<unsigned char> mask(std::size_t(B) * NH * T * T, 0);
    std::size_t bad = 0;
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t)
                for (int j = 0; j < T; ++j) {
                    const double got = r.y[(std::size_t(b) * T + t) * C + std::size_t(h) * hs + j];
                    // A kept entry is 1/((t+1)(1-p)): P = 1/(t+1) rounded to bf16 (ub), the dropout scale
                    // applied in fp32 (u, twice at most), stored as bf16 (ub): within 3 ub of it.
                    const double kept = 1.0 / ((t + 1) * (1.0 - p));
                    const bool is_kept = got != 0.0;
                    if (is_kept && (j > t || std::fabs(got - kept) > 3 * kUb * kept)) ++bad;  // causal, and the value
                    mask[((std::size_t(b) * NH + h) * T + t) * T + j] = is_kept ? 1 : 0;
                }
    EXPECT_EQ(bad, 0u) << "probe entries neither 0 nor keep / ((t + 1) (1 - p)) (or above the diagonal)";
    return mask;
}

// The keep fraction over the n = B NH T (T + 1) / 2 causal draws: if they are independent with
// P(keep) = 1 - p, Hoeffding's inequality bounds P(|fraction - (1 - p)| >= eps) by 2 exp(-2 n eps^2);
// eps is chosen to make that 1e-9, so the test fails by chance once in a billion runs.
TEST(CudnnAttention, DropoutKeepsTheExpectedFraction) {
    ADACC_REQUIRE_CUDNN();
    CudaTestContext ctx;
    const Shape s{2, 64, 128, 2};  // hs = T = 64: the probe reads every probability
    for (float p : {0.1f, 0.5f}) {
        const auto mask = probe_mask(ctx, s, p, rng_key(5, 1, 0, 2, 3));
        std::size_t kept = 0, n = 0;
        for (int bh = 0; bh < s.B * s.NH; ++bh)
            for (int t = 0; t < s.T; ++t)
                for (int j = 0; j <= t; ++j, ++n) kept += mask[(std::size_t(bh) * s.T + t) * s.T + j];
        const double fraction = double(kept) / n, eps = std::sqrt(std::log(2 / 1e-9) / (2.0 * n));
        EXPECT_LE(std::fabs(fraction - (1 - p)), eps) << "p = " << p << ": kept " << kept << " of " << n;
    }
}

// With the probe's mask, the materialized CPU kernels compute what cuDNN does with dropout on real
// data, forward and backward: the mask is the same in both of cuDNN's graphs and does not depend
// on the data (Philox of the seed, offset and the element's position).
TEST(CudnnAttention, DropoutMatchesTheCpuWithCudnnsMask) {
    ADACC_REQUIRE_CUDNN();
    CudaTestContext ctx;
    const Shape s{2, 64, 128, 2};
    const float p = 0.2f;
    const unsigned long long key = rng_key(9, 2, 0, 1, 3);
    const auto mask = probe_mask(ctx, s, p, key);
    const std::size_t N = std::size_t(s.B) * s.T;
    const auto qkv = representable<bf16>(random_floats(N * 3 * s.C, 31, -2.0f, 2.0f));
    const auto dy = representable<bf16>(random_floats(N * s.C, 32));
    const Reference ref = cpu_reference(s, qkv, dy, &mask, p, true);
    // Backward reads cuDNN's own forward output here (as training does): its lse and y.
    const DeviceResult fwd =
        run_cudnn(ctx, s, qkv, dy, std::vector<float>(N * s.C, 0.0f), std::vector<float>(N * s.NH, 0.0f), p, key);
    const DeviceResult got = run_cudnn(ctx, s, qkv, dy, fwd.y, fwd.lse, p, key);
    const float keep_f = 1.0f / (1.0f - p);
    auto keep = [&](std::size_t row, int j) { return mask[row * s.T + j] ? double(keep_f) : 0.0; };
    // The materialized reference's backward read its own y; cuDNN's read cuDNN's y, within L.y of it:
    // bounds() adds that difference's effect through D (Dt_y), with ref.y standing for the reference's.
    const Limits L = bounds(s, qkv, dy, ref, keep);
    EXPECT_TRUE(all_within(got.y, ref.y, L.y)) << describe(s, p) << ": atty";
    EXPECT_TRUE(all_within(got.lse, ref.lse, L.lse)) << describe(s, p) << ": lse";
    EXPECT_TRUE(all_within(got.dqkv, ref.dqkv, L.dqkv)) << describe(s, p) << ": dqkv";
}

// cuDNN's SDPA has no fp32: the CUDA backend refuses the kernels on fp32 activations (the driver
// then stops with the backend's note) and runs them on bf16.
TEST(CudnnAttention, TheBackendRunsItOnBf16Only) {
    ADACC_REQUIRE_CUDNN();
    Backend& backend = cuda_backend();
    EXPECT_TRUE(backend.supports(Kernel::attention_cudnn_forward, DType::bf16));
    EXPECT_TRUE(backend.supports(Kernel::attention_cudnn_backward, DType::bf16));
    EXPECT_FALSE(backend.supports(Kernel::attention_cudnn_forward, DType::f32));
    EXPECT_NE(backend.unsupported_note(Kernel::attention_cudnn_forward, DType::f32).find("bf16"), std::string::npos);
}

// Where cuDNN cannot run (the emulation, or no libcudnn.so.9), the backend does not offer it and
// says why: this one runs everywhere.
TEST(CudnnAttention, UnavailableIsRefusedWithTheReason) {
    ADACC_REQUIRE_CUDA_DEVICE();
    if (cudnn_problem().empty()) GTEST_SKIP() << "cuDNN loads here: nothing to refuse";
    Backend& backend = cuda_backend();
    EXPECT_FALSE(backend.supports(Kernel::attention_cudnn_forward, DType::bf16));
    const std::string note = backend.unsupported_note(Kernel::attention_cudnn_forward, DType::bf16);
    EXPECT_NE(note.find(cudnn_problem()), std::string::npos) << note;
    EXPECT_NE(note.find("fused"), std::string::npos) << note;
}

}  // namespace
}  // namespace adacc::test
