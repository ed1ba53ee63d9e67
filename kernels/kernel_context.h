// What every kernel receives first: where it runs and the scratch memory it may use. One struct
// for every backend, so kernels/ops.inc declares each kernel once; a backend reads its fields
// and leaves the others' alone.
#pragma once

#include <cstddef>

namespace adacc {

struct KernelContext {
    // CPU: the OpenMP team size every parallel region of a kernel runs on (0: OpenMP's default,
    // which is what the CPU backend passes; the codec kernels always run on OpenMP's current
    // team). Results depend on it through reductions, so it is fixed for a model's life.
    int threads = 0;
    // Backend memory a kernel may use as scratch (the outlier codec's per-channel statistics),
    // 64-byte aligned; null when nothing needs any.
    void* scratch = nullptr;
    std::size_t scratch_bytes = 0;
    // CUDA: the cudaStream_t every kernel is queued on and the cuBLASLt handle (opaque here, so
    // the CPU build needs no CUDA headers).
    void* stream = nullptr;
    void* blas = nullptr;
    // CUDA: the backend's scratch for fixed-order two-pass reductions (kernels/cuda/device_sizes.h).
    void* reduction_scratch = nullptr;
    std::size_t reduction_scratch_bytes = 0;
    // CUDA: cuDNN's handle, graph cache and workspace (kernels/cuda/attention_cudnn.h:DnnContext),
    // null where cuDNN did not load (and on the CPU): only the attention_cudnn kernels read it.
    void* dnn = nullptr;
    // CUDA: whether cuDNN's attention backward must be deterministic (its default algorithm sums
    // dQ by atomics: faster, less workspace, last bits vary run to run). The model's
    // training.deterministic; the other kernels are deterministic either way.
    bool deterministic = true;
};

}  // namespace adacc
