// The CUDA backend: device memory (one cudaMalloc per arena) on this rank's GPU, copies through one
// stream, and the kernels of kernels/cuda/ queued on it (the gradient sums on a second). Built with
// the host compiler against the CUDA runtime and cuBLASLt; the SIMT emulation (tests/simt/)
// compiles this same file against its host-memory runtime, so the whole backend runs in CI
// without a GPU.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/blas_context.h"
#include "kernels/cuda/device_sizes.h"
#include "kernels/cuda/ops.h"
#include "src/common/errors.h"
#include "src/cuda/cublaslt_library.h"
#include "src/cuda/cuda_device.h"
#ifndef ADACC_SIMT_EMULATION
#include "src/cuda/nccl_collectives.h"
#endif
#include "src/dist/process_group.h"
#include "src/engine/backend.h"

namespace adacc {

namespace {

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        throw std::runtime_error(std::string(what) + ": CUDA error: " + cudaGetErrorString(status));
}

void check(cublasStatus_t status, const char* what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string(what) + ": cuBLASLt status " + std::to_string(static_cast<int>(status)));
}

// A pair of events per interval, created up front (creating one is not free) and recorded on the
// backend's stream; nothing waits until take_ms.
class EventTimer final : public IntervalTimer {
public:
    EventTimer(cudaStream_t stream, std::size_t max_intervals) : stream_(stream), events_(2 * max_intervals) {
        for (cudaEvent_t& e : events_) check(cudaEventCreate(&e), "cudaEventCreate");
    }
    ~EventTimer() override {
        for (cudaEvent_t e : events_) cudaEventDestroy(e);
    }
    void start() override { record("interval timer start"); }
    void stop() override { record("interval timer stop"); }
    std::vector<double> take_ms() override {
        std::vector<double> out;
        if (recorded_ == 0) return out;
        check(cudaEventSynchronize(events_[recorded_ - 1]), "cudaEventSynchronize");
        for (std::size_t i = 0; i + 1 < recorded_; i += 2) {
            float ms = 0;
            check(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "cudaEventElapsedTime");
            out.push_back(ms);
        }
        recorded_ = 0;
        return out;
    }

private:
    void record(const char* what) {
        if (recorded_ == events_.size()) throw std::logic_error("interval timer: more intervals than it was made for");
        check(cudaEventRecord(events_[recorded_++], stream_), what);
    }
    cudaStream_t stream_;
    std::vector<cudaEvent_t> events_;
    std::size_t recorded_ = 0;
};

// The GPU this process takes: its local rank's (one GPU per rank on each machine), modulo the
// GPUs it sees; 0 for a single process.
int cuda_device_index() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) return 0;
    return process_group().local_rank % count;
}

class CudaBackend final : public Backend {
public:
    CudaBackend() {
        check(cudaSetDevice(cuda_device_index()), "cudaSetDevice");
        check(cudaStreamCreate(&stream_), "cudaStreamCreate");
        open_cublaslt();
        check(cublasLtCreate(&blas_.handle), "cublasLtCreate");
        blas_.workspace = allocate(cuda::kBlasWorkspaceBytes);
        blas_.workspace_bytes = cuda::kBlasWorkspaceBytes;
        reduction_scratch_ = allocate(cuda::kReductionScratchBytes);
#define ADACC_KERNEL(ret, name, ...) kernels_.name = &cuda::name;
#include "kernels/ops.inc"
#undef ADACC_KERNEL
        context_.stream = stream_;
        context_.blas = &blas_;
        context_.reduction_scratch = reduction_scratch_;
        context_.reduction_scratch_bytes = cuda::kReductionScratchBytes;
        // cuDNN's attention when libcudnn.so.9 loads; its handle and graphs come with the first call.
        cudnn_problem_ = cudnn_problem();
        if (cudnn_problem_.empty()) dnn_ = cuda::make_dnn_context();
        context_.dnn = dnn_;
        fixed_overhead_ = measure_fixed_overhead();
    }
    ~CudaBackend() override {
        if (comm_stream_) {
            cudaStreamSynchronize(comm_stream_);
            cudaEventDestroy(queued_);
            cudaEventDestroy(summed_);
            cudaStreamDestroy(comm_stream_);
        }
        cudaStreamSynchronize(stream_);
        cuda::destroy_dnn_context(dnn_);
        cudaFree(reduction_scratch_);
        cudaFree(blas_.workspace);
        cublasLtDestroy(blas_.handle);
        cudaStreamDestroy(stream_);
    }
    Device device() const override { return Device::cuda; }
    void* allocate(std::size_t bytes) override {
        void* p = nullptr;
        if (cudaMalloc(&p, bytes) != cudaSuccess) {
            cudaGetLastError();  // clear the error so later calls do not see it
            throw std::bad_alloc();
        }
        check(cudaMemsetAsync(p, 0, bytes, stream_), "cudaMemsetAsync");
        return p;
    }
    void release(void* memory) override {
        cudaStreamSynchronize(stream_);
        cudaFree(memory);
    }
    void memset(void* dst, int byte, std::size_t bytes) override {
        check(cudaMemsetAsync(dst, byte, bytes, stream_), "cudaMemsetAsync");
    }
    // Host memory of the caller may change after return, so copies wait for the stream.
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync to device");
        synchronize();
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
        check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync to host");
        synchronize();
    }
    void synchronize() override { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
    bool host_addressable() const override { return false; }
    // Every kernel of kernels/cuda/ is templated on fp32 and bf16 activations (with_activation_type),
    // but cuDNN's attention, which needs cuDNN loaded and runs bf16 only (its SDPA has no fp32).
    bool supports(Kernel kernel, DType activation) const override {
        if (is_cudnn_kernel(kernel)) return dnn_ && activation == DType::bf16;
        return activation == DType::f32 || activation == DType::bf16;
    }
    std::string unsupported_note(Kernel kernel, DType activation) const override {
        if (!is_cudnn_kernel(kernel)) return {};
        if (!dnn_)
            return "model.attention = \"cudnn\" needs cuDNN 9, which is unavailable (" + cudnn_problem_ +
                   "); use model.attention = \"fused\" (the same algorithm, adacc's kernel) or fix that";
        return "cuDNN's fused attention runs bf16 activations only: use model.dtype = \"bf16\" (or \"auto\"), or "
               "model.attention = \"fused\"";
    }
    std::size_t library_bytes() const override { return cuda::dnn_device_bytes(dnn_); }
    // cuda_fixed_overhead's measurement (src/engine/device.h).
    std::size_t fixed_overhead() const { return fixed_overhead_; }
    // NCCL's communicator, measured as the device memory in use after making it less before. Every
    // rank then counts the largest rank's, and the largest rank's context too, so the ranks' totals,
    // budgets and plans agree (a planned mode's plan is the job's: each rank solves the same MILP).
    void start_collectives() override {
        synchronize();
        const std::size_t before = memory_in_use();
#ifndef ADACC_SIMT_EMULATION  // the emulation has no NCCL: nothing to make
        nccl_start();
#endif
        const std::size_t after = memory_in_use();
        collectives_bytes_ = all_reduce_max(std::uint64_t{after > before ? after - before : 0});
        fixed_overhead_ = all_reduce_max(std::uint64_t{fixed_overhead_});
    }
    // cuda_collectives_overhead's measurement; none before start_collectives.
    std::optional<std::size_t> collectives_bytes() const { return collectives_bytes_; }
    std::size_t free_memory() const override {
        std::size_t free = 0, total = 0;
        check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
        return free;
    }
    std::unique_ptr<IntervalTimer> make_interval_timer(std::size_t max_intervals) override {
        return std::make_unique<EventTimer>(stream_, max_intervals);
    }
#ifndef ADACC_SIMT_EMULATION  // the emulation has no NCCL: its collectives go through host memory
    // The sums run on a communication stream after an event of this one, so the kernels queued
    // after them (backward's next blocks) run beside them; finish_sums makes this stream wait.
    bool start_sums(std::span<const SumPiece> pieces) override {
        if (!nccl_available()) return false;
        if (!comm_stream_) make_comm_stream();
        check(cudaEventRecord(queued_, stream_), "cudaEventRecord");
        check(cudaStreamWaitEvent(comm_stream_, queued_, 0), "cudaStreamWaitEvent");
        sums_started_ = nccl_sums(pieces, comm_stream_);
        return sums_started_;
    }
    void finish_sums() override {
        if (!sums_started_) return;
        check(cudaEventRecord(summed_, comm_stream_), "cudaEventRecord");
        check(cudaStreamWaitEvent(stream_, summed_, 0), "cudaStreamWaitEvent");
        sums_started_ = false;
    }
    bool all_gather(Act data, std::size_t count) override { return nccl_all_gather(data, count, stream_); }
#endif

private:
    static std::size_t memory_in_use() {
        std::size_t free = 0, total = 0;
        check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
        return total - free;
    }
    // The device memory in use now, less this backend's own buffers: the context, its loaded
    // kernels and cuBLASLt's handle (cudaMemGetInfo cannot be asked before the context exists).
    static std::size_t measure_fixed_overhead() {
        const std::size_t in_use = memory_in_use();
        return in_use > cuda::kBackendBufferBytes ? in_use - cuda::kBackendBufferBytes : 0;
    }
    static bool is_cudnn_kernel(Kernel kernel) {
        return kernel == Kernel::attention_cudnn_forward || kernel == Kernel::attention_cudnn_backward;
    }
#ifndef ADACC_SIMT_EMULATION
    // At the device's highest priority, so the collectives' kernels are not starved by backward's.
    void make_comm_stream() {
        int lowest = 0, highest = 0;
        check(cudaDeviceGetStreamPriorityRange(&lowest, &highest), "cudaDeviceGetStreamPriorityRange");
        check(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamDefault, highest), "cudaStreamCreateWithPriority");
        check(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming), "cudaEventCreate");
        check(cudaEventCreateWithFlags(&summed_, cudaEventDisableTiming), "cudaEventCreate");
    }
#endif
    cudaStream_t stream_ = nullptr;
    // The gradient sums' stream and its two events (queued_: on stream_ before them; summed_: on
    // comm_stream_ after them), made with the first sums.
    cudaStream_t comm_stream_ = nullptr;
    cudaEvent_t queued_ = nullptr, summed_ = nullptr;
    bool sums_started_ = false;
    cuda::BlasContext blas_;
    std::string cudnn_problem_;        // why cuDNN's attention is unavailable, when it is
    cuda::DnnContext* dnn_ = nullptr;  // null without cuDNN
    void* reduction_scratch_ = nullptr;
    std::size_t fixed_overhead_ = 0;
    std::optional<std::size_t> collectives_bytes_;
};

}  // namespace

CudaDeviceInfo cuda_device_info() {
    CudaDeviceInfo info;
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
        cudaGetLastError();
        // Without a GPU the runtime usually reports the missing driver as "insufficient driver".
        info.problem = status == cudaErrorInsufficientDriver
                           ? "no NVIDIA driver found, or one older than this CUDA runtime needs"
                           : (status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device found");
        return info;
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, cuda_device_index()), "cudaGetDeviceProperties");
    info.available = true;
    info.name = prop.name;
    info.compute_capability = prop.major * 10 + prop.minor;
    info.total_memory = prop.totalGlobalMem;
    return info;
}

namespace {
// Whether this machine has a GPU the backend can start on, asked once.
bool gpu_here() {
    static const bool gpu = cuda_device_info().available;
    return gpu;
}

CudaBackend& the_cuda_backend() {
    static std::unique_ptr<CudaBackend> backend = [] {
        const CudaDeviceInfo info = cuda_device_info();
        if (!info.available)
            throw UserError("--device cuda: " + info.problem +
                            "; run on a machine with an NVIDIA GPU and its driver, or use --device cpu");
        return std::make_unique<CudaBackend>();
    }();
    return *backend;
}
}  // namespace

Backend& cuda_backend() { return the_cuda_backend(); }

// Measured by starting the backend where there is a GPU (the run will start it anyway), else the
// estimate. The measurement changes once, when start_collectives makes the ranks agree on it,
// before any total is taken.
CudaFixedOverhead cuda_fixed_overhead() {
    if (!gpu_here()) return {kCudaContextEstimateBytes, false};
    return {the_cuda_backend().fixed_overhead(), true};
}

CudaFixedOverhead cuda_collectives_overhead(int world_size) {
    if (world_size <= 1) return {};
    if (gpu_here())
        if (const std::optional<std::size_t> measured = the_cuda_backend().collectives_bytes())
            return {*measured, true};
    return {kNcclBuffersEstimateBytes, false};
}

}  // namespace adacc
