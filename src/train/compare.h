// `adacc compare`: every (memory mode, batch) trained for a few steps from the same initial
// weights and data, each step exactly as training takes it (src/train/training_step.h: its
// training.grad_accum micro-batches, data.shuffle, clipping, the lr schedule), with the tape's
// measured peak, the step time and the loss, and the gradients' fidelity to keep-all's (one extra
// forward and backward per mode); and the largest batch each mode fits under a budget,
// checked by allocating it and running a step of one micro-batch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "src/engine/activation_plan.h"
#include "src/config/run_config.h"
#include "src/train/gradient_fidelity.h"

namespace adacc {

struct CompareRow {
    MemoryMode mode = MemoryMode::none;
    int batch = 0, seq = 0;
    bool fits = true;                 // false: over the budget (none is still run, as the reference)
    bool ran = false;
    // A planned mode whose planner gave no plan: why (printed to stderr as it happens). Such a row
    // says neither that it fits nor that it does not: the planner may have failed for another
    // reason than the budget (a missing device, a profile of another model).
    std::optional<std::string> plan_error;
    std::size_t tape_peak_bytes = 0;  // measured by the tape
    std::size_t total_bytes = 0;      // every arena as allocated (tape at its planned capacity)
    double step_ms = 0;               // median over the steps after warm-up
    double tokens_per_s = 0;          // B x T x grad_accum per step_ms
    double loss = 0;                  // the last step's (mean over its micro-batches)
    std::optional<double> loss_delta_pct;  // vs mode none at the same batch
    // vs mode none at the same batch, weights and data (src/train/gradient_fidelity.h)
    std::optional<GradientFidelity> gradients;
};

struct CompareOptions {
    std::vector<MemoryMode> modes;
    std::vector<int> batches;
    int steps = 5;
    int warmup = 1;                   // steps left out of the median
    std::uint64_t budget = 0;         // 0: none
    // The gradients' fidelity to none's (one extra forward and backward per mode, and none's at
    // every batch: off where none cannot be allocated, a model far beyond none's largest batch).
    bool fidelity = true;
};

std::vector<CompareRow> run_comparison(const RunConfig& config, const CompareOptions& options);

// Per batch with none, full and a planned mode measured: the share of full recomputation's
// overhead the planned mode wins back, R = (t_full - t_mode) / (t_full - t_none), and its
// tokens/s over full's. One line each.
std::string format_recovery(const std::vector<CompareRow>& rows);

struct MaxBatchRow {
    MemoryMode mode = MemoryMode::none;
    int max_batch = 0;                // by exact accounting
    std::size_t total_bytes = 0;      // at that batch
    bool verified = false;            // allocated and ran one step at that batch
    double ratio_vs_none = 0;         // max_batch / none's
};
std::vector<MaxBatchRow> find_max_batches(const RunConfig& config, const std::vector<MemoryMode>& modes,
                                          std::uint64_t budget);

// "table" (aligned), "csv" or "json".
std::string format_comparison(const std::vector<CompareRow>& rows, const std::string& format);
std::string format_max_batches(const std::vector<MaxBatchRow>& rows, const std::string& format);

}  // namespace adacc
