// What a training checkpoint holds and how it maps onto the model: every parameter tensor
// ("params/NAME"), AdamW's m and v ("adam_m/NAME", "adam_v/NAME"), and metadata with the step,
// the dataloader position, the RNG scheme and the resolved config. Dropout masks come from the
// counter-based RNG keyed by (seed, step, micro-batch, ...), so seed + step is the whole RNG state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "data/dataloader.h"
#include "src/config/run_config.h"
#include "src/engine/gpt_model.h"
#include "src/io/checkpoint_file.h"

namespace adacc {

// Metadata key holding the resolved config as TOML text (see to_toml()).
constexpr const char* kCheckpointConfigKey = "config";

// The config stored in the checkpoint's metadata (kCheckpointConfigKey), loaded and validated.
RunConfig checkpoint_config(const CheckpointReader& reader);

struct TrainingProgress {
    int step = 0;  // optimizer steps completed
    // Position of this rank's training loader after `step`. The checkpoint stores the job's: the
    // batches all W ranks took (W times this rank's), so it resumes on any world size dividing it.
    DataLoaderState train_data;
    int skipped_nonfinite = 0;  // steps skipped so far for a non-finite loss or gradient norm
};

// Whether every parameter is finite; with the AdamW moments too (a diverged run's are not).
bool parameters_are_finite(const GPTModel& model);
bool training_state_is_finite(const GPTModel& model);

// Writes RUN_DIR/checkpoints/ckpt_<step>.bin atomically and prunes to checkpoint.keep. The
// caller checks training_state_is_finite() first: a checkpoint is never written from NaN. In a
// data-parallel job every rank calls it (under ZeRO-1 the AdamW moments are gathered from the
// ranks' shards) and rank 0 writes the file, the others getting nullopt; the file is the same
// whatever the world size.
std::optional<std::filesystem::path> save_training_checkpoint(const std::filesystem::path& run_dir,
                                                              const RunConfig& config, const GPTModel& model,
                                                              const TrainingProgress& progress);

// Loads parameters and optimizer state into `model` (whose shape must match: the error says
// which tensor differs and that the checkpoint belongs to another model) and returns the progress.
// The metadata is validated like the tensors: step (an integer in [0, 2^31), equal to the step
// in the file name), data position (non-negative integers), RNG scheme and seed (those of the
// stored config); non-finite parameters or moments are refused. Each failure is a UserError.
TrainingProgress load_training_checkpoint(const std::filesystem::path& file, GPTModel& model);

// Parameters only, for sample/eval and --init-from: from an opened adacc checkpoint
// (open_checkpoint); non-finite parameters are refused.
void load_model_weights(const CheckpointReader& checkpoint, GPTModel& model);

}  // namespace adacc
