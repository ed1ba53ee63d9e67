// adacc compare --config FILE --modes none,full,selective,quant --batch 1,2,4 --steps N
//               [--format table|csv|json] [--output FILE] [--memory-budget SIZE [--max-batch]] [--no-fidelity]
//               [--no-interleave] [--plot FILE.png]
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>

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
    std::string plot;
    int steps = 5, warmup = 1;
    bool max_batch = false, no_fidelity = false, no_interleave = false;
};

// ---- --plot -----------------------------------------------------------------------------------
// The plot is drawn by scripts/plot_compare.py (matplotlib) from the comparison's json. The script
// is found from the adacc executable itself: /proc/self/exe's folder, then ../scripts/ — build/adacc
// of a checkout finds the checkout's scripts/plot_compare.py. python3 is the first on PATH (the
// script runs itself again with Debian's /usr/bin/python3 when that one has no matplotlib).

std::filesystem::path plot_script() {
    std::error_code error;
    const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
    if (error) return "scripts/plot_compare.py";  // as a relative path: named in the error below
    return (exe.parent_path().parent_path() / "scripts" / "plot_compare.py").lexically_normal();
}

// The first executable python3 on PATH; empty when there is none.
std::filesystem::path python3_on_path() {
    const char* path = std::getenv("PATH");
    std::stringstream dirs(path ? path : "");
    for (std::string dir; std::getline(dirs, dir, ':');) {
        const std::filesystem::path candidate = std::filesystem::path(dir.empty() ? "." : dir) / "python3";
        if (::access(candidate.c_str(), X_OK) == 0 && !std::filesystem::is_directory(candidate)) return candidate;
    }
    return {};
}

std::string shell_quoted(const std::string& s) {
    std::string out = "'";
    for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return out + "'";
}

// Draws `png` from `json` (already written); UserError, naming what is missing and the command
// to draw it by hand, when it cannot.
void draw_plot(const std::filesystem::path& json, const std::filesystem::path& png) {
    std::fflush(stdout);  // the table before any message of the plot's
    const std::filesystem::path script = plot_script();
    const std::string by_hand = "python3 " + shell_quoted(script.string()) + " " + shell_quoted(json.string()) +
                                " --out " + shell_quoted(png.string());
    const std::string wrote =
        "the comparison's json is in " + quoted(json) + "; once that is fixed, draw the plot with: " + by_hand;
    if (!std::filesystem::is_regular_file(script))
        throw UserError("--plot: the plot script " + quoted(script) +
                        " is not there (it is looked for at ../scripts/plot_compare.py from the adacc executable's "
                        "folder: run the adacc of a checkout, build/adacc); " +
                        wrote);
    const std::filesystem::path python = python3_on_path();
    if (python.empty())
        throw UserError(std::string("--plot needs python3 and matplotlib, and there is no python3 on PATH (") +
                        (std::getenv("PATH") ? std::getenv("PATH") : "PATH is not set") +
                        "): install them (scripts/install_deps.sh: Debian's python3 and python3-matplotlib); " + wrote);
    const std::string command = shell_quoted(python.string()) + " " + shell_quoted(script.string()) + " " +
                                shell_quoted(json.string()) + " --out " + shell_quoted(png.string()) + " 2>&1";
    FILE* pipe = ::popen(command.c_str(), "r");
    if (!pipe) throw UserError("--plot: could not start " + python.string() + "; " + wrote);
    std::string output;
    std::array<char, 4096> buffer;
    while (const std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
    const int status = ::pclose(pipe);
    while (!output.empty() && output.back() == '\n') output.pop_back();
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        const std::string why = output.empty() ? "it printed nothing" : "it said: " + output;
        throw UserError("--plot: " + python.string() + " " + script.string() + " failed (" +
                        (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                           : std::string("killed by a signal")) +
                        "; " + why + "); " + wrote);
    }
    std::fprintf(stderr, "compare: %s\n", output.empty() ? ("wrote " + png.string()).c_str() : output.c_str());
}

void run_compare(CompareArgs& args) {
    // --plot's mistakes are found before the comparison runs (minutes), not after.
    if (!args.plot.empty()) {
        if (args.max_batch)
            throw UserError(
                "--plot draws a comparison's memory and tokens/s, and --max-batch runs none: drop one of "
                "them");
        if (std::filesystem::path(args.plot).extension() != ".png")
            throw UserError("--plot " + args.plot + ": the plot is a PNG, name it FILE.png");
    }
    // As in train: --memory-budget is --set memory.budget=..., validated with the other keys.
    if (!args.budget.empty()) args.overrides.push_back("memory.budget=" + args.budget);
    if (!args.device.empty()) args.overrides.push_back("training.device=" + args.device);
    if (!args.dtype.empty()) args.overrides.push_back("model.dtype=" + args.dtype);
    RunConfig config = load_config(args.config, args.overrides);
    const std::uint64_t budget = budget_bytes(config.memory);
    CompareOptions options;
    options.modes = memory_modes_of(args.modes);
    options.batches = args.batches.empty() ? std::vector<int>{config.training.batch_size} : args.batches;
    if (const int* repeat = first_repeat(options.batches))
        throw UserError("--batch lists " + std::to_string(*repeat) + " twice: give each batch once");
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
    options.interleave = !args.no_interleave;
    std::string text;
    std::vector<CompareRow> rows;
    if (args.max_batch) {
        if (!budget) throw UserError("--max-batch needs a budget: pass --memory-budget SIZE (e.g. 8GiB)");
        text = format_max_batches(find_max_batches(config, options.modes, budget), args.format);
    } else {
        rows = run_comparison(config, options);
        text = format_comparison(rows, args.format, budget);
        if (args.format == "table") text += format_recovery(rows);
    }
    std::printf("%s", text.c_str());
    auto write = [](const std::filesystem::path& file, const std::string& bytes) {
        create_parent_folders(file);
        AtomicFileWriter out(file);
        out.write(bytes.data(), bytes.size());
        out.commit();
    };
    if (!args.output.empty()) write(args.output, text);
    if (!args.plot.empty()) {
        // The json beside the PNG: FILE.png's is FILE.json.
        const std::filesystem::path png = args.plot, json = std::filesystem::path(args.plot).replace_extension(".json");
        write(json, format_comparison(rows, "json", budget));
        draw_plot(json, png);
    }
}
}  // namespace

void add_compare_command(Command& program) {
    auto args = std::make_shared<CompareArgs>();
    Command cmd = program.subcommand("compare", "Train each memory mode and batch a few steps and compare");
    cmd.option("--config", args->config, "TOML run config (model, seq_len, data.train, optimizer)").required();
    add_set_option(cmd, args->overrides);
    add_modes_option(cmd, args->modes,
                     "memory modes, comma-separated (default: " + join_memory_mode_names(fixed_memory_modes()) + ")");
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
    cmd.flag("--no-interleave", args->no_interleave,
             "run the modes of a batch one after another instead of step by step in turn (interleaving needs "
             "their models in memory together)");
    cmd.option("--plot", args->plot,
               "also draw FILE.png: per mode its memory by arena with the budget, and tokens/s with its spread "
               "(scripts/plot_compare.py, python3 + matplotlib; the json it draws from goes to FILE.json)");
    cmd.flag("--no-fidelity", args->no_fidelity,
             "skip grad_err / grad_cos (their extra forward and backward per mode, and none's, which must fit)");
    cmd.on_run([args] { run_compare(*args); });
}

}  // namespace adacc
