// Linear layers on CUDA against the CPU twin (kernels/cpu/matmul.cpp), and the cuBLASLt calls
// themselves (emulated under tests/simt/, the real library on a GPU) against a brute-force
// column-major reference: transposes, ld > rows, strided batches, alpha/beta, the bias epilogue.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cuda/blas_context.h"
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

// fp32 against the CPU's Eigen, which accumulates in fp32 in another order (the emulated
// cuBLASLt rounds exact sums once, so the differences measured are the CPU's rounding):
// relative 1e-5, plus an absolute floor for entries whose sum cancels to near zero, which grows
// with the length k of the sum: inputs in [-1, 1], worst differences seen 1.5e-8 * k (k = C, OC or
// N up to 300), floor 4e-8 * k.
constexpr double kRel = 1e-5, kAbsPerTerm = 4e-8;
double abs_floor(int k) { return kAbsPerTerm * k; }

std::vector<float> nans(std::size_t n) { return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- the cuBLASLt calls, column-major, against a brute-force reference ----

struct LtCase {
    int m, n, k;
    bool ta, tb;
    int batch;
    float alpha, beta;
    bool bias;
};

// Layout of a column-major rows x cols operand with ld = rows + pad and batches `stride` apart.
struct Operand {
    long rows, cols, ld, stride;
    long elements(int batch) const { return stride * (batch - 1) + ld * cols; }
};

void check_blas(cublasStatus_t s, const char* what) { ASSERT_EQ(s, CUBLAS_STATUS_SUCCESS) << what; }

void run_lt_case(const LtCase& c, const cuda::BlasContext& blas, cudaStream_t stream) {
    // op(A) m x k, op(B) k x n, D m x n; every ld padded, every batch stride past the matrix.
    auto operand = [](long rows, long cols, long pad, long gap) {
        return Operand{rows, cols, rows + pad, (rows + pad) * cols + gap};
    };
    const Operand as = operand(c.ta ? c.k : c.m, c.ta ? c.m : c.k, 3, 5);
    const Operand bs = operand(c.tb ? c.n : c.k, c.tb ? c.k : c.n, 1, 7);
    const Operand ds = operand(c.m, c.n, 2, 4);
    const std::vector<float> ha = random_floats(as.elements(c.batch), 11), hb = random_floats(bs.elements(c.batch), 12),
                             hd = random_floats(ds.elements(c.batch), 13), hbias = random_floats(c.m, 14);
    // Reference: D (in place, so padding and untouched batches gaps must keep their values).
    std::vector<float> want = hd;
    for (int i = 0; i < c.batch; ++i)
        for (long col = 0; col < c.n; ++col)
            for (long row = 0; row < c.m; ++row) {
                double acc = 0;
                for (long kk = 0; kk < c.k; ++kk) {
                    const double av =
                        c.ta ? ha[i * as.stride + kk + row * as.ld] : ha[i * as.stride + row + kk * as.ld];
                    const double bv =
                        c.tb ? hb[i * bs.stride + col + kk * bs.ld] : hb[i * bs.stride + kk + col * bs.ld];
                    acc += av * bv;
                }
                float& out = want[i * ds.stride + row + col * ds.ld];
                double v = c.alpha * acc + (c.beta != 0.0f ? c.beta * static_cast<double>(out) : 0.0);
                if (c.bias) v += hbias[row];
                out = static_cast<float>(v);
            }
    DeviceArray<float> da(ha), db(hb), dd(hd), dbias(hbias);

    cublasLtMatmulDesc_t desc = nullptr;
    check_blas(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
    const std::int32_t opa = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_blas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)), "transa");
    check_blas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)), "transb");
    if (c.bias) {
        const std::uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        const float* bias = dbias.get();
        check_blas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
                   "epilogue");
        check_blas(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                   "bias");
    }
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    const Operand* ops[3] = {&as, &bs, &ds};
    cublasLtMatrixLayout_t* layouts[3] = {&la, &lb, &ld};
    for (int i = 0; i < 3; ++i) {
        check_blas(cublasLtMatrixLayoutCreate(layouts[i], CUDA_R_32F, ops[i]->rows, ops[i]->cols, ops[i]->ld),
                   "layout");
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
    cublasLtMatmulPreference_t pref = nullptr;
    check_blas(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const std::uint64_t workspace = blas.workspace_bytes;
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                                    sizeof(workspace)),
               "workspace");
    const std::uint32_t align = 4;  // odd lds and strides: float alignment only
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        check_blas(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)), "alignment");
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    check_blas(cublasLtMatmulAlgoGetHeuristic(blas.handle, desc, la, lb, ld, ld, pref, 1, &heuristic, &found),
               "heuristic");
    ASSERT_EQ(found, 1);
    check_blas(cublasLtMatmul(blas.handle, desc, &c.alpha, da.get(), la, db.get(), lb, &c.beta, dd.get(), ld, dd.get(),
                              ld, &heuristic.algo, blas.workspace, blas.workspace_bytes, stream),
               "matmul");
    // The emulation sums in double in the reference's order: bit-identical. A GPU sums in fp32.
    const bool exact = running_under_emulation();
    EXPECT_TRUE(all_close(dd.download(), want, exact ? 0.0 : kRel, exact ? 0.0 : abs_floor(c.k)))
        << "m=" << c.m << " n=" << c.n << " k=" << c.k << " ta=" << c.ta << " tb=" << c.tb << " batch=" << c.batch
        << " beta=" << c.beta << " bias=" << c.bias;
    cublasLtMatmulPreferenceDestroy(pref);
    for (auto* l : layouts) cublasLtMatrixLayoutDestroy(*l);
    cublasLtMatmulDescDestroy(desc);
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

// The emulation refuses what it does not emulate rather than compute something else.
TEST(CudaMatmulCublasLt, EmulationRefusesWhatItDoesNotEmulate) {
    ADACC_REQUIRE_CUDA_DEVICE();
    if (!running_under_emulation()) GTEST_SKIP() << "checks the emulation only";
    cublasLtMatmulDesc_t desc = nullptr;
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F), CUBLAS_STATUS_NOT_SUPPORTED);
    ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    const std::uint32_t gelu = CUBLASLT_EPILOGUE_GELU_BIAS;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &gelu, sizeof(gelu)),
              CUBLAS_STATUS_NOT_SUPPORTED);
    const std::int32_t conj = CUBLAS_OP_C;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &conj, sizeof(conj)),
              CUBLAS_STATUS_NOT_SUPPORTED);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatrixLayout_t layout = nullptr;
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 4, 4, 4), CUBLAS_STATUS_NOT_SUPPORTED);
    cublasLtMatmulPreference_t pref = nullptr;
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    const std::uint64_t impl_mask = 1;
    EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_IMPL_MASK, &impl_mask, sizeof(impl_mask)),
              CUBLAS_STATUS_NOT_SUPPORTED);
    cublasLtMatmulPreferenceDestroy(pref);
}

// A pointer less aligned than the heuristic was told is an error, as on the GPU.
TEST(CudaMatmulCublasLt, EmulationChecksThePromisedAlignment) {
    ADACC_REQUIRE_CUDA_DEVICE();
    if (!running_under_emulation()) GTEST_SKIP() << "checks the emulation only";
    CudaTestContext ctx;
    const auto& blas = *static_cast<const cuda::BlasContext*>(ctx.get().blas);
    DeviceArray<float> a(64), b(64), d(64);
    cublasLtMatmulDesc_t desc = nullptr;
    ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    cublasLtMatrixLayout_t l = nullptr;
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t pref = nullptr;
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);  // default: 256-byte alignment
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(blas.handle, desc, l, l, l, l, pref, 1, &heuristic, &found),
              CUBLAS_STATUS_SUCCESS);
    const float one = 1.0f, zero = 0.0f;
    EXPECT_EQ(cublasLtMatmul(blas.handle, desc, &one, a.get() + 1, l, b.get(), l, &zero, d.get(), l, d.get(), l,
                             &heuristic.algo, nullptr, 0, nullptr),
              CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(l);
    cublasLtMatmulDescDestroy(desc);
}

// ---- matmul_forward / matmul_backward against the CPU twin ----

struct Shape {
    int N, C, OC;
};
// T = 1 (N = 1), odd sizes, and N = 300 rows: the bias gradient's 60 row groups of 5, several
// column tiles (OC = 101).
const Shape kShapes[] = {{1, 40, 101}, {14, 72, 101}, {14, 40, 120}, {300, 72, 101}};

TEST(CudaMatmul, ForwardMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes)
        for (bool with_bias : {true, false}) {
            const auto x = random_floats(static_cast<std::size_t>(s.N) * s.C, 1);
            const auto w = random_floats(static_cast<std::size_t>(s.OC) * s.C, 2);
            const auto bias = random_floats(s.OC, 3);
            std::vector<float> want(static_cast<std::size_t>(s.N) * s.OC);
            cpu::matmul_forward(cpu::default_context(), want.data(), x.data(), w.data(),
                                with_bias ? bias.data() : nullptr, s.N, s.C, s.OC);
            DeviceArray<float> dx(x), dw(w), db(bias), out(nans(want.size()));
            cuda::matmul_forward(ctx.get(), out.get(), dx.get(), dw.get(), with_bias ? db.get() : nullptr, s.N, s.C,
                                 s.OC);
            const auto got = out.download();
            EXPECT_TRUE(all_close(got, want, kRel, abs_floor(s.C)))
                << "N=" << s.N << " C=" << s.C << " OC=" << s.OC << " bias=" << with_bias;
            // Deterministic: the same call again gives the same bits.
            cuda::matmul_forward(ctx.get(), out.get(), dx.get(), dw.get(), with_bias ? db.get() : nullptr, s.N, s.C,
                                 s.OC);
            EXPECT_TRUE(same_bits(out.download(), got));
        }
}

TEST(CudaMatmul, BackwardMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const Shape& s : kShapes)
        for (bool accumulate : {false, true})
            for (bool with_dinp : {true, false})
                for (bool with_dbias : {true, false}) {
                    const std::size_t nx = static_cast<std::size_t>(s.N) * s.C,
                                      nw = static_cast<std::size_t>(s.OC) * s.C,
                                      ny = static_cast<std::size_t>(s.N) * s.OC;
                    const auto x = random_floats(nx, 1), w = random_floats(nw, 2), dy = random_floats(ny, 4);
                    // Gradients already holding a micro-batch's sum (accumulate) or stale values.
                    const auto dw0 = random_floats(nw, 5), db0 = random_floats(s.OC, 6);
                    std::vector<float> dx_want(nx), dw_want = dw0, db_want = db0;
                    cpu::matmul_backward(cpu::default_context(), with_dinp ? dx_want.data() : nullptr, dw_want.data(),
                                         with_dbias ? db_want.data() : nullptr, dy.data(), x.data(), w.data(), s.N, s.C,
                                         s.OC, accumulate);
                    DeviceArray<float> gx(x), gw(w), gy(dy), gdx(nans(nx)), gdw(accumulate ? dw0 : nans(nw)),
                        gdb(accumulate ? db0 : nans(s.OC));
                    cuda::matmul_backward(ctx.get(), with_dinp ? gdx.get() : nullptr, gdw.get(),
                                          with_dbias ? gdb.get() : nullptr, gy.get(), gx.get(), gw.get(), s.N, s.C,
                                          s.OC, accumulate);
                    const std::string where =
                        "N=" + std::to_string(s.N) + " C=" + std::to_string(s.C) + " OC=" + std::to_string(s.OC) +
                        " accumulate=" + std::to_string(accumulate) + " dinp=" + std::to_string(with_dinp) +
                        " dbias=" + std::to_string(with_dbias);
                    if (with_dinp) {
                        EXPECT_TRUE(all_close(gdx.download(), dx_want, kRel, abs_floor(s.OC))) << where;
                    }
                    EXPECT_TRUE(all_close(gdw.download(), dw_want, kRel, abs_floor(s.N))) << where;
                    if (with_dbias) {
                        EXPECT_TRUE(all_close(gdb.download(), db_want, kRel, abs_floor(s.N))) << where;
                    } else if (!accumulate) {
                        // Null dbias: nothing written there (still the NaNs it was filled with).
                        for (float v : gdb.download()) EXPECT_TRUE(std::isnan(v)) << where;
                    }
                }
}

// Bit-identical results: a recomputation equals the first run, the dbias sums do not depend on
// the other outputs, and accumulate = false ignores what the gradients held.
TEST(CudaMatmul, BackwardIsDeterministic) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const Shape s{300, 72, 101};
    const std::size_t nx = static_cast<std::size_t>(s.N) * s.C, nw = static_cast<std::size_t>(s.OC) * s.C,
                      ny = static_cast<std::size_t>(s.N) * s.OC;
    DeviceArray<float> gx(random_floats(nx, 1)), gw(random_floats(nw, 2)), gy(random_floats(ny, 4));
    DeviceArray<float> dx1(nx), dw1(nw), db1(s.OC), dx2(nx), dw2(random_floats(nw, 7)), db2(random_floats(s.OC, 8));
    cuda::matmul_backward(ctx.get(), dx1.get(), dw1.get(), db1.get(), gy.get(), gx.get(), gw.get(), s.N, s.C, s.OC,
                          false);
    cuda::matmul_backward(ctx.get(), nullptr, dw2.get(), db2.get(), gy.get(), gx.get(), gw.get(), s.N, s.C, s.OC,
                          false);
    cuda::matmul_backward(ctx.get(), dx2.get(), dw2.get(), db2.get(), gy.get(), gx.get(), gw.get(), s.N, s.C, s.OC,
                          false);
    EXPECT_TRUE(same_bits(dx1.download(), dx2.download()));
    EXPECT_TRUE(same_bits(dw1.download(), dw2.download()));
    EXPECT_TRUE(same_bits(db1.download(), db2.download()));
}

}  // namespace
}  // namespace adacc::test
