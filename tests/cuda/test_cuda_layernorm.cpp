// LayerNorm on CUDA beyond its twin comparison (the table of tests/cuda/test_cuda_ops.cpp runs
// it against the CPU's in fp32 and bf16): a recomputation gives the same bits, and activations of
// different dtypes are refused.
#include <stdexcept>
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
}

}  // namespace
}  // namespace adacc::test
