// The weights a run starts from when it neither resumes nor loads weights: GPT-2's initialisation
// from training.seed, then the [stress] section's outlier channels (a test and study hook, see
// StressOptions below). Training, `adacc compare`, the gradient-fidelity
// measurement and the Adacc profiler all start from these, so they see the same model.
#pragma once

#include <cstdint>
#include <vector>

#include "models/gpt_params.h"
#include "src/engine/gpt_model.h"

namespace adacc {

// Test and study hooks (the config's [stress] section). LLMs grow systematic outlier channels with
// scale (LLM.int8(), SmoothQuant); a tiny model does not. outlier_channels > 0 multiplies that many
// evenly spaced channels of every layer's ln1 and ln2 weights by outlier_scale when a run
// initialises its weights from the seed, so the residual stream as the linear layers read it (the
// layernorm outputs) has outlier channels from the first step.
struct StressOptions {
    int outlier_channels = 0;
    float outlier_scale = 50.0f;
};

// GPT-2's initialisation of the whole `model` from `seed`, then `stress`'s outlier channels.
void init_run_weights(GPTModel& model, std::uint64_t seed, const StressOptions& stress);

// The same initialisation from its parts: GPT-2's from `seed` for a model `depth` layers deep, then
// `stress`'s outlier channels. `model` may be a slice of that model's first layers (the
// profiler's): it gets exactly those layers' weights.
void init_weights_with_stress(GPTModel& model, std::uint64_t seed, const StressOptions& stress, int depth);

// `stress`'s outlier channels on the weights `model` holds (scale_outlier_channels); nothing when
// outlier_channels is 0. A run started with --init-from applies it to the weights it loaded.
void apply_stress(GPTModel& model, const StressOptions& stress);

// The weights init_run_weights gives a model of shape `shape`, as host floats in ParameterLayout
// order (a model of one token is built for it).
std::vector<float> initial_parameters(const GPTConfig& shape, std::uint64_t seed, const StressOptions& stress);

// Multiplies `channels` evenly spaced channels (channel (2i + 1) * C / (2 * channels), i <
// channels) of every layer's ln1 and ln2 weights in `params` by `scale`. The layernorm outputs
// are those channels' values times the weight, so the matmuls' inputs (ln1, ln2) get outlier
// channels of about `scale` times the others' magnitude in every row: the pattern LLM.int8()
// describes, which plain group INT4 quantizes badly and the outlier codec separates.
void scale_outlier_channels(const GPTConfig& config, const ParameterLayout& layout, float* params, int channels,
                            float scale);

}  // namespace adacc
