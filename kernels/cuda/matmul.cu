// Linear layers: the three GEMMs go to cuBLASLt through kernels/cuda/blas.h (fp32 compute, the
// bias fused as its epilogue, and for the MLP GELU too: GELU_AUX_BIAS forward, DGELU backward);
// the bias gradient is a handwritten two-pass column sum (16-byte loads), because
// cuBLASLt's bias-gradient epilogues do not promise a fixed reduction order. Activations, the
// weight and the bias are the model's dtype T (f32, or bf16 from the working copy); dweight and
// dbias are fp32 always, so in bf16 the dweight GEMM reads bf16 and accumulates into fp32 D.
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

// The column sum's tile: 32 packs of kPack columns (one per lane, so a warp reads 512 contiguous
// bytes of a row) by kSumRowLanes rows, each lane with kSumRowsInFlight rows' packs loaded before it
// adds them.
constexpr int kSumRowLanes = 8;
constexpr int kSumRowsInFlight = 4;
// Rows of a group: 1024 groups at B x T = 262,144, a few thousand blocks to fill the GPU, and
// partials (a row of OC floats per group) a hundredth of what dout's rows hold.
constexpr int kSumRowsPerGroup = 256;

// Pass 1: partial[g * OC + col] = sum of dout[r, col] over row group g (rows [g * rows_per_group,
// ...)). Lane (x, y) sums rows y, y + 8, ... of the group in order for its pack of columns; the 8
// lanes of a column are then added in y order: a fixed order that depends only on the shape.
// `aligned`: dout's rows start 16-byte aligned (dout is, and OC is a multiple of kPack).
template <typename T>
__global__ void column_sum_partial_kernel(float* partial, const T* dout, int N, int OC, int rows_per_group,
                                          bool aligned) {
    constexpr int P = kPack<T>;
    __shared__ float sums[kSumRowLanes][P][32];  // [y][j][x]: a column's lanes 32 words apart, no bank conflict
    const int col = (blockIdx.x * 32 + threadIdx.x) * P;
    const int group = blockIdx.y;
    const int row_end = (group + 1) * rows_per_group < N ? (group + 1) * rows_per_group : N;
    float sum[P] = {};
    if (col < OC)
        for (int first = group * rows_per_group + threadIdx.y; first < row_end;
             first += kSumRowsInFlight * kSumRowLanes) {
            float v[kSumRowsInFlight][P] = {};
            ADACC_UNROLL
            for (int u = 0; u < kSumRowsInFlight; ++u) {
                const int r = first + u * kSumRowLanes;
                if (r < row_end) load_pack(v[u], dout + static_cast<long>(r) * OC, col, OC, aligned);
            }
            ADACC_UNROLL
            for (int u = 0; u < kSumRowsInFlight && first + u * kSumRowLanes < row_end; ++u)
                for (int j = 0; j < P; ++j) sum[j] += v[u][j];
        }
    for (int j = 0; j < P; ++j) sums[threadIdx.y][j][threadIdx.x] = sum[j];
    __syncthreads();
    if (threadIdx.y != 0) return;
    for (int j = 0; j < P && col + j < OC; ++j) {
        float total = sums[0][j][threadIdx.x];
        for (int y = 1; y < kSumRowLanes; ++y) total += sums[y][j][threadIdx.x];
        partial[static_cast<long>(group) * OC + col + j] = total;
    }
}

// dbias (OC) (+)= column sums of dout (N x OC), N >= 1: row groups of kSumRowsPerGroup rows (more
// rows each where their partials would not fit the reduction scratch, or the groups a grid's
// height), then sum_group_partials.
template <typename T>
void bias_gradient(const KernelContext& ctx, float* dbias, const T* dout, int N, int OC, bool accumulate) {
    if (OC <= 0) return;
    const long fit = static_cast<long>(ctx.reduction_scratch_bytes / (sizeof(float) * static_cast<std::size_t>(OC)));
    if (!ctx.reduction_scratch || fit < 1)
        throw std::runtime_error("matmul_backward: the reduction scratch cannot hold one row of dbias partials");
    constexpr long kMaxGridY = 65535;  // the groups are the grid's y dimension
    long groups = ceil_div(N, kSumRowsPerGroup);
    if (groups > fit) groups = fit;
    if (groups > kMaxGridY) groups = kMaxGridY;
    const int rows_per_group = static_cast<int>(ceil_div(N, groups));
    groups = ceil_div(N, rows_per_group);  // no empty trailing group
    auto* partial = static_cast<float*>(ctx.reduction_scratch);
    const bool aligned = OC % kPack<T> == 0 && packs_aligned({dout});
    const dim3 grid(ceil_div(OC, 32 * kPack<T>), static_cast<unsigned>(groups));
    ADACC_LAUNCH(column_sum_partial_kernel<T>, grid, dim3(32, kSumRowLanes), 0, ctx.stream)
    (partial, dout, N, OC, rows_per_group, aligned);
    check_launch("matmul_backward (column_sum_partial_kernel)");
    sum_group_partials(ctx, dbias, partial, static_cast<int>(groups), OC, accumulate, "matmul_backward (dbias)");
}

// out (N x OC) = inp (N x C) @ weight^T, weight stored OC x C; the bias (OC) is added to every
// row by cuBLASLt's epilogue (none when null), then `gelu`'s, if any.
void linear_forward(const KernelContext& ctx, Act out, ConstAct inp, ConstAct weight, ConstAct bias, int N, int C,
                    int OC, DType type, const GemmGelu& gelu, const char* what) {
    GemmShape s;
    s.m = N;
    s.n = OC;
    s.k = C;
    s.input = s.output = type;
    GemmOperand x, w;
    x.data = inp.data();
    x.ld = C;
    w.data = weight.data();
    w.ld = C;
    w.transpose = true;
    gemm(ctx, s, x, w, out.data(), OC, 0, bias.data(), what, gelu);
}

// What a backward's errors name (literals: nothing is built per call).
struct BackwardNames {
    const char *kernel, *memset, *dinp, *dweight;
};
constexpr BackwardNames kMatmulBackward{"matmul_backward", "matmul_backward: cudaMemsetAsync", "matmul_backward (dinp)",
                                        "matmul_backward (dweight)"};
constexpr BackwardNames kDgeluBackward{"matmul_dgelu_backward", "matmul_dgelu_backward: cudaMemsetAsync",
                                       "matmul_dgelu_backward (dpre)", "matmul_dgelu_backward (dweight)"};

// matmul_backward, its dinp GEMM with `gelu`'s epilogue (none, or DGELU).
void linear_backward(const KernelContext& ctx, Act dinp, float* dweight, float* dbias, ConstAct dout, ConstAct inp,
                     ConstAct weight, int N, int C, int OC, bool accumulate, DType type, const GemmGelu& gelu,
                     const BackwardNames& names) {
    if (N <= 0) {
        // No rows: the gradients add nothing; overwriting means zeroing.
        if (!accumulate) {
            check(cudaMemsetAsync(dweight, 0, sizeof(float) * static_cast<std::size_t>(OC) * C, stream_of(ctx)),
                  names.memset);
            if (dbias)
                check(cudaMemsetAsync(dbias, 0, sizeof(float) * static_cast<std::size_t>(OC), stream_of(ctx)),
                      names.memset);
        }
        return;
    }
    GemmOperand gy;  // dout, N x OC
    gy.data = dout.data();
    gy.ld = OC;
    // dinp (N x C) = dout (N x OC) @ weight (OC x C), overwritten, in the activations' type.
    if (dinp) {
        GemmShape s;
        s.m = N;
        s.n = C;
        s.k = OC;
        s.input = s.output = type;
        GemmOperand w;
        w.data = weight.data();
        w.ld = C;
        gemm(ctx, s, gy, w, dinp.data(), C, 0, nullptr, names.dinp, gelu);
    }
    // dweight (OC x C, fp32) = dout^T (OC x N) @ inp (N x C), added to dweight when accumulating.
    {
        GemmShape s;
        s.m = OC;
        s.n = C;
        s.k = N;
        s.beta = accumulate ? 1.0f : 0.0f;
        s.input = type;
        s.output = DType::f32;
        GemmOperand gyt = gy, x;
        gyt.transpose = true;
        x.data = inp.data();
        x.ld = C;
        gemm(ctx, s, gyt, x, dweight, C, 0, nullptr, names.dweight);
    }
    if (dbias)
        with_activation_type(type, names.kernel, [&](auto tag) {
            using T = typename decltype(tag)::type;
            bias_gradient(ctx, dbias, device_ptr<T>(dout), N, OC, accumulate);
        });
}

}  // namespace

void matmul_forward(const KernelContext& ctx, Act out, ConstAct inp, ConstAct weight, ConstAct bias, int N, int C,
                    int OC) {
    const DType type = activation_type("matmul_forward", {inp, out, weight, bias});
    linear_forward(ctx, out, inp, weight, bias, N, C, OC, type, {}, "matmul_forward");
}

void matmul_backward(const KernelContext& ctx, Act dinp, float* dweight, float* dbias, ConstAct dout, ConstAct inp,
                     ConstAct weight, int N, int C, int OC, bool accumulate) {
    const DType type = activation_type("matmul_backward", {dout, inp, weight, dinp});
    linear_backward(ctx, dinp, dweight, dbias, dout, inp, weight, N, C, OC, accumulate, type, {}, kMatmulBackward);
}

// out = gelu(pre) in D, pre = the biased product in GELU_AUX_BIAS's aux matrix.
void matmul_gelu_forward(const KernelContext& ctx, Act out, Act pre, ConstAct inp, ConstAct weight, ConstAct bias,
                         int N, int C, int OC) {
    const DType type = activation_type("matmul_gelu_forward", {inp, out, pre, weight, bias});
    linear_forward(ctx, out, inp, weight, bias, N, C, OC, type, {GeluEpilogue::forward, pre.data(), OC},
                   "matmul_gelu_forward");
}

// dpre = (dout @ weight) * gelu'(pre) in the dinp GEMM's DGELU epilogue.
void matmul_dgelu_backward(const KernelContext& ctx, Act dpre, float* dweight, float* dbias, ConstAct dout,
                           ConstAct inp, ConstAct pre, ConstAct weight, int N, int C, int OC, bool accumulate) {
    const DType type = activation_type("matmul_dgelu_backward", {dout, inp, pre, weight, dpre});
    if (!dpre) throw std::invalid_argument("matmul_dgelu_backward: no dpre (the GELU's input gradient is its output)");
    linear_backward(ctx, dpre, dweight, dbias, dout, inp, weight, N, C, OC, accumulate, type,
                    {GeluEpilogue::backward, pre.data(), C}, kDgeluBackward);
}

}  // namespace adacc::cuda
