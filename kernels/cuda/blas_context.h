// What KernelContext::blas points to on the CUDA backend: the cuBLASLt handle and its fixed
// workspace (kernels/cuda/device_sizes.h), shared by every GEMM the kernels issue.
#pragma once

#include <cublasLt.h>

#include <cstddef>

namespace adacc::cuda {

struct BlasContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
};

}  // namespace adacc::cuda
