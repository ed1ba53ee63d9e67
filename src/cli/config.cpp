// adacc config [--config FILE] [--set ...]   the fully resolved config as a table
// adacc config --reference                    every key with its type, allowed values and help
#include <cstdio>

#include "src/cli/commands.h"
#include "src/config/config.h"

namespace adacc {

namespace {
struct ConfigArgs {
    std::string config;
    std::vector<std::string> overrides;
    bool reference = false, toml = false;
};

void run_config(const ConfigArgs& args) {
    if (args.reference) {
        std::printf("%s", format_config_reference().c_str());
        return;
    }
    const RunConfig config =
        args.config.empty() ? config_from_overrides(args.overrides) : load_config(args.config, args.overrides);
    std::printf("%s", args.toml ? to_toml(config).c_str() : format_config_table(config).c_str());
}
}  // namespace

void add_config_command(Command& program) {
    auto args = std::make_shared<ConfigArgs>();
    Command cmd = program.subcommand("config", "Print a resolved config, or the reference of every key");
    cmd.option("--config", args->config, "TOML run config (default: the built-in defaults)");
    add_set_option(cmd, args->overrides);
    cmd.flag("--reference", args->reference, "list every key with its type, allowed values and meaning");
    cmd.flag("--toml", args->toml, "print as TOML (loadable with --config) instead of a table");
    cmd.on_run([args] { run_config(*args); });
}

}  // namespace adacc
