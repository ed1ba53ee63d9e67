// One function pointer per kernel of kernels/ops.inc: what a backend hands the engine, so the
// driver, the optimizer, the profiler and eval call kernels without naming a backend. Each
// pointer has the kernel's exact signature (KernelContext first).
#pragma once

#include <cstddef>

#include "kernels/activation.h"
#include "kernels/codec_format.h"
#include "kernels/kernel_context.h"

namespace adacc {

struct KernelTable {
#define ADACC_KERNEL(ret, name, ...) ret (*name)(const KernelContext&, __VA_ARGS__) = nullptr;
#include "kernels/ops.inc"
#undef ADACC_KERNEL
};

}  // namespace adacc
