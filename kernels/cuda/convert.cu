// Element type conversion between fp32 and bf16 (the bf16 working copy of the parameters),
// rounding to nearest even as the CPU twin (kernels/cpu/convert.cpp) does.
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void float_to_bf16_kernel(__nv_bfloat16* dst, const float* src, long n) {
    const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void bf16_to_float_kernel(float* dst, const __nv_bfloat16* src, long n) {
    const long i = static_cast<long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __bfloat162float(src[i]);
}

}  // namespace

void convert(const KernelContext& ctx, Act dst, ConstAct src, long n) {
    if (n == 0) return;
    if (dst.dtype() == src.dtype()) {
        check(cudaMemcpyAsync(dst.data(), src.data(), static_cast<std::size_t>(n) * dtype_size(dst.dtype()),
                              cudaMemcpyDeviceToDevice, stream_of(ctx)),
              "convert: cudaMemcpyAsync");
    } else if (dst.dtype() == DType::bf16) {
        ADACC_LAUNCH(float_to_bf16_kernel, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(
            device_ptr<__nv_bfloat16>(dst), src.as<float>(), n);
        check_launch("convert (fp32 to bf16)");
    } else {
        ADACC_LAUNCH(bf16_to_float_kernel, ceil_div(n, kThreads), kThreads, 0, ctx.stream)(
            dst.as<float>(), device_ptr<__nv_bfloat16>(src), n);
        check_launch("convert (bf16 to fp32)");
    }
}

}  // namespace adacc::cuda
