// Shared helpers of kernels/cuda/cuda_common.cuh.
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_common.cuh"

namespace adacc::cuda {

void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        throw std::runtime_error(std::string(what) + ": CUDA error: " + cudaGetErrorString(status));
}

namespace {

// A block sums 32 channels (a warp's coalesced 128 bytes of a partials row) by 32 lanes of groups.
constexpr int kPartialChannels = 32;
constexpr int kPartialGroupLanes = 32;
constexpr int kPartialThreads = kPartialChannels * kPartialGroupLanes;

// Thread (lane g, channel c) adds groups g, g + 32, ... in order; then one thread per channel adds
// the 32 lane sums in lane order. A 1024-thread block: the bounds hold ptxas to the 64 registers a
// thread that such a launch allows.
__global__ void __launch_bounds__(kPartialThreads)
    group_partials_sum_kernel(float* out, const float* partials, int groups, int C, bool accumulate) {
    __shared__ float sums[kPartialGroupLanes][kPartialChannels + 1];  // +1: no bank conflicts down a column
    const int channel = threadIdx.x % kPartialChannels, lane = threadIdx.x / kPartialChannels;
    const int c = blockIdx.x * kPartialChannels + channel;
    float acc = 0.0f;
    if (c < C)
        for (int g = lane; g < groups; g += kPartialGroupLanes) acc += partials[static_cast<long>(g) * C + c];
    sums[lane][channel] = acc;
    __syncthreads();
    if (lane != 0 || c >= C) return;
    float total = 0.0f;
    for (int l = 0; l < kPartialGroupLanes; ++l) total += sums[l][channel];
    out[c] = accumulate ? out[c] + total : total;
}

}  // namespace

std::size_t shared_memory_per_block(const char* what) {
    int device = 0, bytes = 0;
    check(cudaGetDevice(&device), what);
    check(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), what);
    return static_cast<std::size_t>(bytes);
}

void allow_dynamic_shared(const void* kernel, std::size_t bytes, const char* what) {
    if (bytes == 0) return;
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), what);
}

void sum_group_partials(const KernelContext& ctx, float* out, const float* partials, int groups, int C, bool accumulate,
                        const char* what) {
    ADACC_LAUNCH(group_partials_sum_kernel, ceil_div(C, kPartialChannels), kPartialThreads, 0, ctx.stream)
    (out, partials, groups, C, accumulate);
    check_launch(what);
}

}  // namespace adacc::cuda
