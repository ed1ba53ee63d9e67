// UserError: bad input from the user (config, files, flags). main() prints its message as
// "error: ..." and exits with status 2; the message must name the problem and the fix.
#pragma once

#include <stdexcept>
#include <string>

namespace adacc {

class UserError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

}  // namespace adacc
