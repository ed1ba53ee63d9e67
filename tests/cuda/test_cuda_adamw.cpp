// AdamW, the global gradient norm and the loss sum on CUDA against their CPU twins
// (kernels/cpu/adamw.cpp, classifier.cpp).
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// The device runs the CPU twin's operations in its order, with the four FMAs GCC makes of them
// under -march=native (the default build) written out as fmaf (kernels/cuda/adamw.cu), so with
// GCC and FMA hardware the parameters and moments are bit-identical. Any other host compiler may
// fuse differently (or not at all): then a few ulp, well within 1e-6 relative.
#if defined(__GNUC__) && !defined(__clang__) && defined(__FMA__)
constexpr double kAdamRel = 0.0;
#else
constexpr double kAdamRel = 1e-6;
#endif

// Clipping, the skip on a non-finite norm and the bf16 working copy run on the device from the
// norm in device memory, as the CPU twin runs them from the norm in host memory.
TEST(CudaAdamw, UpdateMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (long n : {1L, 37L, 1000L, 4099L}) {
        std::vector<float> params = random_floats(n, 1), m(n, 0.0f), v(n, 0.0f);
        std::vector<bf16> working(n);
        DeviceArray<float> d_params(params), d_m(m), d_v(v);
        DeviceArray<bf16> d_working(working);
        // Steps 1..3 from zero moments (bias corrections large), then step 1000; with and
        // without weight decay; at step 3 the norm is above the clip (scale 0.5).
        int step = 0;
        for (int t : {1, 2, 3, 1000}) {
            const std::vector<float> grads = random_floats(n, 10 + t, -0.1f, 0.1f);
            DeviceArray<float> d_grads(grads);
            const float weight_decay = ++step % 2 ? 0.1f : 0.0f, norm = step == 3 ? 2.0f : 0.5f, clip = 1.0f;
            DeviceArray<float> d_norm(std::vector<float>{norm});
            cpu::adamw_update(cpu::default_context(), params.data(), working.data(), grads.data(), m.data(), v.data(),
                              n, 6e-4f, 0.9f, 0.95f, 1e-8f, weight_decay, clip, &norm, t);
            cuda::adamw_update(ctx.get(), d_params.get(), d_working.get(), d_grads.get(), d_m.get(), d_v.get(), n,
                               6e-4f, 0.9f, 0.95f, 1e-8f, weight_decay, clip, d_norm.get(), t);
            EXPECT_TRUE(all_close(d_params.download(), params, kAdamRel)) << "params n=" << n << " t=" << t;
            EXPECT_TRUE(all_close(d_m.download(), m, kAdamRel)) << "m n=" << n << " t=" << t;
            EXPECT_TRUE(all_close(d_v.download(), v, kAdamRel)) << "v n=" << n << " t=" << t;
            if (kAdamRel == 0.0) {
                EXPECT_TRUE(all_equal_bytes(d_working.download(), working)) << "n=" << n;
            }
        }
    }
}

TEST(CudaAdamw, ANonFiniteNormChangesNothing) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const long n = 300;
    const std::vector<float> params = random_floats(n, 2), grads = random_floats(n, 3), zeros(n, 0.0f);
    for (float bad : {NAN, INFINITY}) {
        DeviceArray<float> d_params(params), d_grads(grads), d_m(zeros), d_v(zeros), d_norm(std::vector<float>{bad});
        cuda::adamw_update(ctx.get(), d_params.get(), nullptr, d_grads.get(), d_m.get(), d_v.get(), n, 1e-2f, 0.9f,
                           0.95f, 1e-8f, 0.1f, 1.0f, d_norm.get(), 1);
        EXPECT_TRUE(all_equal_bytes(d_params.download(), params)) << "norm " << bad;
        EXPECT_TRUE(all_equal_bytes(d_m.download(), zeros)) << "norm " << bad;
    }
}

// Squares of floats are exact in double, so the sums differ only in the order of the additions
// (relative ~sqrt(n) * 1e-16 for these positive terms); after the square root and the rounding
// to float the norms are equal or one ulp apart.
TEST(CudaAdamw, GlobalNormMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    DeviceArray<float> d_norm(1);
    // 300001 elements: more than 1024 blocks of 256, so the first pass strides.
    for (long n : {0L, 1L, 37L, 1000L, 300001L}) {
        const std::vector<float> x = random_floats(n, 40 + n, -3.0f, 3.0f);
        float want = -1.0f;
        cpu::global_norm(cpu::default_context(), &want, x.data(), n);
        DeviceArray<float> d_x(x);
        cuda::global_norm(ctx.get(), d_norm.get(), d_x.get(), n);
        const float got = d_norm.download()[0];
        EXPECT_NEAR(got, want, 1.2e-7 * want) << "n=" << n;
        if (n < 10000) {  // the large case costs seconds under emulation
            cuda::global_norm(ctx.get(), d_norm.get(), d_x.get(), n);
            EXPECT_EQ(d_norm.download()[0], got) << "repeatable, n=" << n;
        }
    }
}

// The loss sum: one block of double partials against the CPU's sequential double sum; rounded
// once to float, so equal or one ulp apart.
TEST(CudaAdamw, LossAccumulateMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (int n : {1, 7, 1000, 5001}) {
        const std::vector<float> a = random_floats(n, 50 + n, 0.0f, 11.0f), b = random_floats(n, 60 + n, 0.0f, 11.0f);
        float want = 0.0f;
        cpu::loss_accumulate(cpu::default_context(), &want, a.data(), n, 3.0 * n, false);
        cpu::loss_accumulate(cpu::default_context(), &want, b.data(), n, 3.0 * n, true);
        DeviceArray<float> d_a(a), d_b(b), d_total(std::vector<float>{NAN});
        cuda::loss_accumulate(ctx.get(), d_total.get(), d_a.get(), n, 3.0 * n, false);
        cuda::loss_accumulate(ctx.get(), d_total.get(), d_b.get(), n, 3.0 * n, true);
        EXPECT_NEAR(d_total.download()[0], want, 2.4e-7 * want) << "n=" << n;
    }
}

}  // namespace
}  // namespace adacc::test
