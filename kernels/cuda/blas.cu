// The shared cuBLASLt GEMM of kernels/cuda/blas.h (host code only).
//
// Row-major vs column-major. cuBLASLt's matrices are column-major: element (r, c) of an R x C
// matrix with leading dimension ld is at r + c * ld. Ours are row-major: (r, c) at r * ld + c.
// The same memory read column-major is therefore the TRANSPOSE: a row-major R x C matrix with
// leading dimension ld is, to cuBLASLt, the column-major C x R matrix with the same ld. So we ask
// cuBLASLt for the transposed product, which it can produce without moving any data:
//     D = op(A) @ op(B)   <=>   D^T = op(B)^T @ op(A)^T
// D^T is what cuBLASLt sees in D's memory, an n x m column-major matrix. Its first operand is our
// B: cuBLASLt sees B's memory as B^T, so if we want op(B) = B (no transpose), op(B)^T = B^T is
// exactly what it sees (CUBLAS_OP_N); if we want op(B) = B^T, it must transpose what it sees
// (CUBLAS_OP_T). Likewise the second operand is our A, with A's transpose flag. Sizes follow:
// cuBLASLt's (m, n, k) are our (n, m, k), and the bias (one value per row of D^T, i.e. per
// column of our D) has n entries.
#include <cublasLt.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/blas_context.h"

namespace adacc::cuda {
namespace {

void check_blas(cublasStatus_t status, const char* what, const char* call) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string(what) + ": " + call + " failed: cuBLASLt status " +
                                 std::to_string(static_cast<int>(status)));
}

cudaDataType_t data_type(GemmInput input) {
    switch (input) {
        case GemmInput::f32: return CUDA_R_32F;
    }
    throw std::invalid_argument("gemm: unknown input type");
}
std::size_t element_bytes(GemmInput input) {
    switch (input) {
        case GemmInput::f32: return sizeof(float);
    }
    throw std::invalid_argument("gemm: unknown input type");
}

// The alignment cuBLASLt may assume for every batch's pointer of an operand: the largest power of
// two dividing the address (and the batch stride in bytes), capped at 16 bytes. The cap makes the
// heuristic's answer depend on the shape only (every arena slot is 64-byte aligned but not always
// 256-byte aligned, the default), so a recomputed tensor gets the saved one's algorithm.
std::uint32_t alignment(const void* p, long stride_elements, int batch, std::size_t element_size) {
    std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(p) | std::uintptr_t{16};
    if (batch > 1) bits |= static_cast<std::uintptr_t>(stride_elements) * element_size;
    return static_cast<std::uint32_t>(bits & (~bits + 1));
}

// Descriptors released on every path (a refusal throws).
struct Layout {
    cublasLtMatrixLayout_t handle = nullptr;
    ~Layout() {
        if (handle) cublasLtMatrixLayoutDestroy(handle);
    }
};
struct MatmulDesc {
    cublasLtMatmulDesc_t handle = nullptr;
    ~MatmulDesc() {
        if (handle) cublasLtMatmulDescDestroy(handle);
    }
};
struct Preference {
    cublasLtMatmulPreference_t handle = nullptr;
    ~Preference() {
        if (handle) cublasLtMatmulPreferenceDestroy(handle);
    }
};

// The column-major view of a row-major stored matrix (rows x cols, leading dimension ld):
// cols x rows, same ld (see the top of the file).
void make_layout(Layout& layout, cudaDataType_t type, long rows, long cols, long ld, int batch, long stride,
                 const char* what) {
    check_blas(cublasLtMatrixLayoutCreate(&layout.handle, type, static_cast<std::uint64_t>(cols),
                                          static_cast<std::uint64_t>(rows), static_cast<std::int64_t>(ld)),
               what, "cublasLtMatrixLayoutCreate");
    if (batch > 1) {
        const std::int32_t count = batch;
        const std::int64_t offset = stride;
        check_blas(
            cublasLtMatrixLayoutSetAttribute(layout.handle, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
            what, "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)");
        check_blas(cublasLtMatrixLayoutSetAttribute(layout.handle, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                    sizeof(offset)),
                   what, "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)");
    }
}

}  // namespace

void gemm(const KernelContext& ctx, const GemmShape& s, const GemmOperand& a, const GemmOperand& b, float* d, long ldd,
          long stride_d, const float* bias, const char* what) {
    if (s.m <= 0 || s.n <= 0 || s.batch <= 0) return;
    if (s.k <= 0) throw std::invalid_argument(std::string(what) + ": gemm with an empty reduction (k = 0)");
    const auto& blas = *static_cast<const BlasContext*>(ctx.blas);
    const cudaDataType_t in_type = data_type(s.input);
    const std::size_t in_bytes = element_bytes(s.input);

    MatmulDesc desc;
    check_blas(cublasLtMatmulDescCreate(&desc.handle, CUBLAS_COMPUTE_32F, CUDA_R_32F), what,
               "cublasLtMatmulDescCreate");
    // cuBLASLt's first operand is our B, its second our A (see the top of the file).
    const std::int32_t op_first = b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    const std::int32_t op_second = a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_blas(cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)),
               what, "cublasLtMatmulDescSetAttribute(TRANSA)");
    check_blas(cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)),
               what, "cublasLtMatmulDescSetAttribute(TRANSB)");
    if (bias) {
        const std::uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        check_blas(
            cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
            what, "cublasLtMatmulDescSetAttribute(EPILOGUE)");
        check_blas(cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                   what, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
    }

    // Stored (row-major) shapes: op(A) is m x k, op(B) is k x n, D is m x n.
    Layout layout_a, layout_b, layout_d;
    make_layout(layout_a, in_type, a.transpose ? s.k : s.m, a.transpose ? s.m : s.k, a.ld, s.batch, a.batch_stride,
                what);
    make_layout(layout_b, in_type, b.transpose ? s.n : s.k, b.transpose ? s.k : s.n, b.ld, s.batch, b.batch_stride,
                what);
    make_layout(layout_d, CUDA_R_32F, s.m, s.n, ldd, s.batch, stride_d, what);

    Preference pref;
    check_blas(cublasLtMatmulPreferenceCreate(&pref.handle), what, "cublasLtMatmulPreferenceCreate");
    const std::uint64_t workspace = blas.workspace_bytes;
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)),
               what, "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
    const std::uint32_t align_first = alignment(b.data, b.batch_stride, s.batch, in_bytes);
    const std::uint32_t align_second = alignment(a.data, a.batch_stride, s.batch, in_bytes);
    const std::uint32_t align_d = alignment(d, stride_d, s.batch, sizeof(float));
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                    &align_first, sizeof(align_first)),
               what, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)");
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                    &align_second, sizeof(align_second)),
               what, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)");
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                    sizeof(align_d)),
               what, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)");
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.handle, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                    sizeof(align_d)),
               what, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)");

    // The heuristic's first answer only: a fixed choice per shape (determinism, see blas.h).
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    check_blas(cublasLtMatmulAlgoGetHeuristic(blas.handle, desc.handle, layout_b.handle, layout_a.handle,
                                              layout_d.handle, layout_d.handle, pref.handle, 1, &heuristic, &found),
               what, "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0)
        throw std::runtime_error(std::string(what) + ": cuBLASLt has no algorithm for m=" + std::to_string(s.m) +
                                 " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                                 " batch=" + std::to_string(s.batch));

    // C is D (in place, same layout): beta scales what D holds; beta == 0 never reads it.
    check_blas(cublasLtMatmul(blas.handle, desc.handle, &s.alpha, b.data, layout_b.handle, a.data, layout_a.handle,
                              &s.beta, d, layout_d.handle, d, layout_d.handle, &heuristic.algo, blas.workspace,
                              blas.workspace_bytes, static_cast<cudaStream_t>(ctx.stream)),
               what, "cublasLtMatmul");
}

}  // namespace adacc::cuda
