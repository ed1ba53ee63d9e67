// Linear layers through Eigen's GEMM. Eigen runs single-threaded inside our own OpenMP
// partition of the output: its parallel path allocates packing buffers on the heap, and a
// training step must not allocate (EIGEN_DONT_PARALLELIZE and a raised
// EIGEN_STACK_ALLOCATION_LIMIT are set in CMakeLists.txt, so packing lives on the stack).
#include <omp.h>
#include <Eigen/Core>
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/ops.h"
#include "kernels/gelu_math.h"

namespace adacc::cpu {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<RowMatrix>;
using ConstMatrixView = Eigen::Map<const RowMatrix>;
using Stride = Eigen::OuterStride<>;
using StridedView = Eigen::Map<RowMatrix, 0, Stride>;
using ConstStridedView = Eigen::Map<const RowMatrix, 0, Stride>;

// This thread's share [begin, end) of `n` items, chunked in multiples of 16 so that SIMD
// panels stay aligned.
struct Range {
    int begin, end;
};
Range thread_range(int n) {
    const int threads = omp_get_num_threads(), id = omp_get_thread_num();
    const int chunk = ((n + threads - 1) / threads + 15) / 16 * 16;
    const int begin = std::min(n, id * chunk);
    return {begin, std::min(n, begin + chunk)};
}

// Output columns per Eigen GEMM call in matmul_forward. Eigen packs the right-hand side's whole
// k x n panel (here C x columns), and a panel over EIGEN_STACK_ALLOCATION_LIMIT goes to the heap:
// the classifier's C x Vp/threads took 73 MiB per thread at gpt-117m, memory no accounting
// counted. Columns in blocks whose panel fits the limit keep packing on the stack. Each output's
// sum runs over the same k blocks in the same order (Eigen's kc depends on k, not n), so the
// results are the same bits.
int column_block(int C) {
    constexpr long kPackBytes = EIGEN_STACK_ALLOCATION_LIMIT;
    const long fits = kPackBytes / (static_cast<long>(sizeof(float)) * C);
    return static_cast<int>(std::max<long>(16, fits / 16 * 16));
}

// The fused kernels' contract (kernels/ops.inc), which the CPU keeps too so that both backends
// refuse the same shapes.
void check_gelu_columns(int columns, const char* what) {
    if (columns % kGeluEpilogueColumns != 0)
        throw std::invalid_argument(std::string(what) + ": the GELU's width " + std::to_string(columns) +
                                    " is not a multiple of " + std::to_string(kGeluEpilogueColumns));
}

}  // namespace

void matmul_forward(const KernelContext& ctx, Act out_act, ConstAct inp_act, ConstAct weight_act, ConstAct bias_act,
                    int N, int C, int OC) {
    float* out = out_act.as<float>();
    const float* inp = inp_act.as<float>();
    const float* weight = weight_act.as<float>();
    const float* bias = bias_act.as<float>();
    // Split over output channels: each thread multiplies all rows by its slice of W, in blocks of
    // columns whose packed panel stays on the stack.
    const int block = column_block(C);
#pragma omp parallel num_threads(team(ctx))
    {
        const Range r = thread_range(OC);
        ConstMatrixView x(inp, N, C);
        for (int begin = r.begin; begin < r.end; begin += block) {
            const int cols = std::min(block, r.end - begin);
            ConstMatrixView w(weight + static_cast<long>(begin) * C, cols, C);
            StridedView y(out + begin, N, cols, Stride(OC));
            y.noalias() = x * w.transpose();
            if (bias)
                for (int i = 0; i < N; ++i)
                    for (int j = 0; j < cols; ++j) y(i, j) += bias[begin + j];
        }
    }
}

void matmul_backward(const KernelContext& ctx, Act dinp_act, float* dweight, float* dbias, ConstAct dout_act,
                     ConstAct inp_act, ConstAct weight_act, int N, int C, int OC, bool accumulate) {
    float* dinp = dinp_act.as<float>();
    const float* dout = dout_act.as<float>();
    const float* inp = inp_act.as<float>();
    const float* weight = weight_act.as<float>();
#pragma omp parallel num_threads(team(ctx))
    {
        // dinp (N x C) = dout (N x OC) @ W (OC x C), split over input channels.
        if (dinp) {
            const Range r = thread_range(C);
            if (r.end > r.begin) {
                ConstMatrixView dy(dout, N, OC);
                ConstStridedView w(weight + r.begin, OC, r.end - r.begin, Stride(C));
                StridedView dx(dinp + r.begin, N, r.end - r.begin, Stride(C));
                dx.noalias() = dy * w;
            }
        }
        // dW (OC x C) += dout^T (OC x N) @ inp (N x C), and dbias, split over output channels.
        const Range r = thread_range(OC);
        if (r.end > r.begin) {
            const int rows = r.end - r.begin;
            ConstStridedView dy(dout + r.begin, N, rows, Stride(OC));
            ConstMatrixView x(inp, N, C);
            MatrixView dw(dweight + static_cast<long>(r.begin) * C, rows, C);
            if (accumulate)
                dw.noalias() += dy.transpose() * x;
            else
                dw.noalias() = dy.transpose() * x;
            if (dbias) {
                if (!accumulate)
                    for (int j = 0; j < rows; ++j) dbias[r.begin + j] = 0.0f;
                for (int i = 0; i < N; ++i)
                    for (int j = 0; j < rows; ++j) dbias[r.begin + j] += dy(i, j);
            }
        }
    }
}

// The fp32 sums, then GELU on them: the unfused ops' arithmetic, bit for bit.
void matmul_gelu_forward(const KernelContext& ctx, Act out, Act pre, ConstAct inp, ConstAct weight, ConstAct bias,
                         int N, int C, int OC) {
    check_gelu_columns(OC, "matmul_gelu_forward");
    matmul_forward(ctx, pre, inp, weight, bias, N, C, OC);
    gelu_forward(ctx, out, pre, static_cast<long>(N) * OC);
}

// d(inp) in fp32 into dpre, then times gelu'(pre) in place: again the unfused ops' arithmetic.
void matmul_dgelu_backward(const KernelContext& ctx, Act dpre, float* dweight, float* dbias, ConstAct dout,
                           ConstAct inp, ConstAct pre, ConstAct weight, int N, int C, int OC, bool accumulate) {
    check_gelu_columns(C, "matmul_dgelu_backward");
    matmul_backward(ctx, dpre, dweight, dbias, dout, inp, weight, N, C, OC, accumulate);
    gelu_backward(ctx, dpre, pre, dpre, static_cast<long>(N) * C);
}

}  // namespace adacc::cpu
