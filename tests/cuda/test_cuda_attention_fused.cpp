// Fused attention on CUDA (kernels/cuda/attention_fused.cu) against its CPU twin
// (kernels/cpu/attention_fused.cpp), in fp32 and bf16, with and without dropout (both draw the
// same RNG bits from the key): atty, lse and all of dqkv (NaN-filled first, so every entry must be
// written). The two differ in rounding order (the CPU's simd dots, CUDA's warp sums) and in
// exp (the CPU's polynomial exp_approx, CUDA's expf: about 2e-7 relative apart).
#include <cmath>
#include <limits>
#include <string>
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

// fp32: relative 1e-5 with absolute floors about twice the worst seen (q, k, v in [-2, 2],
// datty in [-1, 1]): outputs 2e-6, lse 1e-5. bf16 (inputs rounded to bf16 first, so both read the
// same values): the outputs are rounded once (2^-8 relative), and the probabilities are computed
// in fp32 from bf16 inputs on both sides, so dq and dk, sums of terms that cancel, get an absolute
// floor of 0.01.
struct Tolerances {
    double rel, out, lse, dqkv;
};
constexpr Tolerances kF32{1e-5, 2e-6, 1e-5, 2e-6};
constexpr Tolerances kBf16{1.0 / 256 + 1e-5, 2e-6, 1e-5, 0.01};

std::vector<float> nans(std::size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

template <typename E>
void check_case(const Shape& s, bool dropout, const CudaTestContext& ctx, const Tolerances& tol) {
    const auto [B, T, C, NH] = s;
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
    EXPECT_TRUE(all_close(host_values(g_y.download()), y, tol.rel, tol.out)) << name << ": atty";
    EXPECT_TRUE(all_close(g_lse.download(), lse, tol.rel, tol.lse)) << name << ": lse";

    // Backward from the CPU's atty (rounded as the device holds it) and lse.
    const auto yr = representable<E>(y), dy = representable<E>(random_floats(N * C, 2));
    std::vector<float> dqkv(N * 3 * C);
    cpu::attention_fused_backward(cpu::default_context(), dqkv.data(), dy.data(), qkv.data(), yr.data(), lse.data(), B,
                                  T, C, NH, p, key);
    DeviceArray<E> g_yr(device_values<E>(yr)), g_dy(device_values<E>(dy)), g_dqkv(device_values<E>(nans(N * 3 * C)));
    DeviceArray<float> g_lse_in(lse);
    cuda::attention_fused_backward(ctx.get(), g_dqkv.get(), g_dy.get(), g_qkv.get(), g_yr.get(), g_lse_in.get(), B, T,
                                   C, NH, p, key);
    EXPECT_TRUE(all_close(host_values(g_dqkv.download()), dqkv, tol.rel, tol.dqkv)) << name << ": dqkv";
}

TEST(CudaFusedAttention, MatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (bool dropout : {false, true})
        for (const Shape& s : kShapes) check_case<float>(s, dropout, ctx, kF32);
}

TEST(CudaFusedAttention, MatchesTheCpuInBf16) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (bool dropout : {false, true})
        for (const Shape& s : kShapes) check_case<bf16>(s, dropout, ctx, kBf16);
}

}  // namespace
}  // namespace adacc::test
