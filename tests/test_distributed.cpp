// Data parallelism across processes (src/dist/process_group.h), run as users run it: `mpirun -np
// 2 adacc train` on the CPU (--oversubscribe, one thread per rank) against one process.
//   * 2 ranks x batch B train as 1 process x batch 2B (dropout off): the same losses and final
//     parameters within 1e-6 relative — not bit for bit, because one process's matmuls sum the
//     2B rows in another order than the two ranks' all-reduce does;
//   * 2 ranks x grad_accum 1 train as 1 process x grad_accum 2 with dropout on (rank r's
//     micro-batch is the step's micro-batch r, in data and masks alike);
//   * a 2-rank run checkpointed at step 3 and resumed on 1 rank (grad_accum 2: the same global
//     batch) continues with the losses of the uninterrupted 2-rank run;
//   * an error on one rank (a shard missing for rank 1 alone: an MPMD launch gives it another
//     config) ends both ranks within seconds with that rank's message;
//   * ZeRO-1 (training.zero = 1) trains as plain data parallelism, and its accounting: per-rank
//     AdamW state in `adacc memory --world-size`, a larger planned batch at a fixed budget.
// The mpirun tests skip with a message where this build has no MPI or mpirun is not installed.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "src/adacc/adacc_regulator.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/engine/gpt_model.h"
#include "src/io/checkpoint.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

// mpirun as the tests use it: two processes on however many cores there are, one OpenMP thread
// each, allowed to run as root (CI containers are), quiet about the container's network.
std::string mpirun(int ranks) {
    return "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none "
           "mpirun --oversubscribe -x OMP_NUM_THREADS=1 -np " +
           std::to_string(ranks) + " ";
}

std::string mpi_unavailable() {
#ifndef ADACC_HAVE_MPI
    return "this build has no MPI (scripts/install_deps.sh installs libopenmpi-dev; reconfigure)";
#else
    if (test::run_shell("mpirun --version").status != 0) return "mpirun is not installed (openmpi-bin)";
    return "";
#endif
}

#define REQUIRE_MPI()                                                         \
    do {                                                                      \
        const std::string why = mpi_unavailable();                            \
        if (!why.empty()) GTEST_SKIP() << "data parallelism untested: " << why; \
    } while (0)

// Token shards and a tiny model's config (every run here overrides what it varies with --set).
std::filesystem::path write_job(const std::string& tag) {
    const auto dir = test::scratch_dir(tag);
    std::mt19937 gen(3);
    for (const char* split : {"train", "val"}) {
        std::vector<std::uint16_t> tokens(20000);
        for (auto& t : tokens) t = static_cast<std::uint16_t>(gen() % 97);
        write_token_shard(dir / (std::string(split) + ".bin"), tokens);
    }
    std::ofstream(dir / "job.toml") << "[model]\nn_layer = 2\nn_embd = 32\nn_head = 2\nvocab_size = 97\n"
                                       "max_seq_len = 16\ndropout = 0.0\n"
                                       "[training]\nbatch_size = 2\nseq_len = 16\nsteps = 6\nval_every = 3\n"
                                       "val_batches = 4\nthreads = 1\n"
                                       "[lr]\nmax = 1e-3\nwarmup_steps = 2\n"
                                       "[data]\ntrain = \""
                                    << (dir / "train.bin").string() << "\"\nval = \"" << (dir / "val.bin").string()
                                    << "\"\n[checkpoint]\nevery = 0\n[logging]\nprint_every = 1\n";
    return dir;
}

// `adacc train` of the job into RUN, on `ranks` processes (0: without mpirun), with `sets`.
test::ProcessResult train(const std::filesystem::path& dir, const std::string& run, int ranks, const std::string& sets) {
    const std::string args = "train --config " + (dir / "job.toml").string() + " --set logging.run_dir=" +
                             (dir / run).string() + " " + sets;
    return ranks == 0 ? test::run_adacc(args) : test::run_shell(mpirun(ranks) + test::adacc_binary() + " " + args);
}

std::map<int, double> losses(const std::filesystem::path& run_dir) {
    std::map<int, double> out;
    std::ifstream in(run_dir / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const auto r = nlohmann::json::parse(line);
        if (r.contains("loss")) out[r["step"].get<int>()] = r["loss"].get<double>();
    }
    return out;
}

std::vector<float> final_parameters(const std::filesystem::path& run_dir) {
    const CheckpointReader reader(*newest_complete_checkpoint(run_dir));
    std::vector<float> out;
    for (const StoredTensor& t : reader.tensors()) {
        if (t.name.rfind("params/", 0) != 0) continue;
        std::vector<float> values(t.bytes / sizeof(float));
        reader.read_into(t.name, values.data(), t.bytes);
        out.insert(out.end(), values.begin(), values.end());
    }
    return out;
}

void expect_close(const std::map<int, double>& got, const std::map<int, double>& want, double rel) {
    ASSERT_EQ(want.size(), 6u) << "a loss per step of the job";
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [step, loss] : want) {
        ASSERT_TRUE(got.count(step)) << "step " << step;
        EXPECT_NEAR(got.at(step), loss, rel * std::fabs(loss)) << "step " << step;
    }
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
    double diff2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff2 += std::pow(double(got[i]) - want[i], 2);
        ref2 += std::pow(double(want[i]), 2);
    }
    return std::sqrt(diff2 / ref2);
}

TEST(DataParallel, TwoRanksTrainAsOneProcessWithTwiceTheBatch) {
    REQUIRE_MPI();
    const auto dir = write_job("dp_batch");
    const auto two = train(dir, "two", 2, "--set checkpoint.every=6");
    ASSERT_EQ(two.status, 0) << two.output;
    const auto one = train(dir, "one", 0, "--set training.batch_size=4 --set checkpoint.every=6");
    ASSERT_EQ(one.status, 0) << one.output;
    expect_close(losses(dir / "two"), losses(dir / "one"), 1e-6);
    const std::vector<float> a = final_parameters(dir / "two"), b = final_parameters(dir / "one");
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LT(relative_l2(a, b), 1e-6);
    // Rank 0 alone logs: one step line per step, tokens per step counting both ranks (2 x 2 x 16).
    EXPECT_EQ(two.output.find("step      1/6"), two.output.rfind("step      1/6")) << two.output;
}

TEST(DataParallel, TwoRanksTrainAsOneProcessWithTwiceTheMicroBatchesWithDropout) {
    REQUIRE_MPI();
    const auto dir = write_job("dp_accum");
    const std::string dropout = "--set model.dropout=0.1 ";
    ASSERT_EQ(train(dir, "two", 2, dropout).status, 0);
    ASSERT_EQ(train(dir, "one", 0, dropout + "--set training.grad_accum=2").status, 0);
    expect_close(losses(dir / "two"), losses(dir / "one"), 1e-6);
}

TEST(DataParallel, ATwoRankRunResumesOnOneRank) {
    REQUIRE_MPI();
    const auto dir = write_job("dp_resume");
    ASSERT_EQ(train(dir, "run", 2, "--set checkpoint.every=3").status, 0);
    const std::map<int, double> uninterrupted = losses(dir / "run");
    // Killed after step 3's checkpoint, before step 6's: resumed by one process taking both
    // ranks' batches each step.
    std::filesystem::remove(checkpoint_path(dir / "run", 6));
    const auto resumed = test::run_adacc("train --resume " + (dir / "run").string() + " --set training.grad_accum=2");
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
    expect_close(losses(dir / "run"), uninterrupted, 1e-6);
    // The 6 batches taken by step 3 cannot be shared by 4 ranks.
    std::filesystem::remove(checkpoint_path(dir / "run", 6));
    const auto four = test::run_shell(mpirun(4) + test::adacc_binary() + " train --resume " + (dir / "run").string());
    EXPECT_NE(four.status, 0);
    EXPECT_NE(four.output.find("cannot share evenly"), std::string::npos) << four.output;
}

TEST(DataParallel, AnErrorOnOneRankEndsEveryRank) {
    REQUIRE_MPI();
    const auto dir = write_job("dp_error");
    const std::string common = test::adacc_binary() + " train --config " + (dir / "job.toml").string() +
                               " --set training.steps=1000000 --set logging.run_dir=" + (dir / "run").string();
    const auto start = std::chrono::steady_clock::now();
    const auto r = test::run_shell(mpirun(1) + common + " : -np 1 " + common + " --set data.train=" +
                                       (dir / "missing_*.bin").string(),
                                   true, 120);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.status, 124) << "the job hung: " << r.output;
    EXPECT_NE(r.output.find("rank 1 of 2: error: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("missing_*.bin"), std::string::npos) << r.output;
    EXPECT_LT(seconds, 60) << r.output;
}

// ZeRO-1 gives the result of plain data parallelism: the same gradient sums (reduce-scatter
// instead of all-reduce: for two ranks the same additions) and updates; only the gradient norm is
// summed in another order (per shard, then over ranks), so within 1e-6. A ZeRO-1 checkpoint holds
// every moment (gathered) and resumes on one process.
TEST(DataParallel, ZeroOneTrainsAsPlainDataParallelismAndResumesOnOneRank) {
    REQUIRE_MPI();
    const auto dir = write_job("dp_zero");
    const std::string dropout = "--set model.dropout=0.1 --set checkpoint.every=3 ";
    ASSERT_EQ(train(dir, "plain", 2, dropout).status, 0);
    const auto zero = train(dir, "zero", 2, dropout + "--set training.zero=1");
    ASSERT_EQ(zero.status, 0) << zero.output;
    expect_close(losses(dir / "zero"), losses(dir / "plain"), 1e-6);
    const std::vector<float> a = final_parameters(dir / "zero"), b = final_parameters(dir / "plain");
    ASSERT_EQ(a.size(), b.size());
    EXPECT_LT(relative_l2(a, b), 1e-6);
    // Each rank held half of AdamW's m and v (the memory line counts one rank's arenas).
    EXPECT_NE(zero.output.find("adamw 117.50 KiB"), std::string::npos) << zero.output;
    const std::map<int, double> uninterrupted = losses(dir / "zero");
    std::filesystem::remove(checkpoint_path(dir / "zero", 6));
    const auto resumed = test::run_adacc("train --resume " + (dir / "zero").string() + " --set training.grad_accum=2");
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    expect_close(losses(dir / "zero"), uninterrupted, 1e-6);
}

// ZeRO-1's accounting (no processes needed): each of W ranks holds ceil(n / W) of AdamW's moments,
// the shards cover every parameter once, and `adacc memory --world-size 8 --set training.zero=1`
// prints that per-rank size; at a fixed budget the planner then fits a larger batch per rank.
TEST(ZeroOne, ShardsTheAdamWMomentsAcrossRanks) {
    const GPTConfig cfg = *gpt_preset("gpt-micro");
    const int B = 2, T = 16;
    const ActivationPlan plan(BlockGraph(cfg, B, T), cfg.n_layer);
    const std::size_t n = ParameterLayout(cfg).total();
    const ModelMemory whole = GPTModel::plan_memory(cfg, B, T, plan, {}, ModelUse::training, ComputeTarget{});
    const ModelMemory shard =
        GPTModel::plan_memory(cfg, B, T, plan, {}, ModelUse::training, ComputeTarget{Device::cpu, DType::f32, 8});
    EXPECT_EQ(whole.optimizer_state, 2 * n * sizeof(float));
    EXPECT_EQ(shard.optimizer_state, 2 * ((n + 7) / 8) * sizeof(float));
    EXPECT_EQ(shard.parameters, whole.parameters);
    EXPECT_EQ(shard.gradients, whole.gradients);
    std::size_t covered = 0;
    for (int r = 0; r < 8; ++r) {
        const OptimizerShard s = optimizer_shard(n, 8, r);
        EXPECT_EQ(s.begin, covered) << "rank " << r;
        covered += s.count;
    }
    EXPECT_EQ(covered, n);
}

// `text` as a whole cell of a printed table (spaces either side).
std::string table_cell(const std::string& text) {
    std::string cell = " ";
    cell += text;
    cell += ' ';
    return cell;
}

TEST(ZeroOne, AdaccMemoryShowsPerRankStateAndPlanFitsALargerBatch) {
    const auto dir = write_job("zero_memory");
    const std::string config = "--config " + (dir / "job.toml").string() + " --set model.n_embd=128 --set model.n_head=4";
    const auto plain = test::run_adacc("memory " + config + " --world-size 8 --memory-budget 8MiB");
    const auto zero = test::run_adacc("memory " + config + " --world-size 8 --set training.zero=1 --memory-budget 8MiB");
    ASSERT_EQ(plain.status, 0) << plain.output;
    ASSERT_EQ(zero.status, 0) << zero.output;
    EXPECT_NE(zero.output.find("per rank of 8 data-parallel ranks"), std::string::npos) << zero.output;
    EXPECT_NE(zero.output.find("ZeRO-1"), std::string::npos) << zero.output;
    const RunConfig run = load_config(dir / "job.toml", {"model.n_embd=128", "model.n_head=4"});
    const std::size_t n = ParameterLayout(run.model).total();
    EXPECT_NE(plain.output.find(table_cell(format_bytes(2 * sizeof(float) * n))), std::string::npos) << plain.output;
    EXPECT_NE(zero.output.find(table_cell(format_bytes(2 * sizeof(float) * ((n + 7) / 8)))), std::string::npos)
        << "the adamw column holds one rank's shard:\n" << zero.output;
    // The planner at a fixed per-rank budget: a larger predicted batch with the moments sharded.
    const std::vector<int> tokens(static_cast<std::size_t>(run.training.seq_len), 1);
    const Profile unit = unit_batch_profile(run, tokens);
    const std::uint64_t budget = 8u << 20;  // unsharded, the model state alone is 6.6 MB of it
    const int unsharded = largest_planned_batch(run, unit, MemoryMode::adacc, budget, ComputeTarget{});
    const int sharded =
        largest_planned_batch(run, unit, MemoryMode::adacc, budget, ComputeTarget{Device::cpu, DType::f32, 8});
    EXPECT_GT(unsharded, 0);
    EXPECT_GT(sharded, unsharded) << "ZeRO-1 leaves more of the budget for activations";
}

}  // namespace
}  // namespace adacc
