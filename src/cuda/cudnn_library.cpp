// cuDNN 9, opened with dlopen when first asked for (src/cuda/cuda_device.h: cudnn_problem), never
// linked: as with cuBLASLt (src/cuda/cublaslt_library.h), a linked libcudnn would cost every
// process, the CPU's included, its start-up relocations, and a machine without cuDNN could not
// start adacc at all. The cudnn* functions cuDNN's frontend calls (kernels/cuda/attention_cudnn.cpp,
// the only caller) are defined here, forwarding to the opened library's.
//
// Why not the frontend's own NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING: it dlopens cuDNN, but also a
// shared libcudart (libcudart.so.12 or .13 from the library path) for its CUDA runtime calls, a
// second runtime beside the static one this backend links (CUDA::cudart_static), which would also
// have to be found on the GPU machine's library path. Here the frontend's CUDA calls go to the
// backend's own runtime, and only libcudnn.so.9 is looked for. The list of functions below is
// what the frontend's headers call (`nm -u` of attention_cudnn.cpp's object); a missing one is a
// link error, not a run-time surprise.
#include <cudnn.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "src/cuda/cuda_device.h"

namespace adacc {

namespace {

constexpr const char* kLibrary = "libcudnn.so.9";

struct OpenedLibrary {
    void* handle = nullptr;
    std::string problem;  // why not, when handle is null
};

// libcudnn.so.9's own symbol, or null.
void* lookup(void* handle, const char* name) { return handle ? dlsym(handle, name) : nullptr; }

const OpenedLibrary& library() {
    static const OpenedLibrary opened = [] {
        OpenedLibrary l;
        // The loader's search (LD_LIBRARY_PATH: the GPU check puts pip's nvidia-cudnn wheel's folder
        // there), then the CUDA toolkit's folder this build was made with.
        void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
        if (!handle) handle = dlopen(ADACC_CUDNN_FALLBACK_DIR "/libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
        if (!handle) {
            const char* error = dlerror();
            l.problem = std::string("cannot open ") + kLibrary + " (" + (error ? error : "?") +
                        "): install cuDNN 9 (pip's nvidia-cudnn-cu13 wheel, or NVIDIA's cudnn9 package) and put its "
                        "library folder on LD_LIBRARY_PATH (searched: LD_LIBRARY_PATH, ld.so's cache and " +
                        ADACC_CUDNN_FALLBACK_DIR + ")";
            return l;
        }
        using Version = std::size_t (*)();
        const auto version = reinterpret_cast<Version>(lookup(handle, "cudnnGetVersion"));
        const std::size_t v = version ? version() : 0;
        if (v < 90000 || v >= 100000) {
            l.problem = std::string(kLibrary) + " reports version " + std::to_string(v) +
                        ", not cuDNN 9: put cuDNN 9's library folder first on LD_LIBRARY_PATH";
            dlclose(handle);
            return l;
        }
        l.handle = handle;
        return l;
    }();
    return opened;
}

// The opened library's `name`; cudnn_problem() was empty (the backend asks before any call).
void* symbol(const char* name) {
    void* address = lookup(library().handle, name);
    if (!address) {
        // The frontend turns a failed status into its error with cuDNN's message; a missing
        // function is a library older than the headers this was built with.
        std::fprintf(stderr, "adacc: %s has no %s (cuDNN older than 9.0?); aborting\n", kLibrary, name);
        std::abort();
    }
    return address;
}

}  // namespace

std::string cudnn_problem() { return library().problem; }

}  // namespace adacc

// Each function the frontend calls, as cudnn_graph.h declares it, forwarding to the opened
// library's (resolved on its first call).
#define ADACC_FORWARD(ret, name, parameters, arguments)                                   \
    ret CUDNNWINAPI name parameters {                                                     \
        static const auto real = reinterpret_cast<decltype(&name)>(adacc::symbol(#name)); \
        return real arguments;                                                            \
    }

extern "C" {
ADACC_FORWARD(cudnnStatus_t, cudnnCreate, (cudnnHandle_t * handle), (handle))
ADACC_FORWARD(cudnnStatus_t, cudnnDestroy, (cudnnHandle_t handle), (handle))
ADACC_FORWARD(cudnnStatus_t, cudnnSetStream, (cudnnHandle_t handle, cudaStream_t stream), (handle, stream))
ADACC_FORWARD(cudnnStatus_t, cudnnGetStream, (cudnnHandle_t handle, cudaStream_t* stream), (handle, stream))
ADACC_FORWARD(size_t, cudnnGetVersion, (void), ())
ADACC_FORWARD(const char*, cudnnGetErrorString, (cudnnStatus_t status), (status))
ADACC_FORWARD(void, cudnnGetLastErrorString, (char* message, size_t max_size), (message, max_size))
ADACC_FORWARD(cudnnStatus_t, cudnnBackendCreateDescriptor,
              (cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor), (type, descriptor))
ADACC_FORWARD(cudnnStatus_t, cudnnBackendDestroyDescriptor, (cudnnBackendDescriptor_t descriptor), (descriptor))
ADACC_FORWARD(cudnnStatus_t, cudnnBackendFinalize, (cudnnBackendDescriptor_t descriptor), (descriptor))
ADACC_FORWARD(cudnnStatus_t, cudnnBackendExecute,
              (cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t variant_pack),
              (handle, plan, variant_pack))
ADACC_FORWARD(cudnnStatus_t, cudnnBackendGetAttribute,
              (cudnnBackendDescriptor_t const descriptor, cudnnBackendAttributeName_t name,
               cudnnBackendAttributeType_t type, int64_t requested, int64_t* count, void* elements),
              (descriptor, name, type, requested, count, elements))
ADACC_FORWARD(cudnnStatus_t, cudnnBackendSetAttribute,
              (cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
               int64_t count, const void* elements),
              (descriptor, name, type, count, elements))
}

// NVRTC: only the frontend's experimental SM100 RMSNorm+SiLU engine compiles kernels with it, a
// graph adacc never builds; the frontend's headers still reference these functions (through a
// virtual function's code). They answer that NVRTC is not here rather than linking libnvrtc.
#include <nvrtc.h>

extern "C" {
nvrtcResult nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*) {
    return NVRTC_ERROR_INTERNAL_ERROR;
}
nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcDestroyProgram(nvrtcProgram*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetCUBIN(nvrtcProgram, char*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char*) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t*) { return NVRTC_ERROR_INTERNAL_ERROR; }
}
