// UserError: bad input from the user (config, files, flags). main() prints its message as
// "error: ..." and exits with status 2; the message must name the problem and the fix.
// EarlyExit: a command that stopped early on purpose, with the status it chose.
#pragma once

#include <stdexcept>
#include <string>

namespace adacc {

class UserError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A command that ended early on purpose with a status of its own (training stopped by SIGTERM
// after writing its checkpoint: src/train/stop_signals.h). main() returns `exit_status`.
struct EarlyExit {
    int exit_status;
};

}  // namespace adacc
