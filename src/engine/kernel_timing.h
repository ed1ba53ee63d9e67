// Where a step's time goes, kernel by kernel (bench_gpu --per-op). While a KernelTiming lives,
// every kernel a backend's table runs, whoever calls it (the driver, the optimizer, the loss), is
// timed on the backend's queue by the backend's IntervalTimer: CUDA events recorded around it on
// a GPU, so a time is the kernel's own and not its launch's; the steady clock on the CPU. It swaps
// the table's pointers for timed ones in place (the driver holds a reference to the table) and
// puts them back when it goes. What no kernel does (copies, memsets, the host's own work) is the
// step's time less the kernels'. The matmul kernels are also timed by shape, since which of a
// step's GEMMs takes the time (the lm head's, the MLP's) is what a matmul total cannot say.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/kernel_table.h"
#include "src/engine/backend.h"

namespace adacc {

// A matmul kernel's call by its shape (kernels/ops.inc): N rows, C inputs, OC outputs.
struct MatmulShape {
    Kernel kernel;
    int N, C, OC;
    auto operator<=>(const MatmulShape&) const = default;
};
// Whether the kernel is a linear layer's (matmul_forward, matmul_backward and their GELU forms).
constexpr bool is_matmul(Kernel k) {
    return k == Kernel::matmul_forward || k == Kernel::matmul_backward || k == Kernel::matmul_gelu_forward ||
           k == Kernel::matmul_dgelu_backward;
}

struct CallTimes {
    long calls = 0;
    double ms = 0;
};

struct KernelTimes {
    std::array<long, kNumKernels> calls{};
    std::array<double, kNumKernels> ms{};
    // The matmul kernels' calls again, by shape.
    std::map<MatmulShape, CallTimes> matmuls;
    double total_ms() const;
};

class KernelTiming {
public:
    // At most one per process at a time (the timed pointers are free functions that find it
    // through a static): a second is a logic_error.
    explicit KernelTiming(Backend& backend);
    ~KernelTiming();
    KernelTiming(const KernelTiming&) = delete;
    KernelTiming& operator=(const KernelTiming&) = delete;

    // The calls since the last take (or since construction), added up per kernel, after waiting
    // for the queue to reach the last of them; then starts again from zero.
    KernelTimes take();

    // Called by the timed pointers around each kernel.
    void kernel_started();
    void kernel_stopped(Kernel kernel, std::optional<MatmulShape> shape);

private:
    void flush();  // reads the timer's closed intervals into totals_

    // Intervals between reads: enough for a step of the largest preset (a few thousand calls);
    // more flushes early, which waits for the queue once.
    static constexpr std::size_t kIntervals = 1 << 14;
    Backend& backend_;
    KernelTable original_;
    std::unique_ptr<IntervalTimer> timer_;
    struct Interval {
        Kernel kernel;
        std::optional<MatmulShape> shape;  // a matmul's
    };
    std::vector<Interval> pending_;  // the kernel of each interval the timer holds, in order
    KernelTimes totals_;
};

}  // namespace adacc
