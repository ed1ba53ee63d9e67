// AdamW and the gradient norm's sum of squares on CUDA against their CPU twins (kernels/cpu/adamw.cpp).
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

TEST(CudaAdamw, UpdateMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (long n : {1L, 37L, 1000L, 4099L}) {
        std::vector<float> params = random_floats(n, 1), m(n, 0.0f), v(n, 0.0f);
        DeviceArray<float> d_params(params), d_m(m), d_v(v);
        // Steps 1..3 from zero moments (bias corrections large), then step 1000; with and
        // without weight decay, with a clipping scale.
        int step = 0;
        for (int t : {1, 2, 3, 1000}) {
            const std::vector<float> grads = random_floats(n, 10 + t, -0.1f, 0.1f);
            DeviceArray<float> d_grads(grads);
            const float weight_decay = ++step % 2 ? 0.1f : 0.0f, grad_scale = step == 3 ? 0.5f : 1.0f;
            cpu::adamw_update(cpu::default_context(), params.data(), grads.data(), m.data(), v.data(), n, 6e-4f, 0.9f,
                              0.95f, 1e-8f, weight_decay, grad_scale, t);
            cuda::adamw_update(ctx.get(), d_params.get(), d_grads.get(), d_m.get(), d_v.get(), n, 6e-4f, 0.9f, 0.95f,
                               1e-8f, weight_decay, grad_scale, t);
            EXPECT_TRUE(all_close(d_params.download(), params, kAdamRel)) << "params n=" << n << " t=" << t;
            EXPECT_TRUE(all_close(d_m.download(), m, kAdamRel)) << "m n=" << n << " t=" << t;
            EXPECT_TRUE(all_close(d_v.download(), v, kAdamRel)) << "v n=" << n << " t=" << t;
        }
    }
}

// Squares of floats are exact in double, so the sums differ only in the order of the additions:
// relative error ~sqrt(n) * 1e-16 for these positive terms, far inside 1e-12.
TEST(CudaAdamw, SumOfSquaresMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    // 300001 elements: more than 1024 blocks of 256, so the first pass strides.
    for (long n : {1L, 37L, 1000L, 300001L}) {
        const std::vector<float> x = random_floats(n, 40 + n, -3.0f, 3.0f);
        const double want = cpu::sum_of_squares(cpu::default_context(), x.data(), n);
        DeviceArray<float> d_x(x);
        const double got = cuda::sum_of_squares(ctx.get(), d_x.get(), n);
        EXPECT_NEAR(got, want, 1e-12 * want) << "n=" << n;
        if (n < 10000) {  // the large case costs seconds under emulation
            EXPECT_EQ(cuda::sum_of_squares(ctx.get(), d_x.get(), n), got) << "repeatable, n=" << n;
        }
    }
    DeviceArray<float> empty(0);
    EXPECT_EQ(cuda::sum_of_squares(ctx.get(), empty.get(), 0), 0.0);
}

}  // namespace
}  // namespace adacc::test
