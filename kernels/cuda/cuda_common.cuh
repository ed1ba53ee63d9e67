// What every CUDA kernel file includes: the CUDA headers (or, when ADACC_SIMT_EMULATION is
// defined, the test-only emulation of tests/simt/simt.h, which compiles the same source with
// the host compiler), a launch macro both understand, error checks and the warp and block
// reductions the kernels share. Kernels stay within what the emulation runs: no inline PTX,
// no wgmma/mma, no cooperative groups; reductions are fixed-order (no atomics), so every
// kernel is deterministic and a recomputed tensor equals the saved one bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef ADACC_SIMT_EMULATION
#include "simt/simt.h"
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define ADACC_DYNAMIC_SHARED(T, name) \
    extern __shared__ unsigned char adacc_dynamic_smem_[]; \
    T* name = reinterpret_cast<T*>(adacc_dynamic_smem_)
// ADACC_LAUNCH(kernel, grid, block, dynamic smem bytes, stream)(arguments...)
#define ADACC_LAUNCH(kernel, grid, block, smem, stream) \
    kernel<<<(grid), (block), (smem), static_cast<cudaStream_t>(stream)>>>
#endif

#include "kernels/kernel_context.h"

namespace adacc::cuda {

// Throws std::runtime_error naming the call and CUDA's message when `status` is an error.
void check(cudaError_t status, const char* what);
// After a launch: the launch error, if any, as check() reports it.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

inline cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

inline unsigned ceil_div(std::size_t a, std::size_t b) { return static_cast<unsigned>((a + b - 1) / b); }

// Sum over the 32 lanes of a warp; every lane gets the result (a fixed butterfly order).
__device__ inline float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ inline float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ inline float warp_min(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fminf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
// The same in double (the gradient norm and the codec error statistics accumulate in double).
__device__ inline double warp_sum(double v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}
__device__ inline double warp_max(double v) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}

// Sum over a block whose size is a multiple of 32 (at most 1024); every thread gets the
// result. `partials` is __shared__ float[32] of the caller, reused after the final barrier.
__device__ inline float block_sum(float v, float* partials) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    v = warp_sum(v);
    if (lane == 0) partials[warp] = v;
    __syncthreads();
    v = lane < warps ? partials[lane] : 0.0f;
    v = warp_sum(v);
    __syncthreads();
    return v;
}

}  // namespace adacc::cuda
