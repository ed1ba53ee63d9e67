// A build without the CUDA backend (ADACC_CUDA=OFF, or no nvcc found): asking for it names the
// build switch that brings it.
#include "src/common/errors.h"
#include "src/cuda/cuda_device.h"
#include "src/engine/backend.h"

namespace adacc {

namespace {
constexpr const char* kNoCuda =
    "this adacc was built without the CUDA backend (no nvcc found, or -DADACC_CUDA=OFF); rebuild on a machine "
    "with the CUDA toolkit (bash scripts/build.sh), or use --device cpu";
}

CudaDeviceInfo cuda_device_info() {
    CudaDeviceInfo info;
    info.problem = kNoCuda;
    return info;
}

std::string cudnn_problem() { return kNoCuda; }

Backend& cuda_backend() { throw UserError(std::string("--device cuda: ") + kNoCuda); }

CudaFixedOverhead cuda_fixed_overhead() { return {kCudaContextEstimateBytes, false}; }

CudaFixedOverhead cuda_collectives_overhead(int world_size) {
    if (world_size <= 1) return {};
    return {kNcclBuffersEstimateBytes, false};
}

}  // namespace adacc
