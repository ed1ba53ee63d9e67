// Units every part of adacc shares: byte counts as people read them, elapsed wall time, and
// rounding sizes up to an alignment.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace adacc {

// Bytes in the largest binary unit that keeps the number >= 1, two decimals: "1.50 GiB", "512 B".
std::string format_bytes(std::uint64_t bytes);

// Wall time since `start` on the steady clock, in milliseconds and in seconds.
inline double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}
inline double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `bytes` rounded up to a multiple of `alignment` (> 0).
constexpr std::size_t align_up(std::size_t bytes, std::size_t alignment) {
    return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace adacc
