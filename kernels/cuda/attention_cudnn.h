// cuDNN's state for the attention_cudnn kernels (kernels/cuda/attention_cudnn.cpp): one per
// KernelContext that may run them (the CUDA backend's, a device test's), reached through
// KernelContext::dnn. Opaque here, so nothing but that file sees cuDNN's or its frontend's headers.
#pragma once

#include <cstddef>
#include <string>

namespace adacc::cuda {

struct DnnContext;

// A context whose cuDNN handle is made on the first attention call (on the caller's device), so a
// backend that never runs cuDNN's attention never pays for it. cuDNN must have loaded
// (src/cuda/cuda_device.h: cudnn_problem() is empty).
DnnContext* make_dnn_context();
void destroy_dnn_context(DnnContext* dnn);
// Device memory the context holds now: the largest workspace a built graph asked for, and the
// dropout seed and offset.
std::size_t dnn_device_bytes(const DnnContext* dnn);
// One line per graph built so far: its shape and, for backward, whether it is cuDNN's
// deterministic algorithm, and if not, why (not asked for, or none for the shape; tests print it).
std::string dnn_describe(const DnnContext* dnn);

}  // namespace adacc::cuda
