// PolicyMonitor (docs/design.md, 'The monitor and re-planning'): watches the compressed tensors'
// statistics (outlier fraction, relative error, compressed size) with exponential backoff — every
// step at first, then every 2, 4, 8, ... steps (up to a cap) while they stay stable, back to every
// step when they move — and says when the plan no longer fits: a statistic left its tolerance
// around the value the plan was solved with, an error exceeds memory.max_codec_error, or the
// predicted memory exceeds the budget. A minimum number of steps between plan switches keeps it
// from thrashing.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "models/gpt_block.h"

namespace adacc {

struct MonitorOptions {
    int max_interval = 64;                // cap of the backoff (steps between samples)
    double stable_outlier_delta = 0.005;  // a move smaller than this (absolute) counts as stable
    double stable_relative_delta = 0.05;  // for error and size (relative)
    double outlier_tolerance = 0.02;      // re-plan when a fraction moves this far from the plan's
    double error_tolerance = 0.5;         // ... error grows by this factor (relative, 0.5 = +50%)
    double size_tolerance = 0.25;         // ... compressed size grows by this factor
    double max_codec_error = HUGE_VAL;    // ... or an error exceeds this (memory.max_codec_error)
    int min_steps_between_replans = 20;
};

// One compressed tensor's statistics at one sample (a block kind under one codec, worst case
// over the layers that use it).
struct CodecSample {
    TensorKind kind = TensorKind::x;
    Codec codec = Codec::group_int4;
    double outlier_fraction = 0;
    double relative_error = 0;
    std::size_t bytes = 0;
    bool outlier_cap_reached = false;  // the outlier codec kept as many channels as its cap allows
};

class PolicyMonitor {
public:
    explicit PolicyMonitor(MonitorOptions options = {});

    // The statistics the current plan was solved with; resets the schedule to every step.
    void set_baseline(int step, const std::vector<CodecSample>& baseline);
    bool should_sample(int step) const { return step >= next_sample_; }
    int interval() const { return interval_; }

    // Records a sample taken at `step`, updates the backoff, and returns the reason to re-plan
    // (empty when the plan still fits or the last switch is too recent).
    std::optional<std::string> observe(int step, const std::vector<CodecSample>& sample, std::size_t predicted_bytes,
                                       std::size_t budget_bytes);

private:
    bool moved(const std::vector<CodecSample>& sample) const;
    std::optional<std::string> out_of_tolerance(const std::vector<CodecSample>& sample) const;
    const CodecSample* baseline_for(const CodecSample& sample) const;

    MonitorOptions options_;
    std::vector<CodecSample> baseline_, last_;
    int interval_ = 1, next_sample_ = 0, last_replan_ = -1000000;
};

}  // namespace adacc
