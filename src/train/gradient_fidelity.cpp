#include "src/train/gradient_fidelity.h"

#include <cmath>
#include <limits>

#include "src/engine/gpt_model.h"
#include "src/engine/weight_init.h"
#include "src/train/token_loader.h"

namespace adacc {

namespace {

// The batch training's first micro-batch reads (src/train/training_step.cpp).
void first_batch(const RunConfig& config, std::vector<int>& inputs, std::vector<int>& targets) {
    DataLoader data = open_token_loader(config, TokenSplit::train, config.data.shuffle);
    inputs.resize(static_cast<std::size_t>(config.training.batch_size) * config.training.seq_len);
    targets.resize(inputs.size());
    data.next_batch(inputs, targets);
}

// The parameter gradients (the whole gradient arena) of one forward and backward of `model` at
// its weights on (inputs, targets), dropout off, the loss averaged over the batch's tokens; the
// loss itself into *loss when asked.
std::vector<float> gradients_on(GPTModel& model, int B, int T, const std::vector<int>& inputs,
                                const std::vector<int>& targets, float* loss = nullptr) {
    const DropoutContext no_dropout{0, 1, 0, /*training=*/false};
    const float mean_loss =
        model.forward(inputs.data(), targets.data(), B, T, no_dropout, 1.0f / static_cast<float>(B * T));
    if (loss) *loss = mean_loss;
    model.backward(inputs.data(), B, T, /*accumulate=*/false);
    std::vector<float> grads(model.num_params());
    model.read_arena(ModelArena::gradients, 0, grads.size(), grads.data());
    return grads;
}

std::unique_ptr<GPTModel> make_model(const RunConfig& config, const ComputeTarget& target, const ActivationPlan& plan,
                                     const CodecParams& codec_params) {
    return std::make_unique<GPTModel>(config.model, config.training.batch_size, config.training.seq_len, plan,
                                      codec_params, ModelUse::training, target);
}

}  // namespace

FirstBatchGradients first_batch_gradients(const RunConfig& config, const ComputeTarget& target,
                                          const ActivationPlan& plan, const CodecParams& codec_params,
                                          const WeightsFile* weights) {
    const std::unique_ptr<GPTModel> model = make_model(config, target, plan, codec_params);
    if (weights)
        load_weights(*weights, *model);
    else
        init_run_weights(*model, config.training.seed, config.stress);
    FirstBatchGradients out;
    first_batch(config, out.inputs, out.targets);
    out.gradients =
        gradients_on(*model, config.training.batch_size, config.training.seq_len, out.inputs, out.targets, &out.loss);
    return out;
}

std::vector<float> gradients_at_init(const RunConfig& config, const ComputeTarget& target, const ActivationPlan& plan,
                                     const CodecParams& codec_params) {
    return first_batch_gradients(config, target, plan, codec_params).gradients;
}

FidelityProbe::FidelityProbe(const RunConfig& config, const ComputeTarget& target)
    : reference_(make_model(config, target, ActivationPlan(BlockGraph(config.model, 1, 1), config.model.n_layer), {})),
      batch_(config.training.batch_size),
      seq_(config.training.seq_len) {
    first_batch(config, inputs_, targets_);
}

FidelityProbe::~FidelityProbe() = default;

GradientFidelity FidelityProbe::measure(GPTModel& model) {
    std::vector<float> staging;
    reference_->write_arena(ModelArena::parameters, 0, model.num_params(),
                            model.host_readable(ModelArena::parameters, staging));
    const std::vector<float> got = gradients_on(model, batch_, seq_, inputs_, targets_);
    return compare_gradients(got, gradients_on(*reference_, batch_, seq_, inputs_, targets_), model.layout());
}

Fidelity compare_vectors(const float* got, const float* ref, std::size_t n) {
    double err = 0, dot = 0, got2 = 0, ref2 = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const double g = got[i], r = ref[i];
        err += (g - r) * (g - r);
        dot += g * r;
        got2 += g * g;
        ref2 += r * r;
    }
    Fidelity f;
    // A non-finite gradient has no error or angle to speak of: NaN (null in metrics.jsonl), never 0.
    if (!std::isfinite(err) || !std::isfinite(dot) || !std::isfinite(got2) || !std::isfinite(ref2)) {
        f.relative_l2 = f.cosine = std::numeric_limits<double>::quiet_NaN();
        return f;
    }
    // A zero reference: no error when the other is zero too, an unbounded one otherwise.
    f.relative_l2 = ref2 > 0 ? std::sqrt(err / ref2) : (err > 0 ? std::numeric_limits<double>::infinity() : 0.0);
    f.cosine = got2 > 0 && ref2 > 0 ? dot / std::sqrt(got2 * ref2) : (got2 == ref2 ? 1.0 : 0.0);
    return f;
}

GradientFidelity compare_gradients(const std::vector<float>& got, const std::vector<float>& reference,
                                   const ParameterLayout& layout) {
    GradientFidelity out;
    out.overall = compare_vectors(got.data(), reference.data(), reference.size());
    for (const ParamTensorInfo& t : layout.tensors())
        out.tensors.emplace_back(t.name, compare_vectors(got.data() + t.offset, reference.data() + t.offset, t.numel));
    return out;
}

}  // namespace adacc
