// A training step (forward, backward, AdamW) and the data loader's next batch make no heap
// allocation, counted by tests/counting_malloc.h: every allocation is seen, including those inside
// Eigen, libgomp and libstdc++. Under AddressSanitizer, which owns malloc itself, the tests are skipped.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <random>
#include <vector>

#include "data/dataloader.h"
#include "src/engine/gpt_model.h"
#include "src/engine/optimizer.h"
#include "src/train/training_step.h"
#include "tests/counting_malloc.h"
#include "tests/test_support.h"

using adacc::test::g_allocations;

namespace adacc {
namespace {

void training_step(GPTModel& model, const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T,
                   int step, int micro_batches) {
    OptimizerOptions opt;
    LrSchedule lr;
    for (int m = 0; m < micro_batches; ++m) {
        model.forward(tokens.data(), targets.data(), B, T,
                      DropoutContext{1, std::uint64_t(step), std::uint64_t(m), true}, 1.0f / (B * T * micro_batches));
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

// The step the trainer and compare take (src/train/training_step.h): shuffled data, two
// micro-batches with dropout, clipping and AdamW.
TEST(NoAllocation, TrainingStep) {
    if (!ADACC_COUNT_ALLOCATIONS) GTEST_SKIP() << "malloc is owned by AddressSanitizer in this build";
    const auto dir = test::scratch_dir("no_alloc_step");
    test::write_random_shard(dir / "train.bin", 4000, 97, 1);
    RunConfig config;
    config.model = *gpt_preset("gpt-micro");
    config.model.dropout = 0.1f;
    config.training.batch_size = 2, config.training.seq_len = 16, config.training.grad_accum = 2;
    config.data.shuffle = true;
    GPTModel model(config.model, 2, 16);
    model.init_weights(3);
    DataLoaderOptions options;
    options.batch_size = 2;
    options.seq_len = 16;
    options.shuffle = true;
    options.vocab_size = static_cast<std::uint32_t>(config.model.vocab_size);
    DataLoader data({dir / "train.bin"}, options);
    TrainingStep step(config, model, data, nullptr);
    step.run(1);  // warm-up: thread pool, first-touch
    const long before = g_allocations.load();
    for (int s = 2; s <= 4; ++s) {
        step.run(s);
        step.after(s);
    }
    EXPECT_EQ(g_allocations.load() - before, 0) << "heap allocations inside TrainingStep::run";
}

// Shards are read with pread into the loader's own buffer, sequentially and shuffled, across
// shard boundaries and an epoch's end.
TEST(NoAllocation, DataLoaderNextBatch) {
    if (!ADACC_COUNT_ALLOCATIONS) GTEST_SKIP() << "malloc is owned by AddressSanitizer in this build";
    const auto dir = test::scratch_dir("no_alloc_loader");
    std::vector<std::uint16_t> tokens(1000);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i % 97);
    write_token_shard(dir / "a.bin", tokens);
    write_token_shard(dir / "b.bin", tokens);
    for (const bool shuffle : {false, true}) {
        DataLoaderOptions options;
        options.batch_size = 4;
        options.seq_len = 16;
        options.shuffle = shuffle;
        options.vocab_size = 97;
        DataLoader loader({dir / "a.bin", dir / "b.bin"}, options);
        std::vector<std::int32_t> inputs(64), targets(64);
        loader.next_batch(inputs, targets);
        const long before = g_allocations.load();
        for (int i = 0; i < 20; ++i) loader.next_batch(inputs, targets);  // 62 windows: one epoch is 15 batches
        EXPECT_EQ(g_allocations.load() - before, 0) << "heap allocations in next_batch, shuffle=" << shuffle;
    }
}

}  // namespace
}  // namespace adacc
