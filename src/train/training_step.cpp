#include "src/train/training_step.h"

#include <chrono>
#include <cmath>

#include "src/common/units.h"
#include "src/dist/data_parallel.h"
#include "src/dist/process_group.h"
#include "src/engine/optimizer.h"

namespace adacc {

TrainingStep::TrainingStep(const RunConfig& config, GPTModel& model, DataLoader& data, AdaccRegulator* regulator)
    : training_(config.training),
      optimizer_(config.optimizer),
      lr_(config.lr),
      model_(model),
      data_(data),
      regulator_(regulator),
      gradients_(model, config.training.overlap_grads),
      inputs_(static_cast<std::size_t>(config.training.batch_size) * config.training.seq_len),
      targets_(inputs_.size()) {}

StepResult TrainingStep::run(int step) {
    const int B = training_.batch_size, T = training_.seq_len, accum = training_.grad_accum;
    const ProcessGroup& group = process_group();
    const int W = group.world_size;
    const auto start = std::chrono::steady_clock::now();
    if (regulator_) regulator_->before_step(step, model_);
    const float dloss = 1.0f / (static_cast<float>(B) * T * accum * W);
    const double tokens_per_step = static_cast<double>(B) * T * accum * W;  // every rank's
    for (int micro = 0; micro < accum; ++micro) {
        data_.next_batch(inputs_, targets_);
        const DropoutContext dropout{training_.seed, static_cast<std::uint64_t>(step),
                                     static_cast<std::uint64_t>(micro) * W + group.rank, true};
        model_.forward_step(inputs_.data(), targets_.data(), B, T, dropout, dloss, tokens_per_step,
                            /*accumulate_loss=*/micro > 0);
        if (micro == accum - 1) gradients_.before_last_backward();
        model_.backward(inputs_.data(), B, T, /*accumulate=*/micro > 0);
    }
    gradients_.finish();
    // Everything is queued before the one read back. The device skips the update when the norm
    // is not finite; a non-finite loss always comes with one (its logits, hence dlogits and the
    // head's gradient, are non-finite too), so the host's flag below and the device agree.
    StepResult result;
    result.lr = learning_rate(lr_, step, training_.steps);
    queue_gradient_norm(model_);
    combine_gradient_norm(model_);
    queue_adamw_step(model_, optimizer_, result.lr, step);
    gather_parameters(model_);
    const StepReadout readout = model_.read_step();
    double loss = readout.loss;  // this rank's share of the step's mean
    all_reduce_sum(&loss, 1);
    result.loss = static_cast<float>(loss);
    result.grad_norm = readout.grad_norm;
    result.updated = std::isfinite(result.loss) && std::isfinite(result.grad_norm);
    result.seconds = seconds_since(start);
    return result;
}

std::optional<ReplanEvent> TrainingStep::after(int step) {
    if (!regulator_) return std::nullopt;
    return regulator_->after_step(step, model_);
}

}  // namespace adacc
