// AdamW over the parameter arena with decoupled weight decay on 2-D weights only, global
// gradient-norm clipping, and the learning-rate schedule (linear warmup + cosine decay).
#pragma once

#include "src/engine/gpt_model.h"
#include "src/config/run_config.h"

namespace adacc {

// Learning rate at 1-based optimizer step `step` of `total_steps`: linear warmup from
// max/warmup to max over warmup_steps, then cosine decay from max to min at total_steps
// (nanoGPT's schedule); "constant" returns max throughout.
float learning_rate(const LrSection& lr, int step, int total_steps);

struct OptimizerStepStats {
    float grad_norm = 0;   // global L2 norm before clipping
    float grad_scale = 1;  // factor applied to the gradients (clipping)
};

// Global L2 norm of the gradient arena (what clipping and the divergence check look at).
float gradient_norm(const GPTModel& model);

// One AdamW step on every parameter tensor of the model, at 1-based step t. Allocation-free.
OptimizerStepStats adamw_step(GPTModel& model, const OptimizerSection& opt, float lr, int t);
// The same with the gradient norm already computed by gradient_norm().
OptimizerStepStats adamw_step(GPTModel& model, const OptimizerSection& opt, float lr, int t, float grad_norm);

}  // namespace adacc
