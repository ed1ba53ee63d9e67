// cuBLASLt, opened when the CUDA backend starts rather than when the process does. Linked, its
// 540 MB libcublasLt.so.13 cost every process 152 MiB of resident memory at start-up (its
// relocations) and 60 MiB more at exit, on the CPU too, where it is never called: that was the
// whole of the "peak RSS beyond the accounted memory" of a CPU run. The cublasLt* functions the
// kernels call are defined by src/cuda/cublaslt_library.cpp, forwarding to the library this opens
// (the SIMT emulation defines them itself, tests/simt/simt_cublaslt.cpp).
#pragma once

namespace adacc {

// Opens libcublasLt.so.13 (once; the dynamic loader's search, then the CUDA toolkit's folder this
// build was made with) and resolves every function the kernels use. A UserError naming the
// library, where it was looked for and the fix when it cannot.
void open_cublaslt();

}  // namespace adacc
