// Profiler (DESIGN §7): measures, per saved tensor kind of a block, the forward time of its
// producing op, its full size, and for every codec that can store it the compress and decompress
// times, compressed bytes, outlier fraction and error — what the planner weighs. A profile is
// saved as profile.json in the run folder and can be reused (--profile FILE).
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "models/gpt_block.h"
#include "src/engine/gpt_model.h"

namespace adacc {

// One codec measured on one tensor kind of the block.
struct CodecMeasurement {
    Codec codec = Codec::group_int4;
    std::size_t compressed_bytes = 0;  // measured, the largest over layers
    std::size_t compressed_bound = 0;  // the codec's upper bound (what the tape reserves)
    double outlier_fraction = 0;       // largest over layers (outlier codec)
    double relative_error = 0;         // largest over layers (0 for masks)
    double compress_ms = 0;            // per layer, mean over layers
    double decompress_ms = 0;
};

struct TensorProfile {
    TensorKind kind = TensorKind::x;
    std::string name;
    std::size_t bytes = 0;                  // full size per layer at the planned batch
    std::vector<CodecMeasurement> codecs;   // every codec that can store it (codecs_that_store)

    const CodecMeasurement* find(Codec codec) const;  // null when it was not measured
};

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

// The same profile described at another batch: times and compressed sizes scale linearly, full
// sizes and codec bounds are recomputed exactly.
Profile rescale_profile(const Profile& profile, const GPTConfig& config, int batch);

// Runs `repeats` timed forwards of `model`'s weights at measured_batch x T on `tokens`
// (measured_batch * T of them), compresses every layer's saved tensors with every profiled codec,
// and scales times and sizes linearly from measured_batch to `batch`. `weights` (the model's
// parameters, ParameterLayout order) may be null: then the model is initialised from `seed`.
Profile profile_block(const GPTConfig& config, int batch, int measured_batch, int T, const std::vector<int>& tokens,
                      const float* weights, std::uint64_t seed, const CodecParams& codec_params,
                      int repeats = 2);

}  // namespace adacc
