// The command-line options several commands share, declared in src/cli/commands.h.
#include "src/cli/commands.h"
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

}  // namespace adacc
