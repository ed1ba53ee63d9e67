#include "src/engine/optimizer.h"

#include <cmath>


namespace adacc {

float learning_rate(const LrSection& lr, int step, int total_steps) {
    if (lr.schedule == "constant") return lr.max;
    if (step <= lr.warmup_steps) return lr.max * static_cast<float>(step) / static_cast<float>(lr.warmup_steps);
    if (total_steps <= lr.warmup_steps) return lr.max;
    const double progress = static_cast<double>(step - lr.warmup_steps) / (total_steps - lr.warmup_steps);
    const double cosine = 0.5 * (1.0 + std::cos(M_PI * std::min(1.0, progress)));
    return static_cast<float>(lr.min + cosine * (lr.max - lr.min));
}

float gradient_norm(const GPTModel& model) {
    const Backend& backend = model.backend();
    return static_cast<float>(std::sqrt(
        backend.kernels().sum_of_squares(backend.context(), model.grads(), static_cast<long>(model.num_params()))));
}

OptimizerStepStats adamw_step(GPTModel& model, const OptimizerSection& opt, float lr, int t) {
    return adamw_step(model, opt, lr, t, gradient_norm(model));
}

OptimizerStepStats adamw_step(GPTModel& model, const OptimizerSection& opt, float lr, int t, float grad_norm) {
    OptimizerStepStats stats;
    stats.grad_norm = grad_norm;
    if (opt.grad_clip > 0.0f && stats.grad_norm > opt.grad_clip) stats.grad_scale = opt.grad_clip / stats.grad_norm;
    const Backend& backend = model.backend();
    for (const ParamTensorInfo& info : model.layout().tensors()) {
        const std::size_t o = info.offset;
        backend.kernels().adamw_update(backend.context(), model.params() + o, model.grads() + o, model.adam_m() + o,
                                       model.adam_v() + o, static_cast<long>(info.numel), lr, opt.beta1, opt.beta2,
                                       opt.eps, info.weight_decay ? opt.weight_decay : 0.0f, stats.grad_scale, t);
    }
    return stats;
}

}  // namespace adacc
