// `adacc compare` takes its steps through the trainer's TrainingStep: with gradient accumulation,
// shuffled data and dropout, the loss compare reports after N steps is bit for bit the loss
// training logs at step N, in a fixed mode and in a planned one.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "data/token_shard.h"
#include "src/train/compare.h"
#include "src/config/config.h"
#include "src/engine/memory_report.h"
#include "src/adacc/profiler.h"
#include "src/train/trainer.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

RunConfig small_run(const std::filesystem::path& dir) {
    std::mt19937 gen(3);
    std::vector<std::uint16_t> tokens(20000);
    for (auto& t : tokens) t = static_cast<std::uint16_t>(gen() % 97);
    write_token_shard(dir / "train.bin", tokens);
    RunConfig config;
    config.model.n_layer = 2, config.model.n_embd = 32, config.model.n_head = 2, config.model.vocab_size = 97;
    config.model.max_seq_len = 16, config.model.dropout = 0.1f;
    config.training.batch_size = 2, config.training.seq_len = 16, config.training.steps = 4;
    config.training.grad_accum = 2;
    config.optimizer.grad_clip = 0.05f;  // small enough that clipping acts
    config.lr.warmup_steps = 2;
    config.data.train = (dir / "train.bin").string();
    config.data.shuffle = true;
    config.logging.print_every = 100;
    validate_config(config);
    return config;
}

double last_training_loss(const std::filesystem::path& run_dir) {
    std::ifstream in(run_dir / "metrics.jsonl");
    double loss = 0;
    for (std::string line; std::getline(in, line);) {
        const auto record = nlohmann::json::parse(line);
        if (record.contains("loss")) loss = record["loss"].get<double>();
    }
    return loss;
}

void expect_compare_matches_training(RunConfig config, MemoryMode mode, std::uint64_t budget,
                                     const std::filesystem::path& dir) {
    config.memory.mode = memory_mode_name(mode);
    if (budget) config.memory.budget = std::to_string(budget);
    config.logging.run_dir = (dir / memory_mode_name(mode)).string();
    Trainer trainer(config, std::nullopt);
    trainer.run();

    CompareOptions options;
    options.modes = {mode};
    options.batches = {config.training.batch_size};
    options.steps = config.training.steps;
    options.budget = budget;
    const auto rows = run_comparison(config, options);
    ASSERT_EQ(rows.size(), 1u);
    ASSERT_TRUE(rows[0].ran) << memory_mode_name(mode);
    EXPECT_EQ(rows[0].loss, last_training_loss(config.logging.run_dir)) << memory_mode_name(mode);
}

TEST(Compare, StepsAreTrainingSteps) {
    const auto dir = test::scratch_dir("compare");
    const RunConfig config = small_run(dir);
    expect_compare_matches_training(config, MemoryMode::quant, 0, dir);
    // A budget between full's and none's totals, profiled from a file so both plan the same.
    const int B = config.training.batch_size, T = config.training.seq_len;
    const std::uint64_t full = memory_for_mode(config.model, B, T, MemoryMode::full).total();
    const std::uint64_t none = memory_for_mode(config.model, B, T, MemoryMode::none).total();
    RunConfig planned = config;
    std::vector<int> tokens(static_cast<std::size_t>(B) * T, 1);
    profile_block(config.model, B, B, T, tokens, nullptr, 1, {}).save(dir / "profile.json");
    planned.memory.profile = (dir / "profile.json").string();
    expect_compare_matches_training(planned, MemoryMode::adacc, (full + none) / 2, dir);
}

}  // namespace
}  // namespace adacc
