// What the process itself holds, beside what the engine accounts (its arenas): the figure the
// operating system charges it, so a run can print the two side by side.
#pragma once

#include <cstdint>

namespace adacc {

// The process's peak resident set size so far (getrusage's ru_maxrss), in bytes.
std::uint64_t peak_resident_bytes();

}  // namespace adacc
