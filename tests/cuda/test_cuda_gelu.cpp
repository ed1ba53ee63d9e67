// GELU on CUDA against its CPU twin (kernels/cpu/gelu.cpp), odd sizes, in place too.
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// tanhf vs the CPU's tanh_approx (absolute error ~1e-7): relative 1e-5 with a small floor.
constexpr double kRel = 1e-5, kAbs = 1e-6;

TEST(CudaGelu, ForwardAndBackwardMatchTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (long n : {1L, 31L, 257L, 1000L}) {
        const std::vector<float> x = random_floats(n, 1, -6.0f, 6.0f), dout = random_floats(n, 2);
        std::vector<float> want(n), dwant(n);
        cpu::gelu_forward(cpu::default_context(), want.data(), x.data(), n);
        cpu::gelu_backward(cpu::default_context(), dwant.data(), x.data(), dout.data(), n);
        DeviceArray<float> dx(x), dd(dout), out(n);
        cuda::gelu_forward(ctx.get(), out.get(), dx.get(), n);
        EXPECT_TRUE(all_close(out.download(), want, kRel, kAbs)) << "n=" << n;
        cuda::gelu_backward(ctx.get(), dd.get(), dx.get(), dd.get(), n);  // in place, as the driver runs it
        EXPECT_TRUE(all_close(dd.download(), dwant, kRel, kAbs)) << "n=" << n;
    }
}

}  // namespace
}  // namespace adacc::test
