// UserError: bad input from the user (config, files, flags). main() prints its message as
// "error: ..." and exits with status 2; the message must name the problem and the fix.
// SettingError: a UserError about one setting of the run's config: the engine says what is wrong
// in the config's own words, the command line adds how to set it with that command (its flag
// for the setting, else --set: src/cli/setting_advice.cpp).
// EarlyExit: a command that stopped early on purpose, with the status it chose.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace adacc {

class UserError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

class SettingError : public UserError {
public:
    // `setting` is the config key at fault ("memory.budget", "eval.data", ...).
    SettingError(std::string setting, const std::string& problem)
        : UserError(problem), setting_(std::move(setting)) {}
    const std::string& setting() const { return setting_; }

private:
    std::string setting_;
};

// A command that ended early on purpose with a status of its own (training stopped by SIGTERM
// after writing its checkpoint: src/train/stop_signals.h). main() returns `exit_status`.
struct EarlyExit {
    int exit_status;
};

}  // namespace adacc
