// Profiler (docs/design.md, 'The profiler'): measures, per saved tensor kind of a block, the
// forward time of its producing op, its full size, and for every codec that can store it the
// compress and decompress times, compressed bytes, outlier fraction and error — what the planner
// weighs. It runs a slice of the model, never the whole: the embeddings, the first kProfiledLayers
// blocks at the model's width, the final layernorm and the classifier, so planning a model needs
// only the memory of that slice (a GPT-4.7B plans on a machine that could not hold its weights). A
// profile is saved as profile.json in the run folder and can be reused (--profile FILE): it names
// what it was measured for, and a run whose block differs in any of that refuses it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>  // declarations only: the planner's many includers skip json.hpp
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "models/gpt_block.h"
#include "src/engine/device.h"
#include "src/engine/gpt_model.h"
#include "src/engine/weight_init.h"

namespace adacc {

// One codec measured on one tensor kind of the block.
struct CodecMeasurement {
    Codec codec = Codec::group_int4;
    std::size_t compressed_bytes = 0;  // measured, the largest over layers
    std::size_t compressed_bound = 0;  // the codec's upper bound (what the tape reserves)
    double outlier_fraction = 0;       // largest over layers (outlier codec)
    double relative_error = 0;         // largest over layers (0 for masks)
    std::vector<double> layer_errors;  // per profiled layer (the slice's); empty: relative_error for all
    double compress_ms = 0;            // per layer: the median over repeats of the mean over layers
    double decompress_ms = 0;
    double compress_spread_ms = 0;  // the repeats' range (largest - smallest); 0 in format-3 files
    double decompress_spread_ms = 0;
};

struct TensorProfile {
    TensorKind kind = TensorKind::x;
    std::string name;
    std::size_t bytes = 0;                 // full size per layer at the planned batch, in the profiled dtype
    std::vector<CodecMeasurement> codecs;  // every codec that can store it (codecs_that_store)

    const CodecMeasurement* find(Codec codec) const;  // null when it was not measured
};

// The slot tensor `t` (at B x T) takes compressed by `codec`: codec_max_bytes of its rows x cols,
// what the tape reserves, the planner counts and a profile's compressed_bound records.
std::size_t compressed_bound(const GPTConfig& config, const TensorInfo& t, Codec codec, int B, int T,
                             const CodecParams& params);

// The profiled layer whose figures stand for model layer `layer`: itself within the slice, the
// slice's last (deepest) layer beyond it. `layers_profiled` <= 0 means one.
int profiled_layer(int layer, int layers_profiled);

// `m`'s relative error in model layer `layer` (-1: the largest over layers).
double layer_error(const CodecMeasurement& m, int layer);

// What a profile measured besides batch x seq and its codec parameters: the fields that change
// one block's tensor list, sizes, times or errors. Not n_layer beyond the slice (deeper layers
// take the slice's deepest layer's figures), nor vocab_size, max_seq_len or classifier_chunk (the
// profile records the block alone), nor the weights (training.seed, [stress]): re-plans
// re-measure the statistics that drift from the run's own weights.
struct ProfiledBlock {
    int n_embd = 0, n_head = 0;  // every tensor's shape and every op's time
    int layers = 0;              // blocks in the slice (profile_slice): one error per codec each
    float dropout = 0;           // masks exist when > 0, and every tensor after a dropout reads it
    AttentionImpl attention = AttentionImpl::materialized;  // fused has no attention matrices
    Device device = Device::cpu;                            // the times are this device's
    DType dtype = DType::f32;                               // sizes, times and errors are those of this dtype's tensors
};

struct Profile {
    int batch = 0, seq = 0;              // the batch the numbers describe
    int measured_batch = 0;              // the batch actually run (smaller when `batch` did not fit)
    ProfiledBlock block;                 // what it measured besides batch x seq and codec_params
    std::vector<std::string> op_names;   // the block's ops, in order
    std::vector<double> op_ms;           // forward time per op per layer, at `batch`: the repeats' median
    std::vector<double> op_spread_ms;    // the repeats' range per op (0 in format-3 files)
    std::vector<TensorProfile> tensors;  // saved tensors of one block (not x, not layernorm statistics)
    CodecParams codec_params;

    const TensorProfile* find(TensorKind kind) const;
    nlohmann::json to_json() const;
    void save(const std::filesystem::path& file) const;
    // The profile in `file`, for a run of `config` at batch x seq on `target` with `codec_params`.
    // SettingError on memory.profile naming the file and the key at fault when it is unreadable,
    // of another format, measured for another run (any ProfiledBlock field, batch, seq or codec
    // parameter: what profile_subject gives for these arguments), or not a measurement of this
    // block: an op or a saved tensor missing, unknown or repeated, a size or codec bound other than
    // this block's, a number negative, non-finite or out of range. A tensor may list fewer codecs
    // than codecs_that_store (profiles from before every codec was measured): the planner weighs
    // only the measured ones.
    static Profile load(const std::filesystem::path& file, const GPTConfig& config, int batch, int seq,
                        const ComputeTarget& target, const CodecParams& codec_params);
    // The same from the text of one (`source` names it in messages): how the ranks of a job share
    // rank 0's profile.
    static Profile parse(const std::string& text, const std::string& source, const GPTConfig& config, int batch,
                         int seq, const ComputeTarget& target, const CodecParams& codec_params);
};

// A profile of no measurements that names what profile_block(config, batch, ..., seq, ..., target,
// codec_params) measures: its batch, seq, block and codec parameters.
Profile profile_subject(const GPTConfig& config, int batch, int seq, const ComputeTarget& target,
                        const CodecParams& codec_params);

// Whether the profiler measures tensor `t` of a block: saved, planned (not tiny, not the block
// input x) and present.
bool is_profiled(const TensorInfo& t);

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
    StressOptions stress;
};

// `from`'s times (ops' and codecs', with their spreads) in place of `into`'s: a re-measure for a
// re-plan keeps the first profile's times and takes only the errors and sizes that drift.
void keep_times(const Profile& from, Profile& into);

// The same profile described at another batch: times and compressed sizes scale linearly, full
// sizes and codec bounds are recomputed exactly.
Profile rescale_profile(const Profile& profile, const GPTConfig& config, int batch);

// A time measured `repeats` times: the median, which one slow repeat (a first call, a busy
// moment of the machine) does not move, and the range, which says how far to trust it.
struct RepeatedTime {
    double median_ms = 0;
    double spread_ms = 0;  // largest - smallest
};
RepeatedTime summarize_repeats(std::vector<double> times_ms);  // a non-empty list

// The profiler's repeats of every timed op and codec pass, after an untimed warm-up of each.
constexpr int kProfileRepeats = 3;

// Runs a warm-up and `repeats` timed forwards of the slice of `config` with `weights` at
// measured_batch x T on `tokens` (measured_batch * T of them) on `target` (its backend and
// activation dtype: times are the device's, on its queue; errors those of its dtype's tensors),
// compresses and decompresses every sliced layer's saved tensors with every profiled codec
// (a warm-up pass, then `repeats` timed ones), and scales times and sizes linearly from
// measured_batch to `batch`. Per-layer figures are what one layer of the whole model costs
// (times: the repeats' median of the mean over the slice's layers, with the repeats' range;
// sizes, errors, outliers: the largest).
Profile profile_block(const GPTConfig& config, int batch, int measured_batch, int T, const std::vector<int>& tokens,
                      const ProfileWeights& weights, const ComputeTarget& target, const CodecParams& codec_params = {},
                      int repeats = kProfileRepeats);

}  // namespace adacc
