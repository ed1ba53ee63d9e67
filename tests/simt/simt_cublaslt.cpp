// cuBLASLt for the SIMT emulation: the calls kernels/cuda/blas.cu makes (on behalf of matmul.cu
// and attention.cu), served by a CPU GEMM on host memory with cuBLASLt's column-major semantics:
//   D_i = alpha * op(A_i) @ op(B_i) + beta * C_i [+ bias]      (i < batch count)
// element (r, c) of a layout at r + c * ld, batch i at + i * strided batch offset, op = N or T,
// the BIAS epilogue adding bias[r] (+ i * bias batch stride) to row r of D, beta == 0 never
// reading C. Products accumulate in double and round once to fp32, so they are exact to fp32
// rounding; a bf16 D is that fp32 value rounded to nearest even, as cuBLASLt rounds its fp32
// result. Only what the kernels use is emulated: CUBLAS_COMPUTE_32F with fp32 scalars and the
// element types cuBLASLt pairs with it (A and B f32 with C and D f32; A and B bf16 with C and D
// bf16 or f32; the bias of D's type), column order, strided batches, host alpha/beta, the DEFAULT
// and BIAS epilogues, and GELU_AUX, GELU_AUX_BIAS and DGELU on one batch. The GELU epilogues work on
// the fp32 result (bias included): GELU_AUX* store it to the aux matrix and gelu of it to D; DGELU
// stores it times gelu' of the aux matrix's element; GELU is kernels/gelu_math.h's formula with
// the C library's expf, in fp32 (real cuBLASLt's own evaluation may differ by a few fp32 ulps; the
// device tests bound that). Anything else is refused with CUBLAS_STATUS_NOT_SUPPORTED and a message on
// stderr, so no kernel silently gets a wrong result; shapes that cuBLASLt rejects are rejected
// (CUBLAS_STATUS_INVALID_VALUE) with a message too.
// The algorithm the heuristic returns records the preference's minimum alignments, and
// cublasLtMatmul checks every batch's pointers against them, as the real library needs them. A
// bf16 D needs a preference that rules out split-K sums held in bf16 (REDUCTION_SCHEME_MASK
// without INPLACE and OUTPUT_TYPE): the emulation rounds once, as only the other algorithms do.
#include <cublasLt.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "kernels/activation.h"
#include "kernels/gelu_math.h"
#include "src/cuda/cublaslt_library.h"

namespace {

constexpr std::uint64_t kAlgoMagic = 0x53494d54424c4153ULL;  // "SIMTBLAS"

struct Layout {
    cudaDataType type = CUDA_R_32F;
    std::uint64_t rows = 0, cols = 0;
    std::int64_t ld = 0;
    std::int32_t batch = 1;
    std::int64_t stride = 0;
};

struct Desc {
    std::int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
    std::uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void* bias = nullptr;
    std::int64_t bias_batch_stride = 0;
    std::int32_t bias_type = -1;  // -1: D's type (cuBLASLt's default)
    const void* aux = nullptr;    // the GELU epilogues' matrix, D's shape
    std::int64_t aux_ld = 0;
    std::int32_t aux_type = -1;  // -1: D's type (cuBLASLt's default)
};

bool has_bias(std::uint32_t epilogue) {
    return epilogue == CUBLASLT_EPILOGUE_BIAS || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_gelu_aux(std::uint32_t epilogue) {
    return epilogue == CUBLASLT_EPILOGUE_GELU_AUX || epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           epilogue == CUBLASLT_EPILOGUE_DGELU;
}

struct Preference {
    std::uint64_t max_workspace = 0;
    std::uint32_t align[4] = {256, 256, 256, 256};              // A, B, C, D (cuBLASLt's defaults)
    std::uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_MASK;  // cuBLASLt's default: every scheme
};

cublasStatus_t refuse(const char* call, const std::string& what) {
    std::fprintf(stderr, "simt cuBLASLt: %s: %s is not emulated (CUBLAS_STATUS_NOT_SUPPORTED)\n", call, what.c_str());
    return CUBLAS_STATUS_NOT_SUPPORTED;
}
cublasStatus_t invalid(const char* call, const std::string& what) {
    std::fprintf(stderr, "simt cuBLASLt: %s: %s (CUBLAS_STATUS_INVALID_VALUE)\n", call, what.c_str());
    return CUBLAS_STATUS_INVALID_VALUE;
}

// Attribute values are passed by address with their size, which must match the attribute's type.
template <typename T>
bool read_value(const void* buf, std::size_t size, T& out) {
    if (!buf || size != sizeof(T)) return false;
    std::memcpy(&out, buf, sizeof(T));
    return true;
}

Layout* layout_of(cublasLtMatrixLayout_t h) { return reinterpret_cast<Layout*>(h); }
Desc* desc_of(cublasLtMatmulDesc_t h) { return reinterpret_cast<Desc*>(h); }
Preference* pref_of(cublasLtMatmulPreference_t h) { return reinterpret_cast<Preference*>(h); }

bool emulated_type(cudaDataType type) { return type == CUDA_R_32F || type == CUDA_R_16BF; }
std::size_t element_size(cudaDataType type) { return type == CUDA_R_16BF ? 2 : 4; }
std::string type_name(cudaDataType type) {
    if (type == CUDA_R_32F) return "CUDA_R_32F";
    if (type == CUDA_R_16BF) return "CUDA_R_16BF";
    return "data type " + std::to_string(static_cast<int>(type));
}

// Element i of a matrix (or bias) of `type`, and the store of D's elements.
double load(const void* p, cudaDataType type, std::int64_t i) {
    if (type == CUDA_R_16BF) return adacc::to_float(static_cast<const adacc::bf16*>(p)[i]);
    return static_cast<const float*>(p)[i];
}
void store(void* p, cudaDataType type, std::int64_t i, double value) {
    const auto rounded = static_cast<float>(value);  // the fp32 result, then (bf16) rounded again
    if (type == CUDA_R_16BF)
        static_cast<adacc::bf16*>(p)[i] = adacc::to_bf16(rounded);
    else
        static_cast<float*>(p)[i] = rounded;
}

// The element types cuBLASLt supports with CUBLAS_COMPUTE_32F and fp32 scalars, among those
// emulated: A and B alike, C and D alike, a bf16 D only from bf16 A and B, the bias of D's type.
cublasStatus_t check_types(const char* call, const Desc& desc, const Layout& a, const Layout& b, const Layout& c,
                           const Layout& d) {
    if (a.type != b.type) return refuse(call, "A of " + type_name(a.type) + " with B of " + type_name(b.type));
    if (c.type != d.type) return refuse(call, "C of " + type_name(c.type) + " with D of " + type_name(d.type));
    if (a.type == CUDA_R_32F && d.type != CUDA_R_32F)
        return refuse(call, "A and B of CUDA_R_32F with D of " + type_name(d.type));
    if (has_bias(desc.epilogue) && desc.bias_type != -1 && desc.bias_type != d.type)
        return refuse(call, "a bias of " + type_name(static_cast<cudaDataType>(desc.bias_type)) + " with D of " +
                                type_name(d.type));
    if (has_gelu_aux(desc.epilogue) && desc.aux_type != -1 && desc.aux_type != d.type)
        return refuse(call, "a GELU aux matrix of " + type_name(static_cast<cudaDataType>(desc.aux_type)) +
                                " with D of " + type_name(d.type));
    return CUBLAS_STATUS_SUCCESS;
}

// The product's sizes once its descriptors are checked: D is m x n, the reduction over k.
struct Problem {
    long m = 0, n = 0, k = 0;
    int batch = 1;
};

cublasStatus_t check_layout(const char* call, const char* name, const Layout& l) {
    if (l.ld < static_cast<std::int64_t>(l.rows > 0 ? l.rows : 1))
        return invalid(
            call, std::string("matrix ") + name + ": ld " + std::to_string(l.ld) + " < rows " + std::to_string(l.rows));
    if (l.batch < 1) return invalid(call, std::string("matrix ") + name + ": batch count < 1");
    return CUBLAS_STATUS_SUCCESS;
}

// The checks cublasLtMatmulAlgoGetHeuristic and cublasLtMatmul share.
cublasStatus_t check_problem(const char* call, cublasLtHandle_t handle, const Desc* desc, const Layout* a,
                             const Layout* b, const Layout* c, const Layout* d, Problem& p) {
    if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!desc || !a || !b || !c || !d) return invalid(call, "a descriptor is null");
    const char* names[4] = {"A", "B", "C", "D"};
    const Layout* layouts[4] = {a, b, c, d};
    for (int i = 0; i < 4; ++i)
        if (const cublasStatus_t s = check_layout(call, names[i], *layouts[i]); s != CUBLAS_STATUS_SUCCESS) return s;
    if (const cublasStatus_t s = check_types(call, *desc, *a, *b, *c, *d); s != CUBLAS_STATUS_SUCCESS) return s;
    p.m = static_cast<long>(d->rows);
    p.n = static_cast<long>(d->cols);
    const bool ta = desc->transa == CUBLAS_OP_T, tb = desc->transb == CUBLAS_OP_T;
    const long a_rows = static_cast<long>(a->rows), a_cols = static_cast<long>(a->cols);
    const long b_rows = static_cast<long>(b->rows), b_cols = static_cast<long>(b->cols);
    p.k = ta ? a_rows : a_cols;
    if ((ta ? a_cols : a_rows) != p.m)
        return invalid(call,
                       "op(A) has " + std::to_string(ta ? a_cols : a_rows) + " rows, D has " + std::to_string(p.m));
    if ((tb ? b_cols : b_rows) != p.k)
        return invalid(call, "op(B) has " + std::to_string(tb ? b_cols : b_rows) + " rows, op(A) has " +
                                 std::to_string(p.k) + " columns");
    if ((tb ? b_rows : b_cols) != p.n)
        return invalid(call,
                       "op(B) has " + std::to_string(tb ? b_rows : b_cols) + " columns, D has " + std::to_string(p.n));
    if (c->rows != d->rows || c->cols != d->cols) return invalid(call, "C and D differ in shape");
    if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch)
        return invalid(call, "the batch counts of A, B, C and D differ");
    p.batch = d->batch;
    if (has_bias(desc->epilogue) && !desc->bias)
        return invalid(call, "a bias epilogue needs CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    if (has_gelu_aux(desc->epilogue)) {
        // cublasLt.h: the GELU input matrix's leading dimension is a multiple of 8, at least D's rows.
        if (desc->aux_ld < static_cast<std::int64_t>(p.m) || desc->aux_ld % 8 != 0)
            return invalid(call, "EPILOGUE_AUX_LD " + std::to_string(desc->aux_ld) +
                                     " (a GELU aux matrix's must be a multiple of 8 and >= D's " + std::to_string(p.m) +
                                     " rows)");
        if (p.batch != 1) return refuse(call, "a GELU epilogue over batches");
    }
    return CUBLAS_STATUS_SUCCESS;
}

// Every batch's pointer of an operand meets `align` bytes.
bool aligned(const void* p, const Layout& l, std::uint32_t align) {
    const auto address = reinterpret_cast<std::uintptr_t>(p);
    if (address % align) return false;
    return l.batch == 1 || (static_cast<std::uint64_t>(l.stride) * element_size(l.type)) % align == 0;
}

}  // namespace

// The emulated library is linked in: there is nothing to open.
void adacc::open_cublaslt() {}

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    static int emulated_handle;
    *handle = reinterpret_cast<cublasLtHandle_t>(&emulated_handle);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t) { return CUBLAS_STATUS_SUCCESS; }

// ---- matrix layouts ----

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    if (!matLayout) return invalid("cublasLtMatrixLayoutCreate", "null output");
    if (!emulated_type(type))
        return refuse("cublasLtMatrixLayoutCreate", type_name(type) + " (only CUDA_R_32F and CUDA_R_16BF)");
    auto* l = new Layout;
    l->type = type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    delete layout_of(matLayout);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
    const char* call = "cublasLtMatrixLayoutSetAttribute";
    Layout* l = layout_of(matLayout);
    if (!l) return invalid(call, "null layout");
    switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
            if (!read_value(buf, sizeInBytes, l->batch)) return invalid(call, "BATCH_COUNT is an int32_t");
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
            if (!read_value(buf, sizeInBytes, l->stride)) return invalid(call, "STRIDED_BATCH_OFFSET is an int64_t");
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATRIX_LAYOUT_ORDER: {
            std::int32_t order = 0;
            if (!read_value(buf, sizeInBytes, order)) return invalid(call, "ORDER is an int32_t");
            if (order != CUBLASLT_ORDER_COL) return refuse(call, "a memory order other than CUBLASLT_ORDER_COL");
            return CUBLAS_STATUS_SUCCESS;
        }
        default: return refuse(call, "layout attribute " + std::to_string(static_cast<int>(attr)));
    }
}

// ---- matmul descriptors ----

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    const char* call = "cublasLtMatmulDescCreate";
    if (!matmulDesc) return invalid(call, "null output");
    // fp32 only: TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) and the others would not match the CPU.
    if (computeType != CUBLAS_COMPUTE_32F)
        return refuse(call,
                      "compute type " + std::to_string(static_cast<int>(computeType)) + " (only CUBLAS_COMPUTE_32F)");
    if (scaleType != CUDA_R_32F)
        return refuse(call, "scale type " + std::to_string(static_cast<int>(scaleType)) + " (only CUDA_R_32F)");
    *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    delete desc_of(matmulDesc);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
    const char* call = "cublasLtMatmulDescSetAttribute";
    Desc* d = desc_of(matmulDesc);
    if (!d) return invalid(call, "null descriptor");
    switch (attr) {
        case CUBLASLT_MATMUL_DESC_TRANSA:
        case CUBLASLT_MATMUL_DESC_TRANSB: {
            std::int32_t op = 0;
            if (!read_value(buf, sizeInBytes, op)) return invalid(call, "TRANSA/TRANSB is an int32_t");
            if (op != CUBLAS_OP_N && op != CUBLAS_OP_T) return refuse(call, "an operation other than N or T");
            (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->transa : d->transb) = op;
            return CUBLAS_STATUS_SUCCESS;
        }
        case CUBLASLT_MATMUL_DESC_EPILOGUE: {
            std::uint32_t epilogue = 0;
            if (!read_value(buf, sizeInBytes, epilogue)) return invalid(call, "EPILOGUE is a uint32_t");
            if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(epilogue) && !has_gelu_aux(epilogue))
                return refuse(call, "epilogue " + std::to_string(epilogue) +
                                        " (only DEFAULT, BIAS, GELU_AUX, GELU_AUX_BIAS and DGELU)");
            d->epilogue = epilogue;
            return CUBLAS_STATUS_SUCCESS;
        }
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
            if (!read_value(buf, sizeInBytes, d->bias)) return invalid(call, "BIAS_POINTER is a pointer");
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
            if (!read_value(buf, sizeInBytes, d->bias_batch_stride))
                return invalid(call, "BIAS_BATCH_STRIDE is an int64_t");
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: {
            std::int32_t type = 0;
            if (!read_value(buf, sizeInBytes, type)) return invalid(call, "BIAS_DATA_TYPE is an int32_t");
            if (type != -1 && !emulated_type(static_cast<cudaDataType>(type)))
                return refuse(call, "a bias of " + type_name(static_cast<cudaDataType>(type)) +
                                        " (only CUDA_R_32F and CUDA_R_16BF)");
            d->bias_type = type;
            return CUBLAS_STATUS_SUCCESS;
        }
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
            if (!read_value(buf, sizeInBytes, d->aux)) return invalid(call, "EPILOGUE_AUX_POINTER is a pointer");
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
            if (!read_value(buf, sizeInBytes, d->aux_ld)) return invalid(call, "EPILOGUE_AUX_LD is an int64_t");
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: {
            std::int32_t type = 0;
            if (!read_value(buf, sizeInBytes, type)) return invalid(call, "EPILOGUE_AUX_DATA_TYPE is an int32_t");
            if (type != -1 && !emulated_type(static_cast<cudaDataType>(type)))
                return refuse(call, "a GELU aux matrix of " + type_name(static_cast<cudaDataType>(type)) +
                                        " (only CUDA_R_32F and CUDA_R_16BF)");
            d->aux_type = type;
            return CUBLAS_STATUS_SUCCESS;
        }
        case CUBLASLT_MATMUL_DESC_POINTER_MODE: {
            std::int32_t mode = 0;
            if (!read_value(buf, sizeInBytes, mode)) return invalid(call, "POINTER_MODE is an int32_t");
            if (mode != CUBLASLT_POINTER_MODE_HOST) return refuse(call, "alpha/beta other than host scalars");
            return CUBLAS_STATUS_SUCCESS;
        }
        default: return refuse(call, "matmul attribute " + std::to_string(static_cast<int>(attr)));
    }
}

// ---- heuristic preferences ----

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    if (!pref) return invalid("cublasLtMatmulPreferenceCreate", "null output");
    *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref_of(pref);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
    const char* call = "cublasLtMatmulPreferenceSetAttribute";
    Preference* p = pref_of(pref);
    if (!p) return invalid(call, "null preference");
    switch (attr) {
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
            if (!read_value(buf, sizeInBytes, p->max_workspace))
                return invalid(call, "MAX_WORKSPACE_BYTES is a uint64_t");
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
            if (!read_value(buf, sizeInBytes, p->reductions) || (p->reductions & ~CUBLASLT_REDUCTION_SCHEME_MASK))
                return invalid(call, "REDUCTION_SCHEME_MASK is a uint32_t of cublasLtReductionScheme_t bits");
            return CUBLAS_STATUS_SUCCESS;
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: {
            std::uint32_t align = 0;
            if (!read_value(buf, sizeInBytes, align)) return invalid(call, "MIN_ALIGNMENT_*_BYTES is a uint32_t");
            if (align == 0 || (align & (align - 1)))
                return invalid(call, "alignment " + std::to_string(align) + " is not a power of two");
            p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = align;
            return CUBLAS_STATUS_SUCCESS;
        }
        default: return refuse(call, "preference attribute " + std::to_string(static_cast<int>(attr)));
    }
}

// ---- heuristic and matmul ----

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
    const char* call = "cublasLtMatmulAlgoGetHeuristic";
    if (requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount)
        return invalid(call, "no room for results");
    if (!preference) return invalid(call, "null preference");
    Problem p;
    if (const cublasStatus_t s = check_problem(call, lightHandle, desc_of(operationDesc), layout_of(Adesc),
                                               layout_of(Bdesc), layout_of(Cdesc), layout_of(Ddesc), p);
        s != CUBLAS_STATUS_SUCCESS)
        return s;
    // The emulated GEMM rounds its exact sum to D's type once; a bf16 D from a real algorithm whose
    // split-K partial sums are bf16 (in place or in the output type) is rounded more: not emulated.
    const std::uint32_t bf16_reductions = CUBLASLT_REDUCTION_SCHEME_INPLACE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    if (layout_of(Ddesc)->type == CUDA_R_16BF && (pref_of(preference)->reductions & bf16_reductions))
        return refuse(call,
                      "a bf16 D whose preference admits split-K sums in bf16 (REDUCTION_SCHEME_MASK with INPLACE "
                      "or OUTPUT_TYPE)");
    // One algorithm, needing no workspace; it remembers the alignments it was promised.
    cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
    r = cublasLtMatmulHeuristicResult_t{};
    r.algo.data[0] = kAlgoMagic;
    for (int i = 0; i < 4; ++i) r.algo.data[1 + i] = pref_of(preference)->align[i];
    r.workspaceSize = 0;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
    const char* call = "cublasLtMatmul";
    (void)workspace;
    (void)workspaceSizeInBytes;
    (void)stream;  // the emulated device is synchronous
    const Desc* desc = desc_of(computeDesc);
    const Layout *la = layout_of(Adesc), *lb = layout_of(Bdesc), *lc = layout_of(Cdesc), *ld = layout_of(Ddesc);
    Problem p;
    if (const cublasStatus_t s = check_problem(call, lightHandle, desc, la, lb, lc, ld, p); s != CUBLAS_STATUS_SUCCESS)
        return s;
    if (!algo) return refuse(call, "choosing an algorithm (pass the heuristic's)");
    if (algo->data[0] != kAlgoMagic) return invalid(call, "the algorithm is not one the heuristic returned");
    if (!alpha || !beta) return invalid(call, "alpha or beta is null");
    const float alpha_value = *static_cast<const float*>(alpha), beta_value = *static_cast<const float*>(beta);
    if (!A || !B || !D || (beta_value != 0.0f && !C)) return invalid(call, "a matrix pointer is null");
    const char* names[4] = {"A", "B", "C", "D"};
    const void* pointers[4] = {A, B, C, D};
    const Layout* layouts[4] = {la, lb, lc, ld};
    for (int i = 0; i < 4; ++i) {
        const auto align = static_cast<std::uint32_t>(algo->data[1 + i]);
        if (pointers[i] && !aligned(pointers[i], *layouts[i], align))
            return invalid(call, std::string("matrix ") + names[i] + " (or a batch of it) is not aligned to the " +
                                     std::to_string(align) + " bytes the heuristic was promised");
    }
    if (C == D && (lc->ld != ld->ld || lc->stride != ld->stride))
        return invalid(call, "in place (C == D) needs C and D to have the same layout");

    const cudaDataType in = la->type, out = ld->type;  // A and B alike, C and D alike (checked)
    const bool ta = desc->transa == CUBLAS_OP_T, tb = desc->transb == CUBLAS_OP_T;
    const bool with_bias = has_bias(desc->epilogue), dgelu = desc->epilogue == CUBLASLT_EPILOGUE_DGELU;
    const bool gelu_forward = has_gelu_aux(desc->epilogue) && !dgelu;
    if (has_gelu_aux(desc->epilogue) && !desc->aux) return invalid(call, "a GELU epilogue without its aux pointer");
    const auto exp = [](float x) { return std::exp(x); };
    for (std::int64_t batch = 0; batch < p.batch; ++batch) {
        const std::int64_t ab = batch * la->stride, bb = batch * lb->stride, cb = batch * lc->stride,
                           db = batch * ld->stride;
        for (long col = 0; col < p.n; ++col)
            for (long row = 0; row < p.m; ++row) {
                double acc = 0.0;
                for (long i = 0; i < p.k; ++i) {
                    const double av = load(A, in, ab + (ta ? i + row * la->ld : row + i * la->ld));
                    const double bv = load(B, in, bb + (tb ? col + i * lb->ld : i + col * lb->ld));
                    acc += av * bv;
                }
                double value = static_cast<double>(alpha_value) * acc;
                if (beta_value != 0.0f)
                    value += static_cast<double>(beta_value) * load(C, out, cb + row + col * lc->ld);
                if (with_bias) value += load(desc->bias, out, row + batch * desc->bias_batch_stride);
                const std::int64_t at = db + row + col * ld->ld, aux_at = row + col * desc->aux_ld;
                const auto result = static_cast<float>(value);  // the epilogue's fp32 input
                if (gelu_forward) {
                    store(const_cast<void*>(desc->aux), out, aux_at, result);
                    store(D, out, at, adacc::gelu_value(result, exp));
                } else if (dgelu) {
                    const auto pre = static_cast<float>(load(desc->aux, out, aux_at));
                    store(D, out, at, adacc::gelu_derivative(pre, exp) * result);
                } else {
                    store(D, out, at, value);
                }
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
