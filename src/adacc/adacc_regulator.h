// AdaccRegulator: modes `adacc` and `recompute-opt` during training (the Adacc paper's profiler,
// policy generator and policy regulator together). At start it profiles a slice of the model
// (src/adacc/profiler.h; at a smaller batch, scaled linearly, when the slice keeping everything
// would not fit the budget), solves the MILP
// under the budget and hands the plan to the model; during training it samples the compressed
// tensors' statistics on the PolicyMonitor's backoff schedule and, when the plan stops fitting,
// re-measures the statistics with the current weights (keeping the measured timings), re-solves,
// and switches the model's plan before the next step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "src/adacc/budget_planner.h"
#include "src/adacc/codec_sampler.h"
#include "src/adacc/policy_monitor.h"
#include "src/engine/weight_init.h"

namespace adacc {

// What planned modes adacc and recompute-opt plan with (the config's [memory] section,
// src/config/config.h:regulator_options).
struct RegulatorOptions {
    bool allow_compress = true;  // false: recompute-opt
    PlannerOptions planner;
    CodecChoice codecs;
    MonitorOptions monitor;
    std::optional<std::filesystem::path> profile_file;  // reuse instead of profiling
    std::filesystem::path save_profile;                 // where to write the profile ("" = nowhere)
};

// The training run a plan is for: the model, its micro-batch, where it runs (the plan's memory is
// per rank of target.world_size ranks), and the weights it starts from when no parameters are
// given (GPT-2's initialisation from `seed`, then `stress`).
struct PlannedRun {
    GPTConfig model;
    int batch_size = 1;
    int seq_len = 1;
    std::uint64_t seed = 0;
    StressOptions stress;
    ComputeTarget target;
};

// The profile batch searches plan from: the profiler's slice at batch 1 x run.seq_len, from the
// run's initial weights (seed, stress) on the first seq_len of `tokens` (a training batch will do).
// It runs on the CPU in fp32 whatever run.target says, so `adacc memory --device cuda` needs no
// GPU: sizes and errors are what the search needs, and the planner sizes every tensor for the
// target itself.
Profile unit_batch_profile(const PlannedRun& run, const std::vector<int>& tokens);

// The largest batch `options` plan within `budget` on run.target at run.seq_len, by the planner's
// accounting on `unit` (unit_batch_profile) rescaled: nothing is allocated.
int largest_planned_batch(const PlannedRun& run, const Profile& unit, const RegulatorOptions& options,
                          std::uint64_t budget);

struct ReplanEvent {
    int step = 0;
    std::string reason;
    PlanResult::Status status = PlanResult::optimal;
    double solve_ms = 0, profile_ms = 0;
    std::size_t predicted_total_bytes = 0;
    std::uint64_t plan_fingerprint = 0;            // of the new plan
    std::vector<std::uint64_t> rank_fingerprints;  // every rank's, rank by rank (all equal: checked)
};

// Throws UserError, before the training model is allocated, when `plan` (planned mode `mode`'s
// answer for the run's batch and `budget`) totals more than run.target's memory: it names the
// plan's total and arenas, the machine's memory, and the largest batch the mode plans within that
// memory (from `profile`, rescaled; no allocation).
void check_plan_fits_machine(const PlannedRun& run, MemoryMode mode, const RegulatorOptions& options,
                             std::uint64_t budget, const AdaccPlan& plan, const Profile& profile);

class AdaccRegulator {
public:
    // `tokens`: one batch (B*T) of real training tokens to profile with; `weights` the model's
    // parameters (null: profile the run's initialisation from its seed).
    AdaccRegulator(const PlannedRun& run, std::uint64_t budget_bytes, RegulatorOptions options,
                   const std::vector<int>& tokens, const float* weights);

    const AdaccPlan& plan() const { return plan_; }
    const Profile& profile() const { return profile_; }
    std::string describe() const;  // one line: plan status, solve time, predicted memory and time

    // Call before a step's forwards: turns codec sampling on when the monitor wants a sample.
    void before_step(int step, GPTModel& model);
    // Call after the step: reads the sample, and when the plan no longer fits, re-plans and
    // switches the model to the new plan (in effect from the next step).
    std::optional<ReplanEvent> after_step(int step, GPTModel& model);
    // Time the monitor cost (sampling decode + checks), summed over the run, in ms.
    double monitor_ms() const { return monitor_ms_; }

private:
    void solve(const float* weights, const std::vector<CodecSample>& sampled);
    Profile measure(const float* weights, const std::vector<CodecSample>& sampled) const;
    void share_rank0_profile();
    std::vector<std::uint64_t> require_one_plan() const;
    std::vector<CodecSample> rank0_samples(const std::vector<CodecSample>& mine) const;
    std::vector<CodecSample> baseline() const;

    PlannedRun run_;  // run_.target: where the training model runs; the profiler's slice runs there too
    std::uint64_t budget_;
    RegulatorOptions options_;
    int measured_batch_ = 0;
    std::vector<int> tokens_;
    Profile profile_;
    AdaccPlan plan_;
    std::vector<std::uint64_t> rank_fingerprints_;  // plan_'s on every rank (require_one_plan)
    PolicyMonitor monitor_;
    CodecSampler sampler_;  // observes the model's forward on sampled steps
    bool sampling_ = false;
    double monitor_ms_ = 0, last_profile_ms_ = 0;
};

}  // namespace adacc
