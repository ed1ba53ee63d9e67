// adacc train --config FILE [--set section.key=value ...] [--resume RUN_DIR | --init-from FILE|RUN_DIR]
#include <CLI/CLI.hpp>

#include "src/checkpoint.h"
#include "src/commands/commands.h"
#include "src/config.h"
#include "src/errors.h"
#include "src/trainer.h"
#include "src/weights_file.h"

namespace adacc {

namespace {

struct TrainArgs {
    std::string config;
    std::vector<std::string> overrides;
    std::string resume;
    std::string budget;
    std::string init_from;
};

// A resumed run takes its config from the checkpoint (overrides still apply, e.g. more steps);
// the run folder is the one resumed.
RunConfig resolve_config(const TrainArgs& args, std::optional<std::filesystem::path>& checkpoint) {
    if (args.resume.empty()) {
        if (args.config.empty()) throw UserError("adacc train needs --config FILE (or --resume RUN_DIR)");
        return load_config(args.config, args.overrides);
    }
    std::vector<std::string> rejected;
    checkpoint = newest_complete_checkpoint(args.resume, &rejected);
    for (const auto& why : rejected) std::fprintf(stderr, "skipping checkpoint: %s\n", why.c_str());
    if (!checkpoint)
        throw UserError("no complete checkpoint in " + args.resume + "/checkpoints: nothing to resume; " +
                        "start a new run with --config FILE");
    RunConfig config = checkpoint_config(CheckpointReader(*checkpoint));
    for (const auto& o : args.overrides) apply_override(config, o);
    config.logging.run_dir = args.resume;
    validate_config(config, "--set");
    return config;
}

}  // namespace

void add_train_command(CLI::App& app) {
    auto args = std::make_shared<TrainArgs>();
    CLI::App* cmd = app.add_subcommand("train", "Train a GPT model from a TOML config");
    cmd->add_option("--config", args->config, "TOML run config (see configs/)");
    cmd->add_option("--set", args->overrides, "override a config key: section.key=value (repeatable)");
    cmd->add_option("--resume", args->resume, "continue the run in RUN_DIR from its newest complete checkpoint");
    cmd->add_option("--memory-budget", args->budget, "memory budget, e.g. 24GiB (same as --set memory.budget=...)");
    cmd->add_option("--init-from", args->init_from,
                    "start from these weights (llm.c GPT-2 model file, adacc checkpoint or run folder) with a fresh "
                    "optimizer and the data from the start");
    cmd->callback([args] {
        std::optional<std::filesystem::path> checkpoint;
        if (!args->budget.empty()) args->overrides.push_back("memory.budget=" + args->budget);
        if (!args->init_from.empty() && !args->resume.empty())
            throw UserError("--init-from and --resume cannot be combined: --resume continues RUN_DIR with its own "
                            "weights, optimizer state and data position; to start a new run from its weights, pass "
                            "--config FILE --init-from RUN_DIR");
        const RunConfig config = resolve_config(*args, checkpoint);
        std::optional<WeightsFile> init_from;
        if (!args->init_from.empty()) {  // checked before the trainer makes the run folder
            init_from = open_weights_file(args->init_from);
            check_weights_shape(*init_from, config.model);
        }
        Trainer trainer(config, checkpoint, init_from);
        trainer.run();
    });
}

}  // namespace adacc
