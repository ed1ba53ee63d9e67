// Bad input through the real command line: each case runs `adacc`, expects exit status 2 (a
// user error, not a crash) and a message that names the problem and the fix.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "data/token_shard.h"
#include "src/config/config.h"
#include "src/engine/memory_report.h"
#include "src/io/gradients_file.h"
#include "src/train/gradient_fidelity.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

using Result = test::ProcessResult;
using test::run_adacc;

class Cli : public ::testing::Test {
protected:
    void SetUp() override {
        dir = test::scratch_dir("cli");
        test::write_random_shard(dir / "train.bin", 5000, 97, 1);
    }
    // A valid tiny config; `model_extra` adds [model] keys, `train_path` replaces data.train.
    std::string config(const std::string& model_extra = "", const std::string& train_path = "") {
        const auto file = dir / "run.toml";
        std::ofstream(file) << "[model]\nn_layer = 1\nn_embd = 16\nn_head = 2\nvocab_size = 97\nmax_seq_len = 16\n"
                            << model_extra << "[training]\nbatch_size = 2\nseq_len = 8\nsteps = 2\n[data]\ntrain = \""
                            << (train_path.empty() ? (dir / "train.bin").string() : train_path) << "\"\n"
                            << "[logging]\nrun_dir = \"" << (dir / "run").string() << "\"\n";
        return file.string();
    }
    void expect_user_error(const std::string& args, const std::vector<std::string>& fragments) {
        const Result r = run_adacc(args);
        EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
        for (const auto& f : fragments)
            EXPECT_NE(r.output.find(f), std::string::npos) << "missing '" << f << "' in:\n" << r.output;
    }
    std::filesystem::path dir;
};

TEST_F(Cli, ValidConfigTrains) {
    const Result r = run_adacc("train --config " + config());
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("step      2/2"), std::string::npos) << r.output;
}

// Without a GPU (or in a build without CUDA) --device cuda is a user error naming the reason and
// the way back to the CPU, planned modes too (they plan and train on the GPU like the others).
// Skipped where the CUDA backend finds a GPU.
TEST_F(Cli, DeviceCudaWithoutAGpuSaysWhyAndHowToRunOnTheCpu) {
    const Result probe = run_adacc("train --config " + config() + " --device cuda");
    if (probe.status == 0) GTEST_SKIP() << "this machine has a usable GPU";
    expect_user_error("train --config " + config() + " --device cuda", {"--device cuda:", "--device cpu"});
    expect_user_error("train --config " + config() + " --set training.device=gpu", {"training.device", "cpu, cuda"});
    expect_user_error("train --config " + config() + " --device cuda --set memory.mode=adacc --memory-budget 1GiB",
                      {"--device cuda:", "--device cpu"});
}

// bf16 runs on CUDA only: on the CPU it is refused before anything runs, naming the fix.
TEST_F(Cli, Bf16OnTheCpuSaysItRunsOnCudaOnly) {
    for (const std::string command : {"train", "memory"})
        expect_user_error(command + " --config " + config() + " --dtype bf16",
                          {"model.dtype = \"bf16\" runs on CUDA only", "--device cuda"});
    expect_user_error("train --config " + config() + " --set model.dtype=half", {"model.dtype", "auto, fp32, bf16"});
}

// Planned modes in `adacc memory` plan for the budget: without one they are refused, naming the
// option; with one their row has the plan's arenas and the planner's largest batch. Under full
// recomputation's total (no plan stores less) the row says that no plan fits the batch.
TEST_F(Cli, MemoryShowsPlannedModesForABudget) {
    expect_user_error("memory --config " + config() + " --modes adacc",
                      {"plans for a memory budget", "--memory-budget"});
    const Result r =
        run_adacc("memory --config " + config() + " --modes none,adacc,recompute-opt --memory-budget 2MiB");
    EXPECT_EQ(r.status, 0) << r.output;
    for (const char* row : {"\nnone ", "\nadacc ", "\nrecompute-opt "})
        EXPECT_NE(r.output.find(row), std::string::npos) << "no row '" << row << "' in:\n" << r.output;
    EXPECT_NE(r.output.find("max_batch"), std::string::npos) << r.output;

    GPTConfig model;
    model.n_layer = 1, model.n_embd = 16, model.n_head = 2, model.vocab_size = 97, model.max_seq_len = 16;
    const std::uint64_t under_full = memory_for_mode(model, 2, 8, MemoryMode::full).total() - 1;
    const Result tight =
        run_adacc("memory --config " + config() + " --modes adacc --memory-budget " + std::to_string(under_full));
    EXPECT_EQ(tight.status, 0) << tight.output;
    const std::size_t row = tight.output.find("\nadacc ");
    ASSERT_NE(row, std::string::npos) << tight.output;
    const std::string line = tight.output.substr(row + 1, tight.output.find('\n', row + 1) - row - 1);
    EXPECT_NE(line.find(" no plan fits batch 2 within the budget "), std::string::npos) << line;
    EXPECT_EQ(line.substr(line.find_last_of(' ') + 1), "1")
        << "the largest planned batch: full recomputation's plan fits batch 1, no plan batch 2: " << line;
}

// --modes names memory modes (CLI11 lists them for one it does not know) and each at most once, as
// compare's --batch does its batches: a repeat would be run or shown twice.
TEST_F(Cli, ModesAndBatchesAreEachListedOnce) {
    expect_user_error("compare --config " + config() + " --modes none,none", {"--modes lists none twice"});
    expect_user_error("compare --config " + config() + " --batch 2,3,2", {"--batch lists 2 twice"});
    expect_user_error("memory --config " + config() + " --modes full,full", {"--modes lists full twice"});
    expect_user_error("memory --config " + config() + " --modes full,foo",
                      {"error: --modes: foo not in {none,full,selective,quant,adacc,recompute-opt}"});
}

// A command line CLI11 cannot parse reads as every other error ("error: ..."), naming the help that
// lists the options; a word that is no command is named, with the command it may be a typo of.
TEST_F(Cli, ParseErrorsSayErrorAndWhereTheOptionsAre) {
    expect_user_error(
        "train --config " + config() + " --bogus",
        {"error: The following argument was not expected: --bogus; `adacc train --help` lists the options"});
    expect_user_error("sample --vocab x", {"error: ", "--prompt", "`adacc sample --help` lists the options"});
    expect_user_error("tran --config " + config(),
                      {"error: tran is not a command of adacc (did you mean train?); `adacc --help` lists them"});
    expect_user_error("frobnicate", {"error: frobnicate is not a command of adacc; `adacc --help` lists them"});
    expect_user_error("--bogus", {"error: --bogus is not an option of adacc"});
    expect_user_error("", {"error: no command given; `adacc --help` lists them"});
    // A program of the same command line without commands (the benchmarks) names itself.
    const auto bench = std::filesystem::path(test::adacc_binary()).parent_path() / "bench_cpu";
    if (!std::filesystem::exists(bench)) return;  // the sanitized build has no benchmarks
    const Result r = test::run_shell(bench.string() + " --steps 0");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("error: --steps: Value 0 not in range"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("; `bench_cpu --help` lists the options"), std::string::npos) << r.output;
}

TEST_F(Cli, MalformedToml) {
    std::ofstream(dir / "bad.toml") << "[model\nn_layer = 1\n";
    expect_user_error("train --config " + (dir / "bad.toml").string(), {"bad.toml:1:", "malformed TOML"});
}

TEST_F(Cli, UnknownKeySuggestsClosest) {
    expect_user_error("train --config " + config() + " --set training.batchsize=4",
                      {"training.batchsize", "training.batch_size"});
}

TEST_F(Cli, WrongType) {
    expect_user_error("train --config " + config("dropout = \"high\"\n"), {"model.dropout", "number"});
}

TEST_F(Cli, OutOfRange) {
    expect_user_error("train --config " + config() + " --set training.seq_len=64", {"training.seq_len", "max_seq_len"});
}

// --memory-budget goes through the config's validation in every command that takes it.
TEST_F(Cli, BadMemoryBudget) {
    for (const char* command : {"train", "memory", "compare", "plan"})
        expect_user_error(std::string(command) + " --config " + config() + " --memory-budget lots",
                          {"memory.budget = \"lots\"", "must be a size of at least one byte such as"});
}

TEST_F(Cli, MissingShard) {
    expect_user_error("train --config " + config("", (dir / "nothing_*.bin").string()), {"nothing_", "adacc prepare"});
}

// Training, compare and plan open data.train the same way, with the same message when it is unset.
TEST_F(Cli, UnsetTrainingData) {
    expect_user_error("train --config " + config() + " --set data.train=",
                      {"data.train is not set", "adacc prepare", "--set data.train=VALUE"});
    expect_user_error("compare --config " + config() + " --set data.train=",
                      {"data.train is not set", "adacc prepare", "--set data.train=VALUE"});
}

// The engine names the setting at fault; the command line adds how this command sets it: its own
// flag where it has one (plan --profile), else --set (train has no --profile).
TEST_F(Cli, ASettingErrorGetsTheCommandsWayToSetIt) {
    const std::string missing = (dir / "no_profile.json").string();
    expect_user_error("plan --config " + config() + " --memory-budget 64MiB --profile " + missing,
                      {"cannot read profile", "memory.profile", "set it with --profile FILE"});
    expect_user_error(
        "train --config " + config() + " --set memory.mode=adacc --memory-budget 64MiB --set memory.profile=" + missing,
        {"cannot read profile", "--set memory.profile=VALUE"});
}

// `adacc plan` says it profiles on random tokens when data.train cannot be read, and says nothing
// of tokens when a saved profile means nothing is profiled.
TEST_F(Cli, PlanSaysItProfilesOnRandomTokensOnlyWhenItProfiles) {
    const std::string unreadable = config("", (dir / "nothing_*.bin").string());
    const std::string profile = (dir / "profile.json").string();
    const Result profiled =
        run_adacc("plan --config " + unreadable + " --memory-budget 64MiB --save-profile " + profile);
    ASSERT_EQ(profiled.status, 0) << profiled.output;
    EXPECT_NE(profiled.output.find("profiling on random tokens (no token shard files match"), std::string::npos)
        << profiled.output;
    const Result reused = run_adacc("plan --config " + unreadable + " --memory-budget 64MiB --profile " + profile);
    ASSERT_EQ(reused.status, 0) << reused.output;
    EXPECT_EQ(reused.output.find("profiling"), std::string::npos) << reused.output;
    EXPECT_NE(reused.output.find("status optimal"), std::string::npos) << reused.output;
}

// `adacc config` resolves the default attention the same way with and without a config file (a
// CUDA run's is cudnn where cuDNN loads, else materialized: whichever, the same in both).
TEST_F(Cli, ConfigResolvesTheDefaultAttentionWithOrWithoutAFile) {
    auto attention_line = [](const std::string& output) {
        const std::size_t at = output.find("model.attention ");
        return at == std::string::npos ? std::string("(none)") : output.substr(at, output.find('\n', at) - at);
    };
    const std::string cuda = " --set training.device=cuda --set model.dtype=bf16";
    const Result from_file = run_adacc("config --config " + config() + cuda);
    const Result from_sets = run_adacc("config" + cuda);
    ASSERT_EQ(from_file.status, 0) << from_file.output;
    ASSERT_EQ(from_sets.status, 0) << from_sets.output;
    EXPECT_EQ(attention_line(from_sets.output), attention_line(from_file.output));
}

// A count option (--batch, --world-size) refuses what is not a whole number >= 1, saying so.
TEST_F(Cli, CountOptionsSayTheyWantAWholeNumberOfAtLeastOne) {
    for (const char* bad : {"0", "-2", "x", "2.5"}) {
        const std::string value(bad);
        const Result r = run_adacc("compare --config " + config() + " --batch 2," + value);
        EXPECT_EQ(r.status, 2) << r.output;
        EXPECT_NE(r.output.find("--batch: '" + value + "' is not a whole number >= 1"), std::string::npos) << r.output;
        EXPECT_EQ(r.output.find("179769"), std::string::npos) << r.output;  // no DBL_MAX in the message
    }
    const Result r = run_adacc("memory --config " + config() + " --world-size 0");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--world-size: '0' is not a whole number >= 1"), std::string::npos) << r.output;
}

TEST_F(Cli, ShardWithWrongMagic) {
    std::ofstream(dir / "junk.bin") << std::string(2000, 'x');
    expect_user_error("train --config " + config("", (dir / "junk.bin").string()), {"junk.bin", "magic"});
}

TEST_F(Cli, TruncatedShard) {
    std::vector<std::uint16_t> tokens(3000, 5);
    write_token_shard(dir / "cut.bin", tokens);
    std::filesystem::resize_file(dir / "cut.bin", 1024 + 1000);
    expect_user_error("train --config " + config("", (dir / "cut.bin").string()), {"cut.bin", "3000"});
}

TEST_F(Cli, TokenIdsBeyondVocab) {
    std::vector<std::uint16_t> tokens(3000, 5);
    tokens[1234] = 500;  // the model's vocab is 97
    write_token_shard(dir / "big_ids.bin", tokens);
    expect_user_error("train --config " + config("", (dir / "big_ids.bin").string()), {"big_ids.bin", "500", "vocab"});
}

TEST_F(Cli, ResumeWithADifferentModelShape) {
    ASSERT_EQ(run_adacc("train --config " + config()).status, 0);
    expect_user_error("train --resume " + (dir / "run").string() + " --set model.n_embd=32 --set training.steps=4",
                      {"different model"});
}

TEST_F(Cli, ResumeWithoutCheckpoint) {
    expect_user_error("train --resume " + (dir / "empty").string(), {"no complete checkpoint", "--config"});
}

TEST_F(Cli, MissingVocab) {
    expect_user_error("tokenize --vocab " + (dir / "no_vocab").string() + " < /dev/null", {"encoder.json"});
}

TEST_F(Cli, SampleFromModelWithForeignVocab) {
    ASSERT_EQ(run_adacc("train --config " + config()).status, 0);
    const auto vocab = test::shared_data_dir() / "gpt2_tokenizer";
    if (!std::filesystem::exists(vocab)) GTEST_SKIP() << "../shared/data/gpt2_tokenizer not present";
    expect_user_error("sample --checkpoint " + (dir / "run").string() + " --vocab " + vocab.string() + " --prompt hi",
                      {"vocab_size", "97"});
}

// `adacc gradients` writes what first_batch_gradients computes (the fidelity probe's batch, loss
// and gradients), laid out as README's Formats says: the peer (scripts/torch_reference.py) reads
// it by that description. Both run the CPU kernels on the same machine in the same order, so the
// floats are equal, not close.
TEST_F(Cli, GradientsFileHoldsTheFirstBatchItsLossAndGradients) {
    const std::string cfg = config();
    const auto file = dir / "grads.bin";
    const Result r = run_adacc("gradients --config " + cfg + " --output " + file.string());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("keep-all, dropout off"), std::string::npos) << r.output;
    const RunConfig c = load_config(cfg);
    const int B = c.training.batch_size, T = c.training.seq_len;
    const FirstBatchGradients expected =
        first_batch_gradients(c, {}, plan_for_mode(c.model, B, T, MemoryMode::none), {});

    const std::string bytes = test::read_bytes(file);
    const std::size_t tokens = static_cast<std::size_t>(B) * T, params = expected.gradients.size();
    ASSERT_EQ(bytes.size(), 256 * 4 + 2 * tokens * 4 + params * 4);
    std::array<std::int32_t, 256> header;
    std::memcpy(header.data(), bytes.data(), sizeof(header));
    const std::array<std::int32_t, 12> want = {
        kGradientsFileMagic, kGradientsFileVersion, B, T, 16, 97, 1, 2, 16, c.model.padded_vocab_size(), 0, 0};
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(header[i], want[i]) << "header word " << i;
    float loss;
    std::memcpy(&loss, &header[12], sizeof(float));
    EXPECT_EQ(loss, expected.loss);
    EXPECT_GT(loss, 0.0f);
    for (std::size_t i = 13; i < header.size(); ++i) EXPECT_EQ(header[i], 0) << "header word " << i;
    std::vector<std::int32_t> inputs(tokens), targets(tokens);
    std::vector<float> grads(params);
    std::memcpy(inputs.data(), bytes.data() + 1024, tokens * 4);
    std::memcpy(targets.data(), bytes.data() + 1024 + tokens * 4, tokens * 4);
    std::memcpy(grads.data(), bytes.data() + 1024 + 2 * tokens * 4, params * 4);
    EXPECT_EQ(std::vector<int>(inputs.begin(), inputs.end()), expected.inputs);
    EXPECT_EQ(std::vector<int>(targets.begin(), targets.end()), expected.targets);
    EXPECT_EQ(grads, expected.gradients);
    // Sequential data: the targets are the inputs shifted by one token.
    for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(targets[t], inputs[t + 1]);
}

TEST_F(Cli, GradientsAtWeightsOfAnotherShapeSaysWhichFieldsDiffer) {
    ASSERT_EQ(run_adacc("train --config " + config()).status, 0);
    expect_user_error("gradients --config " + config() + " --set model.n_embd=32 --init-from " +
                          (dir / "run").string() + " --output " + (dir / "g.bin").string(),
                      {"n_embd"});
    EXPECT_FALSE(std::filesystem::exists(dir / "g.bin"));
}

}  // namespace
}  // namespace adacc
