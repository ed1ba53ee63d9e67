// Where a model's weights come from: an adacc checkpoint (a file, or a run folder's newest
// complete checkpoint; only its params/* are used) or an llm.c GPT-2 model file (version 3 fp32
// or 5 bf16, src/io/llmc_model_io.h). `train --init-from` tells them apart by content; `sample` and
// `eval` take them as --checkpoint or --llmc-model. One path from "a file on the command line"
// to "parameters in a GPTModel" for every command.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "models/gpt_config.h"
#include "src/io/checkpoint.h"
#include "src/engine/gpt_model.h"

namespace adacc {

enum class WeightsFormat { adacc_checkpoint, llmc_model };

struct WeightsFile {
    WeightsFormat format = WeightsFormat::adacc_checkpoint;
    std::filesystem::path path;  // the checkpoint file (a run folder resolved) or the llm.c file
    GPTConfig shape;             // the model it holds (llm.c files store no dropout: 0)
    // An adacc checkpoint, held open from the moment it was chosen: a run still training in its
    // folder may prune it before the weights are read, and the open file stays readable.
    std::shared_ptr<const CheckpointReader> checkpoint;
};

// An adacc checkpoint file or run folder (UserError when it has no complete checkpoint).
WeightsFile open_checkpoint_weights(const std::filesystem::path& file_or_run_dir);
// An llm.c model file (UserError when it is not one this build reads).
WeightsFile open_llmc_weights(const std::filesystem::path& file);
// Either of the above, by content: a folder or a file starting with ADACCKPT is a checkpoint, a
// file starting with llm.c's model magic an llm.c file; anything else is a UserError naming what
// is accepted.
WeightsFile open_weights_file(const std::filesystem::path& file_or_run_dir);
// The model a command was given as --checkpoint or --llmc-model (at most one is non-empty; the
// caller's CLI makes them exclusive). UserError when neither is.
WeightsFile open_weights_option(const std::string& checkpoint, const std::string& llmc_model);

// UserError when the file's model differs from `config` in any of n_layer, n_embd, n_head,
// vocab_size, max_seq_len: it names each differing field with both values and gives the --set
// overrides (and the preset, when one has the file's shape) that make the config match.
void check_weights_shape(const WeightsFile& weights, const GPTConfig& config);

// Copies the file's parameters into the model (its host API) after check_weights_shape against the
// model's config. Nothing else of the model (optimizer state, gradients) is touched.
void load_weights(const WeightsFile& weights, GPTModel& model);

// One line for logs: "llm.c model 'F'" or "adacc checkpoint 'F' (step S)".
std::string describe_weights(const WeightsFile& weights);

}  // namespace adacc
