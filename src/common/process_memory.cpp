#include "src/common/process_memory.h"

#include <sys/resource.h>

namespace adacc {

std::uint64_t peak_resident_bytes() {
    struct rusage usage {};
    if (::getrusage(RUSAGE_SELF, &usage) != 0) return 0;
    return static_cast<std::uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace adacc
