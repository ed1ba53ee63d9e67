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
// backend's own runtime, and only libcudnn.so.9 is looked for. ADACC_CUDNN_FUNCTIONS is what the
// frontend's headers call (`nm -u` of attention_cudnn.cpp's object): one missing from the list is
// a link error, and a library missing one of them is cuDNN unavailable, said when it is opened.
#include <cudnn.h>
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include "src/cuda/cuda_device.h"

// Each function the frontend calls, as cudnn_graph.h declares it: X(return type, name, parameters,
// arguments). One list for the forwarding definitions and for the check that the library has them all.
#define ADACC_CUDNN_FUNCTIONS(X)                                                                                      \
    X(cudnnStatus_t, cudnnCreate, (cudnnHandle_t * handle), (handle))                                                 \
    X(cudnnStatus_t, cudnnDestroy, (cudnnHandle_t handle), (handle))                                                  \
    X(cudnnStatus_t, cudnnSetStream, (cudnnHandle_t handle, cudaStream_t stream), (handle, stream))                   \
    X(cudnnStatus_t, cudnnGetStream, (cudnnHandle_t handle, cudaStream_t * stream), (handle, stream))                 \
    X(size_t, cudnnGetVersion, (void), ())                                                                            \
    X(const char*, cudnnGetErrorString, (cudnnStatus_t status), (status))                                             \
    X(void, cudnnGetLastErrorString, (char* message, size_t max_size), (message, max_size))                           \
    X(cudnnStatus_t, cudnnBackendCreateDescriptor,                                                                    \
      (cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t * descriptor), (type, descriptor))                 \
    X(cudnnStatus_t, cudnnBackendDestroyDescriptor, (cudnnBackendDescriptor_t descriptor), (descriptor))              \
    X(cudnnStatus_t, cudnnBackendFinalize, (cudnnBackendDescriptor_t descriptor), (descriptor))                       \
    X(cudnnStatus_t, cudnnBackendExecute,                                                                             \
      (cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t variant_pack),                   \
      (handle, plan, variant_pack))                                                                                   \
    X(cudnnStatus_t, cudnnBackendGetAttribute,                                                                        \
      (cudnnBackendDescriptor_t const descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, \
       int64_t requested, int64_t* count, void* elements),                                                            \
      (descriptor, name, type, requested, count, elements))                                                           \
    X(cudnnStatus_t, cudnnBackendSetAttribute,                                                                        \
      (cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,       \
       int64_t count, const void* elements),                                                                          \
      (descriptor, name, type, count, elements))

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
        // Every function the frontend calls, now: a library without one is cuDNN unavailable (and
        // the attention materialized), not a crash at the first attention call.
#define ADACC_NAME(ret, name, parameters, arguments) #name,
        static constexpr const char* kFunctions[] = {ADACC_CUDNN_FUNCTIONS(ADACC_NAME)};
#undef ADACC_NAME
        for (const char* name : kFunctions) {
            if (lookup(handle, name)) continue;
            l.problem = std::string(kLibrary) + " (version " + std::to_string(v) + ") has no " + name +
                        ", which this adacc's cuDNN frontend calls: install a newer cuDNN 9 and put its library " +
                        "folder first on LD_LIBRARY_PATH";
            dlclose(handle);
            return l;
        }
        l.handle = handle;
        return l;
    }();
    return opened;
}

// The opened library's `name`, which library() checked it has. The backend asks cudnn_problem()
// before any call, so a call without the library is a programming error.
void* symbol(const char* name) {
    void* address = lookup(library().handle, name);
    if (!address)
        throw std::logic_error(std::string(name) + " called although cuDNN is unavailable: " + library().problem);
    return address;
}

}  // namespace

std::string cudnn_problem() { return library().problem; }

}  // namespace adacc

// Each function of the list, forwarding to the opened library's (resolved on its first call).
#define ADACC_FORWARD(ret, name, parameters, arguments)                                   \
    ret CUDNNWINAPI name parameters {                                                     \
        static const auto real = reinterpret_cast<decltype(&name)>(adacc::symbol(#name)); \
        return real arguments;                                                            \
    }

extern "C" {
ADACC_CUDNN_FUNCTIONS(ADACC_FORWARD)
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
