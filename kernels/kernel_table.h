// One function pointer per kernel of kernels/ops.inc: what a backend hands the engine, so the
// driver, the optimizer, the profiler and eval call kernels without naming a backend. Each
// pointer has the kernel's exact signature (KernelContext first). The same X-macro names each
// kernel as a Kernel, which is what a backend is asked whether it supports (Backend::supports).
#pragma once

#include <cstddef>
#include <iterator>

#include "kernels/activation.h"
#include "kernels/codec_format.h"
#include "kernels/kernel_context.h"

namespace adacc {

struct KernelTable {
#define ADACC_KERNEL(ret, name, ...) ret (*name)(const KernelContext&, __VA_ARGS__) = nullptr;
#include "kernels/ops.inc"
#undef ADACC_KERNEL
};

// Every kernel of kernels/ops.inc, in its order.
enum class Kernel : int {
#define ADACC_KERNEL(ret, name, ...) name,
#include "kernels/ops.inc"
#undef ADACC_KERNEL
};

inline constexpr const char* kKernelNames[] = {
#define ADACC_KERNEL(ret, name, ...) #name,
#include "kernels/ops.inc"
#undef ADACC_KERNEL
};
inline constexpr int kNumKernels = static_cast<int>(std::size(kKernelNames));

constexpr const char* kernel_name(Kernel kernel) { return kKernelNames[static_cast<int>(kernel)]; }

}  // namespace adacc
