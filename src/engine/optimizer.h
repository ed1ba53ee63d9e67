// AdamW over the parameter arena with decoupled weight decay on 2-D weights only, global
// gradient-norm clipping, and the learning-rate schedule (linear warmup + cosine decay).
#pragma once

#include <string>

#include "src/engine/gpt_model.h"

namespace adacc {

// AdamW's settings (the config's [optimizer] section).
struct OptimizerOptions {
    float beta1 = 0.9f;
    float beta2 = 0.95f;
    float eps = 1e-8f;
    float weight_decay = 0.1f;  // decoupled, on 2-D weights only
    float grad_clip = 1.0f;     // global L2 norm; 0 disables clipping
};

// The learning-rate schedule (the config's [lr] section).
struct LrSchedule {
    float max = 6e-4f;                // peak learning rate
    float min = 6e-5f;                // floor of the cosine decay
    int warmup_steps = 10;            // linear warmup from max/warmup to max
    std::string schedule = "cosine";  // "cosine" | "constant"
};

// Learning rate at 1-based optimizer step `step` of `total_steps`: linear warmup from
// max/warmup to max over warmup_steps, then cosine decay from max to min at total_steps
// (nanoGPT's schedule); "constant" returns max throughout.
float learning_rate(const LrSchedule& lr, int step, int total_steps);

struct OptimizerStepStats {
    float grad_norm = 0;   // global L2 norm before clipping
    float grad_scale = 1;  // factor applied to the gradients (clipping)
};

// Queues the global L2 norm of the gradient arena (what clipping and the divergence check look at)
// into model.grad_norm_slot(), in backend memory; nothing is read back. Under ZeRO-1, the norm of
// this rank's optimizer shard of it (src/dist/data_parallel.h combines the ranks').
void queue_gradient_norm(const GPTModel& model);
// The same, read back (waits for the backend).
float gradient_norm(const GPTModel& model);

// Queues one AdamW step on every parameter tensor (under ZeRO-1, on the parameters of this rank's
// optimizer shard), at 1-based step t, clipped by the norm that queue_gradient_norm left in
// backend memory; when that norm is not finite the kernels change nothing (the step is skipped on
// the device). Reads nothing back; allocation-free.
void queue_adamw_step(GPTModel& model, const OptimizerOptions& opt, float lr, int t);
// The norm, then the step, with the norm and the clipping factor read back.
OptimizerStepStats adamw_step(GPTModel& model, const OptimizerOptions& opt, float lr, int t);

}  // namespace adacc
