// What KernelContext::blas points to on the CUDA backend: the cuBLASLt handle and its fixed
// workspace (kernels/cuda/device_sizes.h), shared by every GEMM the kernels issue.
#pragma once

#include <cublasLt.h>

#include <cstddef>
#include <memory>

namespace adacc::cuda {

struct GemmPlans;  // kernels/cuda/blas.cu

struct BlasContext {
    cublasLtHandle_t handle = nullptr;
    void* workspace = nullptr;
    std::size_t workspace_bytes = 0;
    // The descriptors, layouts and algorithm of each GEMM shape met so far, made by gemm() on a
    // shape's first call (kernels/cuda/blas.cu). A BlasContext serves one host thread at a time.
    mutable std::shared_ptr<GemmPlans> plans;
};

}  // namespace adacc::cuda
