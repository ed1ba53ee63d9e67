// The CUDA backend without cuDNN's attention: a build that found no cuDNN frontend headers
// (scripts/fetch_cudnn_frontend.sh fetches them) or no cudnn.h, and the SIMT emulation, which
// cannot run cuDNN's kernels. cudnn_problem() says which (ADACC_CUDNN_UNAVAILABLE, set by CMake),
// so the backend never offers the attention_cudnn kernels (supports) and the default attention
// falls back to materialized; a direct call is a logic error.
#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/ops.h"
#include "src/cuda/cuda_device.h"

namespace adacc {

std::string cudnn_problem() { return ADACC_CUDNN_UNAVAILABLE; }

namespace cuda {

namespace {
[[noreturn]] void unavailable() { throw std::logic_error(std::string("attention_cudnn: ") + ADACC_CUDNN_UNAVAILABLE); }
}  // namespace

DnnContext* make_dnn_context() { return nullptr; }
void destroy_dnn_context(DnnContext*) {}
std::size_t dnn_device_bytes(const DnnContext*) { return 0; }
std::string dnn_describe(const DnnContext*) { return {}; }

void attention_cudnn_forward(const KernelContext&, Act, float*, ConstAct, int, int, int, int, float,
                             unsigned long long) {
    unavailable();
}
void attention_cudnn_backward(const KernelContext&, Act, ConstAct, ConstAct, ConstAct, const float*, int, int, int, int,
                              float, unsigned long long) {
    unavailable();
}

}  // namespace cuda
}  // namespace adacc
