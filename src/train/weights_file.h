// Where a model's weights come from: an adacc checkpoint (a file, or a run folder's newest
// complete checkpoint; only its params/* are used), an llm.c GPT-2 model file (version 3 fp32
// or 5 bf16, src/io/llmc_model_io.h) or a Hugging Face GPT-2 folder (src/io/hf_gpt2.h).
// `train --init-from` tells them apart by content; `sample` and `eval` take them as --checkpoint,
// --llmc-model or --hf-model. One path from "a file on the command line" to "parameters in a
// GPTModel" for every command.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "models/gpt_config.h"
#include "src/engine/gpt_model.h"
#include "src/io/checkpoint_file.h"

namespace adacc {

enum class WeightsFormat { adacc_checkpoint, llmc_model, hf_model };

struct WeightsFile {
    WeightsFormat format = WeightsFormat::adacc_checkpoint;
    std::filesystem::path path;  // the checkpoint file (a run folder resolved), the llm.c file or the HF folder
    GPTConfig shape;             // the model it holds (llm.c and HF weights carry no dropout: 0)
    // An adacc checkpoint, held open from the moment it was chosen: a run still training in its
    // folder may prune it before the weights are read, and the open file stays readable.
    std::shared_ptr<const CheckpointReader> checkpoint;
};

// An adacc checkpoint file or run folder (UserError when it has no complete checkpoint).
WeightsFile open_checkpoint_weights(const std::filesystem::path& file_or_run_dir);
// An llm.c model file (UserError when it is not one this build reads).
WeightsFile open_llmc_weights(const std::filesystem::path& file);
// A Hugging Face GPT-2 folder (UserError when config.json is not a GPT-2 adacc runs).
WeightsFile open_hf_weights(const std::filesystem::path& dir);
// Any of the above, by content: a folder holding config.json is a Hugging Face model, any other
// folder or a file starting with ADACCKPT a checkpoint, a file starting with llm.c's model magic
// an llm.c file; anything else is a UserError naming what is accepted.
WeightsFile open_weights_file(const std::filesystem::path& file_or_run_dir);
// The model a command was given as --checkpoint, --llmc-model or --hf-model (at most one is
// non-empty; the caller's CLI makes them exclusive). UserError when none is.
WeightsFile open_weights_option(const std::string& checkpoint, const std::string& llmc_model,
                                const std::string& hf_model);

// UserError when the file's model differs from `config` in any of n_layer, n_embd, n_head,
// vocab_size, max_seq_len: it names each differing field with both values and gives the --set
// overrides (and the preset, when one has the file's shape) that make the config match.
void check_weights_shape(const WeightsFile& weights, const GPTConfig& config);

// Copies the file's parameters into the model (its host API) after check_weights_shape against the
// model's config. Nothing else of the model (optimizer state, gradients) is touched.
void load_weights(const WeightsFile& weights, GPTModel& model);

// What a format is called: "llm.c model file", "adacc checkpoint", "Hugging Face GPT-2 folder".
std::string format_name(WeightsFormat format);
// One line for logs: "llm.c model file 'F'", "adacc checkpoint 'F'" or "Hugging Face GPT-2 folder 'D'".
std::string describe_weights(const WeightsFile& weights);

}  // namespace adacc
