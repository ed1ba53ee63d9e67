// One optimizer step of training, and the only code that takes one: the trainer runs it in its
// loop and `adacc compare` measures it, so compare's losses, tape peaks and step times are the
// ones training reports.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "data/dataloader.h"
#include "src/adacc/adacc_regulator.h"
#include "src/config/run_config.h"
#include "src/dist/data_parallel.h"
#include "src/engine/gpt_model.h"

namespace adacc {

struct StepResult {
    float loss = 0;        // mean over the step's micro-batches, on every rank
    float lr = 0;          // the schedule's rate at this step
    float grad_norm = 0;   // global L2 norm of the gradients, before clipping
    bool updated = false;  // false: the loss or the norm is not finite and the parameters were left as they were
    double seconds = 0;    // wall time of the step: data, forwards, backwards and update
};

class TrainingStep {
public:
    // Steps `model` on the batches of `data`; `regulator` (planned modes, else null) samples
    // codec statistics and re-plans. All three must outlive the TrainingStep. The batch buffers
    // are allocated here, so that a step allocates nothing.
    TrainingStep(const RunConfig& config, GPTModel& model, DataLoader& data, AdaccRegulator* regulator);

    // Optimizer step `step` (1-based): training.grad_accum micro-batches, each the data's next
    // batch through forward (dropout seeded by training.seed, the step and the micro-batch;
    // dloss = 1 / (B T grad_accum W) over W data-parallel ranks) and backward (accumulating after
    // the first); the ranks' gradients summed (src/dist/data_parallel.h; under ZeRO-1 each rank
    // its shard's; with training.overlap_grads in buckets that start during the last backward),
    // so every rank holds the mean over the global batch; then, when the loss and
    // the gradient norm are finite, AdamW at learning_rate() with global-norm clipping (under
    // ZeRO-1 on each rank's shard, the parameters then gathered). Rank r's micro-batch m is micro-batch m W + r of
    // the step, in data (its loader takes every W-th batch) and dropout masks alike: W ranks with
    // grad_accum A train as one process with grad_accum A W. What a non-finite step means for
    // the run (skip or stop) is the caller's.
    StepResult run(int step);

    // After the step is reported (its tape peak read): the regulator looks at the step's sample
    // and may switch the model to a new plan, in effect from the next step. nullopt without one.
    std::optional<ReplanEvent> after(int step);

private:
    TrainingSection training_;
    OptimizerOptions optimizer_;
    LrSchedule lr_;
    GPTModel& model_;
    DataLoader& data_;
    AdaccRegulator* regulator_;
    GradientReduction gradients_;
    std::vector<std::int32_t> inputs_, targets_;
};

}  // namespace adacc
