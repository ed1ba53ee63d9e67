// Causal self-attention with materialised T x T probabilities (kernels/cpu/attention.cpp is the
// twin). qkv rows are [q | k | v], head h of batch b is the T x hs block at rows b*T.., columns
// h*hs.. (leading dimension 3C), so for a fixed b the NH heads are a strided batch (stride hs),
// and for a fixed h the B batches are one too (stride T*3C): every product below is one cuBLASLt
// strided-batched GEMM per b or per h (kernels/cuda/blas.h), whichever is fewer calls. The
// handwritten kernels are the row softmaxes (one warp per row) and, only when attention dropout
// is on, the products with dropout(att), whose dropped probabilities are never stored.
//
// Regions written, as the CPU twin: att and datt whole (zero above the diagonal); the v columns
// of dqkv by attention_value_backward, the q and k columns by attention_softmax_backward. The
// cuBLASLt products with att (att @ v, att^T @ datty) read att above the diagonal too, where the
// contract (kernels/ops.inc) says it is zero; the handwritten kernels never read it there.
//
// Element types: every tensor here (qkv, att, atty, datt, dqkv, datty) has the model's dtype, E
// in the templates (f32 or bf16; T is the sequence length). The GEMMs read and write E with fp32
// accumulation; the kernels load with to_f32, compute in fp32 and store with from_f32. In bf16
// the scores q k^T are therefore rounded to bf16 in att before the softmax reads them, as the
// probabilities are after it.
#include <cmath>

#include "kernels/cuda/blas.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {
namespace {

constexpr int kRowThreads = 256;  // row kernels: one warp per row, 8 rows per block
constexpr int kRowsPerBlock = kRowThreads / 32;

// att row (already q.k / sqrt(hs) from the GEMM, over all T columns) -> causal softmax in place:
// max-subtracted, normalised over columns 0..t, zero above the diagonal. The exponentials are
// computed again in the last pass instead of stored between passes, so in bf16 they are not
// rounded before the normalisation (and the row is written once). Each lane touches only columns
// lane, lane + 32, ..., so the passes need no barrier between them.
template <typename E>
__global__ void softmax_forward_kernel(E* att, long rows, int T) {
    const long row = static_cast<long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    if (row >= rows) return;  // whole warps only: no shuffle partner is missing
    const int lane = threadIdx.x % 32, t = static_cast<int>(row % T);
    E* x = att + row * T;
    float maxv = -INFINITY;
    for (int t2 = lane; t2 <= t; t2 += 32) maxv = fmaxf(maxv, to_f32(x[t2]));
    maxv = warp_max(maxv);
    float sum = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) sum += expf(to_f32(x[t2]) - maxv);
    const float inv = 1.0f / warp_sum(sum);
    for (int t2 = lane; t2 < T; t2 += 32) x[t2] = from_f32<E>(t2 <= t ? expf(to_f32(x[t2]) - maxv) * inv : 0.0f);
}

// datt (datty . v over all T columns, from the GEMM) -> d(loss)/d(att): times the dropout scale
// mask / (1 - p) when there is a mask, zero above the diagonal (without a mask only those are
// written).
template <typename E>
__global__ void datt_finish_kernel(E* datt, const unsigned char* mask, float keep, long rows, int T) {
    const long row = static_cast<long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32, t = static_cast<int>(row % T);
    E* d = datt + row * T;
    if (mask) {
        const unsigned char* m = mask + row * T;
        for (int t2 = lane; t2 <= t; t2 += 32) d[t2] = from_f32<E>(to_f32(d[t2]) * (m[t2] ? keep : 0.0f));
    }
    for (int t2 = t + 1 + lane; t2 < T; t2 += 32) d[t2] = from_f32<E>(0.0f);
}

// datt -> dpreatt in place: a (da - sum_j a_j da_j) / sqrt(hs) over columns 0..t, zero above, so
// the GEMMs for dq and dk can run over whole rows.
template <typename E>
__global__ void softmax_backward_kernel(E* datt, const E* att, float scale, long rows, int T) {
    const long row = static_cast<long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    if (row >= rows) return;
    const int lane = threadIdx.x % 32, t = static_cast<int>(row % T);
    const E* a = att + row * T;
    E* d = datt + row * T;
    float weighted = 0.0f;
    for (int t2 = lane; t2 <= t; t2 += 32) weighted += to_f32(a[t2]) * to_f32(d[t2]);
    weighted = warp_sum(weighted);
    for (int t2 = lane; t2 < T; t2 += 32)
        d[t2] = from_f32<E>(t2 <= t ? to_f32(a[t2]) * (to_f32(d[t2]) - weighted) * scale : 0.0f);
}

// With dropout: out (T x hs per (b, h)) = P @ X, P = dropout(att) applied on the fly,
//   kTransposed false: P[t, t2] = att[t, t2] * s(t, t2), t2 <= t   (atty = dropout(att) @ v)
//   kTransposed true:  P[t2, t] = att[t, t2] * s(t, t2), t >= t2   (dv = dropout(att)^T @ datty)
// s = mask ? 1 / (1 - p) : 0. A block computes a 32 x 32 tile of out (rows x head channels),
// thread (x, y) the column x of rows y, y + 8, y + 16, y + 24, summing 32-wide k tiles of P and
// X staged in shared memory in increasing k (a fixed order); causal tiles that are all zero are
// skipped. Grid: (B * NH, row tiles, column tiles).
constexpr int kTile = 32, kTileRows = 8;
template <bool kTransposed, typename E>
__global__ void dropout_att_matmul_kernel(E* out, long out_ld, long out_batch, const E* x, long x_ld, long x_batch,
                                          const E* att, const unsigned char* mask, float keep, int T, int hs, int NH) {
    __shared__ float p_tile[kTile][kTile + 1];  // [out row][k], padded against bank conflicts
    __shared__ float x_tile[kTile][kTile + 1];  // [k][column]
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH;
    const long head = static_cast<long>(h) * hs;
    out += b * out_batch + head;
    x += b * x_batch + head;
    att += static_cast<long>(bh) * T * T;
    mask += static_cast<long>(bh) * T * T;
    const int r0 = blockIdx.y * kTile, c0 = blockIdx.z * kTile;
    const int tid = threadIdx.y * kTile + threadIdx.x;
    // Causal: out row r needs k <= r (forward) or k >= r (transposed).
    const int k_begin = kTransposed ? r0 : 0;
    const int k_end = kTransposed ? T : (r0 + kTile < T ? r0 + kTile : T);
    float acc[kTile / kTileRows] = {};
    for (int k0 = k_begin; k0 < k_end; k0 += kTile) {
        for (int e = tid; e < kTile * kTile; e += kTile * kTileRows) {
            const int lo = e % kTile, hi = e / kTile;  // lo runs along contiguous memory
            // P tile: forward reads att rows (r = hi, k = lo), transposed att columns (r = lo, k = hi).
            const int r = kTransposed ? lo : hi, k = kTransposed ? hi : lo;
            const int row = r0 + r, kk = k0 + k;
            const int t = kTransposed ? kk : row, t2 = kTransposed ? row : kk;
            float p = 0.0f;
            if (t < T && t2 <= t) {
                const long idx = static_cast<long>(t) * T + t2;
                p = to_f32(att[idx]) * (mask[idx] ? keep : 0.0f);
            }
            p_tile[r][k] = p;
            const int xr = k0 + hi, xc = c0 + lo;
            x_tile[hi][lo] = xr < T && xc < hs ? to_f32(x[static_cast<long>(xr) * x_ld + xc]) : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < kTile; ++k) {
            const float xv = x_tile[k][threadIdx.x];
            for (int j = 0; j < kTile / kTileRows; ++j)
                acc[j] = fmaf(p_tile[threadIdx.y + j * kTileRows][k], xv, acc[j]);
        }
        __syncthreads();
    }
    const int col = c0 + threadIdx.x;
    for (int j = 0; j < kTile / kTileRows; ++j) {
        const int row = r0 + threadIdx.y + j * kTileRows;
        if (row < T && col < hs) out[static_cast<long>(row) * out_ld + col] = from_f32<E>(acc[j]);
    }
}

// The B x NH (b, h) pairs as cuBLASLt calls: `calls` strided-batched GEMMs of `batch` pairs.
// Element offsets of pair (b, h): qkv-shaped tensors (N x 3C) b*T*3C + h*hs, att-shaped
// (B x NH x T x T) (b*NH + h)*T*T, atty-shaped (N x C) b*T*C + h*hs. Per call i and batch
// entry j, the offset is i * *_call + j * *_step.
struct HeadPairs {
    int calls = 0, batch = 0;
    long qkv_call = 0, qkv_step = 0, att_call = 0, att_step = 0, y_call = 0, y_step = 0;
};
HeadPairs head_pairs(int B, int T, int C, int NH) {
    const long hs = C / NH, TT = static_cast<long>(T) * T;
    HeadPairs p;
    if (B <= NH) {  // one call per b, its heads batched
        p = {B, NH, 3L * T * C, hs, NH * TT, TT, static_cast<long>(T) * C, hs};
    } else {  // one call per h, the batches batched
        p = {NH, B, hs, 3L * T * C, TT, NH * TT, hs, static_cast<long>(T) * C};
    }
    return p;
}

GemmOperand operand(const void* data, long ld, long step, bool transpose = false) {
    GemmOperand o;
    o.data = data;
    o.ld = ld;
    o.batch_stride = step;
    o.transpose = transpose;
    return o;
}
// Every product here reads and writes the activations' type.
GemmShape shape(DType type, int m, int n, int k, int batch, float alpha = 1.0f) {
    GemmShape s;
    s.input = s.output = type;
    s.m = m;
    s.n = n;
    s.k = k;
    s.batch = batch;
    s.alpha = alpha;
    return s;
}

float softmax_scale(int hs) { return 1.0f / std::sqrt(static_cast<float>(hs)); }
long att_rows(int B, int T, int NH) { return static_cast<long>(B) * NH * T; }

}  // namespace

void attention_softmax_forward(const KernelContext& ctx, Act att_act, ConstAct qkv_act, int B, int T, int C, int NH) {
    const DType type = activation_type("attention_softmax_forward", {qkv_act, att_act});
    with_activation_type(type, "attention_softmax_forward", [&](auto tag) {
        using E = typename decltype(tag)::type;
        E* att = device_ptr<E>(att_act);
        const E* qkv = device_ptr<E>(qkv_act);
        if (B <= 0 || T <= 0) return;
        const int hs = C / NH;
        const HeadPairs p = head_pairs(B, T, C, NH);
        // preatt (T x T) = q (T x hs) @ k^T / sqrt(hs), written over the whole of att.
        for (int i = 0; i < p.calls; ++i) {
            const E* q = qkv + i * p.qkv_call;
            gemm(ctx, shape(type, T, T, hs, p.batch, softmax_scale(hs)), operand(q, 3L * C, p.qkv_step),
                 operand(q + C, 3L * C, p.qkv_step, true), att + i * p.att_call, T, p.att_step, nullptr,
                 "attention_softmax_forward (q k^T)");
        }
        const long rows = att_rows(B, T, NH);
        ADACC_LAUNCH(softmax_forward_kernel<E>, ceil_div(rows, kRowsPerBlock), kRowThreads, 0, ctx.stream)
        (att, rows, T);
        check_launch("attention_softmax_forward");
    });
}

void attention_value_forward(const KernelContext& ctx, Act atty_act, ConstAct att_act, const unsigned char* mask,
                             float dropout_p, ConstAct qkv_act, int B, int T, int C, int NH) {
    const DType type = activation_type("attention_value_forward", {qkv_act, atty_act, att_act});
    with_activation_type(type, "attention_value_forward", [&](auto tag) {
        using E = typename decltype(tag)::type;
        E* atty = device_ptr<E>(atty_act);
        const E* att = device_ptr<E>(att_act);
        const E* qkv = device_ptr<E>(qkv_act);
        if (B <= 0 || T <= 0) return;
        const int hs = C / NH;
        if (mask) {
            const float keep = 1.0f / (1.0f - dropout_p);
            const dim3 grid(B * NH, ceil_div(T, kTile), ceil_div(hs, kTile));
            ADACC_LAUNCH((dropout_att_matmul_kernel<false, E>), grid, dim3(kTile, kTileRows), 0, ctx.stream)
            (atty, C, static_cast<long>(T) * C, qkv + 2 * C, 3L * C, 3L * T * C, att, mask, keep, T, hs, NH);
            check_launch("attention_value_forward");
            return;
        }
        // atty (T x hs, leading dimension C) = att (T x T) @ v (T x hs).
        const HeadPairs p = head_pairs(B, T, C, NH);
        for (int i = 0; i < p.calls; ++i)
            gemm(ctx, shape(type, T, hs, T, p.batch), operand(att + i * p.att_call, T, p.att_step),
                 operand(qkv + 2 * C + i * p.qkv_call, 3L * C, p.qkv_step), atty + i * p.y_call, C, p.y_step, nullptr,
                 "attention_value_forward (att v)");
    });
}

void attention_value_backward(const KernelContext& ctx, Act datt_act, Act dqkv_act, ConstAct datty_act,
                              ConstAct att_act, const unsigned char* mask, float dropout_p, ConstAct qkv_act, int B,
                              int T, int C, int NH) {
    const DType type = activation_type("attention_value_backward", {qkv_act, datt_act, dqkv_act, datty_act, att_act});
    with_activation_type(type, "attention_value_backward", [&](auto tag) {
        using E = typename decltype(tag)::type;
        E* datt = device_ptr<E>(datt_act);
        E* dqkv = device_ptr<E>(dqkv_act);
        const E* datty = device_ptr<E>(datty_act);
        const E* att = device_ptr<E>(att_act);
        const E* qkv = device_ptr<E>(qkv_act);
        if (B <= 0 || T <= 0) return;
        const int hs = C / NH;
        const HeadPairs p = head_pairs(B, T, C, NH);
        // datt (T x T) = datty (T x hs) @ v^T over whole rows, then the dropout scale and the zero
        // upper triangle.
        for (int i = 0; i < p.calls; ++i)
            gemm(ctx, shape(type, T, T, hs, p.batch), operand(datty + i * p.y_call, C, p.y_step),
                 operand(qkv + 2 * C + i * p.qkv_call, 3L * C, p.qkv_step, true), datt + i * p.att_call, T,
                 p.att_step, nullptr, "attention_value_backward (datty v^T)");
        const long rows = att_rows(B, T, NH);
        const float keep = mask ? 1.0f / (1.0f - dropout_p) : 1.0f;
        ADACC_LAUNCH(datt_finish_kernel<E>, ceil_div(rows, kRowsPerBlock), kRowThreads, 0, ctx.stream)
        (datt, mask, keep, rows, T);
        check_launch("attention_value_backward (datt_finish_kernel)");
        // dv (T x hs, the v columns of dqkv) = dropout(att)^T (T x T) @ datty (T x hs).
        if (mask) {
            const dim3 grid(B * NH, ceil_div(T, kTile), ceil_div(hs, kTile));
            ADACC_LAUNCH((dropout_att_matmul_kernel<true, E>), grid, dim3(kTile, kTileRows), 0, ctx.stream)
            (dqkv + 2 * C, 3L * C, 3L * T * C, datty, C, static_cast<long>(T) * C, att, mask, keep, T, hs, NH);
            check_launch("attention_value_backward (dropout_att_matmul_kernel)");
            return;
        }
        for (int i = 0; i < p.calls; ++i)
            gemm(ctx, shape(type, T, hs, T, p.batch), operand(att + i * p.att_call, T, p.att_step, true),
                 operand(datty + i * p.y_call, C, p.y_step), dqkv + 2 * C + i * p.qkv_call, 3L * C, p.qkv_step,
                 nullptr, "attention_value_backward (att^T datty)");
    });
}

void attention_softmax_backward(const KernelContext& ctx, Act dqkv_act, Act datt_act, ConstAct att_act,
                                ConstAct qkv_act, int B, int T, int C, int NH) {
    const DType type = activation_type("attention_softmax_backward", {qkv_act, dqkv_act, datt_act, att_act});
    with_activation_type(type, "attention_softmax_backward", [&](auto tag) {
        using E = typename decltype(tag)::type;
        E* dqkv = device_ptr<E>(dqkv_act);
        E* datt = device_ptr<E>(datt_act);
        const E* att = device_ptr<E>(att_act);
        const E* qkv = device_ptr<E>(qkv_act);
        if (B <= 0 || T <= 0) return;
        const int hs = C / NH;
        const float scale = softmax_scale(hs);
        const long rows = att_rows(B, T, NH);
        // datt becomes dpreatt (its contents are unspecified after the call, see kernels/ops.inc).
        ADACC_LAUNCH(softmax_backward_kernel<E>, ceil_div(rows, kRowsPerBlock), kRowThreads, 0, ctx.stream)
        (datt, att, scale, rows, T);
        check_launch("attention_softmax_backward");
        const HeadPairs p = head_pairs(B, T, C, NH);
        for (int i = 0; i < p.calls; ++i) {
            const E* dpre = datt + i * p.att_call;
            const E* q = qkv + i * p.qkv_call;
            E* dq = dqkv + i * p.qkv_call;
            // dq (T x hs) = dpreatt (T x T) @ k (T x hs); dk = dpreatt^T @ q. Both overwrite.
            gemm(ctx, shape(type, T, hs, T, p.batch), operand(dpre, T, p.att_step),
                 operand(q + C, 3L * C, p.qkv_step), dq, 3L * C, p.qkv_step, nullptr,
                 "attention_softmax_backward (dq)");
            gemm(ctx, shape(type, T, hs, T, p.batch), operand(dpre, T, p.att_step, true),
                 operand(q, 3L * C, p.qkv_step), dq + C, 3L * C, p.qkv_step, nullptr,
                 "attention_softmax_backward (dk)");
        }
    });
}

}  // namespace adacc::cuda
