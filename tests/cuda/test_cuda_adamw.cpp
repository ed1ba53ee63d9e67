// AdamW and the global gradient norm on CUDA beyond their twin comparison (the table of
// tests/cuda/test_cuda_ops.cpp runs them, and the loss sum, against the CPU's): a non-finite norm
// skips the step, and the norm is repeatable.
#include <cmath>
#include <vector>

#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// A non-finite norm skips the step on the device: nothing changes.
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

// The global norm of the same values twice: the same bits (its fixed-order two-pass sum).
TEST(CudaAdamw, GlobalNormIsRepeatable) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    DeviceArray<float> d_norm(1);
    for (long n : {1L, 37L, 1000L}) {
        DeviceArray<float> d_x(random_floats(n, 40 + n, -3.0f, 3.0f));
        cuda::global_norm(ctx.get(), d_norm.get(), d_x.get(), n);
        const float first = d_norm.download()[0];
        cuda::global_norm(ctx.get(), d_norm.get(), d_x.get(), n);
        EXPECT_EQ(d_norm.download()[0], first) << "n=" << n;
    }
}

}  // namespace
}  // namespace adacc::test
