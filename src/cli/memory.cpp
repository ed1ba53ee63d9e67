// adacc memory --config FILE [--set ...] [--memory-budget SIZE] [--modes none,full,...]
// The arena breakdown per memory mode, computed without allocating or training.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "src/cli/commands.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/common/errors.h"
#include "src/engine/memory_mode.h"
#include "src/engine/memory_report.h"

namespace adacc {

namespace {
struct MemoryArgs {
    std::string config, budget, device, dtype;
    std::vector<std::string> overrides, modes;
};

void run_memory(MemoryArgs& args) {
    // As in train: --memory-budget is --set memory.budget=..., validated with the other keys.
    if (!args.budget.empty()) args.overrides.push_back("memory.budget=" + args.budget);
    if (!args.device.empty()) args.overrides.push_back("training.device=" + args.device);
    if (!args.dtype.empty()) args.overrides.push_back("model.dtype=" + args.dtype);
    RunConfig config = load_config(args.config, args.overrides);
    const std::uint64_t budget = config.memory.budget.empty() ? 0 : parse_size(config.memory.budget);
    std::vector<MemoryMode> modes;
    for (const auto& m : args.modes) {
        modes.push_back(parse_memory_mode(m));
        if (is_planned(modes.back()))
            throw UserError("mode " + m + " fills whatever budget it is given: see its plan with "
                            "`adacc plan --config ... --memory-budget SIZE`");
    }
    if (modes.empty()) modes = fixed_memory_modes();
    const GPTConfig& m = config.model;
    const ComputeTarget target = compute_target(config);
    const int B = config.training.batch_size, T = config.training.seq_len;
    std::printf("model L=%d C=%d H=%d V=%d, %lld parameters; batch %d x seq %d%s%s\n\n", m.n_layer, m.n_embd,
                m.n_head, m.vocab_size, static_cast<long long>(m.parameter_count()), B, T,
                budget ? ", budget " : "", budget ? format_bytes(budget).c_str() : "");
    std::printf("%s", describe_device_memory(target).c_str());
    std::printf("%s", format_memory_table(m, B, T, modes, budget, target).c_str());
    std::printf("\ntape: saved activations (kept / compressed at their bound / nothing when recomputed); "
                "materialize: full-size buffers for what is decompressed or recomputed; transients: op outputs "
                "backward does not need and backward's gradient buffers%s\n",
                budget ? "; max_batch: largest batch whose total fits the budget" : "");
}
}  // namespace

void add_memory_command(CLI::App& app) {
    auto args = std::make_shared<MemoryArgs>();
    CLI::App* cmd = app.add_subcommand("memory", "Per-mode memory breakdown of a config, without training");
    cmd->add_option("--config", args->config, "TOML run config")->required();
    cmd->add_option("--set", args->overrides, "override a config key: section.key=value (repeatable)");
    cmd->add_option("--memory-budget", args->budget, "memory budget (e.g. 24GiB): adds the largest batch per mode");
    add_device_option(*cmd, args->device, "training.device; sizes are computed, so no GPU is needed");
    add_dtype_option(*cmd, args->dtype, "model.dtype");
    cmd->add_option("--modes", args->modes,
                    "fixed modes to show (default: " + join_memory_mode_names(fixed_memory_modes()) + ")")
        ->delimiter(',');
    cmd->callback([args] { run_memory(*args); });
}

}  // namespace adacc
