// The cuBLASLt calls (emulated under tests/simt/, the real library on a GPU) against a brute-force
// column-major reference: transposes, ld > rows, strided batches, alpha/beta, the bias epilogue,
// the element types (f32, bf16 in with bf16 or f32 out); and the linear layers' kernels beyond their
// twin comparison (tests/cuda/test_cuda_ops.cpp): determinism, mixed dtypes refused.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/blas_context.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// Derived bounds (u = 2^-24, gamma(n) = n u / (1 - n u)): a sum of n products computed in fp32
// in any order, with or without FMA, is within gamma(n) sum |a_i b_i| of the exact value (Higham,
// Accuracy and Stability of Numerical Algorithms, eq. 3.5), computed per element from the inputs
// below. A bf16 result is rounded to nearest, within 2^-8 of its fp32 value (8 significant bits).
constexpr double kU = 1.0 / (1 << 24), kBf16Rel = 1.0 / 256;
double gamma(long n) { return n * kU / (1 - n * kU); }

// ---- the cuBLASLt calls, column-major, against a brute-force reference ----

struct LtCase {
    int m, n, k;
    bool ta, tb;
    int batch;
    float alpha, beta;
    bool bias;
    cudaDataType in = CUDA_R_32F, out = CUDA_R_32F;  // A and B; C, D and the bias
};

// Layout of a column-major rows x cols operand with ld = rows + pad and batches `stride` apart.
struct Operand {
    long rows, cols, ld, stride;
    long elements(int batch) const { return stride * (batch - 1) + ld * cols; }
};

void check_blas(cublasStatus_t s, const char* what) { ASSERT_EQ(s, CUBLAS_STATUS_SUCCESS) << what; }

// Split-K sums in fp32 (the compute type) or no split-K: kernels/cuda/blas.cu's preference for a bf16 D.
constexpr std::uint32_t kFp32Reductions = CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;

// The cuBLASLt objects a test asks with, destroyed with it: a matmul descriptor (fp32 compute and
// scale), a preference and the layouts made through make_layout. `created`: the first two were.
struct LtObjects {
    explicit LtObjects(const cuda::BlasContext& blas) : handle(blas.handle) {
        created = cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
                  cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS;
    }
    ~LtObjects() {
        for (cublasLtMatrixLayout_t l : layouts) cublasLtMatrixLayoutDestroy(l);
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (desc) cublasLtMatmulDescDestroy(desc);
    }
    LtObjects(const LtObjects&) = delete;
    LtObjects& operator=(const LtObjects&) = delete;

    cublasStatus_t make_layout(cublasLtMatrixLayout_t* out, cudaDataType type, long rows, long cols, long ld) {
        const cublasStatus_t status = cublasLtMatrixLayoutCreate(out, type, rows, cols, ld);
        if (status == CUBLAS_STATUS_SUCCESS) layouts.push_back(*out);
        return status;
    }
    template <typename V>
    cublasStatus_t set(cublasLtMatmulDescAttributes_t attribute, const V& value) const {
        return cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value));
    }
    template <typename V>
    cublasStatus_t prefer(cublasLtMatmulPreferenceAttributes_t attribute, const V& value) const {
        return cublasLtMatmulPreferenceSetAttribute(pref, attribute, &value, sizeof(value));
    }
    // Asks for one algorithm for D = A B (+ C) with these layouts, into *result; how many it found
    // is left in `found`.
    cublasStatus_t heuristic(cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                             cublasLtMatrixLayout_t d, cublasLtMatmulHeuristicResult_t* result) {
        found = 0;
        return cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref, 1, result, &found);
    }
    cublasStatus_t heuristic(cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                             cublasLtMatrixLayout_t d) {
        cublasLtMatmulHeuristicResult_t result{};
        return heuristic(a, b, c, d, &result);
    }

    cublasLtHandle_t handle;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    std::vector<cublasLtMatrixLayout_t> layouts;
    int found = 0;
    bool created = false;
};

// Values as a matrix of `type` holds them, that matrix's bytes (uploaded as they are) and back.
std::uint32_t element_bytes(cudaDataType type) { return type == CUDA_R_16BF ? 2 : 4; }
std::vector<float> representable_as(const std::vector<float>& v, cudaDataType type) {
    return type == CUDA_R_16BF ? representable<bf16>(v) : v;
}
std::vector<unsigned char> bytes_of(const std::vector<float>& v, cudaDataType type) {
    std::vector<unsigned char> bytes(v.size() * element_bytes(type));
    if (type == CUDA_R_16BF)
        std::memcpy(bytes.data(), device_values<bf16>(v).data(), bytes.size());
    else
        std::memcpy(bytes.data(), v.data(), bytes.size());
    return bytes;
}
std::vector<float> floats_of(const std::vector<unsigned char>& bytes, cudaDataType type) {
    if (type == CUDA_R_16BF) {
        std::vector<bf16> v(bytes.size() / sizeof(bf16));
        std::memcpy(v.data(), bytes.data(), bytes.size());
        return host_values(v);
    }
    std::vector<float> v(bytes.size() / sizeof(float));
    std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
}

void run_lt_case(const LtCase& c, const cuda::BlasContext& blas, cudaStream_t stream) {
    // op(A) m x k, op(B) k x n, D m x n; every ld padded, every batch stride past the matrix.
    auto operand = [](long rows, long cols, long pad, long gap) {
        return Operand{rows, cols, rows + pad, (rows + pad) * cols + gap};
    };
    const Operand as = operand(c.ta ? c.k : c.m, c.ta ? c.m : c.k, 3, 5);
    const Operand bs = operand(c.tb ? c.n : c.k, c.tb ? c.k : c.n, 1, 7);
    const Operand ds = operand(c.m, c.n, 2, 4);
    const std::vector<float> ha = representable_as(random_floats(as.elements(c.batch), 11), c.in),
                             hb = representable_as(random_floats(bs.elements(c.batch), 12), c.in),
                             hd = representable_as(random_floats(ds.elements(c.batch), 13), c.out),
                             hbias = representable_as(random_floats(c.m, 14), c.out);
    // Reference: D (in place, so padding and untouched batches gaps must keep their values),
    // rounded to fp32 and then to D's type, as cuBLASLt rounds its fp32 result.
    // mag: |alpha| sum |a b| + |beta c| + |bias| per element of D, 0 where D must be left alone.
    std::vector<float> want = hd;
    std::vector<double> mag(want.size(), 0.0);
    for (int i = 0; i < c.batch; ++i)
        for (long col = 0; col < c.n; ++col)
            for (long row = 0; row < c.m; ++row) {
                double acc = 0, abs_acc = 0;
                for (long kk = 0; kk < c.k; ++kk) {
                    const double av =
                        c.ta ? ha[i * as.stride + kk + row * as.ld] : ha[i * as.stride + row + kk * as.ld];
                    const double bv =
                        c.tb ? hb[i * bs.stride + col + kk * bs.ld] : hb[i * bs.stride + kk + col * bs.ld];
                    acc += av * bv;
                    abs_acc += std::fabs(av * bv);
                }
                const long at = i * ds.stride + row + col * ds.ld;
                float& out = want[at];
                double v = c.alpha * acc + (c.beta != 0.0f ? c.beta * static_cast<double>(out) : 0.0);
                mag[at] = std::fabs(c.alpha) * abs_acc + std::fabs(c.beta * static_cast<double>(out));
                if (c.bias) v += hbias[row], mag[at] += std::fabs(hbias[row]);
                out = representable_as({static_cast<float>(v)}, c.out)[0];
            }
    DeviceArray<unsigned char> da(bytes_of(ha, c.in)), db(bytes_of(hb, c.in)), dd(bytes_of(hd, c.out)),
        dbias(bytes_of(hbias, c.out));

    LtObjects lt(blas);
    ASSERT_TRUE(lt.created);
    const std::int32_t opa = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_blas(lt.set(CUBLASLT_MATMUL_DESC_TRANSA, opa), "transa");
    check_blas(lt.set(CUBLASLT_MATMUL_DESC_TRANSB, opb), "transb");
    if (c.bias) {
        check_blas(lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t{CUBLASLT_EPILOGUE_BIAS}), "epilogue");
        check_blas(lt.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(dbias.get())), "bias");
        check_blas(lt.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<std::int32_t>(c.out)), "bias type");
    }
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    const Operand* ops[3] = {&as, &bs, &ds};
    const cudaDataType types[3] = {c.in, c.in, c.out};
    cublasLtMatrixLayout_t* layouts[3] = {&la, &lb, &ld};
    for (int i = 0; i < 3; ++i) {
        check_blas(lt.make_layout(layouts[i], types[i], ops[i]->rows, ops[i]->cols, ops[i]->ld), "layout");
        if (c.batch > 1) {
            const std::int32_t count = c.batch;
            const std::int64_t stride = ops[i]->stride;
            check_blas(cublasLtMatrixLayoutSetAttribute(*layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                        sizeof(count)),
                       "batch count");
            check_blas(cublasLtMatrixLayoutSetAttribute(*layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                        &stride, sizeof(stride)),
                       "batch stride");
        }
    }
    check_blas(lt.prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{blas.workspace_bytes}), "workspace");
    // A bf16 D from fp32 sums rounded once, as kernels/cuda/blas.cu asks: no split-K sums in bf16.
    if (c.out == CUDA_R_16BF)
        check_blas(lt.prefer(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, kFp32Reductions), "reduction schemes");
    // Odd lds and strides: element alignment only.
    const std::uint32_t align_in = element_bytes(c.in), align_out = element_bytes(c.out);
    const std::pair<cublasLtMatmulPreferenceAttributes_t, std::uint32_t> aligns[4] = {
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_in},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_in},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_out},
        {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_out}};
    for (const auto& [attr, align] : aligns) check_blas(lt.prefer(attr, align), "alignment");
    cublasLtMatmulHeuristicResult_t heuristic{};
    check_blas(lt.heuristic(la, lb, ld, ld, &heuristic), "heuristic");
    ASSERT_EQ(lt.found, 1);
    check_blas(cublasLtMatmul(blas.handle, lt.desc, &c.alpha, da.get(), la, db.get(), lb, &c.beta, dd.get(), ld,
                              dd.get(), ld, &heuristic.algo, blas.workspace, blas.workspace_bytes, stream),
               "matmul");
    // The emulation sums in double in the reference's order: bit-identical. A GPU sums in fp32,
    // within gamma(k + 3) mag (k products, alpha, beta C, the bias), and the reference is the exact
    // value rounded once (u |v| <= u mag): D apart at most. A bf16 D then rounds both fp32 values,
    // each by 2^-8 of itself: 2^-8 (2 |want| / (1 - 2^-8) + D) more.
    // With a bias, a bf16 D may be rounded twice: an H200's cuBLASLt (CUDA 13) rounds alpha AB + beta C
    // to bf16 before the epilogue adds the bias, one more 2^-8 of a value no larger than mag.
    const bool exact = running_under_emulation(), bf16_out = c.out == CUDA_R_16BF;
    const double rounded_before_bias = bf16_out && c.bias ? kBf16Rel : 0.0;
    std::vector<double> limit(mag.size());
    for (std::size_t i = 0; i < mag.size(); ++i)
        limit[i] =
            exact ? 0.0 : ((bf16_out ? 1 + kBf16Rel : 1.0) * (gamma(c.k + 3) + kU) + rounded_before_bias) * mag[i];
    const double rel = exact || !bf16_out ? 0.0 : 2 * kBf16Rel / (1 - kBf16Rel);
    EXPECT_TRUE(all_within(floats_of(dd.download(), c.out), want, rel, limit))
        << "m=" << c.m << " n=" << c.n << " k=" << c.k << " ta=" << c.ta << " tb=" << c.tb << " batch=" << c.batch
        << " beta=" << c.beta << " bias=" << c.bias << " in=" << c.in << " out=" << c.out;
}

TEST(CudaMatmulCublasLt, ColumnMajorSemanticsMatchABruteForceReference) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const auto& blas = *static_cast<const cuda::BlasContext*>(ctx.get().blas);
    const auto stream = static_cast<cudaStream_t>(ctx.get().stream);
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (int batch : {1, 3})
                for (float beta : {0.0f, 0.5f})
                    for (bool bias : {false, true})
                        run_lt_case({5, 7, 9, ta, tb, batch, 0.75f, beta, bias}, blas, stream);
    run_lt_case({1, 1, 1, false, false, 1, 1.0f, 0.0f, true}, blas, stream);
    run_lt_case({33, 2, 40, true, false, 2, 1.0f, 1.0f, false}, blas, stream);
}

// bf16 A and B with a bf16 D (activations) or an fp32 D (a weight gradient accumulating with
// beta = 1): the same reference, D rounded to its type.
TEST(CudaMatmulCublasLt, Bf16InputsMatchABruteForceReference) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const auto& blas = *static_cast<const cuda::BlasContext*>(ctx.get().blas);
    const auto stream = static_cast<cudaStream_t>(ctx.get().stream);
    for (cudaDataType out : {CUDA_R_16BF, CUDA_R_32F})
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (int batch : {1, 3})
                    for (float beta : {0.0f, 1.0f})
                        for (bool bias : {false, true})
                            run_lt_case({5, 7, 9, ta, tb, batch, 0.75f, beta, bias, CUDA_R_16BF, out}, blas, stream);
    run_lt_case({33, 2, 40, true, false, 2, 1.0f, 1.0f, false, CUDA_R_16BF, CUDA_R_32F}, blas, stream);
}

// The emulation refuses what it does not emulate rather than compute something else.
TEST(CudaMatmulCublasLt, EmulationRefusesWhatItDoesNotEmulate) {
    ADACC_REQUIRE_CUDA_DEVICE();
    if (!running_under_emulation()) GTEST_SKIP() << "checks the emulation only";
    CudaTestContext ctx;
    cublasLtMatmulDesc_t tf32 = nullptr;
    EXPECT_EQ(cublasLtMatmulDescCreate(&tf32, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F), CUBLAS_STATUS_NOT_SUPPORTED);
    LtObjects lt(*static_cast<const cuda::BlasContext*>(ctx.get().blas));
    ASSERT_TRUE(lt.created);
    EXPECT_EQ(lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t{CUBLASLT_EPILOGUE_GELU_BIAS}),
              CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(lt.set(CUBLASLT_MATMUL_DESC_TRANSA, std::int32_t{CUBLAS_OP_C}), CUBLAS_STATUS_NOT_SUPPORTED);
    cublasLtMatrixLayout_t f16 = nullptr;
    EXPECT_EQ(lt.make_layout(&f16, CUDA_R_16F, 4, 4, 4), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(lt.prefer(CUBLASLT_MATMUL_PREF_IMPL_MASK, std::uint64_t{1}), CUBLAS_STATUS_NOT_SUPPORTED);
}

// Element types are emulated in the combinations cuBLASLt supports with CUBLAS_COMPUTE_32F only:
// A and B alike, C and D alike, no bf16 D from f32 inputs, a bias of D's type.
TEST(CudaMatmulCublasLt, EmulationRefusesTypeCombinationsCublasLtDoesNotSupport) {
    ADACC_REQUIRE_CUDA_DEVICE();
    if (!running_under_emulation()) GTEST_SKIP() << "checks the emulation only";
    CudaTestContext ctx;
    LtObjects lt(*static_cast<const cuda::BlasContext*>(ctx.get().blas));
    ASSERT_TRUE(lt.created);
    ASSERT_EQ(lt.prefer(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, kFp32Reductions), CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayout_t f32 = nullptr, bf = nullptr;
    ASSERT_EQ(lt.make_layout(&f32, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt.make_layout(&bf, CUDA_R_16BF, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.heuristic(f32, f32, f32, f32), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.heuristic(bf, bf, bf, bf), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.heuristic(bf, bf, f32, f32), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.heuristic(f32, bf, f32, f32), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(lt.heuristic(bf, f32, bf, bf), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(lt.heuristic(f32, f32, bf, bf), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(lt.heuristic(bf, bf, f32, bf), CUBLAS_STATUS_NOT_SUPPORTED);
    // A bias of another type than D.
    DeviceArray<float> bias(4);
    ASSERT_EQ(lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE, std::uint32_t{CUBLASLT_EPILOGUE_BIAS}), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.get())), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, std::int32_t{CUDA_R_32F}), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.heuristic(bf, bf, f32, f32), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.heuristic(bf, bf, bf, bf), CUBLAS_STATUS_NOT_SUPPORTED);
}

// The emulated GEMM rounds its sum to D's type once. A bf16 D is served only where the preference
// rules out split-K sums held in bf16 (in place or in the output type), as kernels/cuda/blas.cu's
// does; cuBLASLt's default admits them. An fp32 D sums in fp32 whatever the scheme.
TEST(CudaMatmulCublasLt, EmulationServesABf16OutputOnlyWithFp32Reductions) {
    ADACC_REQUIRE_CUDA_DEVICE();
    if (!running_under_emulation()) GTEST_SKIP() << "checks the emulation only";
    CudaTestContext ctx;
    LtObjects lt(*static_cast<const cuda::BlasContext*>(ctx.get().blas));
    ASSERT_TRUE(lt.created);
    cublasLtMatrixLayout_t f32 = nullptr, bf = nullptr;
    ASSERT_EQ(lt.make_layout(&f32, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt.make_layout(&bf, CUDA_R_16BF, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.heuristic(bf, bf, bf, bf), CUBLAS_STATUS_NOT_SUPPORTED);  // the default: every scheme
    EXPECT_EQ(lt.heuristic(bf, bf, f32, f32), CUBLAS_STATUS_SUCCESS);
    for (const std::uint32_t bf16_sums :
         {std::uint32_t{CUBLASLT_REDUCTION_SCHEME_INPLACE}, std::uint32_t{CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}}) {
        ASSERT_EQ(lt.prefer(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, kFp32Reductions | bf16_sums),
                  CUBLAS_STATUS_SUCCESS);
        EXPECT_EQ(lt.heuristic(bf, bf, bf, bf), CUBLAS_STATUS_NOT_SUPPORTED) << bf16_sums;
    }
    ASSERT_EQ(lt.prefer(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, kFp32Reductions), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.heuristic(bf, bf, bf, bf), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.prefer(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, std::uint32_t{8}), CUBLAS_STATUS_INVALID_VALUE);
}

// The GELU epilogues' aux matrix as cublasLt.h states its rules: a leading dimension that is a
// multiple of 8 and at least D's rows, its pointer set, and D's type; anything else is refused.
TEST(CudaMatmulCublasLt, EmulationChecksTheGeluEpiloguesAuxMatrix) {
    ADACC_REQUIRE_CUDA_DEVICE();
    if (!running_under_emulation()) GTEST_SKIP() << "checks the emulation only";
    CudaTestContext ctx;
    LtObjects lt(*static_cast<const cuda::BlasContext*>(ctx.get().blas));
    ASSERT_TRUE(lt.created);
    cublasLtMatrixLayout_t f32 = nullptr;  // D has 8 rows
    ASSERT_EQ(lt.make_layout(&f32, CUDA_R_32F, 8, 8, 8), CUBLAS_STATUS_SUCCESS);
    const std::uint32_t element = sizeof(float);  // so that only the aux pointer can be what is refused
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        ASSERT_EQ(lt.prefer(attr, element), CUBLAS_STATUS_SUCCESS);
    auto set_ld = [&](std::int64_t ld) { return lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld); };
    for (std::uint32_t epilogue : {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_DGELU}) {
        ASSERT_EQ(lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue), CUBLAS_STATUS_SUCCESS);
        ASSERT_EQ(set_ld(8), CUBLAS_STATUS_SUCCESS);
        EXPECT_EQ(lt.heuristic(f32, f32, f32, f32), CUBLAS_STATUS_SUCCESS) << epilogue;
        ASSERT_EQ(set_ld(12), CUBLAS_STATUS_SUCCESS);  // not a multiple of 8
        EXPECT_EQ(lt.heuristic(f32, f32, f32, f32), CUBLAS_STATUS_INVALID_VALUE) << epilogue;
        ASSERT_EQ(set_ld(0), CUBLAS_STATUS_SUCCESS);  // fewer than D's rows (and unset)
        EXPECT_EQ(lt.heuristic(f32, f32, f32, f32), CUBLAS_STATUS_INVALID_VALUE) << epilogue;
    }
    ASSERT_EQ(set_ld(8), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, std::int32_t{CUDA_R_16BF}), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(lt.heuristic(f32, f32, f32, f32), CUBLAS_STATUS_NOT_SUPPORTED);  // an aux of another type than D
    // Without its pointer the matmul itself is refused.
    ASSERT_EQ(lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, std::int32_t{-1}), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t result{};
    ASSERT_EQ(lt.heuristic(f32, f32, f32, f32, &result), CUBLAS_STATUS_SUCCESS);
    DeviceArray<float> a(64), b(64), d(64);
    const float alpha = 1.0f, beta = 0.0f;
    EXPECT_EQ(cublasLtMatmul(lt.handle, lt.desc, &alpha, a.get(), f32, b.get(), f32, &beta, d.get(), f32, d.get(), f32,
                             &result.algo, nullptr, 0, nullptr),
              CUBLAS_STATUS_INVALID_VALUE);
}

// A pointer less aligned than the heuristic was told is an error, as on the GPU.
TEST(CudaMatmulCublasLt, EmulationChecksThePromisedAlignment) {
    ADACC_REQUIRE_CUDA_DEVICE();
    if (!running_under_emulation()) GTEST_SKIP() << "checks the emulation only";
    CudaTestContext ctx;
    LtObjects lt(*static_cast<const cuda::BlasContext*>(ctx.get().blas));
    ASSERT_TRUE(lt.created);
    DeviceArray<float> a(64), b(64), d(64);
    cublasLtMatrixLayout_t l = nullptr;
    ASSERT_EQ(lt.make_layout(&l, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t heuristic{};  // the preference's default: 256-byte alignment
    ASSERT_EQ(lt.heuristic(l, l, l, l, &heuristic), CUBLAS_STATUS_SUCCESS);
    const float one = 1.0f, zero = 0.0f;
    EXPECT_EQ(cublasLtMatmul(lt.handle, lt.desc, &one, a.get() + 1, l, b.get(), l, &zero, d.get(), l, d.get(), l,
                             &heuristic.algo, nullptr, 0, nullptr),
              CUBLAS_STATUS_INVALID_VALUE);
}

// ---- matmul_forward / matmul_backward beyond their twin comparison (the table of
// tests/cuda/test_cuda_ops.cpp runs them against the CPU's) ----

struct Shape {
    int N, C, OC;
};

// The same call again gives the same bits, with and without a bias.
template <typename E>
void check_forward_deterministic(const CudaTestContext& ctx) {
    const Shape s{300, 72, 101};
    DeviceArray<E> x(device_values<E>(random_floats(static_cast<std::size_t>(s.N) * s.C, 1))),
        w(device_values<E>(random_floats(static_cast<std::size_t>(s.OC) * s.C, 2))),
        bias(device_values<E>(random_floats(s.OC, 3))), out1(static_cast<std::size_t>(s.N) * s.OC),
        out2(static_cast<std::size_t>(s.N) * s.OC);
    for (const E* b : {static_cast<const E*>(bias.get()), static_cast<const E*>(nullptr)}) {
        cuda::matmul_forward(ctx.get(), out1.get(), x.get(), w.get(), b, s.N, s.C, s.OC);
        cuda::matmul_forward(ctx.get(), out2.get(), x.get(), w.get(), b, s.N, s.C, s.OC);
        EXPECT_TRUE(all_equal_bytes(out1.download(), out2.download())) << "bias " << (b != nullptr);
    }
}

TEST(CudaMatmul, ForwardIsDeterministic) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    check_forward_deterministic<float>(ctx);
    check_forward_deterministic<bf16>(ctx);
}

// Bit-identical results: a recomputation equals the first run, the dbias sums do not depend on
// the other outputs, and accumulate = false ignores what the gradients held.
template <typename E>
void check_backward_deterministic(const CudaTestContext& ctx) {
    const Shape s{300, 72, 101};
    const std::size_t nx = static_cast<std::size_t>(s.N) * s.C, nw = static_cast<std::size_t>(s.OC) * s.C,
                      ny = static_cast<std::size_t>(s.N) * s.OC;
    DeviceArray<E> gx(device_values<E>(random_floats(nx, 1))), gw(device_values<E>(random_floats(nw, 2))),
        gy(device_values<E>(random_floats(ny, 4))), dx1(nx), dx2(nx);
    DeviceArray<float> dw1(nw), db1(s.OC), dw2(random_floats(nw, 7)), db2(random_floats(s.OC, 8));
    cuda::matmul_backward(ctx.get(), dx1.get(), dw1.get(), db1.get(), gy.get(), gx.get(), gw.get(), s.N, s.C, s.OC,
                          false);
    cuda::matmul_backward(ctx.get(), nullptr, dw2.get(), db2.get(), gy.get(), gx.get(), gw.get(), s.N, s.C, s.OC,
                          false);
    cuda::matmul_backward(ctx.get(), dx2.get(), dw2.get(), db2.get(), gy.get(), gx.get(), gw.get(), s.N, s.C, s.OC,
                          false);
    EXPECT_TRUE(all_equal_bytes(dx1.download(), dx2.download()));
    EXPECT_TRUE(all_equal_bytes(dw1.download(), dw2.download()));
    EXPECT_TRUE(all_equal_bytes(db1.download(), db2.download()));
}

TEST(CudaMatmul, BackwardIsDeterministic) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    check_backward_deterministic<float>(ctx);
    check_backward_deterministic<bf16>(ctx);
}

// The GEMMs read every activation as one type: a mixture is refused, naming the kernel.
TEST(CudaMatmul, MixedActivationTypesAreRefused) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const int N = 2, C = 8, OC = 8;
    DeviceArray<float> x32(N * C), w32(OC * C), out32(N * OC), dweight(OC * C);
    DeviceArray<bf16> x16(N * C), w16(OC * C), out16(N * OC), bias16(OC);
    auto message = [](auto&& call) {
        try {
            call();
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("nothing thrown");
    };
    EXPECT_NE(message([&] {
                  cuda::matmul_forward(ctx.get(), out16.get(), x16.get(), w32.get(), nullptr, N, C, OC);
              }).find("matmul_forward"),
              std::string::npos);
    EXPECT_NE(message([&] {
                  cuda::matmul_forward(ctx.get(), out32.get(), x32.get(), w32.get(), bias16.get(), N, C, OC);
              }).find("matmul_forward"),
              std::string::npos);
    EXPECT_NE(message([&] {
                  cuda::matmul_backward(ctx.get(), out32.get(), dweight.get(), nullptr, out16.get(), x16.get(),
                                        w16.get(), N, C, OC, false);
              }).find("matmul_backward"),
              std::string::npos);
}

}  // namespace
}  // namespace adacc::test
