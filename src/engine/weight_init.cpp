#include "src/engine/weight_init.h"

#include <stdexcept>
#include <string>

namespace adacc {

void scale_outlier_channels(const GPTConfig& config, const ParameterLayout& layout, float* params, int channels,
                            float scale) {
    const int C = config.n_embd;
    if (channels < 0 || channels > C)
        throw std::invalid_argument("scale_outlier_channels: " + std::to_string(channels) + " channels of " +
                                    std::to_string(C));
    for (int l = 0; l < config.n_layer; ++l)
        for (ParamId id : {ParamId::ln1w, ParamId::ln2w}) {
            float* w = layout.at(params, id, l);
            for (int i = 0; i < channels; ++i) w[static_cast<long>(2 * i + 1) * C / (2 * channels)] *= scale;
        }
}

void init_run_weights(GPTModel& model, std::uint64_t seed, const StressOptions& stress) {
    init_weights_with_stress(model, seed, stress, model.config().n_layer);
}

void init_weights_with_stress(GPTModel& model, std::uint64_t seed, const StressOptions& stress, int depth) {
    model.init_weights(seed, depth);
    apply_stress(model, stress);
}

void apply_stress(GPTModel& model, const StressOptions& stress) {
    if (stress.outlier_channels == 0) return;
    std::vector<float> staging;
    const float* host = model.host_readable(ModelArena::parameters, staging);
    std::vector<float> params(host, host + model.num_params());
    scale_outlier_channels(model.config(), model.layout(), params.data(), stress.outlier_channels,
                           stress.outlier_scale);
    model.write_arena(ModelArena::parameters, 0, params.size(), params.data());
}

std::vector<float> initial_parameters(const GPTConfig& shape, std::uint64_t seed, const StressOptions& stress) {
    GPTModel model = GPTModel::for_inference(shape, 1, 1);
    init_run_weights(model, seed, stress);
    std::vector<float> params(model.num_params());
    model.read_arena(ModelArena::parameters, 0, params.size(), params.data());
    return params;
}

}  // namespace adacc
