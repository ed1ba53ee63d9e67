// The CUDA device this process would use (its local rank's; device 0 for a single process), asked
// without creating the backend; a build without CUDA (src/cuda/no_cuda_backend.cpp) reports none
// with the reason.
#pragma once

#include <cstddef>
#include <string>

namespace adacc {

struct CudaDeviceInfo {
    bool available = false;
    std::string problem;  // why not, when unavailable
    std::string name;
    int compute_capability = 0;  // 90 for sm_90
    std::size_t total_memory = 0;
};

CudaDeviceInfo cuda_device_info();

// Empty when cuDNN 9 loads (libcudnn.so.9, opened with dlopen: src/cuda/cudnn_library.cpp), so
// model.attention = "cudnn" can run; else why not, with the fix. Opens it on the first call.
std::string cudnn_problem();

}  // namespace adacc
