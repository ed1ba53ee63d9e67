// NCCL's collectives for the CUDA backend (src/cuda/nccl_collectives.cpp), in a GPU build only:
// the SIMT emulation has no NCCL, and its backend goes through host memory like the CPU's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/activation.h"

namespace adacc {

// Whether libnccl.so.2 could be opened (with every function used here).
bool nccl_available();
// Each queues an in-place collective over the job's ranks on `stream` and returns true; false,
// doing nothing, when NCCL is not available. As src/dist/process_group.h's of the same names:
// the sum of `count` floats of device memory on every rank;
bool nccl_all_reduce_sum(float* data, std::size_t count, cudaStream_t stream);
// ZeRO-1's, over `count` elements in world-size equal shards of ceil(count / world size), which
// `data` holds all of (sharded_span): this rank's shard of the ranks' sum, and every rank's shard
// (fp32 or bf16) to every rank.
bool nccl_reduce_scatter_sum(float* data, std::size_t count, cudaStream_t stream);
bool nccl_all_gather(Act data, std::size_t count, cudaStream_t stream);

}  // namespace adacc
