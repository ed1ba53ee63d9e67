// The materialized attention's four CUDA kernels beyond their twin comparison (the table of
// tests/cuda/test_cuda_ops.cpp runs them against the CPU's, in fp32 and bf16, with and without
// dropout): a recomputation gives the same bits.
#include <vector>

#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

struct Shape {
    int B, T, C, NH;
};

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
