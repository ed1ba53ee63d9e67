// Element type conversion between fp32 and bf16 (the bf16 working copy of the parameters).
#include <cstring>

#include "kernels/cpu/ops.h"

namespace adacc::cpu {

void convert(const KernelContext& ctx, Act dst, ConstAct src, long n) {
    if (dst.dtype() == src.dtype()) {
        std::memcpy(dst.data(), src.data(), static_cast<std::size_t>(n) * dtype_size(dst.dtype()));
    } else if (dst.dtype() == DType::bf16) {
        bf16* out = dst.as<bf16>();
        const float* in = src.as<float>();
#pragma omp parallel for schedule(static) num_threads(team(ctx))
        for (long i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
    } else {
        float* out = dst.as<float>();
        const bf16* in = src.as<bf16>();
#pragma omp parallel for schedule(static) num_threads(team(ctx))
        for (long i = 0; i < n; ++i) out[i] = to_float(in[i]);
    }
}

}  // namespace adacc::cpu
