#include "src/training_state.h"

#include <string>
#include <vector>

#include "src/checkpoint.h"
#include "src/config.h"

namespace adacc {

namespace {

std::vector<std::int64_t> stored_shape(const ParamTensorInfo& info) {
    return {info.shape.begin(), info.shape.end()};
}

// The tensors of one arena laid out by ParameterLayout, named "<prefix>/<tensor>".
void add_arena(std::vector<CheckpointTensor>& out, const ParameterLayout& layout, const std::string& prefix,
               const float* arena) {
    for (const auto& info : layout.tensors())
        out.push_back({prefix + "/" + info.name, DType::f32, stored_shape(info), arena + info.offset});
}

void read_arena(const CheckpointReader& reader, const ParameterLayout& layout, const std::string& prefix,
                float* arena) {
    for (const auto& info : layout.tensors()) {
        const auto shape = stored_shape(info);
        reader.read_into(prefix + "/" + info.name, DType::f32, shape, arena + info.offset);
    }
}

}  // namespace

std::filesystem::path save_training_checkpoint(const std::filesystem::path& run_dir, const RunConfig& config,
                                               const GPTModel& model, const TrainingProgress& progress) {
    nlohmann::json meta;
    meta["step"] = progress.step;
    meta["train_data"] = {{"epoch", progress.train_data.epoch}, {"batch", progress.train_data.batch}};
    meta["rng"] = {{"scheme", "counter(seed, step, micro, layer, tensor)"}, {"seed", config.training.seed}};
    meta["parameters"] = model.num_params();
    meta[kCheckpointConfigKey] = to_toml(config);
    std::vector<CheckpointTensor> tensors;
    add_arena(tensors, model.layout(), "params", model.params());
    add_arena(tensors, model.layout(), "adam_m", model.adam_m());
    add_arena(tensors, model.layout(), "adam_v", model.adam_v());
    const auto file = checkpoint_path(run_dir, progress.step);
    write_checkpoint(file, meta, tensors);
    prune_checkpoints(run_dir, config.checkpoint.keep, file);
    return file;
}

TrainingProgress load_training_checkpoint(const std::filesystem::path& file, GPTModel& model) {
    const CheckpointReader reader(file);
    read_arena(reader, model.layout(), "params", model.params());
    read_arena(reader, model.layout(), "adam_m", model.adam_m());
    read_arena(reader, model.layout(), "adam_v", model.adam_v());
    TrainingProgress progress;
    const auto& meta = reader.meta();
    progress.step = meta.at("step").get<int>();
    progress.train_data.epoch = meta.at("train_data").at("epoch").get<std::uint64_t>();
    progress.train_data.batch = meta.at("train_data").at("batch").get<std::uint64_t>();
    return progress;
}

void load_model_weights(const std::filesystem::path& checkpoint, GPTModel& model) {
    const CheckpointReader reader(resolve_checkpoint(checkpoint));
    read_arena(reader, model.layout(), "params", model.params());
}

}  // namespace adacc
