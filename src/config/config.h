// Loading, overriding, validating, printing and writing a RunConfig as TOML.
//
// Every key is described once, in the key registry in config.cpp (section, name, type, where it
// lives in RunConfig, what values it allows, help text); parsing, --set overrides, validation,
// the printed table and to_toml() all walk that one table, so a key added there is handled
// everywhere.
//
// A config file has the sections [model] [training] [optimizer] [lr] [data] [memory]
// [checkpoint] [eval] [stress] [logging], each holding the snake_case fields of the matching
// struct of RunConfig (src/config/run_config.h) ([model]: GPTConfig's, models/gpt_config.h, and dtype). In
// [model], `preset = "gpt-117m"` starts the model from gpt_preset() and the other [model] keys
// override it, wherever they appear in the section.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "src/adacc/adacc_regulator.h"
#include "src/config/run_config.h"
#include "src/dist/process_group.h"
#include "src/engine/device.h"
#include "src/engine/memory_mode.h"

namespace adacc {

// File, then each "section.key=value" override in order, then validate_config().
// Throws UserError naming the file (and line) or the override at fault, and the fix.
RunConfig load_config(const std::filesystem::path& file, const std::vector<std::string>& overrides = {});

// The built-in defaults, then each override, resolved and validated as load_config does
// (`adacc config --set ...` without a file).
RunConfig config_from_overrides(const std::vector<std::string>& overrides);

// The same from TOML text (tests; the config stored inside a checkpoint). `source_name` is what
// error messages call the text. Validated.
RunConfig config_from_toml_string(std::string_view text, std::string_view source_name);

// Applies one "--set" override, "section.key=value", parsing `value` per the key's type:
// integers, numbers, true/false, strings as written (surrounding quotes optional), and lists
// (eval.tasks) as comma-separated items. `model.preset=NAME` resets the whole model section to
// the preset. Does not validate ranges: load_config() validates once everything is applied.
void apply_override(RunConfig& config, std::string_view assignment);

// Throws UserError for the first key whose value is out of its allowed range, naming the key,
// its value and the allowed range or values; `source_name` (a file, or empty) says where to fix it.
// A key one of `overrides` set ("section.key=value", --set and the flags that stand for one) is
// the command line's to fix: a SettingError, which the command line turns into that flag's advice.
// Picks model.attention when the config did not: on CUDA with bf16, cudnn when cuDNN loads
// (src/cuda/cuda_device.h: cudnn_problem), else materialized with one line to stderr saying why; on
// the CPU materialized. load_config and both config_from_* call it before validating.
void resolve_default_attention(RunConfig& config);
void validate_config(const RunConfig& config, std::string_view source_name = {},
                     const std::vector<std::string>& overrides = {});
// ---------------------------------------------------------------------------------------------
// A validated config resolved into the options the components take. train/ and cli/ resolve a
// config once and hand the pieces on; nothing below them reads a RunConfig.

// Where the config's model runs: training.device and model.dtype resolved ("auto": the device's
// default), for a run of `world_size` data-parallel ranks (this job's by default): with
// training.zero = 1 they share the AdamW state. SettingError when the device does not run the dtype.
ComputeTarget compute_target(const RunConfig& config, int world_size = process_group().world_size);

// memory.budget in bytes; 0 when it is "" (no limit). The config was validated, so the text parses.
std::uint64_t budget_bytes(const MemorySection& memory);

// What the planner may compress with: memory.codecs and memory.max_codec_error (SettingError on an
// unknown memory.codecs).
CodecChoice codec_choice(const MemorySection& memory);

// The options of planned mode `mode` (adacc or recompute-opt) as the config's [memory] section
// sets them: memory.granularity, memory.profile, memory.codecs, memory.max_codec_error,
// memory.monitor_max_interval and memory.min_replan_steps (SettingError on a bad memory.codecs).
// Training, `adacc plan`, `adacc memory` and `adacc compare` all start from it; where to save the
// profile is the caller's (the trainer writes it into the run folder).
RegulatorOptions regulator_options(const RunConfig& config, MemoryMode mode);

// The run the planner plans for: [model], training.batch_size, training.seq_len, training.seed and
// [stress], on `target`.
PlannedRun planned_run(const RunConfig& config, const ComputeTarget& target);

// The resolved config, one "section.key  value" row per key, values aligned in one column.
std::string format_config_table(const RunConfig& config);

// Every key with its type, allowed values and help text: the reference for config files.
std::string format_config_reference();

// TOML text that config_from_toml_string() loads back to an identical RunConfig.
std::string to_toml(const RunConfig& config);

}  // namespace adacc
