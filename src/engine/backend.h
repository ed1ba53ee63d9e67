// The seam between the engine and a device (docs/design.md, 'Backends'): a Backend owns its memory
// (one allocation per arena), moves bytes between host and device, and hands out its kernels
// (kernels/kernel_table.h) with the KernelContext they run in. The driver, the tape, the optimizer,
// eval and the profiler reach kernels and device memory only through it. The backends are the
// CPU's, src/engine/cpu_backend.cpp, and CUDA's, src/cuda/cuda_backend.cpp (in a build without
// CUDA, src/cuda/no_cuda_backend.cpp stands in for it and says how to get it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kernels/kernel_context.h"
#include "kernels/kernel_table.h"
#include "src/common/dtype.h"
#include "src/engine/device.h"

namespace adacc {

// Times intervals of a backend's queue without waiting between them (the profiler's op and codec
// times): on a GPU, CUDA events recorded in stream order and read once at the end, so a kernel's
// time is not inflated by its launch or by a synchronisation; on the CPU, whose kernels are
// synchronous, the steady clock.
class IntervalTimer {
public:
    virtual ~IntervalTimer() = default;
    virtual void start() = 0;  // opens an interval at this point of the queue
    virtual void stop() = 0;   // closes it
    // Every closed interval's length in ms, in order, waiting for the queue to reach the last
    // stop; the timer is then empty again.
    virtual std::vector<double> take_ms() = 0;
};

// `count` floats at `data` (backend memory) to sum over the job's ranks in place: into every rank
// (root < 0: an all-reduce), or into rank `root` alone (a reduce; the others keep their values).
struct SumPiece {
    float* data = nullptr;
    std::size_t count = 0;
    int root = -1;
};

class Backend {
public:
    virtual ~Backend() = default;
    virtual Device device() const = 0;
    // One allocation of `bytes` (> 0), zero-filled: 64-byte aligned host memory on the CPU,
    // cudaMalloc on a GPU. Throws std::bad_alloc when it cannot be had.
    virtual void* allocate(std::size_t bytes) = 0;
    virtual void release(void* memory) = 0;
    virtual void memset(void* dst, int byte, std::size_t bytes) = 0;
    virtual void copy_to_device(void* dst, const void* host_src, std::size_t bytes) = 0;
    virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes) = 0;
    // Waits for every queued kernel and copy (a no-op on the CPU, where kernels are synchronous).
    virtual void synchronize() = 0;
    // True when the host may read and write this backend's memory in place (the CPU's), so
    // large host reads such as a checkpoint's need no staging copy.
    virtual bool host_addressable() const = 0;
    // Bytes this backend could still allocate (free device memory on a GPU), checked before a
    // model's arenas are allocated.
    virtual std::size_t free_memory() const = 0;
    // Device memory a library has taken for itself since start-up, outside the arenas (CUDA:
    // cuDNN's attention workspace, sized by its first calls; ModelMemory::backend counts it).
    virtual std::size_t library_bytes() const { return 0; }
    // A timer for up to `max_intervals` intervals between take_ms calls (more is a logic_error).
    virtual std::unique_ptr<IntervalTimer> make_interval_timer(std::size_t max_intervals) = 0;
    // Makes its collective library's communicator over the job's ranks now, with every connection
    // (src/dist/process_group.h: start_collectives, which every rank calls at the same point), and
    // measures the memory it took; a no-op where the process group sums through host memory.
    virtual void start_collectives() {}
    // Starts the in-place sums of `pieces` (this backend's memory) over the job's ranks
    // (src/dist/process_group.h: start_sums) with a collective library of its own (NCCL on a GPU),
    // after everything queued so far but beside what is queued after it; false, doing nothing,
    // when it has none and the process group must sum through host memory.
    virtual bool start_sums(std::span<const SumPiece> pieces) { return false; }
    // What is queued from now on waits for every sum started (no-op without start_sums).
    virtual void finish_sums() {}
    // ZeRO-1's all-gather in place, likewise (src/dist/process_group.h: all_gather); `data` holds
    // sharded_span(count, world size) elements, one equal shard per rank.
    virtual bool all_gather(Act data, std::size_t count) { return false; }
    // Whether this backend runs `kernel` on activations of type `activation` (the model's dtype),
    // ggml's supports_op: the driver asks it for every kernel a model calls before the first step
    // (Driver::require_supported), so an op a backend lacks is refused up front with a UserError
    // naming it, not met mid-step as a kernel's logic_error.
    virtual bool supports(Kernel kernel, DType activation) const = 0;
    // Why not, with the fix, where supports() says no and the backend knows more than which kernel
    // and dtype (a library that did not load); empty otherwise. The driver appends it to its refusal.
    virtual std::string unsupported_note(Kernel kernel, DType activation) const { return {}; }

    const KernelTable& kernels() const { return kernels_; }
    const KernelContext& context() const { return context_; }

protected:
    friend class KernelTiming;  // swaps kernels_'s pointers for timed ones while it lives (kernel_timing.h)
    KernelTable kernels_;
    KernelContext context_;
};

// The process's CPU backend (OpenMP kernels of kernels/cpu/).
Backend& cpu_backend();
// The process's CUDA backend on its local rank's GPU (src/cuda/), created on first use; a
// UserError naming the reason when there is no GPU or the build has no CUDA backend.
Backend& cuda_backend();
Backend& backend_for(Device device);

// One allocation in a backend's memory, released through it; move-only. Size 0 allocates nothing.
class Arena {
public:
    Arena() = default;
    Arena(Backend& backend, std::size_t bytes);
    Arena(Arena&& other) noexcept { *this = std::move(other); }
    Arena& operator=(Arena&& other) noexcept;
    Arena(const Arena&) = delete;
    Arena& operator=(const Arena&) = delete;
    ~Arena() { reset(); }

    void reset();  // releases the memory now
    void* data() const { return data_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(data_);
    }
    std::size_t bytes() const { return bytes_; }

private:
    Backend* backend_ = nullptr;
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
};

}  // namespace adacc
