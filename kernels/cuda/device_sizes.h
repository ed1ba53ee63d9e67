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
// The backend's own buffers, both allocated when it starts.
inline constexpr std::size_t kBackendBufferBytes = kBlasWorkspaceBytes + kReductionScratchBytes;

// cuDNN's attention workspace (model.attention = "cudnn"), which the backend grows to what a graph
// asks for: its deterministic sm90 backward keeps a B x H x T x T bf16 matrix, padded to whole
// 64 x 128 tiles, and 4 bytes per (batch, head, position); its forward asks for 256 bytes. Not
// cuDNN's promise but what its graphs asked for on an H200 (cuDNN 9 from torch 2.11's wheel),
// exactly, at 7 shapes from B=1 H=1 T=100 to B=133 H=24 T=1024 (hs 32 to 128; README's GPU
// section): a cuDNN that asks for more is refused with the sizes (kernels/cuda/attention_cudnn.cpp).
inline constexpr std::size_t cudnn_attention_workspace_bytes(std::size_t B, std::size_t H, std::size_t T) {
    const std::size_t rows = (T + 63) / 64 * 64, cols = (T + 127) / 128 * 128;
    return 2 * B * H * rows * cols + 4 * B * H * T + 256;
}

}  // namespace adacc::cuda
