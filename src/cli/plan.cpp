// adacc plan --config FILE --memory-budget SIZE [--profile FILE] [--format table|json]
//            [--granularity block|global] [--no-compress] [--world-size N] [--set ...]
// Profiles the model (or reads a profile), solves the Adacc MILP for the budget and prints the
// plan per (layer class, tensor), the predicted memory and added time, and the solver's status.
#include <cstdio>

#include "src/adacc/adacc_regulator.h"
#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/train/token_loader.h"

namespace adacc {

namespace {
struct PlanArgs {
    std::string config, budget, profile, format = "table", granularity, save_profile, device, dtype;
    std::vector<std::string> overrides;
    bool no_compress = false;
    int world_size = 1;
};

void run_plan(PlanArgs& args) {
    // --memory-budget, --granularity and --profile stand for --set memory.budget / granularity /
    // profile, validated with the other keys: the plan is the one training with this config would
    // start from.
    if (!args.budget.empty()) args.overrides.push_back("memory.budget=" + args.budget);
    if (!args.granularity.empty()) args.overrides.push_back("memory.granularity=" + args.granularity);
    if (!args.profile.empty()) args.overrides.push_back("memory.profile=" + args.profile);
    if (!args.device.empty()) args.overrides.push_back("training.device=" + args.device);
    if (!args.dtype.empty()) args.overrides.push_back("model.dtype=" + args.dtype);
    RunConfig config = load_config(args.config, args.overrides);
    const std::uint64_t budget = budget_bytes(config.memory);
    if (!budget)
        throw UserError(
            "adacc plan needs a memory budget: pass --memory-budget SIZE (e.g. 24GiB) or set memory.budget");
    RegulatorOptions options =
        regulator_options(config, args.no_compress ? MemoryMode::recompute_opt : MemoryMode::adacc);
    options.save_profile = args.save_profile;
    // With a saved profile nothing is profiled: the tokens are never read, so their source goes unsaid.
    const std::vector<int> tokens = config.memory.profile.empty() ? profiling_tokens(config) : random_tokens(config);
    const AdaccRegulator regulator(planned_run(config, compute_target(config, args.world_size)), budget, options,
                                   tokens, nullptr);
    std::printf("%s", format_plan(regulator.plan(), regulator.profile(), options.codecs, config.model,
                                  config.training.batch_size, config.training.seq_len, budget, args.format)
                          .c_str());
    if (args.format != "json") std::printf("\n%s\n", regulator.describe().c_str());
}
}  // namespace

void add_plan_command(Command& program) {
    auto args = std::make_shared<PlanArgs>();
    Command cmd = program.subcommand("plan", "Solve the Adacc keep/compress/recompute plan for a memory budget");
    cmd.option("--config", args->config, "TOML run config (model, batch, seq_len)").required();
    add_set_option(cmd, args->overrides);
    cmd.option("--memory-budget", args->budget, "memory budget, e.g. 24GiB (default: memory.budget)");
    cmd.option("--profile", args->profile, "reuse a profile.json instead of profiling (default: memory.profile)");
    cmd.option("--save-profile", args->save_profile, "write the profile measured here to FILE");
    add_device_option(cmd, args->device, "training.device");
    add_dtype_option(cmd, args->dtype, "model.dtype");
    cmd.option("--world-size", args->world_size,
               "data-parallel ranks the budget is per rank of (with --set training.zero=1 they share AdamW's "
               "moments, so more of the budget is left for activations)")
        .positive();
    cmd.option("--format", args->format, "table or json").one_of({"table", "json"});
    cmd.option("--granularity", args->granularity,
               "block (one plan for every layer) or global (layers may differ); default: memory.granularity")
        .one_of({"block", "global"});
    cmd.flag("--no-compress", args->no_compress,
             std::string(memory_mode_name(MemoryMode::recompute_opt)) + ": plan with compression disabled");
    cmd.on_run([args] { run_plan(*args); });
}

}  // namespace adacc
