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

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/blas_context.h"

namespace adacc::cuda {

// The cuBLASLt objects of every GEMM met so far, by what they depend on (plan_key below), so
// that each is described and its algorithm chosen once, not on every call.
struct GemmPlans {
    struct Plan {
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // the layouts of our A, B and D
        cublasLtMatmulAlgo_t algo{};
    };
    using Key = std::array<std::int64_t, 18>;
    std::map<Key, Plan> by_key;

    GemmPlans() = default;
    GemmPlans(const GemmPlans&) = delete;
    GemmPlans& operator=(const GemmPlans&) = delete;
    ~GemmPlans();
};

namespace {

void check_blas(cublasStatus_t status, const char* what, const char* call) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw std::runtime_error(std::string(what) + ": " + call + " failed: cuBLASLt status " +
                                 std::to_string(static_cast<int>(status)));
}

cudaDataType_t data_type(DType type, const char* what) {
    switch (type) {
        case DType::f32: return CUDA_R_32F;
        case DType::bf16: return CUDA_R_16BF;
        default: break;
    }
    throw std::invalid_argument(std::string(what) + ": gemm on " + std::string(dtype_name(type)) +
                                " elements (f32 and bf16 only)");
}

// The element types of the table in blas.h: A and B alike, D f32 or (from bf16 inputs) bf16.
void check_types(const GemmShape& s, const char* what) {
    data_type(s.input, what);
    data_type(s.output, what);
    if (s.input == DType::f32 && s.output != DType::f32)
        throw std::invalid_argument(std::string(what) + ": gemm from f32 inputs to " +
                                    std::string(dtype_name(s.output)) + " (f32 inputs give f32 only)");
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

// Descriptors released on every path while a plan is made (a refusal throws); release() hands
// the handle over to the plan cache once every call has succeeded.
template <typename Handle, cublasStatus_t (*destroy)(Handle)>
struct Owned {
    Handle handle = nullptr;
    Owned() = default;
    Owned(const Owned&) = delete;
    Owned& operator=(const Owned&) = delete;
    ~Owned() {
        if (handle) destroy(handle);
    }
    Handle release() { return std::exchange(handle, nullptr); }
};
using Layout = Owned<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using MatmulDesc = Owned<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Preference = Owned<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

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

void set_bias(cublasLtMatmulDesc_t desc, const void* bias, const char* what) {
    check_blas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)), what,
               "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
}

void set_alignment(const Preference& pref, cublasLtMatmulPreferenceAttributes_t attr, std::uint32_t bytes,
                   const char* what, const char* call) {
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.handle, attr, &bytes, sizeof(bytes)), what, call);
}

// The minimum alignments promised for A, B and D (C is D), in our operands' names, and the bias
// pointer's (0: no bias), which the heuristic may also look at.
struct Alignments {
    std::uint32_t a = 0, b = 0, d = 0, bias = 0;
};

// Everything a plan depends on: the shape, the operands' layouts, the element types and the
// alignments (of the bias too: whether there is one); not the pointers, alpha or beta.
GemmPlans::Key plan_key(const GemmShape& s, const GemmOperand& a, const GemmOperand& b, long ldd, long stride_d,
                        const Alignments& align) {
    return {s.m, s.n, s.k, s.batch,              // the shape
            a.ld, a.batch_stride, a.transpose,    // A
            b.ld, b.batch_stride, b.transpose,    // B
            ldd, stride_d,                        // D
            static_cast<std::int64_t>(s.input), static_cast<std::int64_t>(s.output),
            align.a, align.b, align.d, align.bias};
}

// `bias` (null: none) is the first call's: the heuristic is asked with it in place.
GemmPlans::Plan make_plan(const BlasContext& blas, const GemmShape& s, const GemmOperand& a, const GemmOperand& b,
                          long ldd, long stride_d, const void* bias, const Alignments& align, const char* what) {
    const cudaDataType_t in_type = data_type(s.input, what), out_type = data_type(s.output, what);
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
        // Its type is D's, said explicitly; its pointer is set again on every call (gemm below).
        const std::uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        const std::int32_t bias_type = out_type;
        check_blas(
            cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
            what, "cublasLtMatmulDescSetAttribute(EPILOGUE)");
        check_blas(cublasLtMatmulDescSetAttribute(desc.handle, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                  sizeof(bias_type)),
                   what, "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
        set_bias(desc.handle, bias, what);
    }

    // Stored (row-major) shapes: op(A) is m x k, op(B) is k x n, D is m x n.
    Layout layout_a, layout_b, layout_d;
    make_layout(layout_a, in_type, a.transpose ? s.k : s.m, a.transpose ? s.m : s.k, a.ld, s.batch, a.batch_stride,
                what);
    make_layout(layout_b, in_type, b.transpose ? s.n : s.k, b.transpose ? s.k : s.n, b.ld, s.batch, b.batch_stride,
                what);
    make_layout(layout_d, out_type, s.m, s.n, ldd, s.batch, stride_d, what);

    Preference pref;
    check_blas(cublasLtMatmulPreferenceCreate(&pref.handle), what, "cublasLtMatmulPreferenceCreate");
    const std::uint64_t workspace = blas.workspace_bytes;
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.handle, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)),
               what, "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)");
    set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align.b, what,
                  "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)");
    set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align.a, what,
                  "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)");
    set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align.d, what,
                  "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)");
    set_alignment(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align.d, what,
                  "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)");

    // The heuristic's first answer only: a fixed choice per shape (determinism, see blas.h).
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    check_blas(cublasLtMatmulAlgoGetHeuristic(blas.handle, desc.handle, layout_b.handle, layout_a.handle,
                                              layout_d.handle, layout_d.handle, pref.handle, 1, &heuristic, &found),
               what, "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0)
        throw std::runtime_error(std::string(what) + ": cuBLASLt has no algorithm for m=" + std::to_string(s.m) +
                                 " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                                 " batch=" + std::to_string(s.batch) + " (" + std::string(dtype_name(s.input)) +
                                 " to " + std::string(dtype_name(s.output)) + ")");
    return {desc.release(), layout_a.release(), layout_b.release(), layout_d.release(), heuristic.algo};
}

}  // namespace

GemmPlans::~GemmPlans() {
    for (auto& [key, plan] : by_key) {
        cublasLtMatrixLayoutDestroy(plan.d);
        cublasLtMatrixLayoutDestroy(plan.b);
        cublasLtMatrixLayoutDestroy(plan.a);
        cublasLtMatmulDescDestroy(plan.desc);
    }
}

void gemm(const KernelContext& ctx, const GemmShape& s, const GemmOperand& a, const GemmOperand& b, void* d, long ldd,
          long stride_d, const void* bias, const char* what) {
    if (s.m <= 0 || s.n <= 0 || s.batch <= 0) return;
    if (s.k <= 0) throw std::invalid_argument(std::string(what) + ": gemm with an empty reduction (k = 0)");
    check_types(s, what);
    const auto& blas = *static_cast<const BlasContext*>(ctx.blas);
    const std::size_t in_bytes = dtype_size(s.input), out_bytes = dtype_size(s.output);
    const Alignments align{alignment(a.data, a.batch_stride, s.batch, in_bytes),
                           alignment(b.data, b.batch_stride, s.batch, in_bytes),
                           alignment(d, stride_d, s.batch, out_bytes), bias ? alignment(bias, 0, 1, out_bytes) : 0};

    // The descriptors, layouts and algorithm of this key are made on its first GEMM only.
    if (!blas.plans) blas.plans = std::make_shared<GemmPlans>();
    const GemmPlans::Key key = plan_key(s, a, b, ldd, stride_d, align);
    auto& plans = blas.plans->by_key;
    auto found = plans.find(key);
    if (found == plans.end()) found = plans.emplace(key, make_plan(blas, s, a, b, ldd, stride_d, bias, align, what)).first;
    const GemmPlans::Plan& plan = found->second;
    if (bias) set_bias(plan.desc, bias, what);

    // C is D (in place, same layout): beta scales what D holds; beta == 0 never reads it.
    check_blas(cublasLtMatmul(blas.handle, plan.desc, &s.alpha, b.data, plan.b, a.data, plan.a, &s.beta, d, plan.d, d,
                              plan.d, &plan.algo, blas.workspace, blas.workspace_bytes,
                              static_cast<cudaStream_t>(ctx.stream)),
               what, "cublasLtMatmul");
}

}  // namespace adacc::cuda
