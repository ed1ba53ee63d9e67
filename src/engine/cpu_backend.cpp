// The CPU backend: host memory (64-byte aligned, so AVX-512 loads of any tensor start on a cache
// line) and the OpenMP kernels of kernels/cpu/, which run synchronously.
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "kernels/cpu/ops.h"
#include "src/common/units.h"
#include "src/engine/backend.h"
#include "src/engine/memory_report.h"

namespace adacc {

namespace {

// The CPU's kernels have returned when their call does, so the clock between calls is their time.
class SteadyClockTimer final : public IntervalTimer {
public:
    explicit SteadyClockTimer(std::size_t max_intervals) : max_(max_intervals) { ms_.reserve(max_intervals); }
    void start() override { start_ = std::chrono::steady_clock::now(); }
    void stop() override {
        if (ms_.size() == max_) throw std::logic_error("interval timer: more intervals than it was made for");
        ms_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count());
    }
    std::vector<double> take_ms() override {
        std::vector<double> out = std::move(ms_);
        ms_.clear();
        ms_.reserve(max_);
        return out;
    }

private:
    std::size_t max_;
    std::chrono::steady_clock::time_point start_;
    std::vector<double> ms_;
};

bool is_cudnn_kernel(Kernel kernel) {
    return kernel == Kernel::attention_cudnn_forward || kernel == Kernel::attention_cudnn_backward;
}

class CpuBackend final : public Backend {
public:
    CpuBackend() {
#define ADACC_KERNEL(ret, name, ...) kernels_.name = &cpu::name;
#include "kernels/ops.inc"
#undef ADACC_KERNEL
        context_ = cpu::default_context();
    }
    Device device() const override { return Device::cpu; }
    void* allocate(std::size_t bytes) override {
        const std::size_t size = align_up(bytes, kAlignment);
        void* p = std::aligned_alloc(kAlignment, size);
        if (!p) throw std::bad_alloc();
        std::memset(p, 0, size);
        return p;
    }
    void release(void* memory) override { std::free(memory); }
    // Zero bytes is nothing to do, whatever the pointers (an empty Arena's is null, which memcpy and
    // memset may not be given), as cudaMemcpy and cudaMemset have it.
    void memset(void* dst, int byte, std::size_t bytes) override {
        if (bytes) std::memset(dst, byte, bytes);
    }
    void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
        if (bytes) std::memcpy(dst, src, bytes);
    }
    void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
        if (bytes) std::memcpy(dst, src, bytes);
    }
    void synchronize() override {}
    bool host_addressable() const override { return true; }
    // Every CPU kernel computes on fp32 activations and reads them as such (bf16 is CUDA's). The
    // attention_cudnn kernels are cuDNN's on CUDA; here they would be the fused ones under another
    // name, with another dropout mask than CUDA's, so a model asks for "fused" instead.
    bool supports(Kernel kernel, DType activation) const override {
        return activation == DType::f32 && !is_cudnn_kernel(kernel);
    }
    std::string unsupported_note(Kernel kernel, DType) const override {
        if (!is_cudnn_kernel(kernel)) return {};
        return "model.attention = \"cudnn\" is cuDNN's attention, which runs on CUDA only: on the CPU use "
               "model.attention = \"fused\" (the same algorithm) or --device cuda";
    }
    std::size_t free_memory() const override { return host_memory_bytes(); }
    std::unique_ptr<IntervalTimer> make_interval_timer(std::size_t max_intervals) override {
        return std::make_unique<SteadyClockTimer>(max_intervals);
    }

private:
    static constexpr std::size_t kAlignment = 64;
};

}  // namespace

Backend& backend_for(Device device) { return device == Device::cuda ? cuda_backend() : cpu_backend(); }

Backend& cpu_backend() {
    static CpuBackend backend;
    return backend;
}

}  // namespace adacc
