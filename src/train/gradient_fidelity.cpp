#include "src/train/gradient_fidelity.h"

#include <cmath>
#include <limits>

#include "src/config/config.h"
#include "src/engine/gpt_model.h"
#include "src/train/token_loader.h"

namespace adacc {

std::vector<float> gradients_at_init(const RunConfig& config, const ActivationPlan& plan,
                                     const CodecParams& codec_params) {
    const int B = config.training.batch_size, T = config.training.seq_len;
    const ComputeTarget target = compute_target(config);
    GPTModel model(config.model, B, T, plan, codec_params, ModelUse::training, backend_for(target.device),
                   target.activation);
    model.init_weights(config.training.seed);
    // The batch training's first micro-batch reads (src/train/training_step.cpp).
    DataLoader data = open_token_loader(config, TokenSplit::train, config.data.shuffle);
    std::vector<int> inputs(static_cast<std::size_t>(B) * T), targets(inputs.size());
    data.next_batch(inputs, targets);
    const DropoutContext no_dropout{config.training.seed, 1, 0, /*training=*/false};
    model.forward(inputs.data(), targets.data(), B, T, no_dropout, 1.0f / static_cast<float>(B * T));
    model.backward(inputs.data(), B, T, /*accumulate=*/false);
    std::vector<float> grads(model.num_params());
    model.read_arena(ModelArena::gradients, 0, grads.size(), grads.data());
    return grads;
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
