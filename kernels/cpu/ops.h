// CPU kernels: the declarations of kernels/ops.inc in namespace adacc::cpu.
#pragma once

#include <omp.h>

#include "kernels/activation.h"
#include "kernels/codec_format.h"
#include "kernels/kernel_context.h"

namespace adacc::cpu {

#define ADACC_KERNEL(ret, name, ...) ret name(const KernelContext& ctx, __VA_ARGS__);
#include "kernels/ops.inc"
#undef ADACC_KERNEL

// The OpenMP team size a kernel's parallel regions use (num_threads(team(ctx))).
inline int team(const KernelContext& ctx) { return ctx.threads > 0 ? ctx.threads : omp_get_max_threads(); }

// The context of CPU kernels called directly (tests, benchmarks): OpenMP's default team, no scratch.
inline KernelContext default_context() { return KernelContext{}; }

}  // namespace adacc::cpu
