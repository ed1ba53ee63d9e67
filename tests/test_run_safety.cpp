// A run never lost or mixed up, through the real command line: divergence stops training
// without checkpointing NaN, one run per folder (refusal, --overwrite, the lock), what --resume
// may change, SIGTERM/SIGINT checkpoint and resume bit-exactly, a run bigger than the machine is
// refused before allocating, checkpoint metadata is validated, newer-format checkpoints are left
// alone, and I/O failures (full disk) are clean errors. Each test reproduces a defect found by
// trying the engine as a hostile user would.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "data/token_shard.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/engine/memory_report.h"
#include "src/io/checkpoint_folder.h"
#include "src/train/trainer.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

namespace fs = std::filesystem;
using test::run_adacc;
using test::spawn_process;
using test::wait_process;

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

class RunSafety : public ::testing::Test {
protected:
    void SetUp() override {
        dir = test::scratch_dir("safety");
        test::write_random_shard(dir / "train.bin", 20000, 97, 1);
        run_dir = dir / "run";
    }
    // A tiny config (1 layer, 16 wide) with `extra` appended as more TOML sections.
    std::string config(const std::string& extra = "") {
        const auto file = dir / "run.toml";
        std::ofstream(file) << "[model]\nn_layer = 1\nn_embd = 16\nn_head = 2\nvocab_size = 97\nmax_seq_len = 16\n"
                            << "[training]\nbatch_size = 2\nseq_len = 8\nsteps = 4\nseed = 7\n[data]\ntrain = \""
                            << (dir / "train.bin").string() << "\"\n[logging]\nrun_dir = \"" << run_dir.string()
                            << "\"\n"
                            << extra;
        return file.string();
    }
    std::vector<nlohmann::json> metrics() const {
        std::vector<nlohmann::json> records;
        std::ifstream in(run_dir / "metrics.jsonl");
        for (std::string line; std::getline(in, line);) records.push_back(nlohmann::json::parse(line));
        return records;
    }
    std::vector<fs::path> checkpoints() const {
        std::vector<fs::path> files;
        for (const auto& e : fs::directory_iterator(checkpoint_dir(run_dir))) files.push_back(e.path());
        std::sort(files.begin(), files.end());
        return files;
    }
    fs::path dir, run_dir;
};

bool all_tensors_finite(const fs::path& checkpoint) {
    const CheckpointReader reader(checkpoint);
    for (const auto& t : reader.tensors()) {
        std::vector<float> values(t.bytes / sizeof(float));
        reader.read_into(t.name, values.data(), t.bytes);
        for (const float v : values)
            if (!std::isfinite(v)) return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// 1. Divergence: lr.max=1e6 trained on NaN with exit 0, NaN checkpoints pushed the good ones
// out and metrics.jsonl logged "loss": null; lr.max=inf and weight_decay=inf were accepted.

TEST_F(RunSafety, DivergedRunStopsNamingTheStepAndNeverCheckpointsNaN) {
    const auto r = run_adacc("train --config " + config("[checkpoint]\nevery = 1\nkeep = 2\n") +
                             " --set lr.max=1e6 --set training.steps=30");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "error: training diverged at step ")) << r.output;
    EXPECT_TRUE(contains(r.output, "lr.max = 1e+06")) << r.output;
    EXPECT_TRUE(contains(r.output, "skip_nonfinite")) << r.output;
    for (const auto& record : metrics()) {
        EXPECT_TRUE(!record.contains("loss") || record["loss"].is_number()) << record.dump();
        EXPECT_TRUE(!record.contains("grad_norm") || record["grad_norm"].is_number()) << record.dump();
    }
    // Every checkpoint left is finite, and the newest finite one was not pruned: it is the
    // newest checkpoint of the run, one of the last two steps logged before the divergence.
    const auto files = checkpoints();
    ASSERT_FALSE(files.empty()) << r.output;
    for (const auto& file : files) EXPECT_TRUE(all_tensors_finite(file)) << file;
    const auto newest = newest_complete_checkpoint(run_dir);
    ASSERT_TRUE(newest);
    EXPECT_TRUE(contains(r.output, "The newest checkpoint, " + newest->string() + ", is intact")) << r.output;
    EXPECT_EQ(*checkpoint_step(*newest), static_cast<std::int64_t>(metrics().back()["step"].get<int>())) << r.output;
}

TEST_F(RunSafety, InfiniteNumbersInTheConfigAreRefused) {
    for (const char* bad : {"lr.max=inf", "optimizer.weight_decay=inf", "optimizer.eps=nan", "lr.min=-inf"}) {
        const auto r = run_adacc("train --config " + config() + " --set " + bad);
        EXPECT_EQ(r.status, 2) << bad << "\n" << r.output;
        EXPECT_TRUE(contains(r.output, "is not a finite number")) << r.output;
        EXPECT_FALSE(fs::exists(run_dir)) << bad;
    }
    std::ofstream(dir / "inf.toml") << "[lr]\nmax = inf\n";
    const auto r = run_adacc("config --config " + (dir / "inf.toml").string());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "lr.max")) << r.output;
}

// training.skip_nonfinite: a step whose loss is NaN (a NaN planted in the position embedding
// for that one step) is skipped without touching the parameters, up to the allowance.
TEST_F(RunSafety, SkipNonfiniteSkipsThatManyStepsWithoutUpdating) {
    RunConfig cfg = load_config(config(), {"training.steps=6"});
    auto train_with = [&](int allowance, std::vector<float>* params_at_3, std::vector<float>* params_at_4) {
        cfg.training.skip_nonfinite = allowance;
        fs::remove_all(run_dir);
        Trainer trainer(cfg, std::nullopt);
        const auto& wpe = trainer.model().layout().info(ParamId::wpe);
        float saved = 0;
        trainer.set_step_hook([&](int step, GPTModel& model) {
            float* first = model.params() + wpe.offset;
            const std::size_t n = model.num_params();
            if (step == 3) {
                if (params_at_3) params_at_3->assign(model.params(), model.params() + n);
                saved = *first;
                *first = std::nanf("");
            }
            if (step == 4) {
                *first = saved;
                if (params_at_4) params_at_4->assign(model.params(), model.params() + n);
            }
        });
        return trainer.run();
    };
    std::vector<float> before, after;
    EXPECT_EQ(train_with(1, &before, &after), 0);
    EXPECT_EQ(before, after) << "a skipped step must not update the parameters";
    int skipped = 0;
    for (const auto& record : metrics())
        if (record.value("event", "") == "nonfinite_skipped") {
            ++skipped;
            EXPECT_EQ(record["step"], 3);
        }
    EXPECT_EQ(skipped, 1);
    EXPECT_TRUE(all_tensors_finite(checkpoint_path(run_dir, 6)));

    try {
        train_with(0, nullptr, nullptr);
        FAIL() << "a NaN loss with skip_nonfinite = 0 must stop training";
    } catch (const UserError& e) {
        EXPECT_TRUE(contains(e.what(), "training diverged at step 3: the loss is nan")) << e.what();
    }
}

// With fidelity measured every step, a skipped step recorded grad_err 0.0 and grad_cos 0.0: the
// NaN gradients compared as "no error". A skipped step records no fidelity; the others do.
TEST_F(RunSafety, SkippedStepsRecordNoGradientFidelity) {
    RunConfig cfg = load_config(
        config(), {"training.steps=4", "training.skip_nonfinite=1", "training.fidelity_every=1", "memory.mode=quant"});
    Trainer trainer(cfg, std::nullopt);
    const auto& wpe = trainer.model().layout().info(ParamId::wpe);
    float saved = 0;
    trainer.set_step_hook([&](int step, GPTModel& model) {
        float* first = model.params() + wpe.offset;
        if (step == 2) saved = std::exchange(*first, std::nanf(""));
        if (step == 3) *first = saved;
    });
    ASSERT_EQ(trainer.run(), 0);
    std::set<int> measured;
    for (const auto& record : metrics())
        if (record.contains("grad_err")) {
            measured.insert(record["step"].get<int>());
            EXPECT_TRUE(record["grad_err"].is_number() && record["grad_cos"].is_number()) << record.dump();
            EXPECT_GT(record["grad_cos"].get<double>(), 0.5) << record.dump();
        }
    EXPECT_EQ(measured, (std::set<int>{1, 3, 4})) << "step 2 was skipped: it has no fidelity to record";
}

// ---------------------------------------------------------------------------------------------
// 2. One run per folder: a fresh run silently mixed with the old one (metrics truncated, the old
// checkpoints kept and then resumed, sampled, evaluated); two live trainers raced.

TEST_F(RunSafety, FreshRunIntoAFolderHoldingARunIsRefused) {
    ASSERT_EQ(run_adacc("train --config " + config("[checkpoint]\nevery = 1\nkeep = 10\n")).status, 0);
    const auto before = checkpoints();
    const auto r = run_adacc("train --config " + config() + " --set training.steps=2");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "already holds a run")) << r.output;
    EXPECT_TRUE(contains(r.output, "--resume")) << r.output;
    EXPECT_TRUE(contains(r.output, "--overwrite")) << r.output;
    EXPECT_EQ(checkpoints(), before);
    EXPECT_EQ(metrics().size(), 4u);
}

// A fresh run whose data file is missing fails after claiming the folder; it leaves no run
// files, so the corrected command starts without --overwrite.
TEST_F(RunSafety, AFailedStartLeavesNothingThatBlocksTheRetry) {
    const auto bad = run_adacc("train --config " + config() + " --set data.train=" + (dir / "missing.bin").string());
    EXPECT_NE(bad.status, 0) << bad.output;
    EXPECT_TRUE(contains(bad.output, "missing.bin")) << bad.output;
    EXPECT_FALSE(fs::exists(run_dir / "config.toml"));
    const auto retry = run_adacc("train --config " + config());
    ASSERT_EQ(retry.status, 0) << retry.output;
    EXPECT_EQ(metrics().size(), 4u);
}

TEST_F(RunSafety, OverwriteStartsOverWithNothingOfTheOldRun) {
    ASSERT_EQ(run_adacc("train --config " + config("[checkpoint]\nevery = 1\nkeep = 10\n")).status, 0);
    const auto r = run_adacc("train --config " + config() + " --overwrite --set training.steps=2");
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_EQ(checkpoints(), std::vector<fs::path>{checkpoint_path(run_dir, 2)});
    EXPECT_EQ(metrics().size(), 2u);
    EXPECT_EQ(checkpoint_config(CheckpointReader(*newest_complete_checkpoint(run_dir))).training.steps, 2);
}

TEST_F(RunSafety, SecondLiveTrainerInTheSameFolderIsRefused) {
    const int null_fd = open("/dev/null", O_WRONLY);
    const pid_t pid = spawn_process(
        {test::adacc_binary(), "train", "--config", config(), "--set", "training.steps=100000000"}, null_fd);
    close(null_fd);
    ASSERT_GT(pid, 0);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (!fs::exists(run_dir / "metrics.jsonl") && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (const std::string& second : {"--resume " + run_dir.string(), "--config " + config() + " --overwrite"}) {
        const auto r = run_adacc("train " + second);
        EXPECT_EQ(r.status, 2) << second << "\n" << r.output;
        EXPECT_TRUE(contains(r.output, "is in use by another adacc train (process " + std::to_string(pid) + ")"))
            << r.output;
    }
    EXPECT_TRUE(fs::exists(run_dir / "metrics.jsonl")) << "--overwrite must not delete a live run's files";
    kill(pid, SIGKILL);
    EXPECT_EQ(wait_process(pid), -SIGKILL) << "the first trainer must still have been running";
}

TEST_F(RunSafety, ResumeRefusesConfigAndTheChangesItCannotMake) {
    ASSERT_EQ(run_adacc("train --config " + config()).status, 0);
    auto r = run_adacc("train --resume " + run_dir.string() + " --config " + config());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "--config cannot be given with it")) << r.output;
    for (const std::string change : {"model.n_layer=2", "model.n_embd=32", "training.batch_size=3",
                                     "training.seq_len=4", "training.seed=8", "model.preset=gpt-micro"}) {
        r = run_adacc("train --resume " + run_dir.string() + " --set training.steps=6 --set " + change);
        EXPECT_EQ(r.status, 2) << change << "\n" << r.output;
        const std::string key = change.substr(0, change.find('='));
        if (key != "model.preset") {
            EXPECT_TRUE(contains(r.output, key + ": ")) << r.output;
        }
        EXPECT_TRUE(contains(r.output, "cannot change")) << r.output;
    }
    r = run_adacc("train --resume " + run_dir.string() + " --set training.steps=6 --set lr.max=1e-4");
    EXPECT_EQ(r.status, 0) << "what resume allows (more steps, a new rate) still works:\n" << r.output;
    // A finished run resumed again, as it is or with fewer steps, trains nothing, says so and keeps
    // its checkpoints.
    const std::vector<fs::path> kept = checkpoints();
    for (const std::string steps : {"", " --set training.steps=3"}) {
        r = run_adacc("train --resume " + run_dir.string() + steps);
        EXPECT_EQ(r.status, 0) << r.output;
        EXPECT_TRUE(contains(r.output, "nothing to train: the run has completed 6 steps and training.steps is " +
                                           std::string(steps.empty() ? "6" : "3") +
                                           "; to train on, resume with --set training.steps=N (N > 6)"))
            << r.output;
        EXPECT_FALSE(contains(r.output, "step      ")) << r.output;
        EXPECT_EQ(checkpoints(), kept);
    }
}

// ---------------------------------------------------------------------------------------------
// 4. SIGTERM / SIGINT killed the run, losing up to checkpoint.every - 1 steps.

TEST_F(RunSafety, StopSignalsCheckpointTheLastStepAndResumeBitExactly) {
    // Dropout on, so the resumed masks must continue the stopped run's RNG stream exactly.
    const std::string cfg = config("[checkpoint]\nevery = 100000\n");
    const fs::path straight = dir / "straight";
    const int steps = 400;
    const std::string set_steps = "training.steps=" + std::to_string(steps);
    ASSERT_EQ(run_adacc("train --config " + cfg + " --set model.dropout=0.1 --set " + set_steps +
                        " --set logging.run_dir=" + straight.string())
                  .status,
              0);
    for (const int signal : {SIGTERM, SIGINT}) {
        fs::remove_all(run_dir);
        const pid_t pid = spawn_process(
            {test::adacc_binary(), "train", "--config", cfg, "--set", "model.dropout=0.1", "--set", set_steps}, -1);
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
        while (test::last_logged_step(run_dir) < 20 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        kill(pid, signal);
        ASSERT_EQ(wait_process(pid), 128 + signal);
        const int stopped_at = test::last_logged_step(run_dir);
        ASSERT_LT(stopped_at, steps) << "the run finished before the signal";
        const auto newest = newest_complete_checkpoint(run_dir);
        ASSERT_TRUE(newest);
        EXPECT_EQ(*checkpoint_step(*newest), stopped_at) << "the checkpoint is of the last completed step";
        ASSERT_EQ(run_adacc("train --resume " + run_dir.string()).status, 0);
        const CheckpointReader a(checkpoint_path(straight, steps)), b(checkpoint_path(run_dir, steps));
        for (const auto& t : a.tensors()) {
            std::vector<char> x(t.bytes), y(t.bytes);
            a.read_into(t.name, x.data(), x.size());
            b.read_into(t.name, y.data(), y.size());
            EXPECT_TRUE(x == y) << t.name << " differs after a stop by signal " << signal;
        }
    }
}

TEST_F(RunSafety, SecondStopSignalEndsTheRunAtOnce) {
    // Steps long enough (~0.1-1 s) that the second signal lands while the first one's step runs
    // (the second is sent as soon as the first one's message is read). Under AddressSanitizer a
    // quarter of the width (about a tenth of the work) keeps the step that long.
    const std::string cfg = config("[checkpoint]\nevery = 100000\n");
    int pipe_fds[2];
    ASSERT_EQ(pipe(pipe_fds), 0);
    const std::string width = test::kSanitized ? "64" : "256";
    const pid_t pid =
        spawn_process({test::adacc_binary(), "train", "--config", cfg, "--set", "training.steps=100000", "--set",
                       "model.n_embd=" + width, "--set", "model.n_layer=4", "--set", "training.batch_size=16", "--set",
                       "model.max_seq_len=256", "--set", "training.seq_len=256", "--set", "training.threads=1"},
                      pipe_fds[1]);
    close(pipe_fds[1]);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (test::last_logged_step(run_dir) < 1 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    kill(pid, SIGTERM);
    std::string said;
    char c;
    while (!contains(said, "SIGTERM received") && read(pipe_fds[0], &c, 1) == 1) said += c;
    kill(pid, SIGTERM);
    EXPECT_EQ(wait_process(pid), -SIGTERM) << said;
    close(pipe_fds[0]);
}

// ---------------------------------------------------------------------------------------------
// 5. No check against physical memory: gpt-345m, mode full, B=48..64 at T=1024 with a 100 GiB
// budget grew into the OOM killer or ended in std::bad_alloc.

TEST_F(RunSafety, RunLargerThanTheMachineIsRefusedBeforeAllocating) {
    std::vector<std::uint16_t> tokens(1 << 20);
    for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i % 50257);
    write_token_shard(dir / "gpt2.bin", tokens);
    const GPTConfig model = *gpt_preset("gpt-345m");
    const std::uint64_t machine = host_memory_bytes();
    const int fits = largest_batch(model, 1024, MemoryMode::full, machine);
    const int batch = fits + 1;
    ASSERT_LE(batch, 1024) << "this machine holds more than the test data covers";
    const auto r = run_adacc("train --config " + config() + " --set model.preset=gpt-345m --set memory.mode=full" +
                             " --set training.seq_len=1024 --set training.batch_size=" + std::to_string(batch) +
                             " --set data.train=" + (dir / "gpt2.bin").string() + " --memory-budget 100TiB");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "but this machine has " + format_bytes(machine))) << r.output;
    EXPECT_TRUE(contains(r.output, "the largest batch that fits in mode full is " + std::to_string(fits))) << r.output;
    EXPECT_TRUE(contains(r.output, format_bytes(memory_for_mode(model, batch, 1024, MemoryMode::full).total())))
        << r.output;
}

// A fixed mode whose batch is over memory.budget is refused before anything is allocated, with
// its arenas and, for every fixed mode, the largest batch the budget holds (found here by trying
// every batch) or that none fits.
TEST_F(RunSafety, BatchOverTheBudgetIsRefusedWithTheLargestBatchOfEachMode) {
    GPTConfig model;
    model.n_layer = 1, model.n_embd = 16, model.n_head = 2, model.vocab_size = 97, model.max_seq_len = 16;
    const int T = 8;
    const std::uint64_t budget = memory_for_mode(model, 2, T, MemoryMode::none).total() - 1;
    const auto r = run_adacc("train --config " + config() + " --memory-budget " + std::to_string(budget));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output,
                         "memory.budget " + format_bytes(budget) + " is too small for batch 2 x seq 8 in mode none: "))
        << r.output;
    EXPECT_TRUE(contains(r.output, "total " + format_bytes(memory_for_mode(model, 2, T, MemoryMode::none).total())))
        << r.output;
    for (MemoryMode mode : fixed_memory_modes()) {
        int largest = 0;
        for (int b = 1; b <= 64; ++b)
            if (memory_for_mode(model, b, T, mode).total() <= budget) largest = b;
        ASSERT_LT(largest, 64) << memory_mode_name(mode) << ": the test's batches do not reach past the budget";
        const std::string fits = largest ? "largest batch " + std::to_string(largest) : "does not fit even at batch 1";
        EXPECT_TRUE(contains(r.output, std::string("\n  ") + memory_mode_name(mode) + ": " + fits + "\n")) << r.output;
    }
    EXPECT_TRUE(contains(r.output, "Lower training.batch_size, choose another memory.mode, or raise memory.budget."))
        << r.output;
    EXPECT_FALSE(fs::exists(run_dir / "metrics.jsonl"));
    // The resolved config, printed first, comes before the error in a log of stdout and stderr.
    EXPECT_LT(r.output.find("model.n_layer"), r.output.find("error: ")) << r.output;
}

// Planned modes: a model that does not fit even at batch 1 with full recomputation is refused
// before the profiler builds anything; a budget beyond the machine is refused once the plan's
// total is known to exceed the machine, naming the largest batch the mode plans within it. Depths
// and batches are computed from this machine's memory, so both cases exceed it anywhere.
GPTConfig wide_tiny_model(int n_layer) {
    GPTConfig m;
    m.n_layer = n_layer, m.n_embd = 128, m.n_head = 4, m.vocab_size = 97, m.max_seq_len = 16;
    return m;
}

std::string model_overrides(const GPTConfig& m) {
    return " --set model.n_layer=" + std::to_string(m.n_layer) + " --set model.n_embd=" + std::to_string(m.n_embd) +
           " --set model.n_head=" + std::to_string(m.n_head);
}

// A run's last line puts its accounted memory beside the peak RSS the machine charged it, and the
// two agree within the bound, the larger of 5% and 64 MiB: the accounting sees the
// arenas, and what the process holds beside them (its binary and libraries, threads' stacks) is
// small since cuBLASLt is opened only by the CUDA backend (it alone was 152 MiB of RSS, 212 MiB
// at exit). Not under AddressSanitizer, whose shadow memory and redzones are RSS of its own.
TEST_F(RunSafety, TrainEndsWithTheAccountedMemoryBesideThePeakRss) {
    const auto r = run_adacc("train --config " + config());
    ASSERT_EQ(r.status, 0) << r.output;
    const auto summary = r.output.find(", total ");
    const auto last = r.output.rfind("memory: accounted ");
    ASSERT_NE(summary, std::string::npos) << r.output;
    ASSERT_NE(last, std::string::npos) << r.output;
    const std::string total = r.output.substr(summary + 8, r.output.find('\n', summary) - summary - 8);
    EXPECT_EQ(r.output.substr(last + 18, total.size() + 1), total + ",") << "the accounted total is the summary's";
    double rss = 0;
    char unit[8] = {};
    ASSERT_EQ(std::sscanf(r.output.c_str() + r.output.find("peak RSS ", last) + 9, "%lf %7s", &rss, unit), 2);
    EXPECT_TRUE(std::string(unit) == "MiB" || std::string(unit) == "GiB") << r.output.substr(last);
    EXPECT_GT(rss, 0.0);
    EXPECT_EQ(r.output.find('\n', last), r.output.size() - 1) << "it is the run's last line";
    if (test::kSanitized) return;
    double accounted = 0;
    char accounted_unit[8] = {};
    ASSERT_EQ(std::sscanf(total.c_str(), "%lf %7s", &accounted, accounted_unit), 2) << total;
    auto mib = [](double value, const std::string& unit) {
        return unit == "GiB" ? value * 1024 : unit == "KiB" ? value / 1024 : unit == "B" ? value / 1048576 : value;
    };
    const double rss_mib = mib(rss, unit), accounted_mib = mib(accounted, accounted_unit);
    EXPECT_LE(std::abs(rss_mib - accounted_mib), std::max(0.05 * rss_mib, 64.0)) << r.output.substr(last);
}

TEST_F(RunSafety, PlannedModelLargerThanTheMachineIsRefusedBeforeProfiling) {
    const std::uint64_t machine = host_memory_bytes();
    int layers = 1;
    while (memory_for_mode(wide_tiny_model(layers), 1, 8, MemoryMode::full).total() <= machine) layers *= 2;
    const GPTConfig model = wide_tiny_model(layers);
    const auto r = run_adacc("train --config " + config() + model_overrides(model) +
                             " --set memory.mode=adacc --memory-budget 100TiB");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "no memory mode can train it here")) << r.output;
    EXPECT_TRUE(contains(r.output, "this machine has " + format_bytes(machine))) << r.output;
    EXPECT_TRUE(contains(r.output, format_bytes(memory_for_mode(model, 1, 8, MemoryMode::full).total()))) << r.output;
    EXPECT_FALSE(contains(r.output, "plan (adacc)")) << "nothing is profiled or planned:\n" << r.output;
}

TEST_F(RunSafety, PlannedBudgetBeyondTheMachineIsRefusedWithTheBatchThatFits) {
    const std::uint64_t machine = host_memory_bytes();
    const ModelMemory one = memory_for_mode(wide_tiny_model(1), 1, 8, MemoryMode::full);
    const GPTConfig model = wide_tiny_model(static_cast<int>(machine / 8 / one.static_bytes()) + 1);
    const int none_fits = largest_batch(model, 8, MemoryMode::none, machine);
    const int full_fits = largest_batch(model, 8, MemoryMode::full, machine);
    ASSERT_LE((none_fits + 1) * 8, 20000) << "the test shard is too short for this machine";
    const auto r = run_adacc("train --config " + config() + model_overrides(model) + " --set training.batch_size=" +
                             std::to_string(none_fits + 1) + " --set memory.mode=adacc --memory-budget 100TiB");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "but this machine has " + format_bytes(machine))) << r.output;
    const auto at = r.output.find("it plans batch ");
    ASSERT_NE(at, std::string::npos) << r.output;
    const int planned = std::stoi(r.output.substr(at + 15));
    // Keeping everything is a plan, and nothing stores less than full recomputation.
    EXPECT_GE(planned, none_fits) << r.output;
    EXPECT_LE(planned, full_fits) << r.output;
    EXPECT_FALSE(fs::exists(run_dir / "checkpoints")) << "refused before the model was allocated";
}

// ---------------------------------------------------------------------------------------------
// 8. Checkpoint metadata was trusted: a step of 10^12 wrapped negative and trained on NaN, a
// string step was an internal error; a newer-format checkpoint was skipped, then overwritten.

// Rewrites `file` with its metadata changed by `edit` and valid checksums (a crafted file).
void rewrite_metadata(const fs::path& file, const std::function<void(nlohmann::json&)>& edit) {
    const CheckpointReader reader(file);
    nlohmann::json meta = reader.meta();
    edit(meta);
    std::vector<std::vector<char>> data;
    std::vector<CheckpointTensor> tensors;
    for (const auto& t : reader.tensors()) {
        data.emplace_back(t.bytes);
        reader.read_into(t.name, data.back().data(), t.bytes);
    }
    for (std::size_t i = 0; i < reader.tensors().size(); ++i) {
        const auto& t = reader.tensors()[i];
        tensors.push_back({t.name, t.dtype, t.shape, data[i].data()});
    }
    write_checkpoint(file, meta, tensors);
}

TEST_F(RunSafety, CraftedCheckpointMetadataIsRefusedByName) {
    const std::string cfg = config();
    struct Case {
        const char* what;
        std::function<void(nlohmann::json&)> edit;
        const char* fragment;
    };
    const std::vector<Case> cases = {
        {"huge step", [](nlohmann::json& m) { m["step"] = 1000000000000ll; }, "step = 1000000000000 is outside"},
        {"string step", [](nlohmann::json& m) { m["step"] = "4"; }, "step is \"4\", not an integer"},
        {"negative step", [](nlohmann::json& m) { m["step"] = -3; }, "step = -3 is outside"},
        {"step unlike the name", [](nlohmann::json& m) { m["step"] = 3; }, "differs from the file name's step 4"},
        {"no data position", [](nlohmann::json& m) { m.erase("train_data"); }, "train_data.epoch is missing"},
        {"float epoch", [](nlohmann::json& m) { m["train_data"]["epoch"] = 0.5; }, "train_data.epoch is 0.5"},
        {"batch past the epoch", [](nlohmann::json& m) { m["train_data"]["batch"] = 123456789; }, "past the end"},
        {"other seed", [](nlohmann::json& m) { m["rng"]["seed"] = 8; }, "rng.seed 8 differs"},
        {"other rng", [](nlohmann::json& m) { m["rng"]["scheme"] = "mt19937"; }, "rng.scheme"},
        {"config not text", [](nlohmann::json& m) { m["config"] = 5; }, "holds no config"},
    };
    for (const auto& c : cases) {
        fs::remove_all(run_dir);
        ASSERT_EQ(run_adacc("train --config " + cfg).status, 0);
        rewrite_metadata(checkpoint_path(run_dir, 4), c.edit);
        const auto r = run_adacc("train --resume " + run_dir.string() + " --set training.steps=6");
        EXPECT_EQ(r.status, 2) << c.what << "\n" << r.output;
        EXPECT_TRUE(contains(r.output, c.fragment)) << c.what << "\n" << r.output;
        EXPECT_FALSE(fs::exists(checkpoint_path(run_dir, 5))) << c.what << ": it trained on";
    }
}

TEST_F(RunSafety, NonFiniteParametersInACheckpointAreRefused) {
    ASSERT_EQ(run_adacc("train --config " + config()).status, 0);
    const fs::path file = checkpoint_path(run_dir, 4);
    const CheckpointReader reader(file);
    std::vector<std::vector<float>> data;
    std::vector<CheckpointTensor> tensors;
    for (const auto& t : reader.tensors()) {
        data.emplace_back(t.bytes / sizeof(float));
        reader.read_into(t.name, data.back().data(), t.bytes);
        if (t.name == "params/lnfw") data.back()[3] = INFINITY;
    }
    for (std::size_t i = 0; i < data.size(); ++i)
        tensors.push_back(
            {reader.tensors()[i].name, reader.tensors()[i].dtype, reader.tensors()[i].shape, data[i].data()});
    write_checkpoint(file, reader.meta(), tensors);
    const auto r = run_adacc("train --resume " + run_dir.string() + " --set training.steps=6");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "holds non-finite values in params/lnfw")) << r.output;
}

TEST_F(RunSafety, NewerFormatCheckpointIsLeftUntouched) {
    ASSERT_EQ(run_adacc("train --config " + config("[checkpoint]\nevery = 2\nkeep = 1\n")).status, 0);
    // A step-6 checkpoint from a future adacc: version 2 in the header.
    const fs::path newer = checkpoint_path(run_dir, 6);
    fs::copy_file(checkpoint_path(run_dir, 4), newer);
    {
        std::fstream f(newer, std::ios::in | std::ios::out | std::ios::binary);
        const std::uint32_t version = kCheckpointFormatVersion + 1;
        f.seekp(8);
        f.write(reinterpret_cast<const char*>(&version), sizeof version);
    }
    std::ifstream original_in(newer, std::ios::binary);
    const std::string original((std::istreambuf_iterator<char>(original_in)), {});

    auto r = run_adacc("train --resume " + run_dir.string() + " --set training.steps=8");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "was written by a newer adacc")) << r.output;
    EXPECT_FALSE(fs::exists(checkpoint_path(run_dir, 8)));
    std::ifstream after_in(newer, std::ios::binary);
    EXPECT_EQ(std::string((std::istreambuf_iterator<char>(after_in)), {}), original);

    r = run_adacc("train --resume " + run_dir.string() + " --set training.steps=8 --overwrite");
    EXPECT_EQ(r.status, 0) << "--overwrite resumes from the newest readable checkpoint:\n" << r.output;
    EXPECT_TRUE(fs::exists(checkpoint_path(run_dir, 8)));
}

// ---------------------------------------------------------------------------------------------
// 6 and 9: threads, folders, parser codes, sizes, disks.

TEST_F(RunSafety, HugeThreadCountIsAConfigError) {
    const auto r = run_adacc("train --config " + config() + " --set training.threads=100000");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "training.threads = 100000, but it must be in [0, 1024]")) << r.output;
}

TEST_F(RunSafety, ConfigThatIsAFolderIsAnError) {
    const auto r = run_adacc("train --config " + dir.string());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "is a folder; pass a TOML file")) << r.output;
}

TEST_F(RunSafety, UnwritableRunFolderIsAUserError) {
    std::ofstream(dir / "a_file") << "x";
    const auto r =
        run_adacc("train --config " + config() + " --set logging.run_dir=" + (dir / "a_file" / "run").string());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "cannot create the run folder")) << r.output;
    EXPECT_TRUE(contains(r.output, "logging.run_dir")) << r.output;
}

TEST_F(RunSafety, CommandLineParseErrorsExitWithStatusTwo) {
    for (const std::string args : {"train --no-such-flag", "train --config", "", "no-such-command",
                                   "sample --tokens abc --prompt x --vocab v --checkpoint c"}) {
        const auto r = run_adacc(args);
        EXPECT_EQ(r.status, 2) << "'" << args << "'\n" << r.output;
    }
    EXPECT_EQ(run_adacc("train --help").status, 0);
}

TEST_F(RunSafety, SizesThatWouldOverflowAreRefused) {
    auto r = run_adacc("memory --config " + config() + " --set model.n_embd=2147483644 --set model.n_head=4");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "more than the 2^50 any machine can hold")) << r.output;
    r = run_adacc(
        "memory --config " + config() +
        " --set model.max_seq_len=1000000 --set training.seq_len=1000000 --set training.batch_size=2000000000");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "more than 1 EiB of activations")) << r.output;
}

// A full disk, as a file-size limit (ulimit -f, in KiB; SIGXFSZ ignored) makes it: every write past
// the limit fails (EFBIG), as writes to a full disk do (ENOSPC). Each file is written under a name
// of its own (src/common/file_io.h), so a test can no longer plant /dev/full at a fixed ".tmp".
test::ProcessResult run_adacc_with_file_limit(int kib, const std::string& args) {
    return test::run_shell("/bin/sh -c \"ulimit -f " + std::to_string(kib) + "; trap '' XFSZ; exec " +
                           test::adacc_binary() + " " + args + "\"");
}

TEST_F(RunSafety, FullDiskForTheConfigIsAnErrorNotAnEmptyFile) {
    const auto r = run_adacc_with_file_limit(0, "train --config " + config());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "File too large")) << r.output;
    EXPECT_TRUE(contains(r.output, "config.toml' was not written")) << r.output;
    EXPECT_FALSE(fs::exists(run_dir / "config.toml"));
}

TEST_F(RunSafety, FullDiskForACheckpointNamesTheFileThatFailed) {
    ASSERT_EQ(run_adacc("train --config " + config("[checkpoint]\nevery = 2\nkeep = 5\n")).status, 0);
    // A limit below a checkpoint's size and above what the resumed run writes besides it.
    const auto checkpoint_bytes = fs::file_size(checkpoint_path(run_dir, 4));
    const int kib = static_cast<int>(checkpoint_bytes / 1024 / 2);
    ASSERT_GT(kib * 1024, 2 * (fs::file_size(run_dir / "config.toml") + fs::file_size(run_dir / "metrics.jsonl")));
    const auto r = run_adacc_with_file_limit(kib, "train --resume " + run_dir.string() + " --set training.steps=6");
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_TRUE(contains(r.output, "File too large")) << r.output;
    EXPECT_TRUE(contains(r.output, "ckpt_00000006.bin' was not written")) << r.output;
    EXPECT_FALSE(contains(r.output, "previous")) << r.output;
    EXPECT_EQ(*checkpoint_step(*newest_complete_checkpoint(run_dir)), 4) << "the earlier checkpoint is intact";
    for (const auto& file : checkpoints()) EXPECT_FALSE(atomic_write_target(file)) << file << " was left behind";
}

// A file-size limit makes writes to metrics.jsonl past it fail, as a full disk does.
TEST_F(RunSafety, MetricsThatCannotBeWrittenStopTheRun) {
    const auto r = run_adacc("train --config " + config() + " --set training.steps=200");
    ASSERT_EQ(r.status, 0) << r.output;
    fs::remove_all(run_dir);
    const auto limited = run_adacc_with_file_limit(4, "train --config " + config() + " --set training.steps=200");
    EXPECT_EQ(limited.status, 2) << limited.output;
    EXPECT_TRUE(contains(limited.output, "cannot write to " + (run_dir / "metrics.jsonl").string())) << limited.output;
}

}  // namespace
}  // namespace adacc
