// SIMT emulation (test-only): compiles the project's CUDA kernels (kernels/cuda/*.cu) with the
// host compiler and runs them on the CPU, so machines with the CUDA toolkit but no GPU (CI) run
// every kernel against its CPU twin. kernels/cuda/cuda_common.cuh includes this header instead of
// the device compiler's view when ADACC_SIMT_EMULATION is defined.
//
// Model: a launch runs its grid's blocks one after another on the calling OS thread; every CUDA
// thread of a block is a cooperative ucontext fiber with its own stack (guard page below it).
// `__syncthreads` and `__syncwarp` are scheduler barriers: a barrier opens only when every live
// thread of the block (warp) waits at it; threads waiting at different barriers, or exiting while
// others wait, abort with the kernel's name and block index. Warp shuffles write a per-lane slot,
// meet at a warp barrier, read, and meet again. `__shared__` variables are per block (one block
// runs at a time); dynamic shared memory is a per-launch buffer, refused above 48 KiB unless
// cudaFuncSetAttribute allowed the kernel more, as a GPU refuses the launch. Odd-numbered blocks
// run their fibers in reverse order, so a kernel that relies on thread order instead of a barrier
// fails.
// Atomics are atomic by construction (fibers switch only at barriers).
//
// A global-only store intrinsic (__stwb) into dynamic shared memory aborts, as a GPU faults on it;
// so does a 16-byte pack load or store (kernels/cuda/cuda_common.cuh) at an address that is not
// 16-byte aligned, which a CPU reads unaligned and a GPU refuses ("misaligned address").
//
// What it cannot check: speed; registers (its launch log, $SIMT_LAUNCH_LOG, gives each kernel's
// largest block, which tests/cuda/test_cuda_coverage.cpp holds to what an unbounded kernel's
// registers allow); occupancy; static shared memory's share of the 48 KiB a launch may have
// without cudaFuncSetAttribute; races that barriers do not order (fibers never interleave between
// barriers, real threads do); inline PTX (kernels/cuda/ has one, prefetch.L2, a hint the emulation
// skips), wgmma/mma, TMA, cooperative groups (kernels/cuda/ uses none). The runtime calls the
// backend uses (tests/simt/simt_runtime.cpp) map to host memory and run synchronously; cuBLASLt
// (tests/simt/simt_cublaslt.cpp) is a CPU GEMM.
#pragma once

#ifdef __CUDACC__
#error "tests/simt/simt.h is for the host compiler only"
#endif

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

// The toolkit's host_defines.h maps these to attributes the host compiler ignores or rejects;
// under emulation they are plain C++.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#undef __restrict__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
// One block runs at a time on one OS thread, so a static per OS thread is the block's copy.
#define __shared__ static thread_local

namespace simt {

// Where the running fiber is: the builtins below read it.
struct ThreadPosition {
    dim3 thread_idx, block_idx, block_dim, grid_dim;
    int linear = 0;  // threadIdx flattened (x fastest)
};
ThreadPosition& position();
void* dynamic_shared_memory();
// Aborts where p lies in the launch's dynamic shared memory: `what` (an st.global intrinsic) is a
// global-memory store, and a shared address there is an illegal address on a GPU.
void require_global_address(const void* p, const char* what);
// Aborts where p is not a multiple of `alignment`: `what` is a vector load or store of that width,
// which a GPU faults on ("misaligned address") where a CPU reads it unaligned.
void require_aligned(const void* p, std::size_t alignment, const char* what);
void sync_block();
void sync_warp();
// Shuffle: every live lane of the warp publishes `bits`, then reads lane `source` (in-warp index).
std::uint64_t shuffle_exchange(std::uint64_t bits, int source);

using LaunchBody = void (*)(void* closure);
// Runs body(closure) once per thread of every block of the grid (see the model above).
void run_grid(const char* kernel_name, dim3 grid, dim3 block, std::size_t dynamic_smem, LaunchBody body, void* closure);

// Aborts, as a GPU refuses the launch, where `bytes` of dynamic shared memory are more than 48 KiB
// and more than cudaFuncSetAttribute (cudaFuncAttributeMaxDynamicSharedMemorySize) allowed `kernel`.
void check_dynamic_shared(const char* kernel_name, const void* kernel, std::size_t bytes);

// Strips template arguments and spaces from a stringised kernel expression ("k<128>" -> "k").
std::string kernel_base_name(const char* expression);

template <typename... Params>
class Launcher {
public:
    Launcher(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem)
        : name_(name), kernel_(kernel), grid_(grid), block_(block), smem_(smem) {}
    template <typename... Args>
    void operator()(Args&&... args) const {
        static_assert(sizeof...(Args) == sizeof...(Params), "kernel launched with the wrong number of arguments");
        struct Closure {
            void (*kernel)(Params...);
            std::tuple<std::decay_t<Params>...> args;
        } closure{kernel_, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
        check_dynamic_shared(name_, reinterpret_cast<const void*>(kernel_), smem_);
        run_grid(
            name_, grid_, block_, smem_,
            [](void* c) {
                auto* self = static_cast<Closure*>(c);
                std::apply(self->kernel, self->args);  // each thread gets its own copy of by-value parameters
            },
            &closure);
    }

private:
    const char* name_;
    void (*kernel_)(Params...);
    dim3 grid_, block_;
    std::size_t smem_;
};

template <typename... Params>
Launcher<Params...> launcher(const char* name, void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem) {
    return Launcher<Params...>(name, kernel, grid, block, smem);
}

template <typename T>
T shuffle(T value, int source_lane, int width) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of up to 8 bytes");
    const int lane = position().linear % 32;
    const int base = lane & ~(width - 1);
    if (source_lane < 0 || source_lane >= width) source_lane = lane - base;  // out of range: own value
    std::uint64_t bits = 0;
    std::memcpy(&bits, &value, sizeof(T));
    bits = shuffle_exchange(bits, base + source_lane);
    T result;
    std::memcpy(&result, &bits, sizeof(T));
    return result;
}

}  // namespace simt

#define threadIdx (simt::position().thread_idx)
#define blockIdx (simt::position().block_idx)
#define blockDim (simt::position().block_dim)
#define gridDim (simt::position().grid_dim)
inline constexpr int warpSize = 32;

inline void __syncthreads() { simt::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { simt::sync_warp(); }

template <typename T>
T __shfl_sync(unsigned, T v, int src, int width = 32) {
    return simt::shuffle(v, src, width);
}
template <typename T>
T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
    const int lane = simt::position().linear % 32;
    return simt::shuffle(v, (lane % width) ^ mask, width);
}
template <typename T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
    const int lane = simt::position().linear % 32;
    return simt::shuffle(v, (lane % width) + static_cast<int>(delta), width);
}
template <typename T>
T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
    const int lane = simt::position().linear % 32;
    return simt::shuffle(v, (lane % width) - static_cast<int>(delta), width);
}

// Atomics: a fiber never switches inside these, so plain read-modify-write is atomic.
template <typename T>
T atomicAdd(T* address, T value) {
    const T old = *address;
    *address = old + value;
    return old;
}
inline int atomicMax(int* address, int value) {
    const int old = *address;
    if (value > old) *address = value;
    return old;
}

// Device math the kernels use, with the host's float functions.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
// A product rounded on its own, never contracted with a following addition into an FMA (the
// device compiler never fuses __fmul_rn; the volatile stops the host compiler's -ffp-contract).
inline float __fmul_rn(float a, float b) {
    volatile float product = a * b;
    return product;
}
// CUDA's classification functions are global names in device code.
using std::isfinite;
using std::isinf;
using std::isnan;
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
// CUDA's min and max are global overloads in device code (floats too, so a float argument never
// truncates to the int overload here).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
template <typename T>
T __ldg(const T* p) {
    return *p;
}
// st.global.wb: global memory only (kernels/cuda/cuda_common.cuh:store_whole_pack), 16-byte aligned.
inline void __stwb(uint4* p, uint4 value) {
    simt::require_global_address(p, "__stwb (st.global) stored to shared memory; a GPU faults on it");
    simt::require_aligned(p, sizeof(uint4),
                          "__stwb stored 16 bytes at an address not 16-byte aligned; a GPU faults on it");
    *p = value;
}

#define ADACC_DYNAMIC_SHARED(T, name) T* name = static_cast<T*>(simt::dynamic_shared_memory())
#define ADACC_LAUNCH(kernel, grid, block, smem, stream) \
    simt::launcher(#kernel, kernel, dim3(grid), dim3(block), static_cast<std::size_t>(smem))
