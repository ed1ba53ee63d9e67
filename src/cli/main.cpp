// adacc: the command line. Each subcommand registers itself (src/cli/); user errors
// are printed as "error: ..." with exit status 2, never as a crash; an error about a config
// setting gets the way to set it with this command (setting_advice).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <string>

#include "src/cli/commands.h"
#include "src/engine/cpu_threads.h"
#include "src/common/errors.h"

int main(int argc, char** argv) {
    adacc::configure_cpu_threads();
    CLI::App app{"adacc: GPT training with per-tensor activation memory management"};
    app.require_subcommand(1);
    adacc::add_train_command(app);
    adacc::add_prepare_command(app);
    adacc::add_tokenize_command(app);
    adacc::add_sample_command(app);
    adacc::add_memory_command(app);
    adacc::add_compare_command(app);
    adacc::add_eval_command(app);
    adacc::add_config_command(app);
    adacc::add_plan_command(app);
    adacc::add_export_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version exit 0; every other parse error is bad user input: status 2,
        // as documented (CLI11's own codes are 100+).
        return app.exit(e) == 0 ? 0 : 2;
    } catch (const adacc::EarlyExit& e) {
        return e.exit_status;
    } catch (const adacc::SettingError& e) {
        const std::string advice = adacc::setting_advice(app, e.setting());
        std::fprintf(stderr, "error: %s%s\n", e.what(), advice.empty() ? "" : ("; " + advice).c_str());
        return 2;
    } catch (const adacc::UserError& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "internal error: %s\n", e.what());
        return 3;
    }
    return 0;
}
