#include "src/cuda/cublaslt_library.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

#include "src/common/errors.h"

namespace adacc {

namespace {

constexpr const char* kLibrary = "libcublasLt.so.13";

struct OpenedLibrary {
    void* handle = nullptr;
    std::string error;  // the dynamic loader's, when handle is null
};

const OpenedLibrary& library() {
    static const OpenedLibrary opened = [] {
        OpenedLibrary l;
        l.handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
        if (!l.handle) l.handle = dlopen(ADACC_CUBLASLT_FALLBACK_DIR "/libcublasLt.so.13", RTLD_NOW | RTLD_LOCAL);
        if (!l.handle) l.error = dlerror();
        return l;
    }();
    return opened;
}

// The library's own `name`; the library is open (open_cublaslt ran first).
void* symbol(const char* name) {
    void* address = dlsym(library().handle, name);
    if (!address)
        throw UserError(std::string(kLibrary) + " has no " + name + ": it is not cuBLASLt 13; put CUDA 13's " +
                        "library folder first on LD_LIBRARY_PATH");
    return address;
}

}  // namespace

void open_cublaslt() {
    if (library().handle) return;
    throw UserError(std::string("cannot open ") + kLibrary + " (" + library().error +
                    "), which the CUDA backend needs for its matmuls: install the CUDA 13 toolkit's cuBLAS, or "
                    "pip's nvidia-cublas wheel, and put its library folder on LD_LIBRARY_PATH (searched: "
                    "LD_LIBRARY_PATH, ld.so's cache and " ADACC_CUBLASLT_FALLBACK_DIR ")");
}

}  // namespace adacc

// Each function the kernels call, as cublasLt.h declares it, forwarding to the opened library's
// (resolved on its first call).
#define ADACC_FORWARD(name, parameters, arguments)                                        \
    cublasStatus_t CUBLASWINAPI name parameters {                                         \
        static const auto real = reinterpret_cast<decltype(&name)>(adacc::symbol(#name)); \
        return real arguments;                                                            \
    }

extern "C" {
ADACC_FORWARD(cublasLtCreate, (cublasLtHandle_t * handle), (handle))
ADACC_FORWARD(cublasLtDestroy, (cublasLtHandle_t handle), (handle))
ADACC_FORWARD(cublasLtMatmul,
              (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
               cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
               const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
               const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t stream),
              (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace, workspace_bytes,
               stream))
ADACC_FORWARD(cublasLtMatmulAlgoGetHeuristic,
              (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
               cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
               cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
               int* returned),
              (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requested, results, returned))
ADACC_FORWARD(cublasLtMatmulDescCreate,
              (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale), (desc, compute, scale))
ADACC_FORWARD(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
ADACC_FORWARD(cublasLtMatmulDescSetAttribute,
              (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes),
              (desc, attr, buf, bytes))
ADACC_FORWARD(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref), (pref))
ADACC_FORWARD(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref), (pref))
ADACC_FORWARD(cublasLtMatmulPreferenceSetAttribute,
              (cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
               size_t bytes),
              (pref, attr, buf, bytes))
ADACC_FORWARD(cublasLtMatrixLayoutCreate,
              (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
              (layout, type, rows, cols, ld))
ADACC_FORWARD(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
ADACC_FORWARD(cublasLtMatrixLayoutSetAttribute,
              (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void* buf, size_t bytes),
              (layout, attr, buf, bytes))
}
