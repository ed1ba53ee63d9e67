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
//     config) ends both ranks within seconds with that rank's message.
// Skipped with a message where this build has no MPI or mpirun is not installed.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "data/token_shard.h"
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

}  // namespace
}  // namespace adacc
