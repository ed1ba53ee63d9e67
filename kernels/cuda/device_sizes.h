// Fixed device memory the CUDA backend holds besides a model's arenas, as plain constants so that
// `adacc memory --device cuda` counts it on a machine without a GPU (or without nvcc).
#pragma once

#include <cstddef>

namespace adacc::cuda {

// cuBLASLt's workspace: one fixed size, so the algorithm the heuristic returns (and with it
// every GEMM's rounding) is the same for every call of a shape (determinism).
inline constexpr std::size_t kBlasWorkspaceBytes = std::size_t{32} << 20;
// Scratch of the two-pass, fixed-order reductions (layernorm's dweight/dbias, matmul's dbias, the
// gradient norm): partial sums of row groups, summed in a fixed order by a second kernel. The
// encoder backward's sort of positions by token (CUB's buffers) uses it too, in chunks that fit.
inline constexpr std::size_t kReductionScratchBytes = std::size_t{16} << 20;
// Row groups a reduction splits N rows into; fewer when OC x groups floats exceed the scratch.
inline constexpr int kReductionRowGroups = 64;

}  // namespace adacc::cuda
