// adacc compare --config FILE --modes none,full,selective,quant --batch 1,2,4 --steps N
//               [--format table|csv|json] [--output FILE] [--memory-budget SIZE [--max-batch]] [--no-fidelity]
#include <cstdio>

#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/engine/memory_mode.h"
#include "src/train/compare.h"

namespace adacc {

namespace {
struct CompareArgs {
    std::string config, budget, format = "table", output, device, dtype;
    std::vector<std::string> overrides, modes;
    std::vector<int> batches;
    int steps = 5, warmup = 1;
    bool max_batch = false, no_fidelity = false;
};

void run_compare(CompareArgs& args) {
    // As in train: --memory-budget is --set memory.budget=..., validated with the other keys.
    if (!args.budget.empty()) args.overrides.push_back("memory.budget=" + args.budget);
    if (!args.device.empty()) args.overrides.push_back("training.device=" + args.device);
    if (!args.dtype.empty()) args.overrides.push_back("model.dtype=" + args.dtype);
    RunConfig config = load_config(args.config, args.overrides);
    const std::uint64_t budget = budget_bytes(config.memory);
    CompareOptions options;
    for (const auto& m : args.modes) options.modes.push_back(parse_memory_mode(m));
    if (options.modes.empty()) options.modes = fixed_memory_modes();
    options.batches = args.batches.empty() ? std::vector<int>{config.training.batch_size} : args.batches;
    // Each --batch stands in for training.batch_size, so it is checked as that key would be.
    for (int B : options.batches) {
        RunConfig at_batch = config;
        at_batch.training.batch_size = B;
        validate_config(at_batch, "with --batch " + std::to_string(B));
    }
    options.steps = args.steps;
    options.warmup = args.warmup;
    options.budget = budget;
    options.fidelity = !args.no_fidelity;
    std::string text;
    if (args.max_batch) {
        if (!budget) throw UserError("--max-batch needs a budget: pass --memory-budget SIZE (e.g. 8GiB)");
        text = format_max_batches(find_max_batches(config, options.modes, budget), args.format);
    } else {
        const auto rows = run_comparison(config, options);
        text = format_comparison(rows, args.format);
        if (args.format == "table") text += format_recovery(rows);
    }
    std::printf("%s", text.c_str());
    if (!args.output.empty()) {
        AtomicFileWriter out(args.output);
        out.write(text.data(), text.size());
        out.commit();
    }
}
}  // namespace

void add_compare_command(Command& program) {
    auto args = std::make_shared<CompareArgs>();
    Command cmd = program.subcommand("compare", "Train each memory mode and batch a few steps and compare");
    cmd.option("--config", args->config, "TOML run config (model, seq_len, data.train, optimizer)").required();
    cmd.option("--set", args->overrides, "override a config key: section.key=value (repeatable)");
    cmd.option("--modes", args->modes,
               "memory modes, comma-separated (default: " + join_memory_mode_names(fixed_memory_modes()) + ")")
        .comma_separated();
    cmd.option("--batch", args->batches, "batch sizes, comma-separated (default: training.batch_size)")
        .comma_separated()
        .positive();
    cmd.option("--steps", args->steps, "steps per (mode, batch)").in_range(1, 100000);
    cmd.option("--warmup", args->warmup, "steps excluded from the median step time").in_range(0, 100000);
    cmd.option("--format", args->format, "table, csv or json").one_of({"table", "csv", "json"});
    cmd.option("--output", args->output, "also write the result to FILE");
    add_device_option(cmd, args->device, "training.device");
    add_dtype_option(cmd, args->dtype, "model.dtype");
    cmd.option("--memory-budget", args->budget, "memory budget: batches over it are reported, not run");
    cmd.flag("--max-batch", args->max_batch, "largest batch per mode under --memory-budget, verified by a step");
    cmd.flag("--no-fidelity", args->no_fidelity,
             "skip grad_err / grad_cos (their extra forward and backward per mode, and none's, which must fit)");
    cmd.on_run([args] { run_compare(*args); });
}

}  // namespace adacc
