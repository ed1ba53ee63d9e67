// Fused attention on CUDA (kernels/cuda/attention_fused.cu) against its CPU twin
// (kernels/cpu/attention_fused.cpp), in fp32 and bf16, with and without dropout (both draw the
// same RNG bits from the key): atty, lse and all of dqkv (NaN-filled first, so every entry must be
// written). The two differ in rounding order (the CPU's simd dots, CUDA's warp sums) and in
// exp (the CPU's polynomial exp_approx, CUDA's expf: about 2e-7 relative apart).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/rng.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

struct Shape {
    int B, T, C, NH;
};
// hs = 24, 20, 8, 80 and 64 (GPT-2's; several channels per lane), T = 1, and 19, 17 and 37 rows
// per head (several 8-row blocks; 37 crosses two 16-row shared-memory tiles and ends inside a
// third). Small, because every warp_sum is five scheduler points under emulation.
const Shape kShapes[] = {{2, 7, 72, 3}, {2, 1, 40, 2}, {3, 5, 16, 2}, {1, 19, 80, 1}, {2, 17, 16, 2}, {1, 37, 128, 2}};

// Bounds derived per element from the inputs (u = 2^-24, gamma(n) = n u / (1 - n u)): a sum of n
// products in fp32, in any order, with or without FMA, is within gamma(n) sum |a_i b_i| of the
// exact value (Higham, eq. 3.5), so each score s_j = scale q.k_j is within sigma_j = gamma(hs + 1)
// scale sum |q k_j| on both sides (D: the row's largest), and the softmax of scores off by at most
// D is off by a factor e^(+-2D). exp: the CPU's exp_approx is within 4.2u (tests/test_kernels.cpp,
// VectorMath), CUDA's expf within 2 ulp (<= 4u) and the emulation's host expf within 1 ulp: 5u
// covers them; logf within 1 ulp (2u) on all three. A bf16 store rounds within 2^-8 of the value.
// Each side's bound is computed once and covers both, so two results differ by at most twice it.
constexpr double kU = 1.0 / (1 << 24), kBf16Rel = 1.0 / 256, kExpRel = 5 * kU, kLogRel = 2 * kU;
double gamma(long n) { return n * kU / (1 - n * kU); }

// |got - want| <= abs[i] + rel |want| for every element; on failure the first bad index and count.
::testing::AssertionResult all_within(const std::vector<float>& got, const std::vector<float>& want, double rel,
                                      const std::vector<double>& abs) {
    if (got.size() != want.size() || abs.size() != want.size())
        return ::testing::AssertionFailure() << "sizes differ: " << got.size() << ", " << want.size() << ", "
                                             << abs.size();
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
        if (!(std::fabs(double(got[i]) - want[i]) <= abs[i] + rel * std::fabs(double(want[i]))) && bad++ == 0)
            first = i;
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ; first at " << first
                                         << ": got " << got[first] << ", want " << want[first] << ", bound "
                                         << abs[first] + rel * std::fabs(double(want[first]));
}

std::vector<float> nans(std::size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

template <typename E>
void check_case(const Shape& s, bool dropout, const CudaTestContext& ctx) {
    const auto [B, T, C, NH] = s;
    const int hs = C / NH;
    const std::string name = "B=" + std::to_string(B) + " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                             " NH=" + std::to_string(NH) + (dropout ? " dropout" : "");
    const std::size_t N = static_cast<std::size_t>(B) * T, rows = N * NH;
    const float p = dropout ? 0.2f : 0.0f;
    const unsigned long long key = rng_key(3, 1, 4, 1, 5);
    const auto qkv = representable<E>(random_floats(N * 3 * C, 1, -2.0f, 2.0f));
    std::vector<float> y(N * C), lse(rows);
    cpu::attention_fused_forward(cpu::default_context(), y.data(), lse.data(), qkv.data(), B, T, C, NH, p, key);
    DeviceArray<E> g_qkv(device_values<E>(qkv)), g_y(device_values<E>(nans(N * C)));
    DeviceArray<float> g_lse(nans(rows));
    cuda::attention_fused_forward(ctx.get(), g_y.get(), g_lse.get(), g_qkv.get(), B, T, C, NH, p, key);

    // Both sides' float constants and the kernels' dropout factor; q of (b, t, h) at q_at (k at + C,
    // v at + 2C), atty at y_at; the exact scores of a row (s), their magnitudes' bound (sigma).
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs)), keep_f = 1.0f / (1.0f - p);
    auto keep = [&](std::size_t row, int j) {
        return p <= 0.0f ? 1.0 : rng_uniform(key, row * T + j) >= p ? double(keep_f) : 0.0;
    };
    auto q_at = [&](int b, int t, int h) { return (static_cast<std::size_t>(b) * T + t) * 3 * C + h * hs; };
    auto y_at = [&](int b, int t, int h) { return (static_cast<std::size_t>(b) * T + t) * C + h * hs; };
    std::vector<double> sc(T), sigma(T);
    auto scores = [&](int b, int h, int t) {  // the row's D and max |s_j|
        double d = 0, s_max = 0;
        for (int j = 0; j <= t; ++j) {
            const float *q = &qkv[q_at(b, t, h)], *k = &qkv[q_at(b, j, h) + C];
            double v = 0, a = 0;
            for (int i = 0; i < hs; ++i) v += double(q[i]) * k[i], a += std::fabs(double(q[i]) * k[i]);
            sc[j] = scale * v, sigma[j] = gamma(hs + 1) * scale * a;
            d = std::max(d, sigma[j]), s_max = std::max(s_max, std::fabs(sc[j]));
        }
        return std::pair{d, s_max};
    };

    // Forward, per row: every term of the running sums (l, and y before 1/l) is e^(s^_j - m) keep_j
    // (v_j) times (1 + theta_j): at most T exponentials (its own and the device's rescales, each
    // within kExpRel; their arguments' roundings sum to at most 2u R, R the score range) and 2T + 1
    // roundings. So y = num / l is within kappa Y of y(s), Y = sum_j P_j keep_j |v_j|, and
    // lse = m + log(l) within D - log(1 - theta) + the log's and the sum's roundings.
    std::vector<double> y_limit(N * C, 0.0), lse_limit(rows, 0.0);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t) {
                const auto [d, s_max] = scores(b, h, t);
                const long row = (static_cast<long>(b) * NH + h) * T + t;
                const double theta = std::pow(1 + kExpRel, T) * std::exp(2 * kU * 2 * (s_max + d)) *
                                         std::pow(1 + kU, 2 * T + 1) - 1;
                const double kappa = std::expm1(2 * d) + std::exp(2 * d) * (2 * theta * (1 + kU) * (1 + kU) /
                                                                             (1 - theta) + gamma(2));
                double m = -INFINITY, l = 0;
                for (int j = 0; j <= t; ++j) m = std::max(m, sc[j]);
                for (int j = 0; j <= t; ++j) l += std::exp(sc[j] - m);
                for (int j = 0; j <= t; ++j) {
                    const double pk = std::exp(sc[j] - m) / l * keep(row, j);
                    for (int i = 0; i < hs; ++i)
                        y_limit[y_at(b, t, h) + i] += kappa * pk * std::fabs(qkv[q_at(b, j, h) + 2 * C + i]);
                }
                const double log_l = std::max(std::log((t + 1) * (1 + theta)), -std::log(1 - theta));
                const double each = d - std::log(1 - theta) + kLogRel * log_l;
                lse_limit[row] = 2 * (each + kU * (std::fabs(m + std::log(l)) + each));
            }
    const double rel_y = std::is_same_v<E, bf16> ? kBf16Rel : 0.0;  // the device's store
    for (double& v : y_limit) v *= 2 * (1 + rel_y);
    EXPECT_TRUE(all_within(host_values(g_y.download()), y, rel_y, y_limit)) << name << ": atty";
    EXPECT_TRUE(all_within(g_lse.download(), lse, 0.0, lse_limit)) << name << ": lse";

    // Backward from the CPU's atty (rounded as the device holds it) and lse.
    const auto yr = representable<E>(y), dy = representable<E>(random_floats(N * C, 2));
    std::vector<float> dqkv(N * 3 * C);
    cpu::attention_fused_backward(cpu::default_context(), dqkv.data(), dy.data(), qkv.data(), yr.data(), lse.data(), B,
                                  T, C, NH, p, key);
    DeviceArray<E> g_yr(device_values<E>(yr)), g_dy(device_values<E>(dy)), g_dqkv(device_values<E>(nans(N * 3 * C)));
    DeviceArray<float> g_lse_in(lse);
    cuda::attention_fused_backward(ctx.get(), g_dqkv.get(), g_dy.get(), g_qkv.get(), g_yr.get(), g_lse_in.get(), B, T,
                                   C, NH, p, key);
    // Exact, given these inputs: P_j = e^(s_j - lse), D = dy.y, dp_j = keep_j dy.v_j, ds_j = P_j
    // (dp_j - D) scale. Each side's p_j is within P_j pi_j (the exp and its argument's error), D
    // within gamma(hs) sum |dy y|, dp_j within gamma(hs + 1) keep_j sum |dy v_j|, ds_j (three more
    // roundings) within e_ds; dq = sum_j ds_j k_j, dk_j = sum_t ds_tj q_t and dv_j = sum_t (p_tj
    // keep_tj) dy_t are sums of T terms, within sum (e + gamma(T + 1) (|term| + e)) |factor|.
    std::vector<double> limit(N * 3 * C, 0.0);
    for (int b = 0; b < B; ++b)
        for (int h = 0; h < NH; ++h)
            for (int t = 0; t < T; ++t) {
                scores(b, h, t);
                const long row = (static_cast<long>(b) * NH + h) * T + t;
                const float *dyt = &dy[y_at(b, t, h)], *yt = &yr[y_at(b, t, h)], *qt = &qkv[q_at(b, t, h)];
                double D = 0, D_abs = 0;
                for (int i = 0; i < hs; ++i) D += double(dyt[i]) * yt[i], D_abs += std::fabs(double(dyt[i]) * yt[i]);
                for (int j = 0; j <= t; ++j) {
                    const float *kj = &qkv[q_at(b, j, h) + C], *vj = kj + C;
                    const double kp = keep(row, j), P = std::exp(sc[j] - lse[row]);
                    double dp = 0, dp_abs = 0;
                    for (int i = 0; i < hs; ++i) {
                        dp += double(dyt[i]) * vj[i];
                        dp_abs += std::fabs(double(dyt[i]) * vj[i]);
                    }
                    const double x = kp * dp - D, ex = (gamma(hs + 1) * kp * dp_abs + gamma(hs) * D_abs) * (1 + kU) +
                                                        kU * std::fabs(x);
                    const double arg = sigma[j] + kU * (std::fabs(sc[j] - lse[row]) + sigma[j]);
                    const double pi = (1 + kExpRel) * std::exp(arg) - 1;
                    const double ds = std::fabs(P * x * scale);
                    const double e_ds =
                        scale * P * ((pi * (std::fabs(x) + ex) + ex) * (1 + gamma(2)) + gamma(2) * std::fabs(x));
                    const double e_a = P * kp * (pi + gamma(1) * (1 + pi));
                    const double w_ds = e_ds + gamma(T + 1) * (ds + e_ds), w_a = e_a + gamma(T + 1) * (P * kp + e_a);
                    for (int i = 0; i < hs; ++i) {
                        limit[q_at(b, t, h) + i] += w_ds * std::fabs(kj[i]);          // dq_t
                        limit[q_at(b, j, h) + C + i] += w_ds * std::fabs(qt[i]);      // dk_j
                        limit[q_at(b, j, h) + 2 * C + i] += w_a * std::fabs(dyt[i]);  // dv_j
                    }
                }
            }
    for (double& v : limit) v *= 2 * (1 + rel_y);
    EXPECT_TRUE(all_within(host_values(g_dqkv.download()), dqkv, rel_y, limit)) << name << ": dqkv";
}

TEST(CudaFusedAttention, MatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (bool dropout : {false, true})
        for (const Shape& s : kShapes) check_case<float>(s, dropout, ctx);
}

TEST(CudaFusedAttention, MatchesTheCpuInBf16) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (bool dropout : {false, true})
        for (const Shape& s : kShapes) check_case<bf16>(s, dropout, ctx);
}

}  // namespace
}  // namespace adacc::test
