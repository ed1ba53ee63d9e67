// Test hooks of the emulated device (tests/simt/simt_runtime.cpp).
#pragma once

#include <cstddef>

namespace simt {

// The emulated device's memory: cudaMemGetInfo reports it, cudaMalloc refuses beyond it.
void set_device_memory(std::size_t bytes);
std::size_t device_allocated_bytes();

}  // namespace simt
