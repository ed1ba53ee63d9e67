// Attention on CUDA against the CPU twin (kernels/cpu/attention.cpp), in fp32 and bf16: the four
// kernels one by one, each fed the CPU's inputs (so a difference is that kernel's; in bf16 rounded
// to bf16 first, so both read the same values), with and without a dropout mask, every output
// buffer compared whole: att and datt including their zero upper triangles, dqkv including the
// columns the kernel must leave alone.
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

struct Tolerances {
    double rel, prob, dot, out;  // relative; absolute floors of probabilities, datt, the outputs
    double att_rel, datt_rel;    // relative, for att and datt
    double dqk;                  // absolute floor of the q and k columns of dqkv
};

// fp32 against fp32 in another order (the CPU's simd dots and running sums; the emulated
// cuBLASLt rounds exact sums once, so the differences measured here are the CPU's rounding):
// relative 1e-5, plus absolute floors for entries near zero, about twice the worst differences
// seen on these inputs (q, k, v in [-2, 2], gradients in [-1, 1]):
//   probabilities (worst seen 6e-8);
//   datt, hs-term dots of terms up to 2 in size (worst 1.2e-6), that cancel to near zero;
//   atty, dv, dq and dk, sums over up to T terms (worst 2.1e-7; the d(preatt) rows sum to zero,
//   so dq and dk cancel by construction).
constexpr double kRel = 1e-5, kAbsProb = 2e-7, kAbsDot = 3e-6, kAbsOut = 5e-7;
constexpr Tolerances kF32{kRel, kAbsProb, kAbsDot, kAbsOut, kRel, kRel, kAbsOut};
// bf16 against fp32 fed the same bf16 values: the fp32 floors above, plus the bf16 roundings of
// the kernels (half an ulp each, 2^-8 of the value: bf16 has 8 significant bits):
//   y, dv: rounded once (worst seen 0.00388 relative);
//   datt: rounded once by the GEMM and, with dropout, again after the scale: 2^-7 (worst 0.0069);
//   att: the scores s are rounded to bf16 before the softmax, so each probability p_j moves by
//   p_j (ds_j - sum_i p_i ds_i), |ds| <= 2^-8 |s|: relative 2^-8 (1 + 2 max|s|) with the output's
//   own rounding; |s| reaches about 5.6 here (q, k in [-2, 2]), so 0.05 (worst seen 0.0148);
//   dq, dk: dpreatt is rounded elementwise before the GEMMs, and its rows sum to zero, so the
//   error 2^-8 sum_j |dpreatt_j| |k_j| is absolute, not relative to dq: worst seen 0.0082 on
//   these inputs, floor 0.016 (on top of 2^-8 relative for the output's rounding).
constexpr double kRelBf16 = 1.0 / 256 + kRel;
constexpr Tolerances kBf16{kRelBf16, kAbsProb, kAbsDot, kAbsOut, 0.05, 1.0 / 128 + kRel, 0.016};

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
void check_case(const Case& c, const CudaTestContext& ctx, const Tolerances& tol) {
    const auto [B, T, C, NH] = c.s;
    const std::size_t N = static_cast<std::size_t>(B) * T, n_qkv = N * 3 * C, n_y = N * C,
                      n_att = static_cast<std::size_t>(B) * NH * T * T;
    const float p = c.dropout ? 0.1f : 0.0f;
    const auto qkv = representable<E>(random_floats(n_qkv, 1, -2.0f, 2.0f));
    const auto mask = c.dropout ? random_mask(n_att, 2, 1.0f - p) : std::vector<unsigned char>(1);
    const unsigned char* cpu_mask = c.dropout ? mask.data() : nullptr;
    Device<E> g_qkv(qkv);
    DeviceArray<unsigned char> g_mask_buffer(mask);
    const unsigned char* g_mask = c.dropout ? g_mask_buffer.get() : nullptr;

    // Softmax forward: the whole of att (NaN-filled first) written.
    std::vector<float> att(n_att);
    cpu::attention_softmax_forward(cpu::default_context(), att.data(), qkv.data(), B, T, C, NH);
    Device<E> g_att_out(nans(n_att));
    cuda::attention_softmax_forward(ctx.get(), g_att_out.get(), g_qkv.get(), B, T, C, NH);
    const auto att_got = g_att_out.download();
    EXPECT_TRUE(all_close(att_got, att, tol.att_rel, tol.prob)) << c.name();
    EXPECT_TRUE(upper_triangle_zero(att_got, T)) << c.name();

    // Value forward, from the CPU's probabilities.
    att = representable<E>(att);
    Device<E> g_att(att);
    std::vector<float> y(n_y);
    cpu::attention_value_forward(cpu::default_context(), y.data(), att.data(), cpu_mask, p, qkv.data(), B, T, C, NH);
    Device<E> g_y(nans(n_y));
    cuda::attention_value_forward(ctx.get(), g_y.get(), g_att.get(), g_mask, p, g_qkv.get(), B, T, C, NH);
    EXPECT_TRUE(all_close(g_y.download(), y, tol.rel, tol.out)) << c.name();

    // Value backward: datt whole, and only the v columns of dqkv (it starts as other values
    // that the q and k columns must keep).
    const auto dy = representable<E>(random_floats(n_y, 3)), dqkv0 = representable<E>(random_floats(n_qkv, 4));
    std::vector<float> datt(n_att), dqkv = dqkv0;
    cpu::attention_value_backward(cpu::default_context(), datt.data(), dqkv.data(), dy.data(), att.data(), cpu_mask, p,
                                  qkv.data(), B, T, C, NH);
    Device<E> g_dy(dy), g_datt_out(nans(n_att)), g_dqkv(dqkv0);
    cuda::attention_value_backward(ctx.get(), g_datt_out.get(), g_dqkv.get(), g_dy.get(), g_att.get(), g_mask, p,
                                   g_qkv.get(), B, T, C, NH);
    const auto datt_got = g_datt_out.download();
    EXPECT_TRUE(all_close(datt_got, datt, tol.datt_rel, tol.dot)) << c.name();
    EXPECT_TRUE(upper_triangle_zero(datt_got, T)) << c.name();
    EXPECT_TRUE(all_close(g_dqkv.download(), dqkv, tol.rel, tol.out)) << c.name();

    // Softmax backward, from the CPU's datt: the q and k columns of dqkv (the v columns keep
    // what they held).
    datt = representable<E>(datt);
    std::vector<float> dqkv2 = dqkv0, datt_in = datt;
    cpu::attention_softmax_backward(cpu::default_context(), dqkv2.data(), datt_in.data(), att.data(), qkv.data(), B, T,
                                    C, NH);
    Device<E> g_datt(datt), g_dqkv2(dqkv0);
    cuda::attention_softmax_backward(ctx.get(), g_dqkv2.get(), g_datt.get(), g_att.get(), g_qkv.get(), B, T, C, NH);
    EXPECT_TRUE(all_close(g_dqkv2.download(), dqkv2, tol.rel, tol.dqk)) << c.name();
}

TEST(CudaAttention, MatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes) check_case<float>({s, false}, ctx, kF32);
}

TEST(CudaAttention, WithDropoutMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes) check_case<float>({s, true}, ctx, kF32);
}

TEST(CudaAttention, MatchesTheCpuInBf16) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes) check_case<bf16>({s, false}, ctx, kBf16);
}

TEST(CudaAttention, WithDropoutMatchesTheCpuInBf16) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes) check_case<bf16>({s, true}, ctx, kBf16);
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
