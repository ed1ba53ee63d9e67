// adacc train --config FILE [--set section.key=value ...] [--init-from FILE|RUN_DIR|HF_DIR] [--overwrite]
// adacc train --resume RUN_DIR [--set section.key=value ...]

#include <algorithm>

#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/config/config.h"
#include "src/dist/process_group.h"
#include "src/io/checkpoint_folder.h"
#include "src/train/rank_agreement.h"
#include "src/train/run_folder.h"
#include "src/train/stop_signals.h"
#include "src/train/trainer.h"
#include "src/train/weights_file.h"

namespace adacc {

namespace {

struct TrainArgs {
    std::string config;
    std::vector<std::string> overrides;
    std::string resume;
    std::string budget;
    std::string device, dtype;
    std::string init_from;
    bool overwrite = false;
};

// Besides the model's shape (kGPTShapeFields: the checkpoint's tensors), a resumed run keeps what
// its saved data position and dropout masks mean, and the [stress] its initial weights had.
struct FixedTrainingKey {
    const char* key;
    std::int64_t (*get)(const RunConfig&);
};
constexpr FixedTrainingKey kFixedTrainingKeys[] = {
    {"training.batch_size", [](const RunConfig& c) -> std::int64_t { return c.training.batch_size; }},
    {"training.seq_len", [](const RunConfig& c) -> std::int64_t { return c.training.seq_len; }},
    {"training.seed", [](const RunConfig& c) -> std::int64_t { return static_cast<std::int64_t>(c.training.seed); }},
};

void refuse_changes_resume_cannot_make(const RunConfig& stored, const RunConfig& resumed, const std::string& run_dir) {
    std::string changed;
    const auto compare = [&](const std::string& key, auto in_run, auto asked) {
        if (in_run != asked)
            changed +=
                "\n  " + key + ": " + std::to_string(in_run) + " in the run, " + std::to_string(asked) + " asked";
    };
    for (const auto& field : kGPTShapeFields)
        compare(std::string("model.") + field.name, stored.model.*field.member, resumed.model.*field.member);
    for (const auto& fixed : kFixedTrainingKeys) compare(fixed.key, fixed.get(stored), fixed.get(resumed));
    // [stress] shapes the initial weights, which the checkpoint's weights have long replaced.
    compare("stress.outlier_channels", stored.stress.outlier_channels, resumed.stress.outlier_channels);
    compare("stress.outlier_scale", stored.stress.outlier_scale, resumed.stress.outlier_scale);
    if (changed.empty()) return;
    throw UserError("--resume " + run_dir + " cannot change:" + changed +
                    "\nthe checkpoint's tensors, data position and dropout masks depend on them (another shape is a "
                    "different model), and [stress] applies only to a run's initial weights; resume without these "
                    "--set, or start a new run in another folder (--config FILE --init-from " +
                    run_dir + " starts from its weights, and applies [stress] to them)");
}

// Refuses to resume beside checkpoints this build cannot read, unless told to overwrite: pruning
// or a save at the same step would replace them.
void refuse_newer_checkpoints(const std::string& run_dir, bool overwrite) {
    const auto newer = newer_format_checkpoints(run_dir);
    if (newer.empty() || overwrite) return;
    throw UserError("'" + newer.front().string() + "' was written by a newer adacc (format above version " +
                    std::to_string(kCheckpointFormatVersion) +
                    ", which this one writes); resuming here would write older checkpoints beside it and prune it. "
                    "Resume with the newer adacc, or pass --overwrite to resume from the newest checkpoint this "
                    "adacc reads and let it replace the others");
}

// A resumed run takes its config from the checkpoint (overrides still apply, e.g. more steps);
// the run folder is the one resumed.
RunConfig resume_config(const TrainArgs& args, std::optional<std::filesystem::path>& checkpoint) {
    refuse_newer_checkpoints(args.resume, args.overwrite);
    std::vector<std::string> rejected;
    checkpoint = newest_complete_checkpoint(args.resume, &rejected);
    for (const auto& why : rejected) std::fprintf(stderr, "skipping checkpoint: %s\n", why.c_str());
    if (!checkpoint)
        throw UserError("no complete checkpoint in " + args.resume + "/checkpoints: nothing to resume; " +
                        "start a new run there with --config FILE --overwrite (deletes the files the folder holds), " +
                        "or in another logging.run_dir");
    const RunConfig stored = checkpoint_config(CheckpointReader(*checkpoint));
    RunConfig config = stored;
    for (const auto& o : args.overrides) apply_override(config, o);
    config.logging.run_dir = args.resume;
    validate_config(config, "--set", args.overrides);
    refuse_changes_resume_cannot_make(stored, config, args.resume);
    return config;
}

// A new run's folder is cleared (--overwrite) or must be empty: weights to start from cannot live there.
void refuse_weights_inside_run_folder(const WeightsFile& weights, const std::string& run_dir) {
    const auto folder = std::filesystem::weakly_canonical(run_dir),
               file = std::filesystem::weakly_canonical(weights.path);
    const auto [end, unused] = std::mismatch(folder.begin(), folder.end(), file.begin(), file.end());
    if (end != folder.end()) return;
    throw UserError("--init-from " + weights.path.string() + " lies inside the new run's folder " + run_dir +
                    ", which a new run must not mix with (--overwrite would delete it); start the new run in another "
                    "logging.run_dir, or continue that run with --resume");
}

void run_train(TrainArgs& args) {
    if (!args.budget.empty()) args.overrides.push_back("memory.budget=" + args.budget);
    if (!args.device.empty()) args.overrides.push_back("training.device=" + args.device);
    if (!args.dtype.empty()) args.overrides.push_back("model.dtype=" + args.dtype);
    if (!args.resume.empty() && !args.config.empty())
        throw UserError(
            "--resume takes the config stored in the run's checkpoint, so --config cannot be given with "
            "it; change what resume allows with --set (e.g. --set training.steps=2000)");
    if (args.resume.empty() && args.config.empty())
        throw UserError("adacc train needs --config FILE (or --resume RUN_DIR)");
    if (!args.init_from.empty() && !args.resume.empty())
        throw UserError(
            "--init-from and --resume cannot be combined: --resume continues RUN_DIR with its own "
            "weights, optimizer state and data position; to start a new run from its weights, pass "
            "--config FILE --init-from RUN_DIR");

    std::optional<std::filesystem::path> checkpoint;
    std::unique_ptr<RunFolderLock> lock;
    std::optional<WeightsFile> init_from;
    RunConfig config;
    // The run folder is rank 0's to lock and claim (the other ranks of a data-parallel job only
    // read a checkpoint or weights from it).
    const bool root = process_group().is_root();
    if (!args.resume.empty()) {
        if (!std::filesystem::is_directory(args.resume))
            throw UserError("--resume " + args.resume +
                            ": no such run folder, so no complete checkpoint to resume; "
                            "pass the logging.run_dir of a run, or start a new run with --config FILE");
        if (root) lock = std::make_unique<RunFolderLock>(args.resume);
        config = resume_config(args, checkpoint);
    } else {
        config = load_config(args.config, args.overrides);
        if (!args.init_from.empty()) {  // checked before the run folder is made
            init_from = open_weights_file(args.init_from);
            check_weights_shape(*init_from, config.model);
            refuse_weights_inside_run_folder(*init_from, config.logging.run_dir);
        }
    }
    // Before anything is written, and before any collective whose size depends on the config.
    require_ranks_agree(config, checkpoint, init_from);
    if (root && args.resume.empty()) {
        create_run_folder(config.logging.run_dir);
        lock = std::make_unique<RunFolderLock>(config.logging.run_dir);
        claim_run_folder_for_fresh_run(config.logging.run_dir, args.overwrite);
    }
    install_stop_signal_handlers();
    Trainer trainer(config, checkpoint, init_from);
    if (const int signal = trainer.run()) {
        std::printf("stopped by signal %d after step %d's checkpoint; continue with: adacc train --resume %s\n", signal,
                    trainer.completed_steps(), config.logging.run_dir.c_str());
        std::fflush(stdout);
        throw EarlyExit{exit_status_for_signal(signal)};
    }
}

}  // namespace

void add_train_command(Command& program) {
    auto args = std::make_shared<TrainArgs>();
    Command cmd = program.subcommand("train", "Train a GPT model from a TOML config");
    cmd.option("--config", args->config, "TOML run config (see configs/)");
    add_set_option(cmd, args->overrides);
    cmd.option("--resume", args->resume, "continue the run in RUN_DIR from its newest complete checkpoint");
    cmd.option("--memory-budget", args->budget, "memory budget, e.g. 24GiB (same as --set memory.budget=...)");
    add_device_option(cmd, args->device, "training.device");
    add_dtype_option(cmd, args->dtype, "model.dtype");
    cmd.option("--init-from", args->init_from,
               "start from these weights (Hugging Face GPT-2 folder, llm.c GPT-2 model file, adacc checkpoint or "
               "run folder) with a fresh "
               "optimizer and the data from the start");
    cmd.flag("--overwrite", args->overwrite,
             "start over in a run folder that holds a run (deletes its config, metrics and checkpoints); with "
             "--resume: resume beside checkpoints of a newer format, which may then be replaced");
    cmd.on_run([args] { run_train(*args); });
}

}  // namespace adacc
