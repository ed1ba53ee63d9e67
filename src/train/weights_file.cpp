#include "src/train/weights_file.h"

#include <vector>

#include <cstdint>
#include <cstring>

#include "data/token_shard.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/io/checkpoint_folder.h"
#include "src/io/hf_gpt2.h"
#include "src/io/llmc_model_io.h"
#include "src/train/training_state.h"

namespace adacc {

namespace {

namespace fs = std::filesystem;

constexpr const char* kAccepted =
    "pass a Hugging Face GPT-2 folder (config.json and model.safetensors), an llm.c GPT-2 model file (e.g. "
    "gpt2_124M.bin), an adacc checkpoint file or a run folder";

// "50257 (padded to 50304 rows)": llm.c files store the padded vocabulary, so say both.
std::string field_value(const GPTShapeField& field, const GPTConfig& c) {
    std::string text = std::to_string(c.*field.member);
    if (field.member == &GPTConfig::vocab_size)
        text += " (padded to " + std::to_string(c.padded_vocab_size()) + " rows)";
    return text;
}

// Where the file states a field: Hugging Face's config.json names max_seq_len n_positions.
std::string stated_in(const WeightsFile& weights, const GPTShapeField& field) {
    if (weights.format != WeightsFormat::hf_model) return "in the file";
    return std::string("in config.json (") + (field.member == &GPTConfig::max_seq_len ? "n_positions" : field.name) +
           ")";
}

std::string matching_preset(const GPTConfig& shape) {
    for (const auto& name : gpt_preset_names())
        if (same_shape(*gpt_preset(name), shape)) return name;
    return "";
}

}  // namespace

WeightsFile open_checkpoint_weights(const fs::path& file_or_run_dir) {
    WeightsFile weights;
    weights.format = WeightsFormat::adacc_checkpoint;
    weights.checkpoint = open_checkpoint(file_or_run_dir);
    weights.path = weights.checkpoint->path();
    weights.shape = checkpoint_config(*weights.checkpoint).model;
    return weights;
}

WeightsFile open_llmc_weights(const fs::path& file) {
    WeightsFile weights;
    weights.format = WeightsFormat::llmc_model;
    weights.path = file;
    weights.shape = read_llmc_header(file);
    return weights;
}

WeightsFile open_hf_weights(const fs::path& dir) {
    WeightsFile weights;
    weights.format = WeightsFormat::hf_model;
    weights.path = dir;
    weights.shape = read_hf_gpt2(dir);
    return weights;
}

WeightsFile open_weights_file(const fs::path& file_or_run_dir) {
    std::error_code error;
    if (is_hf_model_dir(file_or_run_dir)) return open_hf_weights(file_or_run_dir);
    if (fs::is_directory(file_or_run_dir, error)) return open_checkpoint_weights(file_or_run_dir);
    if (!fs::exists(file_or_run_dir, error)) throw UserError(quoted(file_or_run_dir) + " does not exist; " + kAccepted);
    char start[sizeof kCheckpointMagic] = {};
    const bool long_enough = ReadOnlyFile(file_or_run_dir).read_at(0, start, sizeof start);
    std::int32_t first_word = 0;
    std::memcpy(&first_word, start, sizeof first_word);
    if (long_enough && std::memcmp(start, kCheckpointMagic, sizeof start) == 0)
        return open_checkpoint_weights(file_or_run_dir);
    if (long_enough && first_word == kLlmcModelMagic) return open_llmc_weights(file_or_run_dir);
    const bool token_shard = long_enough && first_word == kTokenShardMagic;
    const bool hf_file = file_or_run_dir.extension() == ".safetensors" || file_or_run_dir.filename() == "config.json";
    throw UserError(quoted(file_or_run_dir) + " is neither an llm.c model file nor an adacc checkpoint" +
                    (token_shard ? " (it is an llm.c token shard: training data)" : "") +
                    (hf_file ? " (it is part of a Hugging Face model: pass the folder that holds it)" : "") + "; " +
                    kAccepted);
}

WeightsFile open_weights_option(const std::string& checkpoint, const std::string& llmc_model,
                                const std::string& hf_model) {
    if (!checkpoint.empty()) return open_checkpoint_weights(checkpoint);
    if (!llmc_model.empty()) return open_llmc_weights(llmc_model);
    if (!hf_model.empty()) return open_hf_weights(hf_model);
    throw UserError("no model given: pass --checkpoint RUN_DIR|FILE, --llmc-model FILE or --hf-model DIR");
}

void check_weights_shape(const WeightsFile& weights, const GPTConfig& config) {
    std::string differences, fix;
    for (const auto& f : kGPTShapeFields) {
        if (weights.shape.*f.member == config.*f.member) continue;
        differences += std::string("\n  model.") + f.name + ": " + field_value(f, weights.shape) + " " +
                       stated_in(weights, f) + ", " + field_value(f, config) + " in the config";
        fix += std::string(" --set model.") + f.name + "=" + std::to_string(weights.shape.*f.member);
    }
    if (differences.empty()) return;
    const std::string preset = matching_preset(weights.shape);
    throw UserError(describe_weights(weights) + " holds a model of another shape than the config's [model]:" +
                    differences + "\nmake the config match the file:" + fix +
                    (preset.empty() ? ""
                                    : "\nor --set model.preset=" + preset +
                                          " (the preset of this shape; it also resets model.dropout to 0)"));
}

void load_weights(const WeightsFile& weights, GPTModel& model) {
    check_weights_shape(weights, model.config());
    if (weights.format == WeightsFormat::adacc_checkpoint) {
        load_model_weights(*weights.checkpoint, model);  // refuses non-finite parameters itself
        return;
    }
    std::vector<float> host(model.num_params());
    if (weights.format == WeightsFormat::hf_model)
        load_hf_gpt2(weights.path, model.config(), host.data());
    else
        load_llmc_model(weights.path, model.config(), host.data());
    model.write_arena(ModelArena::parameters, 0, host.size(), host.data());
    if (!parameters_are_finite(model))
        throw UserError(describe_weights(weights) +
                        " holds non-finite parameters: it was written by a diverged run "
                        "or altered; use another file");
}

std::string format_name(WeightsFormat format) {
    switch (format) {
        case WeightsFormat::llmc_model: return "llm.c model file";
        case WeightsFormat::hf_model: return "Hugging Face GPT-2 folder";
        case WeightsFormat::adacc_checkpoint: break;
    }
    return "adacc checkpoint";
}

std::string describe_weights(const WeightsFile& weights) {
    return format_name(weights.format) + " " + quoted(weights.path);
}

}  // namespace adacc
