// `adacc compare`: every (memory mode, batch) trained for a few steps from the same initial
// weights and data, each step exactly as training takes it (src/train/training_step.h: its
// training.grad_accum micro-batches, data.shuffle, clipping, the lr schedule), with the tape's
// measured peak, the step time (median and spread) and the loss, and the gradients' fidelity to
// keep-all's (one extra forward and backward per mode); and the largest batch each mode fits
// under a budget, checked by allocating it and running a step of one micro-batch.
//
// Timing. At each batch the modes are interleaved step by step: every mode's model, data and
// TrainingStep are allocated together, then step 1 of each mode is taken, then step 2 of each,
// and so on, the order rotated by one mode each round (round k starts with mode k mod n), so a
// machine that gets busier or quieter during the comparison slows every mode alike and no mode
// always runs right after the same other one. Each mode's steps are still exactly its own run's:
// its own model from the same initial weights, its own data loader from the data's start, so its
// losses and tape peak are those of the mode run alone. When the modes' models do not fit in
// memory together (the sum of their accounted totals, planned modes counted at the budget they
// may re-plan up to, above what the device has: host_memory_limit on the CPU), or interleaving is
// turned off, the modes of that batch run one after another as before, and every row of it says
// so and why (CompareRow::not_interleaved).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/config/run_config.h"
#include "src/engine/activation_plan.h"
#include "src/engine/model_layout.h"
#include "src/train/gradient_fidelity.h"

namespace adacc {

struct CompareRow {
    MemoryMode mode = MemoryMode::none;
    int batch = 0, seq = 0;
    bool fits = true;  // false: over the budget (none is still run, as the reference)
    bool ran = false;
    // A planned mode whose planner gave no plan: why (printed to stderr as it happens). Such a row
    // says neither that it fits nor that it does not: the planner may have failed for another
    // reason than the budget (a missing device, a profile of another model).
    std::optional<std::string> plan_error;
    std::size_t tape_peak_bytes = 0;    // measured by the tape
    std::size_t total_bytes = 0;        // every arena as allocated (tape at its planned capacity)
    std::optional<ModelMemory> memory;  // those arenas one by one (absent where nothing was planned)
    // Step times over the timed steps (those after warm-up): their median and their spread, the
    // interquartile range [p25, p75] (step_time_spread). Quartiles rather than min and max: one
    // step stalled by another process does not widen them, half the timed steps lie inside.
    double step_ms = 0, step_ms_p25 = 0, step_ms_p75 = 0;
    int timed_steps = 0;
    double tokens_per_s = 0;                            // B x T x grad_accum per step_ms
    double tokens_per_s_p25 = 0, tokens_per_s_p75 = 0;  // at step_ms_p75 and step_ms_p25
    // True where this mode's steps alternated with the other modes' of its batch (see above);
    // false where they ran one after another, with the reason in not_interleaved (no reason: the
    // batch had one mode to run).
    bool interleaved = false;
    std::optional<std::string> not_interleaved;
    double loss = 0;                       // the last step's (mean over its micro-batches)
    std::vector<double> losses;            // every step's, in order
    std::optional<double> loss_delta_pct;  // vs mode none at the same batch
    // vs mode none at the same batch, weights and data (src/train/gradient_fidelity.h)
    std::optional<GradientFidelity> gradients;
};

struct CompareOptions {
    std::vector<MemoryMode> modes;
    std::vector<int> batches;
    int steps = 5;
    int warmup = 1;            // steps left out of the median
    std::uint64_t budget = 0;  // 0: none
    // The gradients' fidelity to none's (one extra forward and backward per mode, and none's at
    // every batch: off where none cannot be allocated, a model far beyond none's largest batch).
    bool fidelity = true;
    bool interleave = true;  // false: the modes run one after another (--no-interleave)
    // The memory the modes of one batch may hold together when interleaved; 0: what the device
    // has (device_memory_bytes: host_memory_limit on the CPU). Tests set it to see the fallback.
    std::uint64_t memory_limit = 0;
};

std::vector<CompareRow> run_comparison(const RunConfig& config, const CompareOptions& options);

// The median and the quartiles of `ms` (empty: all 0), each the linear interpolation between
// the two nearest order statistics (quantile q at position q (n - 1) of the sorted values:
// numpy's default), so the median of an even count is the mean of the middle two.
struct StepTimeSpread {
    double median = 0, p25 = 0, p75 = 0;
};
StepTimeSpread step_time_spread(std::vector<double> ms);

// Per batch with none, full and a planned mode measured: the share of full recomputation's
// overhead the planned mode wins back, R = (t_full - t_mode) / (t_full - t_none) of the median
// step times, and its tokens/s over full's. One line each. R is printed only where both of its
// differences stand out of the spread: none's and full's interquartile ranges [p25, p75] do not
// overlap (else full recomputation's overhead is not measured), and neither do the mode's and
// full's (else the mode's gain over full is not measured); otherwise the line says which
// difference is inside the spread, with the ranges, and gives no R. (Ranges that touch overlap.)
std::string format_recovery(const std::vector<CompareRow>& rows);

struct MaxBatchRow {
    MemoryMode mode = MemoryMode::none;
    int max_batch = 0;            // by exact accounting
    std::size_t total_bytes = 0;  // at that batch
    bool verified = false;        // allocated and ran one step at that batch
    double ratio_vs_none = 0;     // max_batch / none's
};
std::vector<MaxBatchRow> find_max_batches(const RunConfig& config, const std::vector<MemoryMode>& modes,
                                          std::uint64_t budget);

// "table" (aligned, with a line per batch on whether its modes were interleaved), "csv" or
// "json" (an array of rows; each also carries every arena's bytes, every step's loss and
// `budget`, 0: null, for scripts/plot_compare.py).
std::string format_comparison(const std::vector<CompareRow>& rows, const std::string& format, std::uint64_t budget = 0);
std::string format_max_batches(const std::vector<MaxBatchRow>& rows, const std::string& format);

}  // namespace adacc
