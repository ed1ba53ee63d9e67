// The command line's declarations. Each subcommand (src/cli/*.cpp) and each benchmark declares its
// options through these types, and src/cli/command_line.cpp turns them into CLI11's. That file is
// the one that includes CLI11: it is header-only, and each file including it took seconds to
// compile (17 did, half of a clean build's compile time).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace adacc {

// One declared option or flag; each method adds a CLI11 check or property and returns it again.
class CommandOption {
public:
    explicit CommandOption(CLI::Option* option) : option_(option) {}
    CommandOption& required();
    CommandOption& type_name(const std::string& name);  // the value's name in --help, e.g. DIR
    CommandOption& show_default();                      // the variable's value as the default in --help
    CommandOption& comma_separated();                   // a list option given as 1,2,4
    CommandOption& one_of(const std::vector<std::string>& values);
    CommandOption& positive();
    CommandOption& in_range(int lo, int hi);
    CommandOption& in_range(double lo, double hi);
    CommandOption& excludes(const CommandOption& other);

private:
    CLI::Option* option_;
};

// A command: the program or one of its subcommands, and the options it takes.
class Command {
public:
    explicit Command(CLI::App* app) : app_(app) {}
    // An option that stores its value in `into` (instantiated for the types the commands use:
    // std::string, int, float, double, std::size_t / std::uint64_t, std::filesystem::path and
    // vectors of strings, ints and paths).
    template <class T>
    CommandOption option(const std::string& name, T& into, const std::string& help = "");
    // A flag; "!--no-x" sets `into` to false.
    CommandOption flag(const std::string& name, bool& into, const std::string& help);
    Command subcommand(const std::string& name, const std::string& description);
    // What the command does once its options are parsed (the program runs the chosen one).
    void on_run(std::function<void()> run);
    // Whether the command has the option `name` (e.g. --set).
    bool takes(const std::string& name) const;

private:
    CLI::App* app_;
};

// The program's command line.
class CommandLine {
public:
    explicit CommandLine(const std::string& description);
    ~CommandLine();
    Command program() { return Command(app_.get()); }
    void require_subcommand();
    // Parses argv and runs the chosen command. Returns the status to exit with when parsing ended
    // the program (--help and --version: 0; bad usage: 2, after printing CLI11's message), nullopt
    // when the command ran; the command's own exceptions pass through.
    std::optional<int> run(int argc, char** argv);
    // The subcommand that was parsed, if any.
    std::optional<Command> chosen_subcommand() const;

private:
    std::unique_ptr<CLI::App> app_;
};

}  // namespace adacc
