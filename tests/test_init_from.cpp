// Starting from published weights, through the real command line: `export` writes llm.c's fp32
// model file bit-exactly from a checkpoint; `train --init-from` starts a new run from an llm.c
// file (fp32 or bf16) or an adacc run folder with exactly those weights, a fresh optimizer and
// the data from the start (its first logged loss is the loss of those weights on the first
// batch, computed here independently); `sample --llmc-model` generates what --checkpoint does;
// bad input is exit status 2 with a message naming the problem and the fix.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/dataloader.h"
#include "data/token_shard.h"
#include "models/gpt_params.h"
#include "src/config/config.h"
#include "src/engine/gpt_model.h"
#include "src/io/checkpoint_folder.h"
#include "src/io/llmc_model_io.h"
#include "src/train/training_state.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

namespace fs = std::filesystem;

using Result = test::ProcessResult;
using test::run_adacc;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The metrics.jsonl step records (validation and event lines have no "loss").
std::vector<nlohmann::json> step_records(const fs::path& run_dir) {
    std::ifstream in(run_dir / "metrics.jsonl");
    std::vector<nlohmann::json> records;
    for (std::string line; std::getline(in, line);) {
        auto record = nlohmann::json::parse(line);
        if (record.contains("loss")) records.push_back(std::move(record));
    }
    return records;
}

std::vector<float> checkpoint_params(const fs::path& run_or_file, const GPTConfig& shape) {
    GPTModel model = GPTModel::for_inference(shape, 1, 1);
    load_model_weights(*open_checkpoint(run_or_file), model);
    return {model.params(), model.params() + model.num_params()};
}

std::vector<float> llmc_params(const fs::path& file, const GPTConfig& shape) {
    std::vector<float> params(ParameterLayout(shape).total());
    load_llmc_model(file, shape, params.data());
    return params;
}

// The loss of `params` on the first training batch, as the trainer's step 1 computes it: the data
// loader built from the config's shards, seed and shuffle setting; the same forward (dropout
// context of step 1, micro-batch 0, the gradient scale 1/(B*T)). The same code computes it in
// the trainer, so the two are equal exactly.
float first_step_loss(const RunConfig& cfg, const std::vector<float>& params) {
    const int B = cfg.training.batch_size, T = cfg.training.seq_len;
    DataLoaderOptions options;
    options.batch_size = B;
    options.seq_len = T;
    options.shuffle = cfg.data.shuffle;
    options.seed = cfg.training.seed;
    options.vocab_size = static_cast<std::uint32_t>(cfg.model.vocab_size);
    DataLoader data(expand_shard_pattern(cfg.data.train), options);
    std::vector<std::int32_t> inputs(static_cast<std::size_t>(B) * T), targets(inputs.size());
    data.next_batch(inputs, targets);
    GPTModel model(cfg.model, B, T);
    std::copy(params.begin(), params.end(), model.params());
    return model.forward(inputs.data(), targets.data(), B, T, DropoutContext{cfg.training.seed, 1, 0, true},
                         1.0f / (static_cast<float>(B) * T));
}

// Round to nearest even, as torch's .to(torch.bfloat16) does when llm.c writes a version-5 file.
std::uint16_t to_bf16(float value) {
    const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
    return static_cast<std::uint16_t>((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16);
}

class InitFrom : public ::testing::Test {
protected:
    // A random shard, a tiny model of gpt-micro's shape written key by key, dropout 0, shuffled
    // data; run A trains it from scratch for 3 steps.
    void SetUp() override {
        dir = test::scratch_dir("init_from");
        test::write_random_shard(dir / "train.bin", 5000, 97, 3);
        config_file = dir / "run.toml";
        std::ofstream(config_file) << "[model]\nn_layer = 2\nn_embd = 16\nn_head = 2\nvocab_size = 97\n"
                                      "max_seq_len = 16\ndropout = 0.0\n"
                                      "[training]\nbatch_size = 2\nseq_len = 8\nsteps = 3\nseed = 7\n"
                                      "[data]\ntrain = \""
                                   << (dir / "train.bin").string() << "\"\nshuffle = true\n"
                                   << "[logging]\nrun_dir = \"" << (dir / "a").string() << "\"\n";
        cfg = load_config(config_file);
        const Result a = run_adacc("train --config " + config_file.string());
        ASSERT_EQ(a.status, 0) << a.output;
    }
    // `train` of the test config into run folder `name`, with `extra` arguments.
    Result train(const std::string& name, const std::string& extra) {
        return run_adacc("train --config " + config_file.string() + " --set logging.run_dir=" + (dir / name).string() +
                         " " + extra);
    }
    void expect_user_error(const Result& r, const std::vector<std::string>& fragments) {
        EXPECT_EQ(r.status, 2) << r.output;
        for (const auto& f : fragments)
            EXPECT_NE(r.output.find(f), std::string::npos) << "missing '" << f << "' in:\n" << r.output;
    }
    fs::path dir, config_file;
    RunConfig cfg;
};

TEST_F(InitFrom, ExportWritesTheCheckpointBitExactlyAndTrainingStartsFromIt) {
    const fs::path exported = dir / "exported.bin";
    const Result e = run_adacc("export --checkpoint " + (dir / "a").string() + " --llmc-model " + exported.string());
    ASSERT_EQ(e.status, 0) << e.output;
    const std::size_t count = ParameterLayout(cfg.model).total();
    EXPECT_NE(e.output.find("wrote " + exported.string()), std::string::npos) << e.output;
    EXPECT_NE(e.output.find("L=2 C=16 H=2 V=97 (padded 128) maxT=16, " + std::to_string(count) + " parameters"),
              std::string::npos)
        << e.output;

    // The file is llm.c's version 3 and holds the checkpoint's parameters bit for bit.
    EXPECT_EQ(fs::file_size(exported), 1024 + count * sizeof(float));
    std::array<std::int32_t, 8> header{};
    std::ifstream(exported, std::ios::binary).read(reinterpret_cast<char*>(header.data()), sizeof header);
    EXPECT_EQ(header, (std::array<std::int32_t, 8>{kLlmcModelMagic, 3, 16, 97, 2, 2, 16, 128}));
    const std::vector<float> trained = checkpoint_params(dir / "a", cfg.model);
    ASSERT_TRUE(same_bits(llmc_params(exported, cfg.model), trained));

    // A new run from the file: its step-1 loss is the exported weights' loss on the first batch.
    const Result b = train("b", "--init-from " + exported.string());
    ASSERT_EQ(b.status, 0) << b.output;
    EXPECT_NE(b.output.find("initialised from llm.c model file '" + exported.string() + "'"), std::string::npos)
        << b.output;
    const auto a_steps = step_records(dir / "a"), b_steps = step_records(dir / "b");
    ASSERT_EQ(b_steps.size(), 3u);
    EXPECT_EQ(b_steps[0]["step"], 1);
    EXPECT_EQ(b_steps[0]["loss"].get<float>(), first_step_loss(cfg, trained));
    EXPECT_NE(b_steps[0]["loss"].get<float>(), a_steps[0]["loss"].get<float>());  // not the seeded init
    // Step 0's schedule again: run A's first learning rate.
    EXPECT_EQ(b_steps[0]["lr"], a_steps[0]["lr"]);
    EXPECT_TRUE(fs::exists(checkpoint_path(dir / "b", 3)));
}

TEST_F(InitFrom, ARunFolderGivesItsWeightsOnlyWithAFreshOptimizer) {
    const fs::path exported = dir / "exported.bin";
    ASSERT_EQ(run_adacc("export --checkpoint " + (dir / "a").string() + " --llmc-model " + exported.string()).status,
              0);
    const Result from_file = train("from_file", "--init-from " + exported.string());
    ASSERT_EQ(from_file.status, 0) << from_file.output;
    const Result from_run = train("from_run", "--init-from " + (dir / "a").string());
    ASSERT_EQ(from_run.status, 0) << from_run.output;
    EXPECT_NE(from_run.output.find("initialised from adacc checkpoint '" + checkpoint_path(dir / "a", 3).string()),
              std::string::npos)
        << from_run.output;

    // Same weights, data and a zero optimizer state in both (the checkpoint's adam_m / adam_v are
    // not loaded, nor its step): the whole curves are identical, not only the first loss.
    const auto file_steps = step_records(dir / "from_file"), run_steps = step_records(dir / "from_run");
    ASSERT_EQ(run_steps.size(), 3u);
    EXPECT_EQ(run_steps[0]["loss"].get<float>(), first_step_loss(cfg, checkpoint_params(dir / "a", cfg.model)));
    for (std::size_t i = 0; i < run_steps.size(); ++i) {
        EXPECT_EQ(run_steps[i]["step"], file_steps[i]["step"]);
        EXPECT_EQ(run_steps[i]["loss"], file_steps[i]["loss"]) << i;
        EXPECT_EQ(run_steps[i]["grad_norm"], file_steps[i]["grad_norm"]) << i;
    }
    EXPECT_TRUE(
        same_bits(checkpoint_params(dir / "from_run", cfg.model), checkpoint_params(dir / "from_file", cfg.model)));
}

TEST_F(InitFrom, Bf16FileStartsFromTheRoundedWeights) {
    // A version-5 file as llm.c writes one: the same header with version 5, every parameter
    // rounded to bf16.
    const std::vector<float> trained = checkpoint_params(dir / "a", cfg.model);
    std::array<std::int32_t, 256> header{};
    header[0] = kLlmcModelMagic;
    header[1] = kLlmcVersionBf16;
    const std::array<std::int32_t, 6> shape = {16, 97, 2, 2, 16, 128};  // maxT, V, L, NH, C, Vp
    std::copy(shape.begin(), shape.end(), header.begin() + 2);
    std::vector<std::uint16_t> bf16(trained.size());
    std::vector<float> rounded(trained.size());
    for (std::size_t i = 0; i < trained.size(); ++i) {
        bf16[i] = to_bf16(trained[i]);
        rounded[i] = std::bit_cast<float>(std::uint32_t{bf16[i]} << 16);
    }
    const fs::path file = dir / "bf16.bin";
    {
        std::ofstream out(file, std::ios::binary);
        out.write(reinterpret_cast<const char*>(header.data()), sizeof header);
        out.write(reinterpret_cast<const char*>(bf16.data()), static_cast<std::streamsize>(bf16.size() * 2));
    }
    ASSERT_TRUE(same_bits(llmc_params(file, cfg.model), rounded));
    ASSERT_FALSE(same_bits(rounded, trained));  // the rounding is visible

    const Result r = train("bf16", "--init-from " + file.string());
    ASSERT_EQ(r.status, 0) << r.output;
    const auto steps = step_records(dir / "bf16");
    ASSERT_FALSE(steps.empty());
    EXPECT_EQ(steps[0]["loss"].get<float>(), first_step_loss(cfg, rounded));
}

TEST_F(InitFrom, SampleFromAnExportedFileMatchesTheCheckpoint) {
    const auto vocab = test::shared_data_dir() / "gpt2_tokenizer";
    if (test::shared_data_dir().empty() || !fs::exists(vocab))
        GTEST_SKIP() << "../shared/data/gpt2_tokenizer not present (sample needs GPT-2's vocabulary)";
    // A tiny model over GPT-2's 50257 tokens, saved as a run's checkpoint, then exported.
    RunConfig tiny;
    tiny.model = gpt_preset("gpt-tiny").value();
    tiny.logging.run_dir = (dir / "tiny").string();
    GPTModel model(tiny.model, 1, 8);
    model.init_weights(5);
    save_training_checkpoint(dir / "tiny", tiny, model, TrainingProgress{});
    const fs::path exported = dir / "tiny.bin";
    ASSERT_EQ(run_adacc("export --checkpoint " + (dir / "tiny").string() + " --llmc-model " + exported.string()).status,
              0);

    const std::string common = " --vocab " + vocab.string() + " --prompt 'Hello world' --tokens 12 --seed 3";
    const Result from_file = run_adacc("sample --llmc-model " + exported.string() + common);
    const Result from_checkpoint = run_adacc("sample --checkpoint " + (dir / "tiny").string() + common);
    ASSERT_EQ(from_file.status, 0) << from_file.output;
    ASSERT_EQ(from_checkpoint.status, 0) << from_checkpoint.output;
    EXPECT_EQ(from_file.output.rfind("Hello world", 0), 0u) << from_file.output;
    EXPECT_GT(from_file.output.size(), std::string("Hello world\n").size()) << from_file.output;
    EXPECT_EQ(from_file.output, from_checkpoint.output);

    expect_user_error(run_adacc("sample --vocab " + vocab.string() + " --prompt hi"),
                      {"no model given", "--llmc-model"});
    expect_user_error(
        run_adacc("sample --checkpoint " + exported.string() + " --vocab " + vocab.string() + " --prompt hi"),
        {"is not an adacc checkpoint", "it is an llm.c model file: pass it with --llmc-model"});
}

TEST_F(InitFrom, ShapeMismatchNamesEachFieldBothValuesAndTheFix) {
    const fs::path exported = dir / "exported.bin";
    ASSERT_EQ(run_adacc("export --checkpoint " + (dir / "a").string() + " --llmc-model " + exported.string()).status,
              0);
    const Result r =
        train("mismatch", "--init-from " + exported.string() + " --set model.n_layer=1 --set model.vocab_size=200");
    expect_user_error(r,
                      {"llm.c model file '" + exported.string() + "' holds a model of another shape",
                       "model.n_layer: 2 in the file, 1 in the config",
                       "model.vocab_size: 97 (padded to 128 rows) in the file, 200 (padded to 256 rows) in the config",
                       "--set model.n_layer=2 --set model.vocab_size=97", "--set model.preset=gpt-micro"});
    EXPECT_EQ(r.output.find("model.n_embd"), std::string::npos) << r.output;  // only the fields that differ
    EXPECT_FALSE(fs::exists(dir / "mismatch")) << "refused before the run folder is made";

    // The same for a checkpoint (here a checkpoint file rather than its run folder).
    expect_user_error(
        train("mismatch", "--init-from " + checkpoint_path(dir / "a", 3).string() + " --set model.n_head=4"),
        {"adacc checkpoint", "model.n_head: 2 in the file, 4 in the config", "--set model.n_head=2"});
}

TEST_F(InitFrom, BadInputIsRefusedCleanly) {
    expect_user_error(run_adacc("train --resume " + (dir / "a").string() + " --init-from " + (dir / "a").string()),
                      {"--init-from and --resume cannot be combined", "--config FILE --init-from RUN_DIR"});

    std::ofstream(dir / "junk.bin") << std::string(4000, 'x');
    expect_user_error(train("junk", "--init-from " + (dir / "junk.bin").string()),
                      {"junk.bin' is neither an llm.c model file nor an adacc checkpoint", "gpt2_124M.bin"});
    expect_user_error(train("junk", "--init-from " + (dir / "train.bin").string()),
                      {"train.bin' is neither", "it is an llm.c token shard"});
    expect_user_error(train("junk", "--init-from " + (dir / "absent.bin").string()),
                      {"absent.bin' does not exist", "run folder"});
    fs::create_directories(dir / "empty_run");
    expect_user_error(train("junk", "--init-from " + (dir / "empty_run").string()), {"no complete checkpoint"});
    // A truncated llm.c file: its header is fine, its parameters are not all there.
    const fs::path exported = dir / "exported.bin";
    ASSERT_EQ(run_adacc("export --checkpoint " + (dir / "a").string() + " --llmc-model " + exported.string()).status,
              0);
    fs::resize_file(exported, fs::file_size(exported) - 4);
    expect_user_error(train("junk", "--init-from " + exported.string()), {"is truncated"});
    EXPECT_FALSE(fs::exists(dir / "junk"));

    expect_user_error(
        run_adacc("export --checkpoint " + (dir / "empty_run").string() + " --llmc-model " + (dir / "x.bin").string()),
        {"no complete checkpoint"});
    const fs::path ckpt = checkpoint_path(dir / "a", 3);
    expect_user_error(run_adacc("export --checkpoint " + ckpt.string() + " --llmc-model " + ckpt.string()),
                      {"is the checkpoint being exported"});
    EXPECT_NO_THROW(CheckpointReader{ckpt});
}

}  // namespace
}  // namespace adacc
