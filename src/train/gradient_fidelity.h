// What a memory mode does to the gradients: one forward and backward on the run's first training
// batch, dropout off (so the mode is the only difference), compared with keep-all's gradients on
// the same weights and batch. `adacc compare` reports it per mode at the initial weights; it costs
// one extra forward and backward per mode (and one for the keep-all reference). Training measures
// it along the run at its current weights every training.fidelity_every steps (FidelityProbe).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "models/gpt_params.h"
#include "src/config/run_config.h"
#include "src/engine/activation_plan.h"
#include "src/engine/gpt_model.h"
#include "src/train/weights_file.h"

namespace adacc {

// ||got - ref|| / ||ref|| and <got, ref> / (||got|| ||ref||), summed in double; 0 and 1 when
// the gradients are bit-identical.
struct Fidelity {
    double relative_l2 = 0;
    double cosine = 1;
};

struct GradientFidelity {
    Fidelity overall;
    std::vector<std::pair<std::string, Fidelity>> tensors;  // per parameter tensor, in layout order
};

// One forward and backward on the run's first training batch (training.batch_size x seq_len, the
// batch training's first micro-batch reads), dropout off: the batch, the loss (the mean over its
// B x T tokens) and the parameter gradients (the whole gradient arena, in the parameter layout's
// order, llm.c's).
struct FirstBatchGradients {
    std::vector<int> inputs, targets;  // B x T each, row-major
    float loss = 0;
    std::vector<float> gradients;
};

// That step under `plan` on `target`'s device and dtype, at the run's initial weights
// (training.seed and [stress]) or, given `weights`, at the file's (its shape checked against
// the config's).
FirstBatchGradients first_batch_gradients(const RunConfig& config, const ComputeTarget& target,
                                          const ActivationPlan& plan, const CodecParams& codec_params,
                                          const WeightsFile* weights = nullptr);

// Its gradients at the run's initial weights (`adacc compare`'s fidelity).
std::vector<float> gradients_at_init(const RunConfig& config, const ComputeTarget& target, const ActivationPlan& plan,
                                     const CodecParams& codec_params);

// Training's probe: a keep-all model of the run's shape on `target` (the training model's) and
// the run's first training batch.
class FidelityProbe {
public:
    FidelityProbe(const RunConfig& config, const ComputeTarget& target);
    ~FidelityProbe();
    // `model`'s gradients under its plan vs the keep-all model's at `model`'s current weights. It
    // leaves model's parameters, optimizer state and data position as they were (its gradient
    // arena and tape hold this batch's afterwards, which the next step overwrites).
    GradientFidelity measure(GPTModel& model);

private:
    std::unique_ptr<GPTModel> reference_;
    int batch_, seq_;
    std::vector<int> inputs_, targets_;
};

Fidelity compare_vectors(const float* got, const float* ref, std::size_t n);
GradientFidelity compare_gradients(const std::vector<float>& got, const std::vector<float>& reference,
                                   const ParameterLayout& layout);

}  // namespace adacc
