// Shared helpers of kernels/cuda/cuda_common.cuh.
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_common.cuh"

namespace adacc::cuda {

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": CUDA error: " + cudaGetErrorString(status));
}

}  // namespace adacc::cuda
