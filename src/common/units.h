// Small arithmetic shared across the engine: alignment.
#pragma once

#include <cstddef>

namespace adacc {

// `bytes` rounded up to a multiple of `alignment` (> 0).
constexpr std::size_t align_up(std::size_t bytes, std::size_t alignment) {
    return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace adacc
