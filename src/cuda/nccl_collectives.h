// NCCL's collectives for the CUDA backend (src/cuda/nccl_collectives.cpp), in a GPU build only:
// the SIMT emulation has no NCCL, and its backend goes through host memory like the CPU's.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

#include "kernels/activation.h"
#include "src/engine/backend.h"

namespace adacc {

// Whether libnccl.so.2 could be opened (with every function used here).
bool nccl_available();
// Makes the job's communicator now, with all its connections and their buffers (a collective:
// every rank at the same point); nothing when NCCL is not available.
void nccl_start();
// Each queues in-place collectives over the job's ranks on `stream` and returns true; false,
// doing nothing, when NCCL is not available. As src/dist/process_group.h's start_sums: the sums
// of `pieces` (device memory), one NCCL group (an all-reduce per piece, or a reduce into its
// root), watched as one;
bool nccl_sums(std::span<const SumPiece> pieces, cudaStream_t stream);
// ZeRO-1's all-gather over `count` elements in world-size equal shards of ceil(count / world
// size), which `data` holds all of (sharded_span): every rank's shard (fp32 or bf16) to every rank.
bool nccl_all_gather(Act data, std::size_t count, cudaStream_t stream);

}  // namespace adacc
