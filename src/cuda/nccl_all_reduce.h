// NCCL's all-reduce for the CUDA backend (src/cuda/nccl_all_reduce.cpp), in a GPU build only: the
// SIMT emulation has no NCCL, and its backend sums through host memory like the CPU's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace adacc {

// Whether libnccl.so.2 could be opened (with every function used here).
bool nccl_available();
// Queues the in-place sum of `count` floats of device memory over the job's ranks on `stream`;
// false, doing nothing, when NCCL is not available.
bool nccl_all_reduce_sum(float* data, std::size_t count, cudaStream_t stream);

}  // namespace adacc
