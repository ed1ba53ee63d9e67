// adacc memory --config FILE [--set ...] [--memory-budget SIZE] [--modes none,full,...,adacc] [--world-size N]
// The arena breakdown per memory mode, computed without allocating or training. Planned modes
// (adacc, recompute-opt) need the budget: their row is the plan for it, and their largest batch
// is the planner's, from one profile of the profiler's slice at batch 1 (a few forwards of two
// blocks and the classifier on the CPU, whatever the --device: sizes follow the device).
#include <cstdio>
#include <optional>

#include "src/adacc/adacc_regulator.h"
#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/engine/memory_mode.h"
#include "src/engine/memory_report.h"
#include "src/train/token_loader.h"

namespace adacc {

namespace {
struct MemoryArgs {
    std::string config, budget, device, dtype;
    std::vector<std::string> overrides, modes;
    int world_size = 1;
};

// A planned mode's row: the plan for the config's batch within the budget, and the largest batch
// it plans (both from `unit`, the profile at batch 1, rescaled).
MemoryRow planned_memory_row(const RunConfig& config, const Profile& unit, MemoryMode mode, std::uint64_t budget,
                             const ComputeTarget& target) {
    const int B = config.training.batch_size;
    const RegulatorOptions options = regulator_options(config, mode);
    const PlannedRun run = planned_run(config, target);
    MemoryRow row;
    row.mode = mode;
    try {
        row.memory = plan_adacc(config.model, B, config.training.seq_len, rescale_profile(unit, config.model, B),
                                budget, options.allow_compress, options.planner, options.codecs, target)
                         .memory;
    } catch (const UserError&) {
        row.note = "no plan fits batch " + std::to_string(B) + " within the budget";
    }
    row.max_batch = largest_planned_batch(run, unit, options, budget);  // per rank
    return row;
}

void run_memory(MemoryArgs& args) {
    // As in train: --memory-budget is --set memory.budget=..., validated with the other keys.
    if (!args.budget.empty()) args.overrides.push_back("memory.budget=" + args.budget);
    if (!args.device.empty()) args.overrides.push_back("training.device=" + args.device);
    if (!args.dtype.empty()) args.overrides.push_back("model.dtype=" + args.dtype);
    RunConfig config = load_config(args.config, args.overrides);
    const std::uint64_t budget = budget_bytes(config.memory);
    const std::vector<MemoryMode> modes = memory_modes_of(args.modes);
    for (MemoryMode mode : modes)
        if (is_planned(mode) && !budget)
            throw UserError(std::string("mode ") + memory_mode_name(mode) +
                            " plans for a memory budget: pass --memory-budget SIZE (its row is then the plan for "
                            "that budget and the largest batch it plans)");
    const GPTConfig& m = config.model;
    const ComputeTarget target = compute_target(config, args.world_size);
    const int B = config.training.batch_size, T = config.training.seq_len;
    std::printf("model L=%d C=%d H=%d V=%d, %lld parameters; batch %d x seq %d%s%s\n", m.n_layer, m.n_embd, m.n_head,
                m.vocab_size, static_cast<long long>(m.parameter_count()), B, T, budget ? ", budget " : "",
                budget ? format_bytes(budget).c_str() : "");
    if (args.world_size > 1) {
        const char* zero = device_traits(target).masters_sharded()
                               ? ", ZeRO-1: AdamW's moments and the fp32 masters sharded"
                               : ", ZeRO-1: AdamW's moments sharded";
        std::printf("per rank of %d data-parallel ranks (batch per rank)%s\n", args.world_size,
                    config.training.zero ? zero : ", each holding the whole model state");
    }
    std::printf("\n");
    std::printf("%s", describe_device_memory(target).c_str());
    std::optional<Profile> unit;  // profiled once, for every planned mode
    std::vector<MemoryRow> rows;
    for (MemoryMode mode : modes) {
        if (!is_planned(mode)) {
            rows.push_back(fixed_memory_row(m, B, T, mode, budget, target));
            continue;
        }
        if (!unit) unit = unit_batch_profile(planned_run(config, target), profiling_tokens(config));
        rows.push_back(planned_memory_row(config, *unit, mode, budget, target));
    }
    std::printf("%s", format_memory_rows(rows, target).c_str());
    std::printf(
        "\ntape: saved activations (kept / compressed at their bound / nothing when recomputed); "
        "materialize: full-size buffers for what is decompressed or recomputed; transients: op outputs "
        "backward does not need and backward's gradient buffers%s%s\n",
        target.device == Device::cuda ? "; backend: its fixed memory (above) and, training with cuDNN's attention, "
                                        "cuDNN's workspace"
                                      : "",
        budget ? "; max_batch: largest batch whose total fits the budget (planned modes: the largest the "
                 "planner fits, from the profiler's slice at batch 1)"
               : "");
}
}  // namespace

void add_memory_command(Command& program) {
    auto args = std::make_shared<MemoryArgs>();
    Command cmd = program.subcommand("memory", "Per-mode memory breakdown of a config, without training");
    cmd.option("--config", args->config, "TOML run config").required();
    add_set_option(cmd, args->overrides);
    cmd.option("--memory-budget", args->budget, "memory budget (e.g. 24GiB): adds the largest batch per mode");
    add_device_option(cmd, args->device, "training.device; sizes are computed, so no GPU is needed");
    add_dtype_option(cmd, args->dtype, "model.dtype");
    cmd.option("--world-size", args->world_size,
               "data-parallel ranks the sizes are per rank of (with --set training.zero=1 they share AdamW's "
               "moments)")
        .positive();
    add_modes_option(cmd, args->modes,
                     "modes to show (default: " + join_memory_mode_names(fixed_memory_modes()) +
                         "; adacc and recompute-opt need --memory-budget)");
    cmd.on_run([args] { run_memory(*args); });
}

}  // namespace adacc
