// GELU on CUDA against its CPU twin (kernels/cpu/gelu.cpp), odd sizes, in place too; fp32 and bf16.
#include <stdexcept>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// tanhf vs the CPU's tanh_approx (absolute error ~1e-7): relative 1e-5 with a small floor.
constexpr double kRel = 1e-5, kAbs = 1e-6;
// bf16: the fp32 results differ by that tolerance before rounding, so the rounded results may
// land one bf16 ulp apart (at most 2^-7 of the value); near zero the fp32 floor still applies.
constexpr double kBf16UlpRel = 1.0 / 128;


const long kSizes[] = {1, 31, 257, 1000};

TEST(CudaGelu, ForwardAndBackwardMatchTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (long n : kSizes) {
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

// bf16 in and out: the CPU twin runs on the same bf16 values as floats. The device's bf16 result
// is also checked bit for bit against its own fp32 kernel's result rounded once, which is what
// "computed in fp32, rounded on store" means.
TEST(CudaGelu, Bf16ForwardAndBackwardMatchTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (long n : kSizes) {
        const std::vector<bf16> x = device_values<bf16>(random_floats(n, 1, -6.0f, 6.0f)), dout = device_values<bf16>(random_floats(n, 2));
        const std::vector<float> xf = host_values(x), doutf = host_values(dout);
        std::vector<float> want(n), dwant(n);
        cpu::gelu_forward(cpu::default_context(), want.data(), xf.data(), n);
        cpu::gelu_backward(cpu::default_context(), dwant.data(), xf.data(), doutf.data(), n);
        DeviceArray<bf16> dx(x), dd(dout), out(n);
        DeviceArray<float> dx32(xf), dd32(doutf), out32(n);
        cuda::gelu_forward(ctx.get(), out.get(), dx.get(), n);
        cuda::gelu_forward(ctx.get(), out32.get(), dx32.get(), n);
        const std::vector<bf16> got = out.download();
        EXPECT_TRUE(all_close(host_values(got), host_values(device_values<bf16>(want)), kBf16UlpRel, kAbs)) << "forward n=" << n;
        EXPECT_TRUE(all_equal_bytes(got, device_values<bf16>(out32.download()))) << "forward n=" << n;
        cuda::gelu_backward(ctx.get(), dd.get(), dx.get(), dd.get(), n);  // in place
        cuda::gelu_backward(ctx.get(), dd32.get(), dx32.get(), dd32.get(), n);
        const std::vector<bf16> dgot = dd.download();
        EXPECT_TRUE(all_close(host_values(dgot), host_values(device_values<bf16>(dwant)), kBf16UlpRel, kAbs)) << "backward n=" << n;
        EXPECT_TRUE(all_equal_bytes(dgot, device_values<bf16>(dd32.download()))) << "backward n=" << n;
    }
}

TEST(CudaGelu, ActivationsOfDifferentDtypesAreRefused) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    DeviceArray<bf16> b16(8);
    DeviceArray<float> f32(8);
    EXPECT_THROW(cuda::gelu_forward(ctx.get(), b16.get(), f32.get(), 8), std::invalid_argument);
    EXPECT_THROW(cuda::gelu_backward(ctx.get(), b16.get(), b16.get(), f32.get(), 8), std::invalid_argument);
}

}  // namespace
}  // namespace adacc::test
