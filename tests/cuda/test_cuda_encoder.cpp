// Token + position embedding on CUDA against its CPU twin (kernels/cpu/encoder.cpp). Both
// directions are bit-identical to the CPU: the forward is one addition per element, and the
// backward adds the same values in the same order (positions in increasing b*T+t for every
// (row, channel) of dwte, increasing b for dwpe), so the tests demand exact equality. In bf16
// (out, dout and the embeddings bf16, their gradients fp32) the same holds against the CPU run on
// the bf16 values as floats: out is the CPU's sum rounded once, and dout widens exactly.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

struct Shape {
    int B, T, C, V;
};

// Token ids in [0, V) from a fixed seed; a small V makes many positions share a row of dwte.
std::vector<int> random_tokens(int n, int V, std::uint64_t seed) {
    const std::vector<float> u = random_floats(n, seed, 0.0f, static_cast<float>(V));
    std::vector<int> tokens(n);
    for (int i = 0; i < n; ++i) tokens[i] = std::min(V - 1, static_cast<int>(u[i]));
    return tokens;
}

void check_shape(const Shape& s, const std::vector<int>& tokens) {
    CudaTestContext ctx;
    const int N = s.B * s.T;
    const std::vector<float> wte = random_floats(static_cast<std::size_t>(s.V) * s.C, 11),
                             wpe = random_floats(static_cast<std::size_t>(s.T) * s.C, 12),
                             dout = random_floats(static_cast<std::size_t>(N) * s.C, 13);
    // Nonzero gradients to start from: the backward accumulates.
    std::vector<float> dwte_want = random_floats(wte.size(), 14), dwpe_want = random_floats(wpe.size(), 15);
    DeviceArray<float> d_wte(wte), d_wpe(wpe), d_dout(dout), d_dwte(dwte_want), d_dwpe(dwpe_want),
        d_out(static_cast<std::size_t>(N) * s.C);
    DeviceArray<int> d_tokens(tokens);

    std::vector<float> out_want(static_cast<std::size_t>(N) * s.C);
    cpu::encoder_forward(cpu::default_context(), out_want.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);
    cuda::encoder_forward(ctx.get(), d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), s.B, s.T, s.C);
    EXPECT_TRUE(all_close(d_out.download(), out_want, 0.0, 0.0)) << "forward B=" << s.B << " T=" << s.T << " C=" << s.C;

    cpu::encoder_backward(cpu::default_context(), dwte_want.data(), dwpe_want.data(), dout.data(), tokens.data(), s.B,
                          s.T, s.C);
    cuda::encoder_backward(ctx.get(), d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), s.B, s.T, s.C);
    EXPECT_TRUE(all_close(d_dwte.download(), dwte_want, 0.0, 0.0)) << "dwte B=" << s.B << " T=" << s.T << " C=" << s.C;
    EXPECT_TRUE(all_close(d_dwpe.download(), dwpe_want, 0.0, 0.0)) << "dwpe B=" << s.B << " T=" << s.T << " C=" << s.C;
}


void check_shape_bf16(const Shape& s, const std::vector<int>& tokens) {
    CudaTestContext ctx;
    const int N = s.B * s.T;
    const std::vector<float> wte = representable<bf16>(random_floats(static_cast<std::size_t>(s.V) * s.C, 11)),
                             wpe = representable<bf16>(random_floats(static_cast<std::size_t>(s.T) * s.C, 12));
    const std::vector<bf16> dout = device_values<bf16>(random_floats(static_cast<std::size_t>(N) * s.C, 13));
    std::vector<float> dwte_want = random_floats(wte.size(), 14), dwpe_want = random_floats(wpe.size(), 15);
    DeviceArray<float> d_dwte(dwte_want), d_dwpe(dwpe_want);
    DeviceArray<bf16> d_wte(device_values<bf16>(wte)), d_wpe(device_values<bf16>(wpe)), d_dout(dout),
        d_out(static_cast<std::size_t>(N) * s.C);
    DeviceArray<int> d_tokens(tokens);
    const std::string where = "B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) + " C=" + std::to_string(s.C);

    std::vector<float> out_want(static_cast<std::size_t>(N) * s.C);
    cpu::encoder_forward(cpu::default_context(), out_want.data(), tokens.data(), wte.data(), wpe.data(), s.B, s.T, s.C);
    cuda::encoder_forward(ctx.get(), d_out.get(), d_tokens.get(), d_wte.get(), d_wpe.get(), s.B, s.T, s.C);
    EXPECT_TRUE(all_equal_bytes(d_out.download(), device_values<bf16>(out_want))) << "bf16 forward " << where;

    cpu::encoder_backward(cpu::default_context(), dwte_want.data(), dwpe_want.data(), host_values(dout).data(),
                          tokens.data(), s.B, s.T, s.C);
    cuda::encoder_backward(ctx.get(), d_dwte.get(), d_dwpe.get(), d_dout.get(), d_tokens.get(), s.B, s.T, s.C);
    EXPECT_TRUE(all_close(d_dwte.download(), dwte_want, 0.0, 0.0)) << "bf16 dwte " << where;
    EXPECT_TRUE(all_close(d_dwpe.download(), dwpe_want, 0.0, 0.0)) << "bf16 dwpe " << where;
}

TEST(CudaEncoder, ForwardAndBackwardAreBitIdenticalToTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    // T = 1; odd shapes with repeated tokens (V small); channels over two blocks (C = 300 > 256).
    for (const Shape& s : {Shape{1, 1, 40, 5}, Shape{2, 7, 40, 13}, Shape{3, 5, 300, 4}, Shape{2, 1, 72, 101}})
        check_shape(s, random_tokens(s.B * s.T, s.V, 21 + s.C));
}

TEST(CudaEncoder, BackwardWithEveryPositionOnOneToken) {
    ADACC_REQUIRE_CUDA_DEVICE();
    const Shape s{3, 9, 72, 6};
    check_shape(s, std::vector<int>(s.B * s.T, 4));  // one run of 27 positions, the other rows untouched
}

TEST(CudaEncoder, SeveralSortTilesAndWalkBlocks) {
    ADACC_REQUIRE_CUDA_DEVICE();
    // N = 260 positions: three 128-key tiles in the sort, 260 strided walk blocks, runs up to ~10.
    const Shape s{4, 65, 72, 37};
    check_shape(s, random_tokens(s.B * s.T, s.V, 5));
    // N = 1100 > 1024 walk blocks: blocks stride over the sorted positions.
    const Shape wide{2, 550, 40, 50};
    check_shape(wide, random_tokens(wide.B * wide.T, wide.V, 6));
}

TEST(CudaEncoder, Bf16ForwardAndBackwardAreBitIdenticalToTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    // The shapes above: T = 1, repeated tokens, channels over two blocks; every position on one
    // token; several sort tiles and walk blocks.
    for (const Shape& s : {Shape{1, 1, 40, 5}, Shape{2, 7, 40, 13}, Shape{3, 5, 300, 4}, Shape{2, 1, 72, 101},
                           Shape{4, 65, 72, 37}})
        check_shape_bf16(s, random_tokens(s.B * s.T, s.V, 21 + s.C));
    const Shape one_token{3, 9, 72, 6};
    check_shape_bf16(one_token, std::vector<int>(one_token.B * one_token.T, 4));
}

TEST(CudaEncoder, EmbeddingsOfAnotherDtypeThanTheOutputAreRefused) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    DeviceArray<float> wte32(8 * 4), wpe32(2 * 4);
    DeviceArray<bf16> out16(2 * 4), wpe16(2 * 4);
    DeviceArray<int> tokens(std::vector<int>{1, 2});
    EXPECT_THROW(cuda::encoder_forward(ctx.get(), out16.get(), tokens.get(), wte32.get(), wpe16.get(), 1, 2, 4),
                 std::invalid_argument);
}

}  // namespace
}  // namespace adacc::test
