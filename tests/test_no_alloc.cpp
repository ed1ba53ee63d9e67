// A training step (forward, backward, AdamW) makes no heap allocation, counted by
// tests/counting_malloc.h: every allocation is seen, including those inside Eigen, libgomp and
// libstdc++. Under AddressSanitizer, which owns malloc itself, the test is skipped.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <vector>

#include "src/gpt_model.h"
#include "src/optimizer.h"
#include "tests/counting_malloc.h"

using adacc::test::g_allocations;

namespace adacc {
namespace {

void training_step(GPTModel& model, const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T,
                   int step, int micro_batches) {
    OptimizerSection opt;
    LrSection lr;
    for (int m = 0; m < micro_batches; ++m) {
        model.forward(tokens.data(), targets.data(), B, T, DropoutContext{1, std::uint64_t(step), std::uint64_t(m), true},
                      1.0f / (B * T * micro_batches));
        model.backward(tokens.data(), B, T, /*accumulate=*/m > 0);
    }
    adamw_step(model, opt, learning_rate(lr, step, 100), step);
}

void expect_no_allocation(GPTConfig cfg, int B, int T) {
    if (!ADACC_COUNT_ALLOCATIONS) GTEST_SKIP() << "malloc is owned by AddressSanitizer in this build";
    GPTModel model(cfg, B, T);
    model.init_weights(3);
    std::mt19937 gen(1);
    std::vector<int> tokens(B * T), targets(B * T);
    for (auto& t : tokens) t = static_cast<int>(gen() % cfg.vocab_size);
    for (auto& t : targets) t = static_cast<int>(gen() % cfg.vocab_size);
    training_step(model, tokens, targets, B, T, 1, 2);  // warm-up: thread pool, first-touch
    const long before = g_allocations.load();
    for (int step = 2; step <= 4; ++step) training_step(model, tokens, targets, B, T, step, 2);
    EXPECT_EQ(g_allocations.load() - before, 0) << "heap allocations inside training steps";
}

TEST(NoAllocation, CountingHookSeesAllocations) {
    if (!ADACC_COUNT_ALLOCATIONS) GTEST_SKIP() << "malloc is owned by AddressSanitizer in this build";
    const long before = g_allocations.load();
    std::vector<float> v(1000, 1.0f);  // operator new -> malloc
    volatile float sink = v[999];
    (void)sink;
    EXPECT_GE(g_allocations.load() - before, 1);  // the tests below would be vacuous if this failed
}

TEST(NoAllocation, TinyModelWithDropout) {
    GPTConfig cfg = *gpt_preset("gpt-micro");
    cfg.dropout = 0.1f;
    expect_no_allocation(cfg, 2, 16);
}

// Shapes big enough that Eigen's GEMM blocks and packs (C = 256, 4C = 1024, V = 50257).
TEST(NoAllocation, SmallGpt2Shapes) {
    GPTConfig cfg = *gpt_preset("gpt-small-cpu");
    cfg.n_layer = 1;
    cfg.dropout = 0.1f;
    expect_no_allocation(cfg, 4, 64);
}

}  // namespace
}  // namespace adacc
