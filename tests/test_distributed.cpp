// Data parallelism across processes (src/dist/process_group.h), run as users run it: `mpirun -np
// 2 adacc train` on the CPU (--oversubscribe, one thread per rank) against one process.
//   * 2 ranks x batch B train as 1 process x batch 2B (dropout off): the same losses and final
//     parameters within the tolerances below — not bit for bit, because one process's matmuls
//     sum the 2B rows in another order than the two ranks' all-reduce does;
//   * 2 ranks x grad_accum 1 train as 1 process x grad_accum 2 with dropout on (rank r's
//     micro-batch is the step's micro-batch r, in data and masks alike);
//   * a 2-rank run checkpointed at step 3 and resumed on 1 rank (grad_accum 2: the same global
//     batch) continues with the losses of the uninterrupted 2-rank run;
//   * an error on one rank (a shard missing for rank 1 alone: an MPMD launch gives it another
//     config) ends both ranks within seconds with that rank's message, and so do ranks given
//     different runs (src/train/rank_agreement.h), before the first step;
//   * ZeRO-1 (training.zero = 1) trains as plain data parallelism, and its accounting: per-rank
//     AdamW state in `adacc memory --world-size`, a larger planned batch at a fixed budget;
//   * the gradient sums overlapped with backward (training.overlap_grads) give the sums of the
//     non-overlapped path bit for bit on 2 and 3 ranks, with and without ZeRO-1; each bucket they
//     start during backward holds gradients that backward no longer changes.
// The mpirun tests skip with a message where this build has no MPI or mpirun is not installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "src/adacc/adacc_regulator.h"
#include "src/adacc/profiler.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/dist/data_parallel.h"
#include "src/engine/gpt_model.h"
#include "src/io/checkpoint_folder.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

// Tolerances (u = 2^-24). Losses: the logged loss is a float. One process stores float(S/d) of a
// double sum S of per-token losses (with grad_accum 2, float(float(S0/d) + S1/d)); each rank
// stores float(S_r/d) and their double all-reduce rounds once more: from the same per-token losses
// (step 1: every token's forward is the same operations on both sides) they differ by <= 4u L.
// Later steps see parameters that differ where sums over tokens rounded differently (below), and
// no closed-form bound on steps of training exists: AdamW's update m / (sqrt(v) + eps) is flat in
// g to first order, except at step 1 for |g| within rounding of zero, where it can flip; there
// dL/dp ~ 0, so a flip moves later losses at second order, ~lr_1^2 H ~ 1e-7 relative (estimated).
// kLossRel = 4u + 13u of room for those: an estimate, not a bound.
constexpr double kU = 1.0 / (1 << 24), kLossRel = 17 * kU;
// Parameters: a flipped first update moves its parameter by 2 lr_1 = 1e-3 (lr_1 = 5e-4, the first
// warmup step), so no relative bound near 1e-6 can hold. A flip needs |g| within 2 gamma(2BT)
// sum |terms| of zero (gamma(n) = n u / (1 - n u)): about one of the ~30k elements at worst
// (estimated from g / sum |terms| ~ N(0, 1.6 / 2BT)); the L2 bound allows kFlips of them, plus 17u
// of ||p|| as for the losses.
constexpr double kLr1 = 5e-4;
constexpr int kFlips = 4;

test::ProcessResult train(const std::filesystem::path& dir, const std::string& run, int ranks,
                          const std::string& sets) {
    return test::train_job(test::adacc_binary(), dir, run, ranks, sets);
}

void expect_close(const std::map<int, double>& got, const std::map<int, double>& want, double rel) {
    ASSERT_EQ(want.size(), 6u) << "a loss per step of the job";
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [step, loss] : want) {
        ASSERT_TRUE(got.count(step)) << "step " << step;
        EXPECT_NEAR(got.at(step), loss, rel * std::fabs(loss)) << "step " << step;
    }
}

// ||got - want|| <= 2 lr_1 sqrt(flips) + rel ||want|| (the tolerances above).
::testing::AssertionResult l2_close(const std::vector<float>& got, const std::vector<float>& want, int flips,
                                    double rel) {
    if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " vs " << want.size();
    double diff2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        diff2 += std::pow(double(got[i]) - want[i], 2);
        ref2 += std::pow(double(want[i]), 2);
    }
    const double bound = 2 * kLr1 * std::sqrt(double(flips)) + rel * std::sqrt(ref2);
    if (std::sqrt(diff2) <= bound) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "L2 distance " << std::sqrt(diff2) << " (relative "
                                         << std::sqrt(diff2 / ref2) << ") above " << bound;
}

TEST(DataParallel, TwoRanksTrainAsOneProcessWithTwiceTheBatch) {
    ADACC_REQUIRE_MPI();
    const auto dir = test::write_data_parallel_job("dp_batch");
    const auto two = train(dir, "two", 2, "--set checkpoint.every=6");
    ASSERT_EQ(two.status, 0) << two.output;
    const auto one = train(dir, "one", 0, "--set training.batch_size=4 --set checkpoint.every=6");
    ASSERT_EQ(one.status, 0) << one.output;
    expect_close(test::logged_losses(dir / "two"), test::logged_losses(dir / "one"), kLossRel);
    const std::vector<float> a = test::checkpoint_parameters(dir / "two"), b = test::checkpoint_parameters(dir / "one");
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(l2_close(a, b, kFlips, 17 * kU));
    // Rank 0 alone logs: one step line per step, tokens per step counting both ranks (2 x 2 x 16).
    EXPECT_EQ(two.output.find("step      1/6"), two.output.rfind("step      1/6")) << two.output;
}

TEST(DataParallel, TwoRanksTrainAsOneProcessWithTwiceTheMicroBatchesWithDropout) {
    ADACC_REQUIRE_MPI();
    const auto dir = test::write_data_parallel_job("dp_accum");
    const std::string dropout = "--set model.dropout=0.1 ";
    ASSERT_EQ(train(dir, "two", 2, dropout).status, 0);
    ASSERT_EQ(train(dir, "one", 0, dropout + "--set training.grad_accum=2").status, 0);
    expect_close(test::logged_losses(dir / "two"), test::logged_losses(dir / "one"), kLossRel);
}

TEST(DataParallel, ATwoRankRunResumesOnOneRank) {
    ADACC_REQUIRE_MPI();
    const auto dir = test::write_data_parallel_job("dp_resume");
    ASSERT_EQ(train(dir, "run", 2, "--set checkpoint.every=3").status, 0);
    const std::map<int, double> uninterrupted = test::logged_losses(dir / "run");
    // Killed after step 3's checkpoint, before step 6's: resumed by one process taking both
    // ranks' batches each step.
    std::filesystem::remove(checkpoint_path(dir / "run", 6));
    const auto resumed = test::run_adacc("train --resume " + (dir / "run").string() + " --set training.grad_accum=2");
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("resumed from"), std::string::npos) << resumed.output;
    expect_close(test::logged_losses(dir / "run"), uninterrupted, kLossRel);
    // The 6 batches taken by step 3 cannot be shared by 4 ranks.
    std::filesystem::remove(checkpoint_path(dir / "run", 6));
    const auto four =
        test::run_shell(test::mpirun(4) + test::adacc_binary() + " train --resume " + (dir / "run").string());
    EXPECT_NE(four.status, 0);
    EXPECT_NE(four.output.find("cannot share evenly"), std::string::npos) << four.output;
}

TEST(DataParallel, AnErrorOnOneRankEndsEveryRank) {
    ADACC_REQUIRE_MPI();
    const auto dir = test::write_data_parallel_job("dp_error");
    const std::string common = test::adacc_binary() + " train --config " + (dir / "job.toml").string() +
                               " --set training.steps=1000000 --set logging.run_dir=" + (dir / "run").string();
    const auto start = std::chrono::steady_clock::now();
    const auto r = test::run_shell(
        test::mpirun(1) + common + " : -np 1 " + common + " --set data.train=" + (dir / "missing_*.bin").string(), true,
        120);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(r.status, 0) << r.output;
    EXPECT_NE(r.status, 124) << "the job hung: " << r.output;
    EXPECT_NE(r.output.find("rank 1 of 2: error: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("missing_*.bin"), std::string::npos) << r.output;
    EXPECT_LT(seconds, 60) << r.output;
}

// A rank killed mid-step (SIGKILL: the OOM killer, a node failing) ends the job within seconds,
// nonzero, with the launcher naming the rank; the newest checkpoint is intact, and the run
// resumes on 2 ranks bit for bit as the uninterrupted run went (on 1 rank, a 2-rank checkpoint
// resumes within kLossRel: ATwoRankRunResumesOnOneRank).
// The job is long enough (1500 steps of about a millisecond each on a fast machine) that the kill,
// which looks for rank 1 in /proc once the step-10 checkpoint appears, lands mid-run.
TEST(DataParallel, ARankKilledMidStepEndsTheJobAndTheRunResumes) {
    ADACC_REQUIRE_MPI();
    const auto dir = test::write_data_parallel_job("dp_killed");
    const std::string sets = "--set training.steps=1500 --set training.val_every=0 --set checkpoint.every=10 ";
    ASSERT_EQ(train(dir, "uninterrupted", 2, sets).status, 0);
    const auto run = dir / "run";
    // The job in the background; once its step-10 checkpoint is there, rank 1 is killed.
    const auto script = dir / "kill.sh";
    std::ofstream(script) << test::mpirun(2) << test::adacc_binary() << " train --config "
                          << (dir / "job.toml").string() << " --set logging.run_dir=" << run.string() << " " << sets
                          << " > " << (dir / "job.out").string() << " 2>&1 &\njob=$!\n"
                          << "while [ ! -e " << checkpoint_path(run, 10).string()
                          << " ] && kill -0 $job; do sleep 0.01; done\n"
                          // This job's rank 1 (not another test's): one grep over every process's
                          // environment finds the rank-1 processes, then their command lines pick
                          // this run's (a process may end between the glob and the read: quietly
                          // skipped). Forking twice per process instead took seconds, longer than the job.
                          << "for f in $(grep -lzx OMPI_COMM_WORLD_RANK=1 /proc/[0-9]*/environ 2>/dev/null); do\n"
                          << "  d=${f%/environ}\n"
                          << "  { tr '\\0' ' ' < $d/cmdline; } 2>/dev/null | grep -q 'adacc.* train .*" << run.string()
                          << "' && kill -9 ${d#/proc/}\n"
                          << "done\nkilled=$(date +%s%N)\nwait $job\nstatus=$?\n"
                          << "echo \"status $status after $(( ($(date +%s%N) - killed) / 1000000 )) ms\"\n";
    const auto killed = test::run_shell("sh " + script.string(), true, 300);
    int status = 0, ms = 0;
    const auto report = killed.output.rfind("status ");
    ASSERT_NE(report, std::string::npos) << killed.output;
    ASSERT_EQ(std::sscanf(killed.output.c_str() + report, "status %d after %d ms", &status, &ms), 2) << killed.output;
    const std::string job_output = test::read_bytes(dir / "job.out");
    EXPECT_NE(status, 0) << job_output;
    EXPECT_LT(ms, 60000) << job_output;
    EXPECT_NE(job_output.find("rank 1"), std::string::npos) << "the launcher names the rank: " << job_output;
    EXPECT_EQ(job_output.find("step   1500/1500"), std::string::npos) << "the job finished before the kill";
    const auto newest = newest_complete_checkpoint(run);
    ASSERT_TRUE(newest) << "no complete checkpoint after the kill";
    EXPECT_FALSE(test::checkpoint_parameters(run).empty()) << "its tensors read with their checksums";

    const auto two = test::run_shell(test::mpirun(2) + test::adacc_binary() + " train --resume " + run.string());
    ASSERT_EQ(two.status, 0) << two.output;
    EXPECT_EQ(test::logged_losses(run), test::logged_losses(dir / "uninterrupted")) << "2 ranks resume bit for bit";
    EXPECT_EQ(test::checkpoint_parameters(run), test::checkpoint_parameters(dir / "uninterrupted"));
}

// Each step's plan fingerprint in RUN/metrics.jsonl, by step.
std::map<int, std::string> step_fingerprints(const std::filesystem::path& run) {
    std::map<int, std::string> out;
    std::ifstream in(run / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const auto r = nlohmann::json::parse(line);
        if (r.contains("loss")) out[r["step"].get<int>()] = r.value("plan_fingerprint", "");
    }
    return out;
}

// One plan per job: under adacc every rank solves the MILP from rank 0's profile and follows rank
// 0's monitor, and checks at each plan that its plan is rank 0's (a rank that differs ends the
// job). The profile is pinned with its errors understated by half, so the first samples leave it
// and the monitor re-plans once memory.min_replan_steps = 3 allows: mid-run, from a profile each
// rank would otherwise have measured on its own batch. The budget lies between keeping
// everything and compressing everything, so the plan mixes policies.
TEST(DataParallel, AdaccRanksRunRankZerosPlanThroughAReplan) {
    ADACC_REQUIRE_MPI();
    const auto dir = test::write_data_parallel_job("dp_adacc");
    const RunConfig job = load_config(dir / "job.toml");
    const int B = job.training.batch_size, T = job.training.seq_len;
    Profile profile = profile_block(job.model, B, B, T, test::random_tokens(B * T, 97, 5),
                                    ProfileWeights{nullptr, job.training.seed, {}}, ComputeTarget{});
    test::favour_compression(profile);
    for (auto& t : profile.tensors)
        for (auto& m : t.codecs) {
            m.relative_error /= 2;
            for (double& e : m.layer_errors) e /= 2;
        }
    profile.save(dir / "profile.json");
    const std::uint64_t compressed = test::everything_compressed_memory(job.model, B, T, profile).total();
    const std::uint64_t kept =
        GPTModel::plan_memory(job.model, B, T, ActivationPlan(BlockGraph(job.model, B, T), job.model.n_layer), {},
                              ModelUse::training)
            .total();
    const std::string sets = "--set memory.mode=adacc --set memory.budget=" + std::to_string((compressed + kept) / 2) +
                             " --set memory.profile=" + (dir / "profile.json").string() +
                             " --set memory.min_replan_steps=3 --set training.val_every=0";
    const auto two = train(dir, "two", 2, sets);
    ASSERT_EQ(two.status, 0) << two.output;
    int replans = 0, steps = 0;
    std::set<std::string> fingerprints;
    std::ifstream in(dir / "two" / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
        const auto r = nlohmann::json::parse(line);
        if (r.value("event", "") == "replan") {
            ++replans;
            EXPECT_GE(r["step"].get<int>(), 3) << line;
            ASSERT_TRUE(r.contains("plan_fingerprint")) << line;
            // Rank 0's log carries both ranks' fingerprints of the new plan, each rank 0's.
            const nlohmann::json both = nlohmann::json::array({r["plan_fingerprint"], r["plan_fingerprint"]});
            EXPECT_EQ(r.value("rank_plan_fingerprints", nlohmann::json()), both) << line;
        }
        if (r.contains("loss")) {
            ++steps;
            ASSERT_TRUE(r.contains("plan_fingerprint")) << line;
            fingerprints.insert(r["plan_fingerprint"].get<std::string>());
        }
    }
    EXPECT_EQ(steps, 6);
    EXPECT_GE(replans, 1) << "the understated profile must be re-planned mid-run\n" << two.output;
    EXPECT_GE(fingerprints.size(), 2u) << "the re-plan changed nothing";
    // One process taking both ranks' micro-batches runs the same plans at every step (rank 0's
    // batch is its first micro-batch: the profile and the samples are the same).
    const auto one = train(dir, "one", 0, sets + " --set training.grad_accum=2");
    ASSERT_EQ(one.status, 0) << one.output;
    EXPECT_EQ(step_fingerprints(dir / "two"), step_fingerprints(dir / "one"));
    expect_close(test::logged_losses(dir / "two"), test::logged_losses(dir / "one"), kLossRel);
}

// Ranks given different runs: a --set that differs per rank (an MPMD launch gives rank 1 its own)
// hung the job (the steps), aborted it in MPI with MPI_ERR_TRUNCATE (a shape) or trained replicas
// that differ with exit 0 (the learning rate), and so did --init-from files that differ. Each now
// ends the job before the first step, exit 2, naming the key and both values. llm.c files and
// Hugging Face folders are told apart by their bytes' digests; the same files on every rank agree.
TEST(DataParallel, RanksGivenDifferentRunsEndTheJobNamingTheDifference) {
    ADACC_REQUIRE_MPI();
    const auto dir = test::write_data_parallel_job("dp_disagree");
    const std::string common = test::adacc_binary() + " train --config " + (dir / "job.toml").string() +
                               " --set logging.run_dir=" + (dir / "run").string() + " --overwrite";
    ASSERT_EQ(train(dir, "source", 0, "--set checkpoint.every=2").status, 0);
    // The weights after step 2 and after step 6, as llm.c files and Hugging Face folders.
    const std::string early = checkpoint_path(dir / "source", 2).string(), late = (dir / "source").string();
    for (const auto& [checkpoint, name] : {std::pair{early, "early"}, std::pair{late, "late"}})
        for (const std::string& to : {" --llmc-model " + (dir / (std::string(name) + ".bin")).string(),
                                      " --hf-model " + (dir / ("hf_" + std::string(name))).string()}) {
            const auto exported = test::run_adacc("export --checkpoint " + checkpoint + to);
            ASSERT_EQ(exported.status, 0) << exported.output;
        }
    const auto init_from = [&](const std::string& file) { return "--init-from " + (dir / file).string(); };
    struct Case {
        std::string rank0_sets, rank1_sets, difference;
    };
    const std::vector<Case> cases = {
        {"", "--set training.steps=3", "training.steps: 6 on rank 0, 3 on rank 1"},
        {"", "--set model.n_layer=3", "model.n_layer: 2 on rank 0, 3 on rank 1"},
        {"", "--set lr.max=0.002", "lr.max: 0.001 on rank 0, 0.002 on rank 1"},
        {"", "--init-from " + early, "weights: initialised from training.seed on rank 0, adacc checkpoint, digest 0x"},
        {init_from("early.bin"), init_from("late.bin"), " on rank 0, llm.c model file, digest 0x"},
        {init_from("hf_early"), init_from("hf_late"), " on rank 0, Hugging Face GPT-2 folder, digest 0x"},
    };
    for (const auto& c : cases) {
        const auto start = std::chrono::steady_clock::now();
        const auto r = test::run_shell(
            test::mpirun(1) + common + " " + c.rank0_sets + " : -np 1 " + common + " " + c.rank1_sets, true, 120);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        EXPECT_EQ(r.status, 2) << c.rank1_sets << "\n" << r.output;
        EXPECT_NE(r.output.find("rank 1 of 2: error: this rank was given another run than rank 0"), std::string::npos)
            << r.output;
        EXPECT_NE(r.output.find(c.difference), std::string::npos) << r.output;
        EXPECT_EQ(r.output.find("step      1/"), std::string::npos) << "no step may run: " << r.output;
        EXPECT_LT(seconds, 60) << r.output;
    }
    for (const std::string file : {"late.bin", "hf_late"}) {
        const auto r = train(dir, "from_" + file, 2, init_from(file));
        EXPECT_EQ(r.status, 0) << file << ": the same file on both ranks\n" << r.output;
    }
}

// ZeRO-1 gives the result of plain data parallelism: the same gradient sums (reduce-scatter
// instead of all-reduce: for two ranks the same additions) and updates; only the gradient norm is
// summed in another order (per shard, then over ranks). Its norm is within 3u, the clipping factor
// within 5u: a positive factor, so no update flips (kFlips = 0); AdamW's step-1 update moves by
// at most 5u / 4 (|dU / d log g| <= 1/4) and each parameter by about an ulp, and later steps see
// only such ulp-level differences (17u of ||p||, the losses' room; estimated, as for the losses).
// A ZeRO-1 checkpoint holds every moment (gathered) and resumes on one process.
TEST(DataParallel, ZeroOneTrainsAsPlainDataParallelismAndResumesOnOneRank) {
    ADACC_REQUIRE_MPI();
    const auto dir = test::write_data_parallel_job("dp_zero");
    const std::string dropout = "--set model.dropout=0.1 --set checkpoint.every=3 ";
    ASSERT_EQ(train(dir, "plain", 2, dropout).status, 0);
    const auto zero = train(dir, "zero", 2, dropout + "--set training.zero=1");
    ASSERT_EQ(zero.status, 0) << zero.output;
    expect_close(test::logged_losses(dir / "zero"), test::logged_losses(dir / "plain"), kLossRel);
    const std::vector<float> a = test::checkpoint_parameters(dir / "zero"),
                             b = test::checkpoint_parameters(dir / "plain");
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(l2_close(a, b, 0, 17 * kU));
    // Each rank held half of AdamW's m and v (the memory line counts one rank's arenas).
    EXPECT_NE(zero.output.find("adamw 117.50 KiB"), std::string::npos) << zero.output;
    const std::map<int, double> uninterrupted = test::logged_losses(dir / "zero");
    std::filesystem::remove(checkpoint_path(dir / "zero", 6));
    const auto resumed = test::run_adacc("train --resume " + (dir / "zero").string() + " --set training.grad_accum=2");
    ASSERT_EQ(resumed.status, 0) << resumed.output;
    expect_close(test::logged_losses(dir / "zero"), uninterrupted, kLossRel);
}

// ZeRO-1's accounting (no processes needed): each of W ranks holds ceil(n / W) of AdamW's moments,
// the shards cover every parameter once, and `adacc memory --world-size 8 --set training.zero=1`
// prints that per-rank size; at a fixed budget the planner then fits a larger batch per rank. The
// arrays the collectives address whole (gradients, and the working copy or else the parameters)
// are padded to W equal shards; beside a bf16 working copy the fp32 masters are sharded too.
TEST(ZeroOne, ShardsTheAdamWMomentsAcrossRanks) {
    const GPTConfig cfg = *gpt_preset("gpt-micro");
    const int B = 2, T = 16;
    const ActivationPlan plan(BlockGraph(cfg, B, T), cfg.n_layer);
    constexpr int W = 7;  // not a divisor of n: the last shard is short, and the padding shows
    const std::size_t n = ParameterLayout(cfg).total(), shard = (n + W - 1) / W;
    ASSERT_NE(n % W, 0u);
    auto memory = [&](Device device, DType dtype, int shards) {
        return GPTModel::plan_memory(cfg, B, T, plan, {}, ModelUse::training, ComputeTarget{device, dtype, shards});
    };
    const ModelMemory whole = memory(Device::cpu, DType::f32, 1), sharded = memory(Device::cpu, DType::f32, W);
    EXPECT_EQ(whole.optimizer_state, 2 * n * sizeof(float));
    EXPECT_EQ(sharded.optimizer_state, 2 * shard * sizeof(float));
    EXPECT_EQ(whole.parameters, n * sizeof(float));
    EXPECT_EQ(sharded.parameters, W * shard * sizeof(float)) << "fp32: the masters are the working weights, whole";
    EXPECT_EQ(whole.gradients, n * sizeof(float));
    EXPECT_EQ(sharded.gradients, W * shard * sizeof(float));
    const ModelMemory bf16_whole = memory(Device::cuda, DType::bf16, 1);
    const ModelMemory bf16_sharded = memory(Device::cuda, DType::bf16, W);
    EXPECT_EQ(bf16_whole.parameters, n * sizeof(float));
    EXPECT_EQ(bf16_sharded.parameters, shard * sizeof(float)) << "beside a bf16 working copy, a shard of the masters";
    EXPECT_EQ(bf16_whole.working_weights, n * sizeof(bf16));
    EXPECT_EQ(bf16_sharded.working_weights, W * shard * sizeof(bf16));
    EXPECT_EQ(bf16_sharded.optimizer_state, sharded.optimizer_state);
    const ModelMemory inference =
        GPTModel::plan_memory(cfg, B, T, plan, {}, ModelUse::inference, ComputeTarget{Device::cuda, DType::bf16, W});
    EXPECT_EQ(inference.parameters, n * sizeof(float)) << "inference holds every parameter, unpadded";
    EXPECT_EQ(inference.working_weights, n * sizeof(bf16));
    std::size_t covered = 0;
    for (int r = 0; r < W; ++r) {
        const OptimizerShard s = optimizer_shard(n, W, r);
        EXPECT_EQ(s.begin, covered) << "rank " << r;
        covered += s.count;
    }
    EXPECT_EQ(covered, n);
    EXPECT_EQ(sharded_span(n, W), W * shard);
    EXPECT_EQ(sharded_span(n, 1), n);
}

// `text` as a whole cell of a printed table (spaces either side).
std::string table_cell(const std::string& text) {
    std::string cell = " ";
    cell += text;
    cell += ' ';
    return cell;
}

TEST(ZeroOne, AdaccMemoryShowsPerRankStateAndPlanFitsALargerBatch) {
    const auto dir = test::write_data_parallel_job("zero_memory");
    const std::string config =
        "--config " + (dir / "job.toml").string() + " --set model.n_embd=128 --set model.n_head=4";
    const auto plain = test::run_adacc("memory " + config + " --world-size 8 --memory-budget 8MiB");
    const auto zero =
        test::run_adacc("memory " + config + " --world-size 8 --set training.zero=1 --memory-budget 8MiB");
    ASSERT_EQ(plain.status, 0) << plain.output;
    ASSERT_EQ(zero.status, 0) << zero.output;
    EXPECT_NE(zero.output.find("per rank of 8 data-parallel ranks"), std::string::npos) << zero.output;
    EXPECT_NE(zero.output.find("ZeRO-1"), std::string::npos) << zero.output;
    const RunConfig run = load_config(dir / "job.toml", {"model.n_embd=128", "model.n_head=4"});
    const std::size_t n = ParameterLayout(run.model).total();
    EXPECT_NE(plain.output.find(table_cell(format_bytes(2 * sizeof(float) * n))), std::string::npos) << plain.output;
    EXPECT_NE(zero.output.find(table_cell(format_bytes(2 * sizeof(float) * ((n + 7) / 8)))), std::string::npos)
        << "the adamw column holds one rank's shard:\n"
        << zero.output;
    EXPECT_NE(zero.output.find("(ZeRO-1 over 8 ranks: 9.00 per rank, the moments sharded)"), std::string::npos)
        << zero.output;
    // In bf16 on CUDA the fp32 masters are sharded too: 4 (gradient) + 2 (bf16 copy) + 12 / 8.
    const auto gpu = test::run_adacc("memory " + config + " --device cuda --world-size 8 --set training.zero=1");
    ASSERT_EQ(gpu.status, 0) << gpu.output;
    EXPECT_NE(gpu.output.find("ZeRO-1: AdamW's moments and the fp32 masters sharded"), std::string::npos) << gpu.output;
    EXPECT_NE(gpu.output.find("(ZeRO-1 over 8 ranks: 7.50 per rank, the moments and masters sharded)"),
              std::string::npos)
        << gpu.output;
    const std::size_t masters = sizeof(float) * ((n + 7) / 8), working = sizeof(bf16) * ((n + 7) / 8 * 8);
    EXPECT_NE(gpu.output.find(table_cell(format_bytes(masters + working))), std::string::npos)
        << "the params column holds one rank's shard of the masters and the whole bf16 copy:\n"
        << gpu.output;
    // The planner at a fixed per-rank budget: a larger predicted batch with the moments sharded.
    const std::vector<int> tokens(static_cast<std::size_t>(run.training.seq_len), 1);
    const Profile unit = unit_batch_profile(planned_run(run, ComputeTarget{}), tokens);
    const std::uint64_t budget = 8u << 20;  // unsharded, the model state alone is 6.6 MB of it
    const RegulatorOptions options = regulator_options(run, MemoryMode::adacc);
    const int unsharded = largest_planned_batch(planned_run(run, ComputeTarget{}), unit, options, budget);
    const int sharded =
        largest_planned_batch(planned_run(run, ComputeTarget{Device::cpu, DType::f32, 8}), unit, options, budget);
    EXPECT_GT(unsharded, 0);
    EXPECT_GT(sharded, unsharded) << "ZeRO-1 leaves more of the budget for activations";
}

// Overlap is the non-overlapped path's arithmetic: both start the same collectives (a bucket per
// block, then the embeddings') in the same order, only at other times, so every sum is the same
// bits, on 3 ranks too, where MPI's summation order (which rank's addend comes first) depends on
// the collective and its size. Two micro-batches per rank (the buckets start during the second
// backward only), dropout on, 4 steps; the losses and the final parameters must be equal.
void expect_overlap_changes_no_bit(int ranks) {
    const auto dir = test::write_data_parallel_job("dp_overlap_" + std::to_string(ranks));
    const std::string job =
        "--set training.grad_accum=2 --set model.dropout=0.1 --set training.steps=4 "
        "--set training.val_every=0 ";
    for (const std::string zero : {"0", "1"}) {
        const std::string sets = job + "--set training.zero=" + zero;
        const auto on = train(dir, "on" + zero, ranks, sets);
        ASSERT_EQ(on.status, 0) << on.output;
        const auto off = train(dir, "off" + zero, ranks, sets + " --set training.overlap_grads=false");
        ASSERT_EQ(off.status, 0) << off.output;
        const std::map<int, double> losses = test::logged_losses(dir / ("on" + zero));
        EXPECT_EQ(losses.size(), 4u) << on.output;
        EXPECT_EQ(losses, test::logged_losses(dir / ("off" + zero))) << "training.zero = " << zero;
        EXPECT_EQ(test::checkpoint_parameters(dir / ("on" + zero)), test::checkpoint_parameters(dir / ("off" + zero)))
            << "training.zero = " << zero;
    }
}

TEST(DataParallel, OverlappedGradientSumsAreTheSerialOnesBitForBitOnTwoRanks) {
    ADACC_REQUIRE_MPI();
    expect_overlap_changes_no_bit(2);
}

TEST(DataParallel, OverlappedGradientSumsAreTheSerialOnesBitForBitOnThreeRanks) {
    ADACC_REQUIRE_MPI();
    expect_overlap_changes_no_bit(3);
}

// Every parameter's gradient is in exactly one bucket; under ZeRO-1 every piece lies in one
// optimizer shard and goes to the rank holding it.
void expect_buckets_cover_every_parameter_once(const ParameterLayout& layout, int world_size, bool sharded) {
    std::vector<int> times(layout.total(), 0);
    for (const auto& bucket : gradient_buckets(layout, world_size, sharded))
        for (const GradientPiece& p : bucket) {
            for (std::size_t i = p.begin; i < p.begin + p.count; ++i) ++times[i];
            if (!sharded) {
                EXPECT_EQ(p.root, -1);
                continue;
            }
            const OptimizerShard shard = optimizer_shard(layout.total(), world_size, p.root);
            EXPECT_GE(p.begin, shard.begin) << "piece at " << p.begin;
            EXPECT_LE(p.begin + p.count, shard.begin + shard.count) << "piece at " << p.begin;
        }
    EXPECT_EQ(std::ranges::count(times, 1), static_cast<std::ptrdiff_t>(layout.total()));
}

// The premise of overlap: when backward reports block l (GPTModel::set_block_gradients_hook), the
// gradients of bucket L - 1 - l are final — nothing later in that backward writes them — in a
// step's first backward (overwriting) and in its second (accumulating), with dropout and a
// chunked classifier (which writes wte's gradient in forward). Checked by copying the bucket at
// the report and comparing the copy with the gradients after backward, bit for bit.
TEST(GradientBuckets, EachBlocksBucketIsFinalWhenBackwardReportsTheBlock) {
    GPTConfig cfg = *gpt_preset("gpt-micro");
    cfg.n_layer = 3;
    cfg.dropout = 0.1f;
    cfg.classifier_chunk = 8;
    const int B = 2, T = 16, L = cfg.n_layer;
    GPTModel model(cfg, B, T);
    model.init_weights(7);
    const ParameterLayout& layout = model.layout();
    expect_buckets_cover_every_parameter_once(layout, 1, false);
    expect_buckets_cover_every_parameter_once(layout, 3, true);
    const auto buckets = gradient_buckets(layout, 1, false);
    ASSERT_EQ(buckets.size(), static_cast<std::size_t>(L + 1));
    // Block l's bucket holds its slice of every per-layer tensor (bucket 0 also lnfw and lnfb).
    for (int l = 0; l < L; ++l)
        for (const ParamTensorInfo& t : layout.tensors()) {
            if (!t.per_layer) continue;
            const std::size_t begin = t.offset + static_cast<std::size_t>(l) * (t.numel / L);
            const auto& bucket = buckets[static_cast<std::size_t>(L - 1 - l)];
            EXPECT_TRUE(std::ranges::any_of(
                bucket,
                [&](const GradientPiece& p) { return p.begin <= begin && begin + t.numel / L <= p.begin + p.count; }))
                << t.name << " of block " << l;
        }

    const float* grads = model.grads();
    for (int micro = 0; micro < 2; ++micro) {
        const std::vector<int> tokens = test::random_tokens(B * T, cfg.vocab_size, 11 + micro);
        const std::vector<int> targets = test::random_tokens(B * T, cfg.vocab_size, 21 + micro);
        const DropoutContext dropout{5, 1, static_cast<std::uint64_t>(micro), true};
        model.forward_step(tokens.data(), targets.data(), B, T, dropout, 1.0f / (2 * B * T), 2.0 * B * T, micro > 0);
        std::vector<int> reported;
        std::vector<std::vector<float>> at_report(buckets.size());
        model.set_block_gradients_hook([&](int layer) {
            reported.push_back(layer);
            for (const GradientPiece& p : buckets[static_cast<std::size_t>(L - 1 - layer)])
                at_report[static_cast<std::size_t>(L - 1 - layer)].insert(
                    at_report[static_cast<std::size_t>(L - 1 - layer)].end(), grads + p.begin,
                    grads + p.begin + p.count);
        });
        model.backward(tokens.data(), B, T, micro > 0);
        model.set_block_gradients_hook(nullptr);
        EXPECT_EQ(reported, (std::vector<int>{2, 1, 0})) << "backward reports the blocks last to first";
        for (int b = 0; b < L; ++b) {
            std::vector<float> final_values;
            for (const GradientPiece& p : buckets[static_cast<std::size_t>(b)])
                final_values.insert(final_values.end(), grads + p.begin, grads + p.begin + p.count);
            EXPECT_EQ(at_report[static_cast<std::size_t>(b)], final_values) << "bucket " << b << ", micro " << micro;
        }
    }
}

}  // namespace
}  // namespace adacc
