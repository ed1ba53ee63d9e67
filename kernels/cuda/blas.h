// The one place kernels/cuda/ calls cuBLASLt: a row-major, optionally strided-batched GEMM
//   D_i (m x n) = alpha * op(A_i) (m x k) @ op(B_i) (k x n) + beta * D_i [+ bias (n), every row]
// for i < batch, X_i = X + i * stride_x elements, op(X) = X or X^T. Accumulation is fp32
// (CUBLAS_COMPUTE_32F: true fp32, never TF32; split-K partial sums too, a bf16 D's included)
// whatever the element types, which are those
// cuBLASLt supports with it:
//   A, B f32  -> D f32
//   A, B bf16 -> D bf16 (rounded to nearest even from the fp32 result), or D f32 (with beta = 1,
//                how a parameter gradient accumulates in fp32 from bf16 activations).
// The bias has D's element type. An epilogue may add GELU after the bias (GemmGelu). Plain C++ (no
// device code), so tests can include it too.
#pragma once

#include "kernels/kernel_context.h"
#include "src/common/dtype.h"

namespace adacc::cuda {

// A row-major matrix operand: element (r, c) of batch i at data[i * batch_stride + r * ld + c],
// r and c counted in the stored (untransposed) matrix.
struct GemmOperand {
    const void* data = nullptr;
    long ld = 0;
    long batch_stride = 0;
    bool transpose = false;  // use the stored matrix transposed
};

struct GemmShape {
    int m = 0, n = 0, k = 0;  // D is m x n, the reduction is over k
    int batch = 1;
    float alpha = 1.0f, beta = 0.0f;  // beta == 0: D is not read (may hold anything, NaN too)
    DType input = DType::f32;         // element type of A and B
    DType output = DType::f32;        // element type of D (and of the bias)
};

// GELU in the epilogue, applied to the fp32 result (bias included) before D is stored. forward:
// D = gelu(result), and the result itself goes to `aux` (cuBLASLt's GELU_AUX[_BIAS]); backward:
// D = result * gelu'(aux) (DGELU; no bias). aux is a row-major m x n matrix of D's element type,
// leading dimension ld a multiple of kGeluEpilogueColumns (kernels/gelu_math.h); batch 1 only.
enum class GeluEpilogue { none, forward, backward };
struct GemmGelu {
    GeluEpilogue mode = GeluEpilogue::none;
    const void* aux = nullptr;  // written in forward, read in backward
    long ld = 0;
};

// Queues the GEMM on ctx.stream with the handle and workspace of ctx.blas (cuda::BlasContext).
// d: ldd and stride_d as for the operands; bias: n elements (null: none). Throws
// std::invalid_argument naming `what` for element types outside the table above, and
// std::runtime_error when cuBLASLt refuses. Deterministic: the workspace size is fixed and the
// heuristic's first algorithm is used, so a shape (and operand alignment, capped at 16 bytes so
// that 64-byte-aligned arena slots all look alike) always runs the same algorithm.
void gemm(const KernelContext& ctx, const GemmShape& shape, const GemmOperand& a, const GemmOperand& b, void* d,
          long ldd, long stride_d, const void* bias, const char* what, const GemmGelu& gelu = {});

}  // namespace adacc::cuda
