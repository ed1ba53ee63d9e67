// The CUDA runtime calls the backend and the kernels use, mapped onto host memory for the SIMT
// emulation (tests/simt/simt.h). Everything is synchronous: a launch runs to completion, so
// streams and events only keep time. One emulated device with simt_device_memory() bytes.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "simt.h"
#include "simt_device.h"

namespace {

std::mutex allocations_mutex;
std::map<void*, std::size_t>& allocations() {
    static std::map<void*, std::size_t> live;
    return live;
}
std::size_t allocated_bytes = 0;
std::size_t device_memory = std::size_t{80} << 30;
// Shared memory per block, an H100's: 48 KiB of dynamic shared memory unless the kernel was
// allowed more (cudaFuncAttributeMaxDynamicSharedMemorySize), up to the opt-in limit.
constexpr int kSharedPerBlock = 48 * 1024;
constexpr int kSharedPerBlockOptin = 227 * 1024;
std::mutex attributes_mutex;
std::map<const void*, int>& dynamic_shared_allowed() {
    static std::map<const void*, int> allowed;
    return allowed;
}

struct EmulatedEvent {
    std::chrono::steady_clock::time_point when;
};

}  // namespace

namespace simt {

void set_device_memory(std::size_t bytes) { device_memory = bytes; }

std::size_t device_allocated_bytes() {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    return allocated_bytes;
}

void check_dynamic_shared(const char* kernel_name, const void* kernel, std::size_t bytes) {
    if (bytes <= static_cast<std::size_t>(kSharedPerBlock)) return;
    int allowed = kSharedPerBlock;
    {
        std::lock_guard<std::mutex> lock(attributes_mutex);
        const auto it = dynamic_shared_allowed().find(kernel);
        if (it != dynamic_shared_allowed().end() && it->second > allowed) allowed = it->second;
    }
    if (bytes <= static_cast<std::size_t>(allowed)) return;
    std::fprintf(stderr,
                 "SIMT emulation: kernel %s launched with %zu bytes of dynamic shared memory, more than the %d "
                 "its cudaFuncAttributeMaxDynamicSharedMemorySize allows (a GPU refuses the launch)\n",
                 kernel_name, bytes, allowed);
    std::abort();
}

}  // namespace simt

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    std::memset(prop, 0, sizeof(*prop));
    std::strncpy(prop->name, "SIMT emulation", sizeof(prop->name) - 1);
    prop->totalGlobalMem = device_memory;
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = 1;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = 1024;
    prop->sharedMemPerBlock = kSharedPerBlock;
    prop->sharedMemPerBlockOptin = kSharedPerBlockOptin;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    switch (attr) {
        case cudaDevAttrMultiProcessorCount: *value = 1; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *value = kSharedPerBlock; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kSharedPerBlockOptin; break;
        default: *value = 0;
    }
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    *total = device_memory;
    *free = device_memory > allocated_bytes ? device_memory - allocated_bytes : 0;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void** ptr, size_t size) {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    if (allocated_bytes + size > device_memory) {
        *ptr = nullptr;
        return cudaErrorMemoryAllocation;
    }
    // 256-byte aligned like cudaMalloc; filled with 0xA5 so reads of memory nothing wrote differ
    // from zeros (the backend zero-fills what it promises zeroed).
    void* p = std::aligned_alloc(256, (size + 255) / 256 * 256);
    if (!p) return cudaErrorMemoryAllocation;
    std::memset(p, 0xA5, size);
    allocations()[p] = size;
    allocated_bytes += size;
    *ptr = p;
    return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
    if (!ptr) return cudaSuccess;
    std::lock_guard<std::mutex> lock(allocations_mutex);
    auto it = allocations().find(ptr);
    if (it == allocations().end()) return cudaErrorInvalidValue;
    allocated_bytes -= it->second;
    allocations().erase(it);
    std::free(ptr);
    return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t size) {
    *ptr = std::malloc(size ? size : 1);
    return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* ptr) {
    std::free(ptr);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
    if (count) std::memmove(dst, src, count);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t) {
    return cudaMemcpy(dst, src, count, kind);
}
cudaError_t cudaMemset(void* dst, int value, size_t count) {
    if (count) std::memset(dst, value, count);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t) { return cudaMemset(dst, value, count); }

// A stream is a distinct non-null handle; work on it has already run.
cudaError_t cudaStreamCreate(cudaStream_t* stream) {
    *stream = reinterpret_cast<cudaStream_t>(new char(0));
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) { return cudaStreamCreate(stream); }
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    delete reinterpret_cast<char*>(stream);
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
    *event = reinterpret_cast<cudaEvent_t>(new EmulatedEvent{});
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) { return cudaEventCreate(event); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
    delete reinterpret_cast<EmulatedEvent*>(event);
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
    reinterpret_cast<EmulatedEvent*>(event)->when = std::chrono::steady_clock::now();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
    *ms = std::chrono::duration<float, std::milli>(reinterpret_cast<EmulatedEvent*>(end)->when -
                                                   reinterpret_cast<EmulatedEvent*>(start)->when)
              .count();
    return cudaSuccess;
}

// Kernel launches cannot fail late here (a bad launch aborts with a message), so no error is sticky.
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
const char* cudaGetErrorString(cudaError_t error) {
    switch (error) {
        case cudaSuccess: return "no error";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        default: return "emulated CUDA error";
    }
}
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
    if (value < 0 || value > kSharedPerBlockOptin) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lock(attributes_mutex);
    dynamic_shared_allowed()[kernel] = value;
    return cudaSuccess;
}

}  // extern "C"
