#include "src/train/training_state.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "src/common/errors.h"
#include "src/config/config.h"
#include "src/dist/data_parallel.h"
#include "src/dist/process_group.h"
#include "src/io/checkpoint_folder.h"

namespace adacc {

namespace {

std::vector<std::int64_t> stored_shape(const ParamTensorInfo& info) { return {info.shape.begin(), info.shape.end()}; }

// The tensors of one arena laid out by ParameterLayout, named "<prefix>/<tensor>".
void add_arena(std::vector<CheckpointTensor>& out, const ParameterLayout& layout, const std::string& prefix,
               const float* arena) {
    for (const auto& info : layout.tensors())
        out.push_back({prefix + "/" + info.name, DType::f32, stored_shape(info), arena + info.offset});
}

bool all_finite(const float* values, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i)
        if (!std::isfinite(values[i])) return false;
    return true;
}

// One tensor at a time through host memory, so loading needs one tensor's worth beside the model.
// A checkpoint holds every parameter's values: a ZeRO-1 rank keeps its shard's where it holds a
// shard (GPTModel::write_arena), so a job resumes on another number of ranks.
void read_arena(const CheckpointReader& reader, GPTModel& model, ModelArena arena, const std::string& prefix) {
    std::vector<float> host;
    for (const auto& info : model.layout().tensors()) {
        const auto shape = stored_shape(info);
        const std::string name = prefix + "/" + info.name;
        host.resize(info.numel);
        reader.read_into(name, DType::f32, shape, host.data());
        if (!all_finite(host.data(), info.numel))
            throw UserError("checkpoint '" + reader.path().string() + "' holds non-finite values in " + name +
                            ": it comes from a diverged run or was altered; use an earlier checkpoint");
        model.write_arena(arena, info.offset, info.numel, host.data());
    }
}

// What this rank holds of `arena`.
bool arena_is_finite(const GPTModel& model, ModelArena arena) {
    std::vector<float> staging;
    return all_finite(model.host_readable(arena, staging), model.held(arena).count);
}

const char* const kRngScheme = "counter(seed, step, micro, layer, tensor)";

UserError bad_metadata(const CheckpointReader& reader, const std::string& what) {
    return UserError("checkpoint '" + reader.path().string() + "' has invalid metadata: " + what +
                     "; it was altered or written by an incompatible tool: use an earlier checkpoint");
}

// object[key] as an integer in [0, max], or a UserError naming the field.
std::uint64_t unsigned_field(const CheckpointReader& reader, const nlohmann::json& object, const char* key,
                             const std::string& label, std::uint64_t max) {
    if (!object.is_object() || !object.contains(key)) throw bad_metadata(reader, label + " is missing");
    const auto& value = object[key];
    if (!value.is_number_integer()) throw bad_metadata(reader, label + " is " + value.dump() + ", not an integer");
    const bool negative = !value.is_number_unsigned() && value.get<std::int64_t>() < 0;
    if (negative || value.get<std::uint64_t>() > max)
        throw bad_metadata(reader, label + " = " + value.dump() + " is outside [0, " + std::to_string(max) + "]");
    return value.get<std::uint64_t>();
}

// The checkpoint's data position counts the batches of every rank (train_data.batch): each of
// this job's W ranks has taken a W-th of them, so a job resumes on any world size that divides it.
std::uint64_t rank_batches(const CheckpointReader& reader, std::uint64_t job_batches) {
    const int W = process_group().world_size;
    if (job_batches % static_cast<std::uint64_t>(W) != 0)
        throw UserError(reader.path().string() + " was written after batch " + std::to_string(job_batches) +
                        " of its epoch (all ranks together), which " + std::to_string(W) +
                        " ranks cannot share evenly: resume with a number of processes that divides " +
                        std::to_string(job_batches));
    return job_batches / static_cast<std::uint64_t>(W);
}

TrainingProgress read_progress(const CheckpointReader& reader, std::uint64_t config_seed) {
    const auto& meta = reader.meta();
    TrainingProgress progress;
    constexpr auto kMaxInt = static_cast<std::uint64_t>(std::numeric_limits<int>::max());
    progress.step = static_cast<int>(unsigned_field(reader, meta, "step", "step", kMaxInt));
    if (const auto named = checkpoint_step(reader.path()); named && *named != progress.step)
        throw bad_metadata(reader, "step " + std::to_string(progress.step) + " differs from the file name's step " +
                                       std::to_string(*named));
    const nlohmann::json data = meta.contains("train_data") ? meta["train_data"] : nlohmann::json();
    constexpr std::uint64_t kMaxPosition = std::uint64_t{1} << 53;
    progress.train_data.epoch = unsigned_field(reader, data, "epoch", "train_data.epoch", kMaxPosition);
    progress.train_data.batch =
        rank_batches(reader, unsigned_field(reader, data, "batch", "train_data.batch", kMaxPosition));
    const nlohmann::json rng = meta.contains("rng") ? meta["rng"] : nlohmann::json();
    if (!rng.is_object() || rng.value("scheme", nlohmann::json()) != kRngScheme)
        throw bad_metadata(reader, "rng.scheme is not \"" + std::string(kRngScheme) + "\"");
    if (unsigned_field(reader, rng, "seed", "rng.seed", std::numeric_limits<std::uint64_t>::max()) != config_seed)
        throw bad_metadata(reader, "rng.seed " + rng["seed"].dump() +
                                       " differs from the stored config's training.seed " +
                                       std::to_string(config_seed));
    // Absent in checkpoints written before the divergence check existed.
    if (meta.contains("skipped_nonfinite"))
        progress.skipped_nonfinite =
            static_cast<int>(unsigned_field(reader, meta, "skipped_nonfinite", "skipped_nonfinite", kMaxInt));
    return progress;
}

}  // namespace

RunConfig checkpoint_config(const CheckpointReader& reader) {
    const auto& meta = reader.meta();
    if (!meta.is_object() || !meta.contains(kCheckpointConfigKey) || !meta[kCheckpointConfigKey].is_string())
        throw UserError("checkpoint " + quoted(reader.path()) + " holds no config (metadata key '" +
                        kCheckpointConfigKey + "'); pass the run's config file explicitly");
    return config_from_toml_string(meta[kCheckpointConfigKey].get<std::string>(),
                                   reader.path().string() + " (stored config)");
}

std::optional<std::filesystem::path> save_training_checkpoint(const std::filesystem::path& run_dir,
                                                              const RunConfig& config, const GPTModel& model,
                                                              const TrainingProgress& progress) {
    std::vector<float> staging[3];  // host copies where the backend's memory is not the host's
    const float* arenas[3] = {arena_on_root(model, ModelArena::parameters, staging[0]),
                              arena_on_root(model, ModelArena::adam_m, staging[1]),
                              arena_on_root(model, ModelArena::adam_v, staging[2])};
    if (!process_group().is_root()) return std::nullopt;
    nlohmann::json meta;
    meta["step"] = progress.step;
    const int W = process_group().world_size;  // every rank has taken as many batches as this one
    meta["train_data"] = {{"epoch", progress.train_data.epoch},
                          {"batch", progress.train_data.batch * static_cast<std::uint64_t>(W)},
                          {"world_size", W}};
    meta["rng"] = {{"scheme", kRngScheme}, {"seed", config.training.seed}};
    meta["skipped_nonfinite"] = progress.skipped_nonfinite;
    meta["parameters"] = model.num_params();
    meta[kCheckpointConfigKey] = to_toml(config);
    std::vector<CheckpointTensor> tensors;
    add_arena(tensors, model.layout(), "params", arenas[0]);
    add_arena(tensors, model.layout(), "adam_m", arenas[1]);
    add_arena(tensors, model.layout(), "adam_v", arenas[2]);
    const auto file = checkpoint_path(run_dir, progress.step);
    write_checkpoint(file, meta, tensors);
    prune_checkpoints(run_dir, config.checkpoint.keep, file);
    return file;
}

bool parameters_are_finite(const GPTModel& model) { return arena_is_finite(model, ModelArena::parameters); }

bool training_state_is_finite(const GPTModel& model) {
    return parameters_are_finite(model) && arena_is_finite(model, ModelArena::adam_m) &&
           arena_is_finite(model, ModelArena::adam_v);
}

TrainingProgress load_training_checkpoint(const std::filesystem::path& file, GPTModel& model) {
    const CheckpointReader reader(file);
    const TrainingProgress progress = read_progress(reader, checkpoint_config(reader).training.seed);
    read_arena(reader, model, ModelArena::parameters, "params");
    read_arena(reader, model, ModelArena::adam_m, "adam_m");
    read_arena(reader, model, ModelArena::adam_v, "adam_v");
    return progress;
}

void load_model_weights(const CheckpointReader& checkpoint, GPTModel& model) {
    read_arena(checkpoint, model, ModelArena::parameters, "params");
}

}  // namespace adacc
