// The fused classifier on CUDA against its CPU twin (kernels/cpu/classifier.cpp). Not bit-identical:
// the device uses expf and an online (running-max) sum, the CPU its own polynomial exp_approx
// (kernels/vector_math.h, within ~2 ulp of expf) over the max-subtracted row, summed in SIMD lanes.
// bf16 logits: the CPU runs on the same bf16 values as floats; the losses stay fp32 and the
// dlogits are the device's fp32 values rounded once to bf16.
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// Losses: logsumexp - (logit - max) is a few ulp off in each term; the absolute floor is for a
// loss near 0 (a confident target: log of a sum just above 1, whose float spacing is 1.2e-7;
// seen 2.4e-7 off).
constexpr double kLossRel = 1e-5, kLossAbs = 1e-6;
// dlogits: exp(x - max) * dloss / sum carries the exp's few ulp and the sum's; at the target,
// softmax - 1 cancels, so the floor is a few ulp of dloss itself (1e-6 * |dloss| is ~10 ulp).
constexpr double kGradRel = 1e-5, kGradAbsPerDloss = 1e-6;
// bf16 dlogits: rounding the device's fp32 value y moves it by at most 2^-8 |y|; with y within
// the fp32 tolerance of the CPU's, that is 2^-8 on top of the fp32 tolerance doubled.
constexpr double kBf16GradRel = 1.0 / 256 + 2 * kGradRel, kBf16GradAbsPerDloss = 2 * kGradAbsPerDloss;
constexpr float kPadding = 7.0f;  // what the padded columns hold before the kernel runs (exact in bf16)

struct Shape {
    int N, V, Vp;
};

std::vector<float> test_logits(const Shape& s, float spread, const std::vector<int>& targets) {
    std::vector<float> logits = random_floats(static_cast<std::size_t>(s.N) * s.Vp, 31 + s.V, -spread, spread);
    for (int i = 0; i < s.N; ++i)
        for (int j = s.V; j < s.Vp; ++j) logits[static_cast<std::size_t>(i) * s.Vp + j] = kPadding;
    // A row whose target dominates, so its loss is ~0 and its dlogit at the target cancels.
    if (s.N > 2) logits[2 * static_cast<std::size_t>(s.Vp) + targets[2]] = 4.0f * spread;
    return logits;
}

std::vector<int> test_targets(const Shape& s) {
    std::vector<int> targets(s.N);
    for (int i = 0; i < s.N; ++i) targets[i] = i == 0 ? 0 : (i == 1 ? s.V - 1 : (i * 37) % s.V);
    return targets;
}

std::string where(const Shape& s, float dloss) {
    return "N=" + std::to_string(s.N) + " V=" + std::to_string(s.V) + " dloss=" + std::to_string(dloss);
}

void check(const Shape& s, float dloss, float spread) {
    CudaTestContext ctx;
    const std::vector<int> targets = test_targets(s);
    const std::vector<float> logits = test_logits(s, spread, targets);
    DeviceArray<float> d_logits(logits), d_losses(s.N);
    DeviceArray<int> d_targets(targets);
    std::vector<float> want = logits, losses(s.N);
    cpu::fused_classifier(cpu::default_context(), want.data(), losses.data(), targets.data(), s.N, s.V, s.Vp, dloss);
    cuda::fused_classifier(ctx.get(), d_logits.get(), d_losses.get(), d_targets.get(), s.N, s.V, s.Vp, dloss);
    EXPECT_TRUE(all_close(d_losses.download(), losses, kLossRel, kLossAbs)) << where(s, dloss);
    const std::vector<float> got = d_logits.download();
    if (dloss == 0.0f) {
        EXPECT_TRUE(all_close(got, logits, 0.0, 0.0)) << "logits must be untouched, " << where(s, dloss);
        return;
    }
    EXPECT_TRUE(all_close(got, want, kGradRel, kGradAbsPerDloss * std::fabs(dloss))) << where(s, dloss);
    for (int i = 0; i < s.N; ++i)
        for (int j = s.V; j < s.Vp; ++j)
            ASSERT_EQ(got[static_cast<std::size_t>(i) * s.Vp + j], 0.0f)
                << "padding, row " << i << ", " << where(s, dloss);
}


// check() with bf16 logits: the losses at the fp32 tolerance (the same values, fp32 math), the
// dlogits at the bf16 one, the padding exactly 0, and with dloss 0 the logits' bits untouched.
void check_bf16(const Shape& s, float dloss, float spread) {
    CudaTestContext ctx;
    const std::vector<int> targets = test_targets(s);
    const std::vector<bf16> logits = device_values<bf16>(test_logits(s, spread, targets));
    DeviceArray<bf16> d_logits(logits);
    DeviceArray<float> d_losses(s.N);
    DeviceArray<int> d_targets(targets);
    std::vector<float> want = host_values(logits), losses(s.N);
    cpu::fused_classifier(cpu::default_context(), want.data(), losses.data(), targets.data(), s.N, s.V, s.Vp, dloss);
    cuda::fused_classifier(ctx.get(), d_logits.get(), d_losses.get(), d_targets.get(), s.N, s.V, s.Vp, dloss);
    EXPECT_TRUE(all_close(d_losses.download(), losses, kLossRel, kLossAbs)) << "bf16 " << where(s, dloss);
    if (dloss == 0.0f) {
        EXPECT_TRUE(all_equal_bytes(d_logits.download(), logits))
            << "bf16 logits must be untouched, " << where(s, dloss);
        return;
    }
    const std::vector<float> got = host_values(d_logits.download());
    EXPECT_TRUE(all_close(got, want, kBf16GradRel, kBf16GradAbsPerDloss * std::fabs(dloss)))
        << "bf16 " << where(s, dloss);
    for (int i = 0; i < s.N; ++i)
        for (int j = s.V; j < s.Vp; ++j)
            ASSERT_EQ(got[static_cast<std::size_t>(i) * s.Vp + j], 0.0f)
                << "bf16 padding, row " << i << ", " << where(s, dloss);
}

TEST(CudaClassifier, LossesOnlyWhenDlossIsZero) {
    ADACC_REQUIRE_CUDA_DEVICE();
    check(Shape{1, 101, 128}, 0.0f, 4.0f);
    check(Shape{5, 101, 128}, 0.0f, 4.0f);
}

TEST(CudaClassifier, LossesAndDlogitsMatchTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    check(Shape{1, 101, 128}, 1.0f, 4.0f);
    check(Shape{5, 101, 128}, 1.0f / 5, 4.0f);
    check(Shape{3, 101, 101}, 0.5f, 8.0f);  // no padding
    // Wider than the block (512 threads): several columns per thread, the running max moving.
    check(Shape{4, 2051, 2112}, 0.25f, 8.0f);
}

TEST(CudaClassifier, Bf16LossesAndDlogitsMatchTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    check_bf16(Shape{1, 101, 128}, 0.0f, 4.0f);
    check_bf16(Shape{5, 101, 128}, 0.0f, 4.0f);
    check_bf16(Shape{1, 101, 128}, 1.0f, 4.0f);
    check_bf16(Shape{5, 101, 128}, 1.0f / 5, 4.0f);
    check_bf16(Shape{3, 101, 101}, 0.5f, 8.0f);
    check_bf16(Shape{4, 2051, 2112}, 0.25f, 8.0f);
}

}  // namespace
}  // namespace adacc::test
