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
// The GELU epilogues' auxiliary matrix has D's shape and is seen the same way: our row-major m x n
// aux with leading dimension ld is cuBLASLt's column-major n x m with the same ld.
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
#include "kernels/gelu_math.h"

namespace adacc::cuda {

// The cuBLASLt objects of every GEMM met so far, by what they depend on (plan_key below), so
// that each is described and its algorithm chosen once, not on every call.
struct GemmPlans {
    struct Plan {
        cublasLtMatmulDesc_t desc = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;  // the layouts of our A, B and D
        cublasLtMatmulAlgo_t algo{};
    };
    using Key = std::array<std::int64_t, 21>;
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

// One attribute of a matmul descriptor; `call` names it in the error.
template <typename V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& value, const char* what,
              const char* call) {
    check_blas(cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof(value)), what, call);
}

void set_bias(cublasLtMatmulDesc_t desc, const void* bias, const char* what) {
    set_desc(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, what, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)");
}

void set_alignment(const Preference& pref, cublasLtMatmulPreferenceAttributes_t attr, std::uint32_t bytes,
                   const char* what, const char* call) {
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.handle, attr, &bytes, sizeof(bytes)), what, call);
}

// The minimum alignments promised for A, B and D (C is D), in our operands' names, and the bias
// and GELU aux pointers' (0: none), which the heuristic may also look at.
struct Alignments {
    std::uint32_t a = 0, b = 0, d = 0, bias = 0, aux = 0;
};

// The aux pointer the heuristic is shown: one aligned to exactly the key's alignment (capped at 16
// bytes). The heuristic reads the alignment off the pointer's value (cublasLt.h), and a later call
// with the same key may pass a pointer aligned to no more than that. Not dereferenced.
const void* heuristic_aux(const void* aux, std::uint32_t align) {
    const auto p = reinterpret_cast<std::uintptr_t>(aux);
    return (p & (2 * static_cast<std::uintptr_t>(align) - 1)) == 0 ? reinterpret_cast<const void*>(p + align) : aux;
}

void set_aux(cublasLtMatmulDesc_t desc, const void* aux, const char* what) {
    set_desc(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux, what,
             "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)");
}

// The epilogue of a bias (or none) and a GELU mode.
std::uint32_t epilogue_of(bool bias, GeluEpilogue gelu) {
    switch (gelu) {
        case GeluEpilogue::forward: return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        case GeluEpilogue::backward: return CUBLASLT_EPILOGUE_DGELU;
        case GeluEpilogue::none: break;
    }
    return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// The GELU epilogues' rules (blas.h): an aux matrix with a leading dimension cuBLASLt accepts, one
// batch, and no bias in backward (DGELU adds none).
void check_gelu(const GemmShape& s, const void* bias, const GemmGelu& g, const char* what) {
    if (g.mode == GeluEpilogue::none) return;
    auto refuse = [&](const std::string& why) {
        throw std::invalid_argument(std::string(what) + ": gemm with a GELU epilogue " + why);
    };
    if (!g.aux) refuse("and no aux matrix");
    if (g.ld < s.n || g.ld % kGeluEpilogueColumns != 0)
        refuse("and aux leading dimension " + std::to_string(g.ld) + " (it must be >= n = " + std::to_string(s.n) +
               " and a multiple of " + std::to_string(kGeluEpilogueColumns) + ")");
    if (s.batch != 1) refuse("over " + std::to_string(s.batch) + " batches (1 only)");
    if (g.mode == GeluEpilogue::backward && bias) refuse("in backward with a bias");
}

// Everything a plan depends on: the shape, the operands' layouts, the element types and the
// alignments (of the bias too: whether there is one); not the pointers, alpha or beta.
GemmPlans::Key plan_key(const GemmShape& s, const GemmOperand& a, const GemmOperand& b, long ldd, long stride_d,
                        const GemmGelu& gelu, const Alignments& align) {
    return {s.m,
            s.n,
            s.k,
            s.batch,  // the shape
            a.ld,
            a.batch_stride,
            a.transpose,  // A
            b.ld,
            b.batch_stride,
            b.transpose,  // B
            ldd,
            stride_d,  // D
            static_cast<std::int64_t>(gelu.mode),
            gelu.ld,  // the GELU epilogue
            static_cast<std::int64_t>(s.input),
            static_cast<std::int64_t>(s.output),
            align.a,
            align.b,
            align.d,
            align.bias,
            align.aux};
}

// `bias` (null: none) is the first call's: the heuristic is asked with it in place.
GemmPlans::Plan make_plan(const BlasContext& blas, const GemmShape& s, const GemmOperand& a, const GemmOperand& b,
                          long ldd, long stride_d, const void* bias, const GemmGelu& gelu, const Alignments& align,
                          const char* what) {
    const cudaDataType_t in_type = data_type(s.input, what), out_type = data_type(s.output, what);
    MatmulDesc desc;
    check_blas(cublasLtMatmulDescCreate(&desc.handle, CUBLAS_COMPUTE_32F, CUDA_R_32F), what,
               "cublasLtMatmulDescCreate");
    // cuBLASLt's first operand is our B, its second our A (see the top of the file).
    const std::int32_t op_first = b.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    const std::int32_t op_second = a.transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_desc(desc.handle, CUBLASLT_MATMUL_DESC_TRANSA, op_first, what, "cublasLtMatmulDescSetAttribute(TRANSA)");
    set_desc(desc.handle, CUBLASLT_MATMUL_DESC_TRANSB, op_second, what, "cublasLtMatmulDescSetAttribute(TRANSB)");
    const std::uint32_t epilogue = epilogue_of(bias != nullptr, gelu.mode);
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        set_desc(desc.handle, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, what,
                 "cublasLtMatmulDescSetAttribute(EPILOGUE)");
    if (bias) {
        // Its type is D's, said explicitly; its pointer is set again on every call (gemm below).
        const std::int32_t bias_type = out_type;
        set_desc(desc.handle, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, what,
                 "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)");
        set_bias(desc.handle, bias, what);
    }
    if (gelu.mode != GeluEpilogue::none) {
        // aux is D's type, said explicitly; its pointer too is set again on every call.
        const std::int64_t aux_ld = gelu.ld;
        const std::int32_t aux_type = out_type;
        set_desc(desc.handle, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld, what,
                 "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)");
        set_desc(desc.handle, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, aux_type, what,
                 "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_DATA_TYPE)");
        set_aux(desc.handle, heuristic_aux(gelu.aux, align.aux), what);
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
    if (s.output == DType::bf16) {
        // Split-K partial sums in fp32 (the compute type) or no split-K: an in-place or output-type
        // reduction would add partial sums held in bf16, each rounded, where accumulation is fp32
        // (blas.h). The shapes it can pick split-K for are the small outputs of long sums (the lm
        // head's dinp over Vp); fp32 outputs reduce in fp32 whatever the scheme.
        const std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
        check_blas(cublasLtMatmulPreferenceSetAttribute(pref.handle, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                        &reductions, sizeof(reductions)),
                   what, "cublasLtMatmulPreferenceSetAttribute(REDUCTION_SCHEME_MASK)");
    }
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
          long stride_d, const void* bias, const char* what, const GemmGelu& gelu) {
    check_gelu(s, bias, gelu, what);  // an empty product too: a shape is refused or run whatever its rows
    if (s.m <= 0 || s.n <= 0 || s.batch <= 0) return;
    if (s.k <= 0) throw std::invalid_argument(std::string(what) + ": gemm with an empty reduction (k = 0)");
    check_types(s, what);
    const auto& blas = *static_cast<const BlasContext*>(ctx.blas);
    const std::size_t in_bytes = dtype_size(s.input), out_bytes = dtype_size(s.output);
    const Alignments align{alignment(a.data, a.batch_stride, s.batch, in_bytes),
                           alignment(b.data, b.batch_stride, s.batch, in_bytes),
                           alignment(d, stride_d, s.batch, out_bytes), bias ? alignment(bias, 0, 1, out_bytes) : 0,
                           gelu.aux ? alignment(gelu.aux, 0, 1, out_bytes) : 0};

    // The descriptors, layouts and algorithm of this key are made on its first GEMM only.
    if (!blas.plans) blas.plans = std::make_shared<GemmPlans>();
    const GemmPlans::Key key = plan_key(s, a, b, ldd, stride_d, gelu, align);
    auto& plans = blas.plans->by_key;
    auto found = plans.find(key);
    if (found == plans.end())
        found = plans.emplace(key, make_plan(blas, s, a, b, ldd, stride_d, bias, gelu, align, what)).first;
    const GemmPlans::Plan& plan = found->second;
    if (bias) set_bias(plan.desc, bias, what);
    if (gelu.mode != GeluEpilogue::none) set_aux(plan.desc, gelu.aux, what);

    // C is D (in place, same layout): beta scales what D holds; beta == 0 never reads it.
    check_blas(
        cublasLtMatmul(blas.handle, plan.desc, &s.alpha, b.data, plan.b, a.data, plan.a, &s.beta, d, plan.d, d, plan.d,
                       &plan.algo, blas.workspace, blas.workspace_bytes, static_cast<cudaStream_t>(ctx.stream)),
        what, "cublasLtMatmul");
}

}  // namespace adacc::cuda
