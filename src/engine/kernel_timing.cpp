#include "src/engine/kernel_timing.h"

#include <numeric>
#include <stdexcept>
#include <type_traits>

namespace adacc {

namespace {

KernelTiming* g_active = nullptr;  // the KernelTiming the timed pointers report to

// A matmul kernel's shape from its arguments: its three int parameters are N, C and OC, in that
// order (kernels/ops.inc); nothing for any other kernel.
template <Kernel K, typename... Args>
std::optional<MatmulShape> matmul_shape(const Args&... args) {
    if constexpr (is_matmul(K)) {
        static_assert((std::is_same_v<Args, int> + ...) == 3, "a matmul kernel's ints are N, C, OC");
        int dims[3] = {};
        int i = 0;
        (
            [&] {
                if constexpr (std::is_same_v<Args, int>) dims[i++] = args;
            }(),
            ...);
        return MatmulShape{K, dims[0], dims[1], dims[2]};
    } else {
        return std::nullopt;
    }
}

// A kernel's timed stand-in: the same signature, the original called between two interval marks.
template <Kernel K, typename F>
struct Timed;
template <Kernel K, typename R, typename... Args>
struct Timed<K, R (*)(const KernelContext&, Args...)> {
    static inline R (*original)(const KernelContext&, Args...) = nullptr;
    static R call(const KernelContext& ctx, Args... args) {
        g_active->kernel_started();
        if constexpr (std::is_void_v<R>) {
            original(ctx, args...);
            g_active->kernel_stopped(K, matmul_shape<K>(args...));
        } else {
            R result = original(ctx, args...);
            g_active->kernel_stopped(K, matmul_shape<K>(args...));
            return result;
        }
    }
};

}  // namespace

double KernelTimes::total_ms() const { return std::accumulate(ms.begin(), ms.end(), 0.0); }

KernelTiming::KernelTiming(Backend& backend)
    : backend_(backend), original_(backend.kernels_), timer_(backend.make_interval_timer(kIntervals)) {
    if (g_active) throw std::logic_error("KernelTiming: one is already timing a backend");
    g_active = this;
    pending_.reserve(kIntervals);
#define ADACC_KERNEL(ret, name, ...)                                             \
    Timed<Kernel::name, decltype(KernelTable::name)>::original = original_.name; \
    if (original_.name) backend_.kernels_.name = &Timed<Kernel::name, decltype(KernelTable::name)>::call;
#include "kernels/ops.inc"
#undef ADACC_KERNEL
}

KernelTiming::~KernelTiming() {
    backend_.kernels_ = original_;
    g_active = nullptr;
}

void KernelTiming::kernel_started() {
    if (pending_.size() == kIntervals) flush();
    timer_->start();
}

void KernelTiming::kernel_stopped(Kernel kernel, std::optional<MatmulShape> shape) {
    timer_->stop();
    pending_.push_back({kernel, shape});
}

void KernelTiming::flush() {
    const std::vector<double> ms = timer_->take_ms();
    for (std::size_t i = 0; i < ms.size(); ++i) {
        const int k = static_cast<int>(pending_[i].kernel);
        totals_.calls[k] += 1;
        totals_.ms[k] += ms[i];
        if (const auto& shape = pending_[i].shape) {
            CallTimes& by_shape = totals_.matmuls[*shape];
            by_shape.calls += 1;
            by_shape.ms += ms[i];
        }
    }
    pending_.clear();
}

KernelTimes KernelTiming::take() {
    flush();
    KernelTimes out = totals_;
    totals_ = {};
    return out;
}

}  // namespace adacc
