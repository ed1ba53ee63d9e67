// Attention on CUDA against the CPU twin (kernels/cpu/attention.cpp), in fp32 and bf16: the four
// kernels one by one, each fed the CPU's inputs (so a difference is that kernel's; in bf16 rounded
// to bf16 first, so both read the same values), with and without a dropout mask, every output
// buffer compared whole: att and datt including their zero upper triangles, dqkv including the
// columns the kernel must leave alone.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// Bounds derived per element from the inputs (u = 2^-24, gamma(n) = n u / (1 - n u)): a sum of n
// products in fp32, in any order, with or without FMA, is within gamma(n) sum |a_i b_i| of the
// exact value (Higham, eq. 3.5); the CPU (simd dots, running sums), cuBLASLt on a GPU and the
// emulated cuBLASLt (the exact sum rounded once) all are, so two of them differ by twice that.
// A bf16 store rounds to nearest, within 2^-8 of the value (8 significant bits). exp: the CPU's
// exp_approx is within 4.2u (tests/test_kernels.cpp, VectorMath), CUDA's expf within 2 ulp (CUDA
// C Programming Guide), <= 4u, and the emulation's host expf within 1 ulp: 5u covers them.
constexpr double kU = 1.0 / (1 << 24), kBf16Rel = 1.0 / 256, kExpRel = 5 * kU;
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

// A device result rounded to E r times after its fp32 computation, against the CPU's fp32, each
// within `each` of the exact value: got = v (1 + f), |f| <= (1 + 2^-8)^r - 1 = rel, so
// |got - want| <= rel |want| + (1 + rel) 2 each. The absolute parts; rel_of(r) the relative one.
double rel_of(bool bf16, int roundings) { return bf16 ? std::pow(1 + kBf16Rel, roundings) - 1 : 0.0; }
void scale_bound(std::vector<double>& each, double rel) {
    for (double& e : each) e *= 2 * (1 + rel);
}

struct Shape {
    int B, T, C, NH;
};
// hs = 24 and 20; T = 1; B <= NH (one GEMM per batch, heads batched) and B > NH (one per head);
// T = 33, 40 and 69: several 32-row tiles and row-softmax blocks; hs = 80: several 32-channel
// tiles (the dropout products), one head.
const Shape kShapes[] = {{2, 7, 72, 3},  {2, 1, 40, 2},  {1, 7, 40, 2},
                         {3, 5, 40, 2},  {4, 33, 40, 2}, {2, 69, 72, 3}, {1, 40, 80, 1}};

std::vector<float> nans(std::size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

// A device array of E holding v, and its contents as floats.
template <typename E>
struct Device {
    explicit Device(const std::vector<float>& v) : array(device_values<E>(v)) {}
    E* get() const { return array.get(); }
    std::vector<float> download() const { return host_values(array.download()); }
    DeviceArray<E> array;
};

// Entries above the diagonal of every T x T block, exactly zero.
::testing::AssertionResult upper_triangle_zero(const std::vector<float>& m, int T) {
    for (std::size_t row = 0; row < m.size() / T; ++row)
        for (int t2 = static_cast<int>(row % T) + 1; t2 < T; ++t2)
            if (m[row * T + t2] != 0.0f)
                return ::testing::AssertionFailure() << "row " << row << " column " << t2 << " is " << m[row * T + t2];
    return ::testing::AssertionSuccess();
}

struct Case {
    Shape s;
    bool dropout;
    std::string name() const {
        return "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C) +
               " NH=" + std::to_string(s.NH) + (dropout ? " dropout" : "");
    }
};

template <typename E>
void check_case(const Case& c, const CudaTestContext& ctx) {
    constexpr bool kBf16 = std::is_same_v<E, bf16>;
    const auto [B, T, C, NH] = c.s;
    const int hs = C / NH;
    const std::size_t N = static_cast<std::size_t>(B) * T, n_qkv = N * 3 * C, n_y = N * C,
                      n_att = static_cast<std::size_t>(B) * NH * T * T;
    const float p = c.dropout ? 0.1f : 0.0f;
    const auto qkv = representable<E>(random_floats(n_qkv, 1, -2.0f, 2.0f));
    const auto mask = c.dropout ? random_mask(n_att, 2, 1.0f - p) : std::vector<unsigned char>(1);
    const unsigned char* cpu_mask = c.dropout ? mask.data() : nullptr;
    Device<E> g_qkv(qkv);
    DeviceArray<unsigned char> g_mask_buffer(mask);
    const unsigned char* g_mask = c.dropout ? g_mask_buffer.get() : nullptr;
    // Both sides' float constants (the softmax scale, the dropout factor), and where things are:
    // q of (b, t, h) at q_at (k at + C, v at + 2C), atty at y_at, row t of att for (b, h) at att_at.
    const float scale = 1.0f / std::sqrt(static_cast<float>(hs)), keep_f = 1.0f / (1.0f - p);
    auto keep = [&](std::size_t idx) { return c.dropout ? (mask[idx] ? double(keep_f) : 0.0) : 1.0; };
    auto q_at = [&](int b, int t, int h) { return (static_cast<std::size_t>(b) * T + t) * 3 * C + h * hs; };
    auto y_at = [&](int b, int t, int h) { return (static_cast<std::size_t>(b) * T + t) * C + h * hs; };
    auto att_at = [&](int b, int h, int t) { return ((static_cast<std::size_t>(b) * NH + h) * T + t) * T; };
    auto for_rows = [&](auto&& f) {
        for (int b = 0; b < B; ++b)
            for (int h = 0; h < NH; ++h)
                for (int t = 0; t < T; ++t) f(b, h, t);
    };

    // Softmax forward: the whole of att (NaN-filled first) written. Scores s_j = scale q.k_j are
    // within sigma_j = gamma(hs + 1) scale sum |q k_j| on each side (the device's then rounded to
    // E: + 2^-8 (|s_j| + sigma_j)); the softmax of scores off by at most D is off by a factor
    // e^(+-2D). Each exponential is within kExpRel and its argument's rounding, u R (R the row's
    // score range); the row sum of t + 1 positive terms within gamma(t + 1); 1/sum and the product
    // round once each; the device's output rounds to E. So each side's p_j = P_j (1 + rho), and
    // |got - want| <= (rho_cpu + rho_dev) want / (1 - rho_cpu).
    std::vector<float> att(n_att);
    cpu::attention_softmax_forward(cpu::default_context(), att.data(), qkv.data(), B, T, C, NH);
    Device<E> g_att_out(nans(n_att));
    cuda::attention_softmax_forward(ctx.get(), g_att_out.get(), g_qkv.get(), B, T, C, NH);
    const auto att_got = g_att_out.download();
    std::vector<double> att_limit(n_att, 0.0);
    for_rows([&](int b, int h, int t) {
        double d_cpu = 0, d_dev = 0, s_max = 0;
        for (int j = 0; j <= t; ++j) {
            const float *q = &qkv[q_at(b, t, h)], *k = &qkv[q_at(b, j, h) + C];
            double s = 0, a = 0;
            for (int i = 0; i < hs; ++i) s += double(q[i]) * k[i], a += std::fabs(double(q[i]) * k[i]);
            s *= scale, a *= scale;
            const double sigma = gamma(hs + 1) * a;
            d_cpu = std::max(d_cpu, sigma);
            d_dev = std::max(d_dev, sigma + (kBf16 ? kBf16Rel * (std::fabs(s) + sigma) : 0.0));
            s_max = std::max(s_max, std::fabs(s));
        }
        auto rho = [&](double d, double out_rel) {
            const double eta = (1 + kExpRel) * std::exp(kU * 2 * (s_max + d)) - 1;
            return std::exp(2 * d) * (1 + eta) * (1 + kU) * (1 + kU) / ((1 - eta) * (1 - gamma(t + 1))) *
                       (1 + out_rel) - 1;
        };
        const double rho_cpu = rho(d_cpu, 0.0), rho_dev = rho(d_dev, rel_of(kBf16, 1));
        for (int j = 0; j <= t; ++j) {
            const std::size_t at = att_at(b, h, t) + j;
            att_limit[at] = (rho_cpu + rho_dev) * att[at] / (1 - rho_cpu);
        }
    });
    EXPECT_TRUE(all_within(att_got, att, 0.0, att_limit)) << c.name();
    EXPECT_TRUE(upper_triangle_zero(att_got, T)) << c.name();

    // Value forward, from the CPU's probabilities: y = sum_j (att_j keep_j) v_j, T products (and
    // the dropout product) on each side, then rounded to E once.
    att = representable<E>(att);
    Device<E> g_att(att);
    std::vector<float> y(n_y);
    cpu::attention_value_forward(cpu::default_context(), y.data(), att.data(), cpu_mask, p, qkv.data(), B, T, C, NH);
    Device<E> g_y(nans(n_y));
    cuda::attention_value_forward(ctx.get(), g_y.get(), g_att.get(), g_mask, p, g_qkv.get(), B, T, C, NH);
    std::vector<double> y_limit(n_y, 0.0);
    for_rows([&](int b, int h, int t) {
        for (int j = 0; j <= t; ++j) {
            const double a = std::fabs(att[att_at(b, h, t) + j]) * keep(att_at(b, h, t) + j);
            for (int i = 0; i < hs; ++i) y_limit[y_at(b, t, h) + i] += a * std::fabs(qkv[q_at(b, j, h) + 2 * C + i]);
        }
    });
    for (double& l : y_limit) l *= gamma(T + 1);
    scale_bound(y_limit, rel_of(kBf16, 1));
    EXPECT_TRUE(all_within(g_y.download(), y, rel_of(kBf16, 1), y_limit)) << c.name();

    // Value backward: datt whole, and only the v columns of dqkv (it starts as other values that
    // the q and k columns must keep: bound 0 there). datt_j = keep_j dy.v_j (hs products and the
    // keep product; on the device rounded to E by the GEMM and, with dropout, again after keep);
    // dv_j = sum_t (att_tj keep_tj) dy_t (T products and the dropout product, rounded once).
    const auto dy = representable<E>(random_floats(n_y, 3)), dqkv0 = representable<E>(random_floats(n_qkv, 4));
    std::vector<float> datt(n_att), dqkv = dqkv0;
    cpu::attention_value_backward(cpu::default_context(), datt.data(), dqkv.data(), dy.data(), att.data(), cpu_mask, p,
                                  qkv.data(), B, T, C, NH);
    Device<E> g_dy(dy), g_datt_out(nans(n_att)), g_dqkv(dqkv0);
    cuda::attention_value_backward(ctx.get(), g_datt_out.get(), g_dqkv.get(), g_dy.get(), g_att.get(), g_mask, p,
                                   g_qkv.get(), B, T, C, NH);
    std::vector<double> datt_limit(n_att, 0.0), dv_limit(n_qkv, 0.0);
    for_rows([&](int b, int h, int t) {
        for (int j = 0; j <= t; ++j) {
            const std::size_t at = att_at(b, h, t) + j;
            const float *d = &dy[y_at(b, t, h)], *v = &qkv[q_at(b, j, h) + 2 * C];
            double mag = 0;
            for (int i = 0; i < hs; ++i) mag += std::fabs(double(d[i]) * v[i]);
            datt_limit[at] = gamma(hs + 1) * keep(at) * mag;
            const double a = std::fabs(att[at]) * keep(at);
            for (int i = 0; i < hs; ++i) dv_limit[q_at(b, j, h) + 2 * C + i] += gamma(T + 1) * a * std::fabs(d[i]);
        }
    });
    const double datt_rel = rel_of(kBf16, c.dropout ? 2 : 1);
    scale_bound(datt_limit, datt_rel);
    scale_bound(dv_limit, rel_of(kBf16, 1));
    const auto datt_got = g_datt_out.download();
    EXPECT_TRUE(all_within(datt_got, datt, datt_rel, datt_limit)) << c.name();
    EXPECT_TRUE(upper_triangle_zero(datt_got, T)) << c.name();
    // rel applies only where dv is written (the q and k columns must equal dqkv0 exactly).
    std::vector<double> dv_rel_limit = dv_limit;
    for (std::size_t i = 0; i < n_qkv; ++i)
        if (i % (3 * C) >= static_cast<std::size_t>(2 * C)) dv_rel_limit[i] += rel_of(kBf16, 1) * std::fabs(dqkv[i]);
    EXPECT_TRUE(all_within(g_dqkv.download(), dqkv, 0.0, dv_rel_limit)) << c.name();

    // Softmax backward, from the CPU's datt: the q and k columns of dqkv (the v columns keep what
    // they held: bound 0). Per row, W = sum_j a_j da_j within omega = gamma(t + 1) sum |a_j da_j|
    // on each side; z_j = a_j (da_j - W) scale (three roundings) within
    // e_j = a_j scale ((|da_j| + |W|) gamma(3) + omega (1 + gamma(3))), on the device then rounded
    // to E (+ 2^-8 (|z_j| + e_j)); dq = sum_j z_j k_j and dk_j = sum_t z_tj q_t (T products) within
    // sum (e |k| + gamma(T) (|z| + e) |k|) on each side; the device's output rounded to E once.
    datt = representable<E>(datt);
    std::vector<float> dqkv2 = dqkv0, datt_in = datt;
    cpu::attention_softmax_backward(cpu::default_context(), dqkv2.data(), datt_in.data(), att.data(), qkv.data(), B, T,
                                    C, NH);
    Device<E> g_datt(datt), g_dqkv2(dqkv0);
    cuda::attention_softmax_backward(ctx.get(), g_dqkv2.get(), g_datt.get(), g_att.get(), g_qkv.get(), B, T, C, NH);
    std::vector<double> dqk_limit(n_qkv, 0.0);
    for_rows([&](int b, int h, int t) {
        const std::size_t row = att_at(b, h, t);
        double w = 0, w_abs = 0;
        for (int j = 0; j <= t; ++j) {
            w += double(att[row + j]) * datt[row + j];
            w_abs += std::fabs(double(att[row + j]) * datt[row + j]);
        }
        const double omega = gamma(t + 1) * w_abs;
        for (int j = 0; j <= t; ++j) {
            const double a = std::fabs(att[row + j]) * scale, z = std::fabs(att[row + j] * (datt[row + j] - w) * scale);
            const double e_cpu = a * ((std::fabs(datt[row + j]) + std::fabs(w)) * gamma(3) + omega * (1 + gamma(3)));
            const double e_dev = e_cpu + (kBf16 ? kBf16Rel * (z + e_cpu) : 0.0);
            // Both sides' bounds on this term of dq (row t, times k_j) and of dk (row j, times q_t).
            const double term = e_cpu + e_dev + gamma(T) * (2 * z + e_cpu + e_dev);
            for (int i = 0; i < hs; ++i) {
                dqk_limit[q_at(b, t, h) + i] += term * std::fabs(qkv[q_at(b, j, h) + C + i]);
                dqk_limit[q_at(b, j, h) + C + i] += term * std::fabs(qkv[q_at(b, t, h) + i]);
            }
        }
    });
    const double dqk_rel = rel_of(kBf16, 1);
    for (std::size_t i = 0; i < n_qkv; ++i)
        if (i % (3 * C) < static_cast<std::size_t>(2 * C))
            dqk_limit[i] = (1 + dqk_rel) * dqk_limit[i] + dqk_rel * std::fabs(dqkv2[i]);
    EXPECT_TRUE(all_within(g_dqkv2.download(), dqkv2, 0.0, dqk_limit)) << c.name();
}

TEST(CudaAttention, MatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes) check_case<float>({s, false}, ctx);
}

TEST(CudaAttention, WithDropoutMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes) check_case<float>({s, true}, ctx);
}

TEST(CudaAttention, MatchesTheCpuInBf16) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes) check_case<bf16>({s, false}, ctx);
}

TEST(CudaAttention, WithDropoutMatchesTheCpuInBf16) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes) check_case<bf16>({s, true}, ctx);
}

// Bit-identical recomputation: every kernel run twice on the same inputs gives the same bits.
template <typename E>
void check_deterministic(const CudaTestContext& ctx) {
    const auto [B, T, C, NH] = Shape{2, 69, 72, 3};
    const std::size_t N = static_cast<std::size_t>(B) * T, n_att = static_cast<std::size_t>(B) * NH * T * T;
    DeviceArray<E> qkv(device_values<E>(random_floats(N * 3 * C, 1, -2.0f, 2.0f))),
        dy(device_values<E>(random_floats(N * C, 3)));
    DeviceArray<unsigned char> mask(random_mask(n_att, 2, 0.9f));
    const unsigned char* masks[2] = {nullptr, mask.get()};
    for (const unsigned char* m : masks) {
        std::vector<E> outs[2][4];
        for (auto& out : outs) {
            DeviceArray<E> att(n_att), y(N * C), datt(n_att), dqkv(N * 3 * C);
            cuda::attention_softmax_forward(ctx.get(), att.get(), qkv.get(), B, T, C, NH);
            cuda::attention_value_forward(ctx.get(), y.get(), att.get(), m, 0.1f, qkv.get(), B, T, C, NH);
            cuda::attention_value_backward(ctx.get(), datt.get(), dqkv.get(), dy.get(), att.get(), m, 0.1f, qkv.get(),
                                           B, T, C, NH);
            out[2] = datt.download();
            cuda::attention_softmax_backward(ctx.get(), dqkv.get(), datt.get(), att.get(), qkv.get(), B, T, C, NH);
            out[0] = att.download();
            out[1] = y.download();
            out[3] = dqkv.download();
        }
        for (int i = 0; i < 4; ++i)
            EXPECT_TRUE(all_equal_bytes(outs[0][i], outs[1][i])) << "output " << i << " mask " << !!m;
    }
}

TEST(CudaAttention, IsDeterministic) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    check_deterministic<float>(ctx);
    check_deterministic<bf16>(ctx);
}

}  // namespace
}  // namespace adacc::test
