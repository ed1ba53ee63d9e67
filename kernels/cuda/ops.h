// CUDA kernels: the declarations of kernels/ops.inc in namespace adacc::cuda, one op family per
// file of kernels/cuda/ with the same names as kernels/cpu/. Pointers are device memory; every
// kernel is queued on ctx.stream and returns without waiting, except the two that return a value
// to the host (codec_outlier_count and codec_error, which only profiling and the monitor's
// sampling call), which synchronise.
#pragma once

#include "kernels/activation.h"
#include "kernels/codec_format.h"
#include "kernels/kernel_context.h"

namespace adacc::cuda {

#define ADACC_KERNEL(ret, name, ...) ret name(const KernelContext& ctx, __VA_ARGS__);
#include "kernels/ops.inc"
#undef ADACC_KERNEL

}  // namespace adacc::cuda
