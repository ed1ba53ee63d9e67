// What every CUDA kernel file includes: the CUDA headers (or, when ADACC_SIMT_EMULATION is
// defined, the test-only emulation of tests/simt/simt.h, which compiles the same source with
// the host compiler), a launch macro both understand, error checks and the warp and block
// reductions the kernels share. Kernels stay within what the emulation runs: no inline PTX,
// no wgmma/mma, no cooperative groups; reductions are fixed-order (no atomics), so every
// kernel is deterministic and a recomputed tensor equals the saved one bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#ifdef ADACC_SIMT_EMULATION
#include "simt/simt.h"
#else
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#define ADACC_DYNAMIC_SHARED(T, name)                                    \
    extern __shared__ __align__(16) unsigned char adacc_dynamic_smem_[]; \
    T* name = reinterpret_cast<T*>(adacc_dynamic_smem_)
// ADACC_LAUNCH(kernel, grid, block, dynamic smem bytes, stream)(arguments...)
#define ADACC_LAUNCH(kernel, grid, block, smem, stream) \
    kernel<<<(grid), (block), (smem), static_cast<cudaStream_t>(stream)>>>
#endif
// Unrolls the loop that follows on the GPU (an array indexed by its counter then stays in
// registers); the host compiler of the emulation does not know the pragma.
#if defined(__CUDACC__) && !defined(ADACC_SIMT_EMULATION)
#define ADACC_UNROLL _Pragma("unroll")
#else
#define ADACC_UNROLL
#endif

#include <stdexcept>
#include <string>

#include "kernels/activation.h"
#include "kernels/kernel_context.h"

namespace adacc::cuda {

// Throws std::runtime_error naming the call and CUDA's message when `status` is an error.
void check(cudaError_t status, const char* what);
// After a launch: the launch error, if any, as check() reports it.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

inline cudaStream_t stream_of(const KernelContext& ctx) { return static_cast<cudaStream_t>(ctx.stream); }

// The shared memory, static and dynamic together, any kernel may be launched with, on every GPU,
// without asking (a kernel with no static shared memory may have all of it dynamic).
inline constexpr std::size_t kDefaultDynamicShared = 48 * 1024;
// The most shared memory a block of the current device may have, static and dynamic together
// (cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KiB on an H100 or H200, 163 KiB on an A100).
std::size_t shared_memory_per_block(const char* what);
// Allows `kernel` (a __global__ function's address) `bytes` of dynamic shared memory beside its
// static shared memory. Asked whenever bytes > 0: the 48 KiB a launch may have unasked counts the
// static bytes too (the fused classifier's 272 would make 48 KiB of dynamic fail). `what` names
// the caller in an error.
void allow_dynamic_shared(const void* kernel, std::size_t bytes, const char* what);

inline unsigned ceil_div(std::size_t a, std::size_t b) { return static_cast<unsigned>((a + b - 1) / b); }

// The second pass of the two-pass column sums (layernorm's dweight and dbias, matmul's dbias):
// out[c] (+)= the sum over g < groups of partials[g * C + c], for c < C, where the first pass left
// one row of C partial sums per row group. Lane l of a channel adds groups l, l + 32, ... in
// order, then the 32 lane sums are added in lane order: an order fixed by groups and C, with 32
// loads in flight per channel. `what` names the caller in a launch error.
void sum_group_partials(const KernelContext& ctx, float* out, const float* partials, int groups, int C, bool accumulate,
                        const char* what);

// ---- activation element types -----------------------------------------------------------------
// Kernels are templates on the activation type T (float or __nv_bfloat16); they load with
// to_f32, compute in fp32 and store with from_f32 (bf16: round to nearest even). A launcher
// picks T from the Act's dtype with with_activation_type and gets typed pointers from
// device_ptr<T>, which refuses an Act of another type.
template <typename T>
struct TypeTag {
    using type = T;
};

// body(TypeTag<T>{}) for the activation dtype; a logic_error naming `kernel` for any other.
template <typename Body>
void with_activation_type(DType dtype, const char* kernel, Body&& body) {
    if (dtype == DType::f32) return body(TypeTag<float>{});
    if (dtype == DType::bf16) return body(TypeTag<__nv_bfloat16>{});
    throw std::logic_error(std::string(kernel) + ": activations of type " + std::string(dtype_name(dtype)) +
                           " (the CUDA kernels run f32 and bf16)");
}

// The dtype every (non-null) activation of one call shares; a mixture is refused naming the
// kernel, because the launcher picks one T (and the GEMMs one type) for all of them.
inline DType activation_type(const char* kernel, std::initializer_list<ConstAct> tensors) {
    const DType type = tensors.begin()->dtype();
    for (const ConstAct& t : tensors)
        if (t && t.dtype() != type)
            throw std::invalid_argument(std::string(kernel) + ": activations of types " +
                                        std::string(dtype_name(type)) + " and " + std::string(dtype_name(t.dtype())) +
                                        " in one call");
    return type;
}

template <typename T>
T* device_ptr(Act a) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return reinterpret_cast<__nv_bfloat16*>(a.as<bf16>());
    else
        return a.as<T>();
}
template <typename T>
const T* device_ptr(ConstAct a) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return reinterpret_cast<const __nv_bfloat16*>(a.as<bf16>());
    else
        return a.as<T>();
}

__device__ inline float to_f32(float x) { return x; }
__device__ inline float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T>
__device__ inline T from_f32(float x) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __float2bfloat16_rn(x);
    else
        return x;
}

// ---- 128-bit loads and stores ------------------------------------------------------------------
// Memory-bound kernels move 16 bytes per load or store (8 bf16 or 4 floats), as a GPU's widest
// instructions do: a thread owns the kPack consecutive elements [i, i + kPack). Where a pointer
// is not 16-byte aligned, or the pack runs past n, the same elements are moved one by one; both
// give each thread the same values, so the choice changes speed, never a result (a reduction's
// order depends on kPack and the shape alone).
template <typename T>
inline constexpr int kPack = 16 / static_cast<int>(sizeof(T));

template <typename T>
struct alignas(16) Pack {
    T v[kPack<T>];
};

// Whether every pointer given can be read or written as packs (null ones: unused, ignored).
inline bool packs_aligned(std::initializer_list<const void*> pointers) {
    for (const void* p : pointers)
        if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return false;
    return true;
}

// One 16-byte load of the pack at p, which must be 16-byte aligned: a GPU faults on a misaligned
// one, so the emulation aborts on it (a CPU would read it unaligned).
template <typename T>
__device__ inline Pack<T> load_whole_pack(const T* p) {
#ifdef ADACC_SIMT_EMULATION
    simt::require_aligned(p, sizeof(Pack<T>),
                          "a 16-byte pack load at an address not 16-byte aligned; a GPU faults on it");
#endif
    return *reinterpret_cast<const Pack<T>*>(p);
}

// Elements [i, i + kPack) of p as fp32 (those at or past n read as 0): one 128-bit load when
// `aligned` (p is 16-byte aligned and i a multiple of kPack) and the pack is whole.
template <typename T>
__device__ inline void load_pack(float (&out)[kPack<T>], const T* p, long i, long n, bool aligned) {
    if (aligned && i + kPack<T> <= n) {
        const Pack<T> pack = load_whole_pack(p + i);
        for (int j = 0; j < kPack<T>; ++j) out[j] = to_f32(pack.v[j]);
    } else {
        for (int j = 0; j < kPack<T>; ++j) out[j] = i + j < n ? to_f32(p[i + j]) : 0.0f;
    }
}

// The same elements kept as T, for a kernel that holds packs in registers between two uses
// (half the registers of fp32 values in bf16); unpack gives load_pack's values.
template <typename T>
__device__ inline Pack<T> load_raw_pack(const T* p, long i, long n, bool aligned) {
    if (aligned && i + kPack<T> <= n) return load_whole_pack(p + i);
    Pack<T> pack;
    for (int j = 0; j < kPack<T>; ++j) pack.v[j] = i + j < n ? p[i + j] : from_f32<T>(0.0f);
    return pack;
}
template <typename T>
__device__ inline void unpack(float (&out)[kPack<T>], const Pack<T>& pack) {
    for (int j = 0; j < kPack<T>; ++j) out[j] = to_f32(pack.v[j]);
}

// One 16-byte store of a pack at a 16-byte aligned p in global memory, through __stwb (an ordinary
// write-back store of a uint4), which is always one st.global.v4: nvcc may split a Pack copy into
// 4-byte stores where the stored values come from loads of other arrays. Global memory only, as
// are store_pack and store_raw_pack: a shared address faults (the emulation aborts on one).
template <typename T>
__device__ inline void store_whole_pack(T* p, const Pack<T>& pack) {
    uint4 bits;
    memcpy(&bits, &pack, sizeof bits);
    __stwb(reinterpret_cast<uint4*>(p), bits);
}

// Stores elements [i, min(i + kPack, n)) of `in`, rounded to T, as load_pack reads them.
template <typename T>
__device__ inline void store_pack(T* p, long i, long n, const float (&in)[kPack<T>], bool aligned) {
    if (aligned && i + kPack<T> <= n) {
        Pack<T> pack;
        for (int j = 0; j < kPack<T>; ++j) pack.v[j] = from_f32<T>(in[j]);
        store_whole_pack(p + i, pack);
    } else {
        for (int j = 0; j < kPack<T> && i + j < n; ++j) p[i + j] = from_f32<T>(in[j]);
    }
}
// Stores elements [i, min(i + kPack, n)) of a pack already of type T (load_raw_pack's counterpart).
template <typename T>
__device__ inline void store_raw_pack(T* p, long i, long n, const Pack<T>& pack, bool aligned) {
    if (aligned && i + kPack<T> <= n) {
        store_whole_pack(p + i, pack);
    } else {
        for (int j = 0; j < kPack<T> && i + j < n; ++j) p[i + j] = pack.v[j];
    }
}

// ---- prefetching --------------------------------------------------------------------------------
// Asks for the cache line holding p to be brought into L2 (prefetch.L2 on a generic address),
// neither waiting for it nor holding a register: a kernel that will read a row soon asks for it
// early, and its loads then hit L2 instead of waiting on DRAM. A hint: no result changes. Under
// the emulation, nothing.
__device__ inline void prefetch_l2(const void* p) {
#if defined(__CUDACC__) && !defined(ADACC_SIMT_EMULATION)
    asm volatile("prefetch.L2 [%0];" ::"l"(p));
#else
    (void)p;
#endif
}
// Elements [0, n) of row, a 128-byte line at a time from the row's start, asked for by the 32
// lanes of a warp in turn (a row that does not start on a line may leave its last line to the
// loads). Plain int offsets: its registers count in kernels that hold rows in them.
template <typename T>
__device__ inline void prefetch_row_l2(const T* row, int n, int lane) {
    const char* bytes = reinterpret_cast<const char*>(row);
    const int size = n * static_cast<int>(sizeof(T));
    for (int b = lane * 128; b < size; b += 32 * 128) prefetch_l2(bytes + b);
}

// ---- residual additions -----------------------------------------------------------------------
// The dropout scale 1 / (1 - p) of a residual addition, computed on the host exactly as
// kernels/cpu/dropout.cpp computes it (no mask: 1, every element kept).
inline float dropout_scale(const unsigned char* mask, float p) { return mask ? 1.0f / (1.0f - p) : 1.0f; }
// residual + branch * mask[i] * scale (mask null: residual + branch) in fp32, the product rounded
// before the addition (__fmul_rn: never contracted into an FMA) as the CPU's vectorised loops do.
// residual_dropout_forward and residual_layernorm_forward both add this way, so their sums agree.
__device__ inline float residual_dropout(float residual, float branch, const unsigned char* mask, long i, float scale) {
    return !mask ? residual + branch : residual + (mask[i] ? __fmul_rn(branch, scale) : 0.0f);
}

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
