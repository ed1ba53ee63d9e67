#include "src/common/process_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string_view>

#include "src/common/units.h"

namespace adacc {

namespace {

// A cgroup memory limit file's value; empty when absent or "max" (no limit).
std::optional<std::uint64_t> cgroup_limit(const char* file) {
    std::ifstream in(file);
    std::uint64_t bytes = 0;
    if (in >> bytes && bytes > 0) return bytes;
    return std::nullopt;
}

// A "VmSize:   1234 kB" line's bytes from /proc/self/status (0 when it cannot be read).
std::uint64_t status_bytes(std::string_view key) {
    std::ifstream in("/proc/self/status");
    std::string line;
    while (std::getline(in, line))
        if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() && line[key.size()] == ':')
            return std::stoull(line.substr(key.size() + 1)) * 1024;
    return 0;
}

// A process limit's soft value; empty when unlimited.
std::optional<std::uint64_t> soft_limit(int resource) {
    struct rlimit limit {};
    if (::getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
    return static_cast<std::uint64_t>(limit.rlim_cur);
}

}  // namespace

std::uint64_t peak_resident_bytes() {
    struct rusage usage {};
    if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
    return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

HostMemoryLimit host_memory_limit() {
    HostMemoryLimit least;
    least.bytes =
        static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
    least.source = "this machine has " + format_bytes(least.bytes) + " of memory";
    for (const char* file : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"})
        if (const auto limit = cgroup_limit(file); limit && *limit < least.bytes)
            least = {*limit, "its cgroup allows " + format_bytes(*limit) + " (" + file + ")"};
    // Arenas are address space (RLIMIT_AS) and private data (RLIMIT_DATA, which counts anonymous
    // mappings): what is left of each is the limit less what the process already has.
    const struct {
        int resource;
        const char* flag;
        const char* status_key;
    } process_limits[] = {{RLIMIT_AS, "ulimit -v", "VmSize"}, {RLIMIT_DATA, "ulimit -d", "VmData"}};
    for (const auto& l : process_limits) {
        const auto limit = soft_limit(l.resource);
        if (!limit) continue;
        const std::uint64_t used = status_bytes(l.status_key), left = *limit > used ? *limit - used : 0;
        if (left < least.bytes)
            least = {left, std::string(l.flag) + " allows the process " + format_bytes(*limit) + ", of which it " +
                               "already maps " + format_bytes(used) + ", leaving " + format_bytes(left)};
    }
    return least;
}

}  // namespace adacc
