// Each subcommand lives in its own file under src/cli/ and registers itself on the program's
// command line here (src/cli/command_line.h); what it runs does the work and throws
// adacc::UserError on bad input.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "src/cli/command_line.h"
#include "src/engine/memory_mode.h"

namespace adacc {

void add_train_command(Command& program);      // src/cli/train.cpp
void add_prepare_command(Command& program);    // src/cli/prepare.cpp
void add_tokenize_command(Command& program);   // src/cli/tokenize.cpp
void add_sample_command(Command& program);     // src/cli/sample.cpp
void add_memory_command(Command& program);     // src/cli/memory.cpp
void add_compare_command(Command& program);    // src/cli/compare.cpp
void add_eval_command(Command& program);       // src/cli/eval.cpp
void add_config_command(Command& program);     // src/cli/config.cpp
void add_plan_command(Command& program);       // src/cli/plan.cpp
void add_export_command(Command& program);     // src/cli/export.cpp
void add_gradients_command(Command& program);  // src/cli/gradients.cpp

// The model a command reads, as --checkpoint DIR|FILE, --llmc-model FILE or --hf-model DIR (one of
// them; src/train/weights_file.h opens them): src/cli/weights_options.cpp. Used by sample and eval.
void add_model_options(Command& command, std::string& checkpoint, std::string& llmc_model, std::string& hf_model);

// The options several commands share: src/cli/common_options.cpp.
// --set section.key=value (repeatable) into `overrides`, applied over the config in order.
void add_set_option(Command& command, std::vector<std::string>& overrides);
// --device cpu|cuda (src/engine/device.h) into `device` (left empty when not given); commands
// with a config pass it on as training.device.
void add_device_option(Command& command, std::string& device, const char* default_text);
// --dtype auto|fp32|bf16 (model.dtype) into `dtype` (left empty when not given), the same way.
void add_dtype_option(Command& command, std::string& dtype, const char* default_text);
// --modes MODE,... (memory modes, checked as parsed) into `modes`; memory_modes_of reads them.
void add_modes_option(Command& command, std::vector<std::string>& modes, const std::string& help);
// The modes --modes named, in order, or the fixed ones when it was not given; UserError when one
// is named twice (it would be run or shown twice).
std::vector<MemoryMode> memory_modes_of(const std::vector<std::string>& names);
// The first value a list option holds a second time, or null: --modes and --batch refuse repeats.
template <class T>
const T* first_repeat(const std::vector<T>& values) {
    for (auto v = values.begin(); v != values.end(); ++v)
        if (std::find(values.begin(), v, *v) != v) return &*v;
    return nullptr;
}

// How to set a config setting with the command that was parsed (its own flag for it, or --set),
// for a SettingError's message; empty when the command takes neither.
std::string setting_advice(const Command& command, const std::string& setting);

}  // namespace adacc
