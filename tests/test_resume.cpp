// Exact resume, with real processes: `adacc train` run straight to N steps, and the same run
// killed with SIGKILL part-way and resumed with `adacc train --resume`, produce bit-identical
// losses and bit-identical final parameters and optimizer state. A second test kills a run
// that checkpoints every step at random moments (often mid-write) and checks each time that the
// newest complete checkpoint loads and the run still ends bit-identical.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "data/token_shard.h"
#include "src/io/checkpoint_folder.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

constexpr int kSteps = 16;

std::filesystem::path make_run_config(const std::filesystem::path& dir, int checkpoint_every) {
    std::mt19937 gen(3);
    std::vector<std::uint16_t> train(40000), val(4000);
    for (auto& t : train) t = static_cast<std::uint16_t>(gen() % 50257);
    for (auto& t : val) t = static_cast<std::uint16_t>(gen() % 50257);
    write_token_shard(dir / "train_000000.bin", train);
    write_token_shard(dir / "val_000000.bin", val);
    const auto config = dir / "run.toml";
    std::ofstream(config) << "[model]\nn_layer = 2\nn_embd = 64\nn_head = 4\nvocab_size = 50257\nmax_seq_len = 32\n"
                          << "dropout = 0.1\n[training]\nbatch_size = 4\nseq_len = 32\nsteps = " << kSteps
                          << "\ngrad_accum = 2\nseed = 5\nval_every = 4\nval_batches = 2\nthreads = 1\n"
                          << "[lr]\nmax = 1e-3\nwarmup_steps = 3\n[data]\ntrain = \"" << (dir / "train_*.bin").string()
                          << "\"\nval = \"" << (dir / "val_*.bin").string() << "\"\nshuffle = true\n"
                          << "[checkpoint]\nevery = " << checkpoint_every << "\nkeep = 2\n";
    return config;
}

pid_t spawn(const std::vector<std::string>& args) {
    const pid_t pid = test::spawn_process(args);
    EXPECT_GT(pid, 0) << "cannot start " << args[0];
    return pid;
}

int wait_exit(pid_t pid) { return test::wait_process(pid); }

std::vector<std::string> train_args(const std::filesystem::path& config, const std::filesystem::path& run_dir) {
    return {test::adacc_binary(), "train", "--config", config.string(), "--set", "logging.run_dir=" + run_dir.string()};
}

// step -> loss (and "val" records keyed by -step), exactly as logged.
std::map<int, double> logged_losses(const std::filesystem::path& run_dir) {
    std::map<int, double> losses;
    std::ifstream in(run_dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const auto r = nlohmann::json::parse(line);
        if (r.contains("loss")) losses[r["step"].get<int>()] = r["loss"].get<double>();
        if (r.contains("val_loss")) losses[-r["step"].get<int>()] = r["val_loss"].get<double>();
    }
    return losses;
}

void expect_same_final_state(const std::filesystem::path& a, const std::filesystem::path& b) {
    const CheckpointReader ra(checkpoint_path(a, kSteps)), rb(checkpoint_path(b, kSteps));
    ASSERT_EQ(ra.tensors().size(), rb.tensors().size());
    for (const auto& t : ra.tensors()) {
        std::vector<char> x(t.bytes), y(t.bytes);
        ra.read_into(t.name, x.data(), x.size());
        rb.read_into(t.name, y.data(), y.size());
        EXPECT_TRUE(x == y) << t.name << " differs";
    }
}

class Resume : public ::testing::Test {
protected:
    void SetUp() override {
        dir = test::scratch_dir("resume");
        straight = dir / "straight";
        ASSERT_EQ(wait_exit(spawn(train_args(make_run_config(dir, 4), straight))), 0);
    }
    std::filesystem::path dir, straight;
};

TEST_F(Resume, KilledAndResumedRunIsBitIdentical) {
    const auto killed = dir / "killed";
    const pid_t pid = spawn(train_args(dir / "run.toml", killed));
    // Kill once step 9 is logged: the newest checkpoint is step 8, steps 9.. are lost work.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (test::last_logged_step(killed) < 9 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    kill(pid, SIGKILL);
    ASSERT_EQ(wait_exit(pid), -SIGKILL);
    ASSERT_LT(test::last_logged_step(killed), kSteps) << "the run finished before it could be killed";
    ASSERT_EQ(wait_exit(spawn({test::adacc_binary(), "train", "--resume", killed.string()})), 0);
    EXPECT_EQ(logged_losses(straight), logged_losses(killed));
    expect_same_final_state(straight, killed);
}

TEST_F(Resume, KillsDuringCheckpointWritesLeaveALoadableCheckpoint) {
    const auto run_dir = dir / "kills";
    const auto config = dir / "every_step.toml";
    std::filesystem::copy_file(make_run_config(dir, 1), config);
    std::mt19937 gen(11);
    bool started = false;
    for (int attempt = 0; attempt < 4 && test::last_logged_step(run_dir) < kSteps; ++attempt) {
        auto args = started ? std::vector<std::string>{test::adacc_binary(), "train", "--resume", run_dir.string()}
                            : train_args(config, run_dir);
        if (!started && attempt > 0) args.push_back("--overwrite");  // the killed attempt left its config and log
        const int before = test::last_logged_step(run_dir);
        const pid_t pid = spawn(args);
        // Let the run make progress first (a sanitizer build starts slowly), then kill it at a
        // random moment of the following steps, which checkpoint every step.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
        while (test::last_logged_step(run_dir) <= before && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
        std::this_thread::sleep_for(std::chrono::milliseconds(gen() % 400));
        kill(pid, SIGKILL);
        wait_exit(pid);
        const auto newest = newest_complete_checkpoint(run_dir);
        if (!newest) continue;  // killed before the first checkpoint: start again
        started = true;
        const CheckpointReader reader(*newest);  // header and table valid
        for (const auto& t : reader.tensors()) {
            std::vector<char> bytes(t.bytes);
            reader.read_into(t.name, bytes.data(), bytes.size());  // checksums verified
        }
    }
    ASSERT_TRUE(started) << "no checkpoint was ever written";
    ASSERT_EQ(wait_exit(spawn({test::adacc_binary(), "train", "--resume", run_dir.string()})), 0);
    auto a = logged_losses(straight), b = logged_losses(run_dir);
    EXPECT_EQ(a, b);
    // The every-step run has the same config but for checkpoint.every, which changes no number.
    expect_same_final_state(straight, run_dir);
}

}  // namespace
}  // namespace adacc
