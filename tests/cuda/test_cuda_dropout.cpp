// Dropout on CUDA against its CPU twin (kernels/cpu/dropout.cpp). The masks come from the same
// counter-based RNG (kernels/rng.h, compiled for the device too) and must be the CPU's bit for
// bit; the scaled and residual outputs are one rounded operation per step, the CPU's too. In
// bf16 they are those fp32 results rounded once, so they equal the CPU's (run on the same bf16
// values as floats) rounded to bf16, bit for bit.
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "kernels/rng.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

const long kSizes[] = {1, 31, 257, 4099};

TEST(CudaDropout, MaskIsBitIdenticalToTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (long n : {1L, 31L, 257L, 100003L})
        for (float p : {0.0f, 0.1f, 0.5f}) {
            const unsigned long long key = rng_key(42, 7, 1, 3, static_cast<std::uint64_t>(n));
            std::vector<unsigned char> want(n);
            cpu::dropout_mask(cpu::default_context(), want.data(), n, p, key);
            DeviceArray<unsigned char> got(n);
            cuda::dropout_mask(ctx.get(), got.get(), n, p, key);
            EXPECT_TRUE(all_equal_bytes(got.download(), want)) << "n=" << n << " p=" << p;
        }
}

// Each test runs in fp32 and in bf16 (E): the inputs are values E holds, the CPU twin runs on
// them as floats, and the device's result must be the CPU's (rounded to E once) bit for bit.
template <typename E>
void check_residual_forward() {
    CudaTestContext ctx;
    const float p = 0.1f;
    for (long n : kSizes) {
        const std::vector<float> residual = representable<E>(random_floats(n, 1)),
                                 inp = representable<E>(random_floats(n, 2));
        const std::vector<unsigned char> mask = random_mask(n, 3, 1.0f - p);
        DeviceArray<E> d_res(device_values<E>(residual)), d_inp(device_values<E>(inp)), d_out(n);
        DeviceArray<unsigned char> d_mask(mask);

        // No mask: one addition, bit-identical.
        std::vector<float> want(n);
        cpu::residual_dropout_forward(cpu::default_context(), want.data(), residual.data(), inp.data(), nullptr, p, n);
        cuda::residual_dropout_forward(ctx.get(), d_out.get(), d_res.get(), d_inp.get(), nullptr, p, n);
        EXPECT_TRUE(all_equal_bytes(d_out.download(), device_values<E>(want))) << "no mask, n=" << n;

        // Mask: residual + round(inp * scale). The CPU twin computes that in its vectorised loop,
        // but GCC fuses the scalar remainder of each thread's chunk into one FMA (one rounding
        // instead of two), so the device is compared exactly with the two-rounding formula and
        // with the CPU within what the two roundings allow: an ulp of the result (relative
        // 2.4e-7) plus an ulp of the product where they cancel (|inp * scale| < 1.2: 1.2e-7).
        // In bf16 the device's result is rounded once more (2^-8 of it), and the CPU's fp32 may
        // sit on the other side of a rounding boundary: 2^-8 plus that tolerance doubled.
        cpu::residual_dropout_forward(cpu::default_context(), want.data(), residual.data(), inp.data(), mask.data(), p,
                                      n);
        cuda::residual_dropout_forward(ctx.get(), d_out.get(), d_res.get(), d_inp.get(), d_mask.get(), p, n);
        const std::vector<E> got = d_out.download();
        const bool bf16 = std::is_same_v<E, adacc::bf16>;
        EXPECT_TRUE(all_close(host_values(got), want, bf16 ? 1.0 / 256 + 2 * 2.4e-7 : 2.4e-7, bf16 ? 2.4e-7 : 1.2e-7))
            << "mask, n=" << n;
        const float scale = 1.0f / (1.0f - p);
        std::vector<float> rounded(n);
        for (long i = 0; i < n; ++i) {
            volatile float product = inp[i] * scale;  // volatile: rounded, never contracted
            rounded[i] = residual[i] + (mask[i] ? static_cast<float>(product) : 0.0f);
        }
        EXPECT_TRUE(all_equal_bytes(got, device_values<E>(rounded))) << "mask, n=" << n;
    }
}

template <typename E>
void check_residual_backward() {
    CudaTestContext ctx;
    const float p = 0.25f;
    for (long n : kSizes) {
        const std::vector<float> dout = representable<E>(random_floats(n, 4));
        const std::vector<unsigned char> mask = random_mask(n, 5, 1.0f - p);
        DeviceArray<E> d_dout(device_values<E>(dout)), d_dinp(n);
        DeviceArray<unsigned char> d_mask(mask);
        for (const unsigned char* m : {static_cast<const unsigned char*>(nullptr), mask.data()}) {
            std::vector<float> want(n);
            cpu::residual_dropout_backward(cpu::default_context(), want.data(), dout.data(), m, p, n);
            cuda::residual_dropout_backward(ctx.get(), d_dinp.get(), d_dout.get(), m ? d_mask.get() : nullptr, p, n);
            EXPECT_TRUE(all_equal_bytes(d_dinp.download(), device_values<E>(want)))
                << (m ? "mask" : "no mask") << ", n=" << n;
        }
    }
}

template <typename E>
void check_dropout_forward() {
    CudaTestContext ctx;
    const float p = 0.1f;
    for (long n : kSizes) {
        const std::vector<float> inp = representable<E>(random_floats(n, 6));
        const std::vector<unsigned char> mask = random_mask(n, 7, 1.0f - p);
        std::vector<float> want(n);
        cpu::dropout_forward(cpu::default_context(), want.data(), inp.data(), mask.data(), p, n);
        DeviceArray<E> d_inp(device_values<E>(inp)), d_out(n);
        DeviceArray<unsigned char> d_mask(mask);
        cuda::dropout_forward(ctx.get(), d_out.get(), d_inp.get(), d_mask.get(), p, n);
        EXPECT_TRUE(all_equal_bytes(d_out.download(), device_values<E>(want))) << "n=" << n;
        cuda::dropout_forward(ctx.get(), d_inp.get(), d_inp.get(), d_mask.get(), p, n);  // in place (embeddings)
        EXPECT_TRUE(all_equal_bytes(d_inp.download(), device_values<E>(want))) << "in place, n=" << n;
    }
}

TEST(CudaDropout, ResidualForwardMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    check_residual_forward<float>();
    check_residual_forward<bf16>();
}

TEST(CudaDropout, ResidualBackwardIsBitIdenticalToTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    check_residual_backward<float>();
    check_residual_backward<bf16>();
}

TEST(CudaDropout, ForwardIsBitIdenticalToTheCpuInPlaceToo) {
    ADACC_REQUIRE_CUDA_DEVICE();
    check_dropout_forward<float>();
    check_dropout_forward<bf16>();
}

TEST(CudaDropout, ActivationsOfDifferentDtypesAreRefused) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    DeviceArray<bf16> b16(8);
    DeviceArray<float> f32(8);
    EXPECT_THROW(cuda::residual_dropout_forward(ctx.get(), b16.get(), b16.get(), f32.get(), nullptr, 0.1f, 8),
                 std::invalid_argument);
    EXPECT_THROW(cuda::residual_dropout_backward(ctx.get(), b16.get(), f32.get(), nullptr, 0.1f, 8),
                 std::invalid_argument);
    EXPECT_THROW(cuda::dropout_forward(ctx.get(), f32.get(), b16.get(), nullptr, 0.1f, 8), std::invalid_argument);
}

}  // namespace
}  // namespace adacc::test
