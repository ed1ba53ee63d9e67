// Profiler (docs/design.md, 'The profiler'): measures, per saved tensor kind of a block, the
// forward time of its producing op, its full size, and for every codec that can store it the
// compress and decompress times, compressed bytes, outlier fraction and error — what the planner
// weighs. It runs a slice of the model, never the whole: the embeddings, the first kProfiledLayers
// blocks at the model's width, the final layernorm and the classifier, so planning a model needs
// only the memory of that slice (a GPT-4.7B plans on a machine that could not hold its weights). A
// profile is saved as profile.json in the run folder and can be reused (--profile FILE).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>  // declarations only: the planner's many includers skip json.hpp
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "models/gpt_block.h"
#include "src/config/run_config.h"
#include "src/engine/device.h"
#include "src/engine/gpt_model.h"

namespace adacc {

// One codec measured on one tensor kind of the block.
struct CodecMeasurement {
    Codec codec = Codec::group_int4;
    std::size_t compressed_bytes = 0;  // measured, the largest over layers
    std::size_t compressed_bound = 0;  // the codec's upper bound (what the tape reserves)
    double outlier_fraction = 0;       // largest over layers (outlier codec)
    double relative_error = 0;         // largest over layers (0 for masks)
    std::vector<double> layer_errors;  // per profiled layer (the slice's); empty: relative_error for all
    double compress_ms = 0;            // per layer, mean over layers
    double decompress_ms = 0;
};

struct TensorProfile {
    TensorKind kind = TensorKind::x;
    std::string name;
    std::size_t bytes = 0;                  // full size per layer at the planned batch, in the profiled dtype
    std::vector<CodecMeasurement> codecs;   // every codec that can store it (codecs_that_store)

    const CodecMeasurement* find(Codec codec) const;  // null when it was not measured
};

// The profiled layer whose figures stand for model layer `layer`: itself within the slice, the
// slice's last (deepest) layer beyond it. `layers_profiled` <= 0 means one.
int profiled_layer(int layer, int layers_profiled);

// `m`'s relative error in model layer `layer` (-1: the largest over layers).
double layer_error(const CodecMeasurement& m, int layer);

struct Profile {
    int batch = 0, seq = 0;            // the batch the numbers describe
    int measured_batch = 0;            // the batch actually run (smaller when `batch` did not fit)
    std::vector<std::string> op_names; // the block's ops, in order
    std::vector<double> op_ms;         // forward time per op per layer, at `batch`
    std::vector<TensorProfile> tensors;  // saved tensors of one block (not x, not layernorm statistics)
    CodecParams codec_params;

    const TensorProfile* find(TensorKind kind) const;
    nlohmann::json to_json() const;
    static Profile from_json(const nlohmann::json& json);
    void save(const std::filesystem::path& file) const;
    static Profile load(const std::filesystem::path& file);  // UserError when unreadable or malformed
};

// Blocks in the profiler's slice: two, so a block's input is itself a block's output (layer 1
// sees the residual stream as every deeper layer does; layer 0 sees the embeddings).
constexpr int kProfiledLayers = 2;

// The model the profiler runs for `config`: its first min(n_layer, kProfiledLayers) blocks.
GPTConfig profile_slice(const GPTConfig& config);

// Whether a profile's slice of (config, B, T) fits in `bytes` keeping everything, as `target`
// allocates it (what the profiler allocates).
bool profile_slice_fits(const GPTConfig& config, int B, int T, std::uint64_t bytes, const ComputeTarget& target);

// The weights a profile measures: a model's parameters (ParameterLayout order of the whole
// model; the slice's are copied out of them), or when null the run's initialisation from `seed`
// and the [stress] hook, computed for the slice alone.
struct ProfileWeights {
    const float* parameters = nullptr;
    std::uint64_t seed = 0;
    StressSection stress;
};

// The same profile described at another batch: times and compressed sizes scale linearly, full
// sizes and codec bounds are recomputed exactly.
Profile rescale_profile(const Profile& profile, const GPTConfig& config, int batch);

// Runs `repeats` timed forwards of the slice of `config` with `weights` at measured_batch x T on
// `tokens` (measured_batch * T of them) on `target` (its backend and activation dtype: times are
// the device's, on its queue; errors those of its dtype's tensors), compresses every sliced
// layer's saved tensors with every profiled codec, and scales times and sizes linearly from
// measured_batch to `batch`. Per-layer figures are what one layer of the whole model costs
// (times: mean over the slice's layers; sizes, errors, outliers: the largest).
Profile profile_block(const GPTConfig& config, int batch, int measured_batch, int T, const std::vector<int>& tokens,
                      const ProfileWeights& weights, const ComputeTarget& target, const CodecParams& codec_params = {},
                      int repeats = 2);

}  // namespace adacc
