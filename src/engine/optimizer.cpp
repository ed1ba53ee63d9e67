#include "src/engine/optimizer.h"

#include <algorithm>
#include <cmath>

#include "kernels/grad_clip.h"

namespace adacc {

float learning_rate(const LrSchedule& lr, int step, int total_steps) {
    if (lr.schedule == "constant") return lr.max;
    if (step <= lr.warmup_steps) return lr.max * static_cast<float>(step) / static_cast<float>(lr.warmup_steps);
    if (total_steps <= lr.warmup_steps) return lr.max;
    const double progress = static_cast<double>(step - lr.warmup_steps) / (total_steps - lr.warmup_steps);
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
    return static_cast<float>(lr.min + cosine * (lr.max - lr.min));
}

void queue_gradient_norm(const GPTModel& model) {
    const Backend& backend = model.backend();
    const OptimizerShard shard = model.optimizer_shard();
    backend.kernels().global_norm(backend.context(), model.grad_norm_slot(), model.grads() + shard.begin,
                                  static_cast<long>(shard.count));
}

float gradient_norm(const GPTModel& model) {
    queue_gradient_norm(model);
    float norm = 0.0f;
    model.backend().copy_to_host(&norm, model.grad_norm_slot(), sizeof norm);
    return norm;
}

void queue_adamw_step(GPTModel& model, const OptimizerOptions& opt, float lr, int t) {
    const Backend& backend = model.backend();
    bf16* working = model.working_weights().as<bf16>();  // null in fp32
    const OptimizerShard shard = model.optimizer_shard();
    const std::size_t first_master = model.held(ModelArena::parameters).begin;  // the shard's, or 0
    for (const ParamTensorInfo& info : model.layout().tensors()) {
        // The part of the tensor in this rank's shard (all of it without ZeRO-1).
        const OptimizerShard part = shard_part(shard, info.offset, info.numel);
        if (part.count == 0) continue;
        const Act working_slice = working ? Act(working + part.begin) : Act();
        const std::size_t moment = part.begin - shard.begin;
        float* masters = model.params() + (part.begin - first_master);
        backend.kernels().adamw_update(backend.context(), masters, working_slice, model.grads() + part.begin,
                                       model.adam_m() + moment, model.adam_v() + moment, static_cast<long>(part.count),
                                       lr, opt.beta1, opt.beta2, opt.eps, info.weight_decay ? opt.weight_decay : 0.0f,
                                       opt.grad_clip, model.grad_norm_slot(), t);
    }
}

OptimizerStepStats adamw_step(GPTModel& model, const OptimizerOptions& opt, float lr, int t) {
    OptimizerStepStats stats;
    stats.grad_norm = gradient_norm(model);
    stats.grad_scale = clip_scale(opt.grad_clip, stats.grad_norm);
    queue_adamw_step(model, opt, lr, t);
    return stats;
}

}  // namespace adacc
