#include <CLI/CLI.hpp>

#include "src/cli/commands.h"
#include "src/engine/device.h"

namespace adacc {

void add_device_option(CLI::App& command, std::string& device, const char* default_text) {
    command.add_option("--device", device, std::string("where the model runs: cpu, or cuda (GPU 0); default: ") + default_text)
        ->check(CLI::IsMember(device_names()))
        ->type_name("DEVICE");
}

void add_dtype_option(CLI::App& command, std::string& dtype, const char* default_text) {
    command
        .add_option("--dtype", dtype, std::string(kModelDtypeHelp) + "; default: " + default_text)
        ->check(CLI::IsMember(model_dtype_names()))
        ->type_name("DTYPE");
}

}  // namespace adacc
