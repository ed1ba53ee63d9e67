// What the process itself holds and may hold, beside what the engine accounts (its arenas): the
// figures the operating system charges and limits it by, so a run can print the two side by side
// and refuse, before allocating, what it would not be allowed to hold.
#pragma once

#include <cstdint>
#include <string>

namespace adacc {

// The process's peak resident set size so far (getrusage's ru_maxrss), in bytes.
std::uint64_t peak_resident_bytes();

// The host memory this process may still take, and what sets it: the least of the machine's RAM,
// its cgroup's memory limit (containers, Slurm jobs) and the process's own limits (ulimit -v:
// RLIMIT_AS; ulimit -d: RLIMIT_DATA), those two less what the process already maps.
struct HostMemoryLimit {
    std::uint64_t bytes = 0;
    std::string source;  // "this machine has 23.47 GiB of memory", "ulimit -v allows ...": a message's words
};
HostMemoryLimit host_memory_limit();

}  // namespace adacc
