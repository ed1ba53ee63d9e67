// LayerNorm on CUDA against its CPU twin (kernels/cpu/layernorm.cpp). The formulas are the same,
// the summation orders are not (a warp's butterfly vs the CPU's SIMD lanes; dweight / dbias summed
// per row group then over groups vs row by row), so the results agree to fp32 rounding, not bits.
// bf16 (out, inp, dout, dinp and the weight and bias bf16; mean, rstd and the parameters'
// gradients fp32) is compared with the CPU run on the same bf16 values as floats.
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// Row statistics and outputs: a few ulp of relative error. The absolute floor covers elements
// near zero (out = norm * weight + bias cancels; the mean of an offset row is ~0.5 but of
// differences ~1e-7 absolute), far below any value that matters.
constexpr double kRel = 1e-5, kAbs = 1e-6;
// dweight / dbias sum N rows in a different order: the error grows with the partial sums, whose
// size is ~sqrt(N) here, so the floor is a few ulp of those (N <= 300).
constexpr double kParamAbs = 1e-5;

// A bf16 output is the device's fp32 result y rounded once, which moves it by at most half a
// bf16 ulp, 2^-8 of |y|. With y within the fp32 tolerance of the CPU's result w, the bf16 output
// is within 2^-8 |w| + (1 + 2^-8) (kRel |w| + kAbs) of w: the fp32 tolerance doubled, plus 2^-8.
constexpr double kBf16Rounding = 1.0 / 256;
constexpr double kBf16Rel = kBf16Rounding + 2 * kRel, kBf16Abs = 2 * kAbs;

struct Shape {
    int N, C;
};

struct Inputs {
    std::vector<float> x, weight, bias;
    Inputs(const Shape& s, std::uint64_t seed)
        : x(random_floats(static_cast<std::size_t>(s.N) * s.C, seed, -1.0f, 2.0f)),  // mean ~0.5, not 0
          weight(random_floats(s.C, seed + 1, 0.5f, 1.5f)),
          bias(random_floats(s.C, seed + 2, -0.5f, 0.5f)) {}
};

// Inputs whose values bf16 holds exactly: the bf16 kernels read them as the CPU reads the floats.
Inputs bf16_inputs(const Shape& s, std::uint64_t seed) {
    Inputs in(s, seed);
    for (std::vector<float>* v : {&in.x, &in.weight, &in.bias}) *v = representable<bf16>(*v);
    return in;
}

std::string shape_name(const Shape& s) { return "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C); }

TEST(CudaLayernorm, ForwardMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    // One row, odd widths, rows over several blocks (8 per block), C not a multiple of 32.
    for (const Shape& s : {Shape{1, 40}, Shape{14, 72}, Shape{37, 300}, Shape{3, 768}}) {
        const Inputs in(s, 100 + s.C);
        std::vector<float> out(in.x.size()), mean(s.N), rstd(s.N);
        cpu::layernorm_forward(cpu::default_context(), out.data(), mean.data(), rstd.data(), in.x.data(),
                               in.weight.data(), in.bias.data(), s.N, s.C);
        DeviceArray<float> d_x(in.x), d_w(in.weight), d_b(in.bias), d_out(in.x.size()), d_mean(s.N), d_rstd(s.N);
        cuda::layernorm_forward(ctx.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(),
                                s.N, s.C);
        EXPECT_TRUE(all_close(d_out.download(), out, kRel, kAbs)) << "out N=" << s.N << " C=" << s.C;
        EXPECT_TRUE(all_close(d_mean.download(), mean, kRel, kAbs)) << "mean N=" << s.N << " C=" << s.C;
        EXPECT_TRUE(all_close(d_rstd.download(), rstd, kRel, 0.0)) << "rstd N=" << s.N << " C=" << s.C;
    }
}

// Backward from the CPU's saved statistics (so both start from the same mean and rstd), with
// nonzero dinp, dweight, dbias: all three accumulate. `scratch_bytes` (0: the context's own)
// shrinks the reduction scratch to force fewer, larger row groups.
void check_backward(const Shape& s, std::size_t scratch_bytes = 0) {
    CudaTestContext ctx;
    KernelContext kctx = ctx.get();
    if (scratch_bytes) kctx.reduction_scratch_bytes = scratch_bytes;
    const Inputs in(s, 200 + s.C);
    const std::size_t n = in.x.size();
    std::vector<float> out(n), mean(s.N), rstd(s.N);
    cpu::layernorm_forward(cpu::default_context(), out.data(), mean.data(), rstd.data(), in.x.data(), in.weight.data(),
                           in.bias.data(), s.N, s.C);
    const std::vector<float> dout = random_floats(n, 7);
    std::vector<float> dinp = random_floats(n, 8), dweight = random_floats(s.C, 9), dbias = random_floats(s.C, 10);
    DeviceArray<float> d_x(in.x), d_w(in.weight), d_mean(mean), d_rstd(rstd), d_dout(dout), d_dinp(dinp),
        d_dweight(dweight), d_dbias(dbias);
    cpu::layernorm_backward(cpu::default_context(), dinp.data(), dweight.data(), dbias.data(), dout.data(),
                            in.x.data(), in.weight.data(), mean.data(), rstd.data(), s.N, s.C);
    cuda::layernorm_backward(kctx, d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(), d_x.get(), d_w.get(),
                             d_mean.get(), d_rstd.get(), s.N, s.C);
    EXPECT_TRUE(all_close(d_dinp.download(), dinp, kRel, kAbs)) << "dinp N=" << s.N << " C=" << s.C;
    EXPECT_TRUE(all_close(d_dweight.download(), dweight, kRel, kParamAbs)) << "dweight N=" << s.N << " C=" << s.C;
    EXPECT_TRUE(all_close(d_dbias.download(), dbias, kRel, kParamAbs)) << "dbias N=" << s.N << " C=" << s.C;
}

TEST(CudaLayernorm, BackwardMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    // One row; odd widths; 300 rows = 10 row groups of 32 (the last short) over 4-warp blocks.
    for (const Shape& s : {Shape{1, 40}, Shape{14, 72}, Shape{300, 100}}) check_backward(s);
}

TEST(CudaLayernorm, BackwardWithFewerWarpsAndFewerGroups) {
    ADACC_REQUIRE_CUDA_DEVICE();
    check_backward(Shape{5, 2000});  // 16 KB of shared memory per warp: 3 warps per block
    check_backward(Shape{3, 6000});  // 48000 bytes: one warp
    // Scratch for 3 groups of 2 * 40 floats: 300 rows become 3 groups of 100.
    check_backward(Shape{300, 40}, 3 * 2 * 40 * sizeof(float));
}

TEST(CudaLayernorm, BackwardIsDeterministic) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const Shape s{70, 72};
    const Inputs in(s, 300);
    const std::size_t n = in.x.size();
    std::vector<float> out(n), mean(s.N), rstd(s.N);
    cpu::layernorm_forward(cpu::default_context(), out.data(), mean.data(), rstd.data(), in.x.data(), in.weight.data(),
                           in.bias.data(), s.N, s.C);
    DeviceArray<float> d_x(in.x), d_w(in.weight), d_mean(mean), d_rstd(rstd), d_dout(random_floats(n, 3));
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

TEST(CudaLayernorm, Bf16ForwardMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : {Shape{1, 40}, Shape{14, 72}, Shape{37, 300}, Shape{3, 768}}) {
        const Inputs in = bf16_inputs(s, 100 + s.C);
        std::vector<float> out(in.x.size()), mean(s.N), rstd(s.N);
        cpu::layernorm_forward(cpu::default_context(), out.data(), mean.data(), rstd.data(), in.x.data(),
                               in.weight.data(), in.bias.data(), s.N, s.C);
        DeviceArray<bf16> d_x(device_values<bf16>(in.x)), d_out(in.x.size()), d_w(device_values<bf16>(in.weight)),
            d_b(device_values<bf16>(in.bias));
        DeviceArray<float> d_mean(s.N), d_rstd(s.N);
        cuda::layernorm_forward(ctx.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_x.get(), d_w.get(), d_b.get(),
                                s.N, s.C);
        EXPECT_TRUE(all_close(host_values(d_out.download()), out, kBf16Rel, kBf16Abs)) << "out " << shape_name(s);
        // The statistics stay fp32, computed from the same values as the CPU's: the fp32 tolerance.
        EXPECT_TRUE(all_close(d_mean.download(), mean, kRel, kAbs)) << "mean " << shape_name(s);
        EXPECT_TRUE(all_close(d_rstd.download(), rstd, kRel, 0.0)) << "rstd " << shape_name(s);
    }
}

// check_backward in bf16: x, weight, dout and the accumulated dinp bf16 (the CPU adds into dinp's
// bf16 values as floats); dweight and dbias fp32, at the fp32 tolerance.
void check_backward_bf16(const Shape& s, std::size_t scratch_bytes = 0) {
    CudaTestContext ctx;
    KernelContext kctx = ctx.get();
    if (scratch_bytes) kctx.reduction_scratch_bytes = scratch_bytes;
    const Inputs in = bf16_inputs(s, 200 + s.C);
    const std::size_t n = in.x.size();
    std::vector<float> out(n), mean(s.N), rstd(s.N);
    cpu::layernorm_forward(cpu::default_context(), out.data(), mean.data(), rstd.data(), in.x.data(), in.weight.data(),
                           in.bias.data(), s.N, s.C);
    const std::vector<float> dout = representable<bf16>(random_floats(n, 7));
    std::vector<float> dinp = representable<bf16>(random_floats(n, 8)), dweight = random_floats(s.C, 9),
                       dbias = random_floats(s.C, 10);
    DeviceArray<bf16> d_x(device_values<bf16>(in.x)), d_dout(device_values<bf16>(dout)), d_dinp(device_values<bf16>(dinp)),
        d_w(device_values<bf16>(in.weight));
    DeviceArray<float> d_mean(mean), d_rstd(rstd), d_dweight(dweight), d_dbias(dbias);
    cpu::layernorm_backward(cpu::default_context(), dinp.data(), dweight.data(), dbias.data(), dout.data(),
                            in.x.data(), in.weight.data(), mean.data(), rstd.data(), s.N, s.C);
    cuda::layernorm_backward(kctx, d_dinp.get(), d_dweight.get(), d_dbias.get(), d_dout.get(), d_x.get(), d_w.get(),
                             d_mean.get(), d_rstd.get(), s.N, s.C);
    EXPECT_TRUE(all_close(host_values(d_dinp.download()), dinp, kBf16Rel, kBf16Abs)) << "dinp " << shape_name(s);
    EXPECT_TRUE(all_close(d_dweight.download(), dweight, kRel, kParamAbs)) << "dweight " << shape_name(s);
    EXPECT_TRUE(all_close(d_dbias.download(), dbias, kRel, kParamAbs)) << "dbias " << shape_name(s);
}

TEST(CudaLayernorm, Bf16BackwardMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    // One row; odd widths; 10 row groups; 3 warps per block; 3 groups of 100 rows.
    for (const Shape& s : {Shape{1, 40}, Shape{14, 72}, Shape{300, 100}, Shape{5, 2000}}) check_backward_bf16(s);
    check_backward_bf16(Shape{300, 40}, 3 * 2 * 40 * sizeof(float));
}

TEST(CudaLayernorm, ActivationsOfDifferentDtypesAreRefused) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const Shape s{2, 40};
    const std::size_t n = static_cast<std::size_t>(s.N) * s.C;
    DeviceArray<bf16> b16(n);
    DeviceArray<float> f32(n), w(s.C), stats(s.N);
    EXPECT_THROW(cuda::layernorm_forward(ctx.get(), b16.get(), stats.get(), stats.get(), f32.get(), w.get(), w.get(),
                                         s.N, s.C),
                 std::invalid_argument);
    EXPECT_THROW(cuda::layernorm_backward(ctx.get(), b16.get(), w.get(), w.get(), b16.get(), f32.get(), w.get(),
                                          stats.get(), stats.get(), s.N, s.C),
                 std::invalid_argument);
    // The parameters must be of the activations' type: fp32 weights beside bf16 activations are refused.
    DeviceArray<bf16> w16(s.C), other16(n);
    EXPECT_THROW(cuda::layernorm_forward(ctx.get(), b16.get(), stats.get(), stats.get(), other16.get(), w.get(),
                                         w16.get(), s.N, s.C),
                 std::invalid_argument);
    EXPECT_THROW(cuda::layernorm_backward(ctx.get(), b16.get(), w.get(), w.get(), other16.get(), other16.get(),
                                          w.get(), stats.get(), stats.get(), s.N, s.C),
                 std::invalid_argument);
}

}  // namespace
}  // namespace adacc::test
