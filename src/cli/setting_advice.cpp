// The command-line half of a SettingError (src/common/errors.h): the engine names the config
// setting at fault; here it becomes the way to set it with the command the user ran.
#include <string>

#include "src/cli/commands.h"

namespace adacc {

namespace {

struct SettingFlag {
    const char* setting;
    const char* flag;
    const char* value;
};
// Settings some commands take as a flag of their own (the flag then wins over the config).
constexpr SettingFlag kSettingFlags[] = {
    {"memory.budget", "--memory-budget", "SIZE"},
    {"training.device", "--device", "cpu|cuda"},
    {"model.dtype", "--dtype", "auto|fp32|bf16"},
    {"memory.profile", "--profile", "FILE"},
    {"eval.data", "--data", "PATH"},
    {"eval.vocab", "--vocab", "DIR"},
};

}  // namespace

std::string setting_advice(const Command& command, const std::string& setting) {
    for (const SettingFlag& f : kSettingFlags)
        if (setting == f.setting && command.takes(f.flag)) return std::string("set it with ") + f.flag + " " + f.value;
    if (command.takes("--set")) return "set it in the config or with --set " + setting + "=VALUE";
    return "";
}

}  // namespace adacc
