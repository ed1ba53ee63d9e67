// The command-line options several commands share, declared in src/cli/commands.h.
#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/engine/device.h"

namespace adacc {

void add_set_option(Command& command, std::vector<std::string>& overrides) {
    command.option("--set", overrides, "override a config key: section.key=value (repeatable)");
}

void add_device_option(Command& command, std::string& device, const char* default_text) {
    command
        .option("--device", device, std::string("where the model runs: cpu, or cuda (GPU 0); default: ") + default_text)
        .one_of(device_names())
        .type_name("DEVICE");
}

void add_dtype_option(Command& command, std::string& dtype, const char* default_text) {
    command.option("--dtype", dtype, std::string(kModelDtypeHelp) + "; default: " + default_text)
        .one_of(model_dtype_names())
        .type_name("DTYPE");
}

void add_modes_option(Command& command, std::vector<std::string>& modes, const std::string& help) {
    command.option("--modes", modes, help).comma_separated().one_of(memory_mode_names()).type_name("MODE");
}

std::vector<MemoryMode> memory_modes_of(const std::vector<std::string>& names) {
    std::vector<MemoryMode> modes;
    for (const std::string& name : names) modes.push_back(parse_memory_mode(name));
    if (const MemoryMode* repeat = first_repeat(modes))
        throw UserError("--modes lists " + std::string(memory_mode_name(*repeat)) + " twice: give each mode once");
    return modes.empty() ? fixed_memory_modes() : modes;
}

}  // namespace adacc
