// LayerNorm on CUDA beyond its twin comparison (the table of tests/cuda/test_cuda_ops.cpp runs
// it against the CPU's in fp32 and bf16): a recomputation gives the same bits, the fused residual
// and layernorm gives the two kernels' bits, and activations of different dtypes are refused.
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

struct Shape {
    int N, C;
};

TEST(CudaLayernorm, BackwardIsDeterministic) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const Shape s{70, 72};
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    const std::vector<float> x = random_floats(n, 300, -1.0f, 2.0f), weight = random_floats(s.C, 301, 0.5f, 1.5f),
                             bias = random_floats(s.C, 302, -0.5f, 0.5f);
    std::vector<float> out(n), mean(s.N), rstd(s.N);
    cpu::layernorm_forward(cpu::default_context(), out.data(), mean.data(), rstd.data(), x.data(), weight.data(),
                           bias.data(), s.N, s.C);
    DeviceArray<float> d_x(x), d_w(weight), d_mean(mean), d_rstd(rstd), d_dout(random_floats(n, 3));
    std::vector<std::vector<float>> runs;
    for (int run = 0; run < 2; ++run) {
        DeviceArray<float> d_dinp(n), d_dweight(s.C), d_dbias(s.C);
        cuda::layernorm_backward(ctx.get(), d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(), d_x.get(),
                                 d_w.get(), d_mean.get(), d_rstd.get(), s.N, s.C);
        runs.push_back(d_dweight.download());
        std::vector<float> dbias = d_dbias.download(), dinp = d_dinp.download();
        runs.back().insert(runs.back().end(), dbias.begin(), dbias.end());
        runs.back().insert(runs.back().end(), dinp.begin(), dinp.end());
    }
    EXPECT_TRUE(all_close(runs[1], runs[0], 0.0, 0.0));
}

// The fused kernel and the two it stands for (residual_dropout_forward, then layernorm_forward of
// the stored sum) on the same inputs: all four outputs bit for bit.
template <typename E>
void expect_fused_is_the_pair(const Shape& s, bool with_mask) {
    SCOPED_TRACE("C = " + std::to_string(s.C) + (std::is_same_v<E, float> ? " fp32" : " bf16") +
                 (with_mask ? " mask" : " no mask"));
    CudaTestContext ctx;
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    const float p = 0.1f;
    // The residual stream's mean is ~0.5, not 0 (as in the layernorm table); the branch is random.
    const DeviceArray<E> residual(device_values<E>(random_floats(n, 400 + s.C, -1.0f, 2.0f))),
        branch(device_values<E>(random_floats(n, 401 + s.C))),
        weight(device_values<E>(random_floats(s.C, 402 + s.C, 0.5f, 1.5f))),
        bias(device_values<E>(random_floats(s.C, 403 + s.C, -0.5f, 0.5f)));
    const DeviceArray<unsigned char> mask(random_mask(n, 404 + s.C, 0.9f));
    const unsigned char* m = with_mask ? mask.get() : nullptr;
    DeviceArray<E> sum(n), out(n), pair_sum(n), pair_out(n);
    DeviceArray<float> mean(s.N), rstd(s.N), pair_mean(s.N), pair_rstd(s.N);
    cuda::residual_layernorm_forward(ctx.get(), sum.get(), out.get(), mean.get(), rstd.get(), residual.get(),
                                     branch.get(), m, p, weight.get(), bias.get(), s.N, s.C);
    cuda::residual_dropout_forward(ctx.get(), pair_sum.get(), residual.get(), branch.get(), m, p, static_cast<long>(n));
    cuda::layernorm_forward(ctx.get(), pair_out.get(), pair_mean.get(), pair_rstd.get(), pair_sum.get(), weight.get(),
                            bias.get(), s.N, s.C);
    EXPECT_TRUE(all_equal_bytes(sum.download(), pair_sum.download())) << "sum";
    EXPECT_TRUE(all_equal_bytes(out.download(), pair_out.download())) << "out";
    EXPECT_TRUE(all_equal_bytes(mean.download(), pair_mean.download())) << "mean";
    EXPECT_TRUE(all_equal_bytes(rstd.download(), pair_rstd.download())) << "rstd";
}

// Widths take every row path of the fused kernel: the row in registers in 2, 4 and 8 steps of 32
// packs, and the fallback that rereads it: C = 40, 300, 500, 1024, 2000 in fp32 (1, 3, 4, 8 and 16
// steps of 128 channels) and 40, 768, 1024, 2000, 6000 in bf16 (steps of 256: 1, 3, 4, 8, 24);
// C = 300 is no multiple of bf16's 8-element packs (unaligned rows). 14 rows: two blocks of 8, the
// last short.
TEST(CudaLayernorm, ResidualLayernormIsResidualDropoutThenLayernormBitForBit) {
    ADACC_REQUIRE_CUDA_DEVICE();
    for (bool with_mask : {false, true}) {
        for (int C : {40, 300, 500, 1024, 2000}) expect_fused_is_the_pair<float>({14, C}, with_mask);
        for (int C : {40, 300, 768, 1024, 2000, 6000}) expect_fused_is_the_pair<bf16>({14, C}, with_mask);
    }
}

TEST(CudaLayernorm, ActivationsOfDifferentDtypesAreRefused) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const Shape s{2, 40};
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    DeviceArray<bf16> b16(n);
    DeviceArray<float> f32(n), w(s.C), stats(s.N);
    EXPECT_THROW(
        cuda::layernorm_forward(ctx.get(), b16.get(), stats.get(), stats.get(), f32.get(), w.get(), w.get(), s.N, s.C),
        std::invalid_argument);
    EXPECT_THROW(cuda::layernorm_backward(ctx.get(), b16.get(), w.get(), w.get(), b16.get(), f32.get(), w.get(),
                                          stats.get(), stats.get(), s.N, s.C),
                 std::invalid_argument);
    // The parameters must be of the activations' type: fp32 weights beside bf16 activations are refused.
    DeviceArray<bf16> w16(s.C), other16(n);
    EXPECT_THROW(cuda::layernorm_forward(ctx.get(), b16.get(), stats.get(), stats.get(), other16.get(), w.get(),
                                         w16.get(), s.N, s.C),
                 std::invalid_argument);
    EXPECT_THROW(cuda::layernorm_backward(ctx.get(), b16.get(), w.get(), w.get(), other16.get(), other16.get(), w.get(),
                                          stats.get(), stats.get(), s.N, s.C),
                 std::invalid_argument);
    // The fused residual and layernorm: an fp32 branch, or fp32 parameters, beside bf16 activations.
    EXPECT_THROW(cuda::residual_layernorm_forward(ctx.get(), b16.get(), other16.get(), stats.get(), stats.get(),
                                                  b16.get(), f32.get(), nullptr, 0.1f, w16.get(), w16.get(), s.N, s.C),
                 std::invalid_argument);
    EXPECT_THROW(cuda::residual_layernorm_forward(ctx.get(), b16.get(), other16.get(), stats.get(), stats.get(),
                                                  b16.get(), b16.get(), nullptr, 0.1f, w.get(), w16.get(), s.N, s.C),
                 std::invalid_argument);
}

}  // namespace
}  // namespace adacc::test
