// adacc: the command line. Each subcommand registers itself (src/cli/); user errors
// are printed as "error: ..." with exit status 2, never as a crash; an error about a config
// setting gets the way to set it with this command (setting_advice). Started by an MPI launcher
// (`mpirun -np N adacc train`), the process joins the job first (src/dist/process_group.h), and
// a failure on any rank ends every rank.
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <string>

#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/dist/process_group.h"
#include "src/engine/cpu_threads.h"

namespace {

// The command's outcome: its exit status and, for a failure, what to print on stderr.
struct Outcome {
    int status = 0;
    std::string message;
};

Outcome run_command(adacc::CommandLine& command_line, int argc, char** argv) {
    try {
        if (const auto parse_ended = command_line.run(argc, argv)) return {*parse_ended, ""};
    } catch (const adacc::EarlyExit& e) {
        return {e.exit_status, ""};
    } catch (const adacc::SettingError& e) {
        const auto command = command_line.chosen_subcommand();
        const std::string advice = command ? adacc::setting_advice(*command, e.setting()) : "";
        return {2, std::string("error: ") + e.what() + (advice.empty() ? "" : "; " + advice)};
    } catch (const adacc::UserError& e) {
        return {2, std::string("error: ") + e.what()};
    } catch (const std::filesystem::filesystem_error& e) {
        // The paths are the user's (a missing or read-only folder); what() names them and the reason.
        return {2, std::string("error: ") + e.what() + "; check the path, its folder's permissions and free space"};
    } catch (const std::bad_alloc&) {
        // Allocations are sized by the config: a batch, sequence or model too large for the process.
        return {2,
                "error: out of memory: this run needs more memory than the process may allocate (the machine, "
                "its cgroup or ulimit -v); lower training.batch_size, training.seq_len or the model, or use a "
                "memory mode that recomputes (see `adacc memory`)"};
    } catch (const std::exception& e) {
        return {3, std::string("internal error: ") + e.what()};
    }
    return {};
}

}  // namespace

int main(int argc, char** argv) {
    adacc::join_process_group(&argc, &argv);
    adacc::configure_cpu_threads();
    adacc::CommandLine command_line("adacc: GPT training with per-tensor activation memory management");
    command_line.require_subcommand();
    adacc::Command program = command_line.program();
    adacc::add_train_command(program);
    adacc::add_prepare_command(program);
    adacc::add_tokenize_command(program);
    adacc::add_sample_command(program);
    adacc::add_memory_command(program);
    adacc::add_compare_command(program);
    adacc::add_eval_command(program);
    adacc::add_config_command(program);
    adacc::add_plan_command(program);
    adacc::add_export_command(program);
    adacc::add_gradients_command(program);
    // Data parallelism is training's: any other command would run N times over.
    if (adacc::process_group().world_size > 1 && (argc < 2 || std::string(argv[1]) != "train"))
        adacc::abort_process_group(
            "error: only `adacc train` runs as several processes; start this command without "
            "mpirun / srun",
            2);
    const Outcome outcome = run_command(command_line, argc, argv);
    // A failure on one rank of several ends them all (the others may be waiting for it in a
    // collective), with its message.
    if (!outcome.message.empty()) {
        if (adacc::process_group().world_size > 1) adacc::abort_process_group(outcome.message, outcome.status);
        // What the command printed comes first where stdout and stderr go to one log (stdout is
        // fully buffered there, stderr not), as abort_process_group does for several ranks.
        std::fflush(stdout);
        std::fprintf(stderr, "%s\n", outcome.message.c_str());
    }
    adacc::leave_process_group();
    return outcome.status;
}
