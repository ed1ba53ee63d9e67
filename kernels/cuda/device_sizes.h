// Fixed device memory the CUDA backend holds besides a model's arenas, as plain constants so that
// `adacc memory --device cuda` counts it on a machine without a GPU (or without nvcc).
#pragma once

#include <cstddef>
#include <cstdint>

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

// The device memory of cuDNN's attention (model.attention = "cudnn"): its workspace, which the
// backend grows to what a graph asks for, and the dropout seed and offset (two int64s). Its
// deterministic sm90 backward asks for a B x H x T x T bf16 matrix (dP), padded to whole 64 x 128
// tiles, 4 bytes per (batch, head, position) and 256 bytes; its forward for 256 bytes. Not cuDNN's
// promise but what its graphs asked for on an H200 (cuDNN 9 from torch 2.11's wheel), exactly, at
// 7 shapes from B=1 H=1 T=100 to B=133 H=24 T=1024 (hs 32 to 128; README's GPU section). Its
// other backward (training.deterministic = false) sums dQ by atomics into an fp32 B x H x T x hs
// buffer instead of the dP matrix: the frontend's composite SDPA backward sizes it and the 4 bytes
// per position (cudnn_frontend/node/scaled_dot_product_flash_attention.h: dQ_accum, softmax_sum);
// the 256 bytes are assumed as in the deterministic case, not yet measured on a GPU. Where cuDNN
// has no deterministic backward for a shape it runs the other (attention_cudnn.cpp:
// build_backward), so a deterministic request reserves the larger of the two: the dP matrix's
// at T = 1024, the dQ buffer's only where T is below about 2 hs. A cuDNN that asks for more is refused with
// the sizes when the device is full (kernels/cuda/attention_cudnn.cpp).
inline constexpr std::size_t cudnn_attention_device_bytes(std::size_t B, std::size_t H, std::size_t T, std::size_t hs,
                                                          bool deterministic) {
    const std::size_t softmax_sums = 4 * B * H * T, engine = 256, seed_and_offset = 2 * sizeof(std::int64_t);
    const std::size_t fixed = softmax_sums + engine + seed_and_offset;
    const std::size_t dq_sums = 4 * B * H * T * hs;
    if (!deterministic) return dq_sums + fixed;
    const std::size_t rows = (T + 63) / 64 * 64, cols = (T + 127) / 128 * 128;
    const std::size_t dp_matrix = 2 * B * H * rows * cols;
    return (dp_matrix > dq_sums ? dp_matrix : dq_sums) + fixed;
}

}  // namespace adacc::cuda
