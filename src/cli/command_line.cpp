// The command line's declarations (src/cli/command_line.h) in CLI11's terms: the one translation
// unit that includes CLI11.
#include "src/cli/command_line.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <filesystem>
#include <system_error>
#include <vector>

#include "src/common/closest_name.h"

namespace adacc {

CommandOption& CommandOption::required() {
    option_->required();
    return *this;
}
CommandOption& CommandOption::type_name(const std::string& name) {
    option_->type_name(name);
    return *this;
}
CommandOption& CommandOption::show_default() {
    option_->capture_default_str();
    return *this;
}
CommandOption& CommandOption::comma_separated() {
    option_->delimiter(',');
    return *this;
}
CommandOption& CommandOption::one_of(const std::vector<std::string>& values) {
    option_->check(CLI::IsMember(values));
    return *this;
}
CommandOption& CommandOption::positive() {
    // Not CLI::PositiveNumber: its message names the range "0.000000 to" DBL_MAX's 309 digits.
    option_->check(CLI::Validator(
        [](std::string& value) -> std::string {
            long long n = 0;
            const char* end = value.data() + value.size();
            const auto [stop, error] = std::from_chars(value.data(), end, n);
            if (error == std::errc() && stop == end && n >= 1) return "";
            return "'" + value + "' is not a whole number >= 1";
        },
        "POSITIVE"));
    return *this;
}
CommandOption& CommandOption::in_range(int lo, int hi) {
    option_->check(CLI::Range(lo, hi));
    return *this;
}
CommandOption& CommandOption::in_range(double lo, double hi) {
    option_->check(CLI::Range(lo, hi));
    return *this;
}
CommandOption& CommandOption::excludes(const CommandOption& other) {
    option_->excludes(other.option_);
    return *this;
}

template <class T>
CommandOption Command::option(const std::string& name, T& into, const std::string& help) {
    return CommandOption(app_->add_option(name, into, help));
}
template CommandOption Command::option<std::string>(const std::string&, std::string&, const std::string&);
template CommandOption Command::option<int>(const std::string&, int&, const std::string&);
template CommandOption Command::option<float>(const std::string&, float&, const std::string&);
template CommandOption Command::option<double>(const std::string&, double&, const std::string&);
template CommandOption Command::option<unsigned long>(const std::string&, unsigned long&, const std::string&);
template CommandOption Command::option<unsigned long long>(const std::string&, unsigned long long&, const std::string&);
template CommandOption Command::option<std::vector<std::string>>(const std::string&, std::vector<std::string>&,
                                                                 const std::string&);
template CommandOption Command::option<std::vector<int>>(const std::string&, std::vector<int>&, const std::string&);
template CommandOption Command::option<std::filesystem::path>(const std::string&, std::filesystem::path&,
                                                              const std::string&);
template CommandOption Command::option<std::vector<std::filesystem::path>>(const std::string&,
                                                                           std::vector<std::filesystem::path>&,
                                                                           const std::string&);

CommandOption Command::flag(const std::string& name, bool& into, const std::string& help) {
    return CommandOption(app_->add_flag(name, into, help));
}

Command Command::subcommand(const std::string& name, const std::string& description) {
    return Command(app_->add_subcommand(name, description));
}

void Command::on_run(std::function<void()> run) { app_->callback(std::move(run)); }

bool Command::takes(const std::string& name) const { return app_->get_option_no_throw(name) != nullptr; }

namespace {

// A parse error before any of PROGRAM's commands: CLI11 says only that a subcommand is required.
// Says instead what the first word is, the command it may be a typo of, and where they are listed.
std::string no_command_message(const std::string& program, const std::vector<std::string>& commands,
                               const std::vector<std::string>& words) {
    const std::string listed = "; `" + program + " --help` lists them\n";
    if (words.empty()) return "error: no command given" + listed;
    const std::string& word = words.front();
    if (word.starts_with("-")) return "error: " + word + " is not an option of " + program + listed;
    const auto suggestion = closest_name(word, commands);
    return "error: " + word + " is not a command of " + program +
           (suggestion ? " (did you mean " + *suggestion + "?)" : "") + listed;
}

}  // namespace

CommandLine::CommandLine(const std::string& description) : app_(std::make_unique<CLI::App>(description)) {
    // A parse error (an unknown option, a value of the wrong kind, a missing one) reads as the
    // commands' own errors do (main.cpp): "error: ...", then where the options are listed.
    app_->failure_message([](const CLI::App* app, const CLI::Error& e) {
        const std::string program = std::filesystem::path(app->get_name()).filename().string();
        std::vector<std::string> commands;
        for (const CLI::App* command : app->get_subcommands([](const CLI::App*) { return true; }))
            commands.push_back(command->get_name());
        const auto chosen = app->get_subcommands();
        if (!commands.empty() && chosen.empty()) return no_command_message(program, commands, app->remaining());
        const std::string command = chosen.empty() ? program : program + " " + chosen.front()->get_name();
        return "error: " + std::string(e.what()) + "; `" + command + " --help` lists the options\n";
    });
}
CommandLine::~CommandLine() = default;

void CommandLine::require_subcommand() { app_->require_subcommand(1); }

std::optional<int> CommandLine::run(int argc, char** argv) {
    try {
        app_->parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // --help and --version exit 0; every other parse error is bad user input: status 2, as
        // documented (CLI11's own codes are 100+).
        return app_->exit(e) == 0 ? 0 : 2;
    }
    return std::nullopt;
}

std::optional<Command> CommandLine::chosen_subcommand() const {
    const auto chosen = app_->get_subcommands();
    if (chosen.empty()) return std::nullopt;
    return Command(chosen.front());
}

}  // namespace adacc
