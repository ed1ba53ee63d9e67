// AdaccRegulator: modes `adacc` and `recompute-opt` during training (the Adacc paper's profiler,
// policy generator and policy regulator together). At start it profiles the model (at a smaller
// batch, scaled linearly, when keeping everything would not fit the budget), solves the MILP
// under the budget and hands the plan to the model; during training it samples the compressed
// tensors' statistics on the PolicyMonitor's backoff schedule and, when the plan stops fitting,
// re-measures the statistics with the current weights (keeping the measured timings), re-solves,
// and switches the model's plan before the next step.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "src/adacc/budget_planner.h"
#include "src/adacc/codec_sampler.h"
#include "src/adacc/policy_monitor.h"
#include "src/config/run_config.h"

namespace adacc {

struct RegulatorOptions {
    bool allow_compress = true;      // false: recompute-opt
    PlannerOptions planner;
    CodecChoice codecs;
    MonitorOptions monitor;
    std::optional<std::filesystem::path> profile_file;  // reuse instead of profiling
    std::filesystem::path save_profile;                 // where to write the profile ("" = nowhere)
};

// The options of planned mode `mode` (adacc or recompute-opt) as the config's [memory] section
// sets them: memory.granularity, memory.profile, memory.monitor_max_interval and
// memory.min_replan_steps. Training, `adacc plan` and `adacc compare` all start from it; where to
// save the profile is the caller's (the trainer writes it into the run folder).
RegulatorOptions regulator_options(const RunConfig& config, MemoryMode mode);

struct ReplanEvent {
    int step = 0;
    std::string reason;
    PlanResult::Status status = PlanResult::optimal;
    double solve_ms = 0, profile_ms = 0;
    std::size_t predicted_total_bytes = 0;
};

class AdaccRegulator {
public:
    // `tokens`: one batch (B*T) of real training tokens to profile with; `weights` the model's
    // parameters (null: profile an initialisation from the config's seed).
    AdaccRegulator(const RunConfig& config, std::uint64_t budget_bytes, RegulatorOptions options,
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
    void solve(const std::vector<int>& tokens, const float* weights);
    std::vector<CodecSample> baseline() const;

    RunConfig config_;
    std::uint64_t budget_;
    RegulatorOptions options_;
    int measured_batch_ = 0;
    std::vector<int> tokens_;
    Profile profile_;
    AdaccPlan plan_;
    PolicyMonitor monitor_;
    CodecSampler sampler_;  // observes the model's forward on sampled steps
    bool sampling_ = false;
    double monitor_ms_ = 0, last_profile_ms_ = 0;
};

}  // namespace adacc
