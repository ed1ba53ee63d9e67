// The codec kernels of kernels/ops.inc on CUDA (twin: kernels/cpu/codecs.cpp): compress and
// decompress pick the activations' element type (float or bf16, for the INT4 codecs) once and
// dispatch to one file per family (codec_*.cu, shared pieces in codecs.cuh), the outlier count
// reads a blob's header back, and the error measurement (float or bf16, in double) is a two-pass
// reduction.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "kernels/cuda/codecs.cuh"
#include "kernels/cuda/ops.h"

namespace adacc::cuda {

using namespace codec_detail;

namespace {

constexpr int kErrorThreads = 256;
constexpr unsigned kErrorBlocks = 256;  // partial sums of the first pass (about two per SM)

// The block's (err2, ref2, max_err) into out[0..2], in a fixed order: every thread's values
// through shared memory, then warp 0 (lane l takes threads l, l + 32, ... in order, then a
// butterfly). One barrier, and the shuffles of one warp only.
__device__ inline void block_error_sums(double err2, double ref2, double max_err, double* out) {
    __shared__ double values[3][kErrorThreads];
    const int tid = threadIdx.x, lane = tid % 32;
    values[0][tid] = err2;
    values[1][tid] = ref2;
    values[2][tid] = max_err;
    __syncthreads();
    if (tid >= 32) return;  // no barrier follows
    err2 = ref2 = max_err = 0.0;
    for (int t = lane; t < kErrorThreads; t += 32) {
        err2 += values[0][t];
        ref2 += values[1][t];
        max_err = fmax(max_err, values[2][t]);
    }
    err2 = warp_sum(err2);
    ref2 = warp_sum(ref2);
    max_err = warp_max(max_err);
    if (lane == 0) {
        out[0] = err2;
        out[1] = ref2;
        out[2] = max_err;
    }
}

// Pass 1 (kErrorThreads per block): block b's sums over its grid-stride share of the elements,
// in double as on the CPU: partials[3b .. 3b + 2] = sum (x - x^)^2, sum x^2, max |x - x^|.
template <typename T>
__global__ void error_partials_kernel(const T* original, const T* decoded, std::size_t n, double* partials) {
    double err2 = 0.0, ref2 = 0.0, max_err = 0.0;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double x = to_f32(original[i]), d = x - static_cast<double>(to_f32(decoded[i]));
        err2 = fma(d, d, err2);
        ref2 = fma(x, x, ref2);
        max_err = fmax(max_err, fabs(d));
    }
    block_error_sums(err2, ref2, max_err, partials + 3 * blockIdx.x);
}

// Pass 2 (one block of kErrorThreads): the partials summed in a fixed order into result[0..2].
__global__ void error_finish_kernel(const double* partials, unsigned blocks, double* result) {
    double err2 = 0.0, ref2 = 0.0, max_err = 0.0;
    for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x) {
        err2 += partials[3 * b];
        ref2 += partials[3 * b + 1];
        max_err = fmax(max_err, partials[3 * b + 2]);
    }
    block_error_sums(err2, ref2, max_err, result);
}

}  // namespace

void codec_compress(const KernelContext& ctx, Codec codec, ConstAct src, std::size_t rows, std::size_t cols,
                    const CodecParams& params, void* dst) {
    if (codec == Codec::bitpack) {
        codec_format::check_params(params);  // refused for every codec alike, though bitpack reads none
        return compress_bitpack(ctx, src.as<unsigned char>(), rows * cols, dst);
    }
    with_activation_type(src.dtype(), "codec_compress", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* x = device_ptr<T>(src);
        switch (codec) {
        case Codec::group_int4: return compress_group_int4(ctx, x, rows, cols, params, dst);
        case Codec::outlier_int4: return compress_outlier_int4(ctx, x, rows, cols, params, dst);
        case Codec::channel_int4: return compress_channel_int4(ctx, x, rows, cols, params, dst);
        case Codec::asym_int4: return compress_asym_int4(ctx, x, rows, cols, params, dst);
        case Codec::bitpack: break;
        }
        throw std::invalid_argument("codec_compress: unknown codec");
    });
}

void codec_decompress(const KernelContext& ctx, Codec codec, const void* blob, std::size_t rows, std::size_t cols,
                      Act dst) {
    if (codec == Codec::bitpack) return decompress_bitpack(ctx, blob, rows * cols, dst.as<unsigned char>());
    with_activation_type(dst.dtype(), "codec_decompress", [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* y = device_ptr<T>(dst);
        switch (codec) {
        case Codec::group_int4: return decompress_group_int4(ctx, blob, rows, cols, y);
        case Codec::outlier_int4: return decompress_outlier_int4(ctx, blob, rows, cols, y);
        case Codec::channel_int4: return decompress_channel_int4(ctx, blob, rows, cols, y);
        case Codec::asym_int4: return decompress_asym_int4(ctx, blob, rows, cols, y);
        case Codec::bitpack: break;
        }
        throw std::invalid_argument("codec_decompress: unknown codec");
    });
}

// Reads the blob's header back (waiting for the stream, so for the compress that wrote it).
std::size_t codec_outlier_count(const KernelContext& ctx, Codec codec, const void* blob) {
    if (codec == Codec::bitpack) return 0;  // bitpack blobs have no header
    BlobHeader h;
    check(cudaMemcpyAsync(&h, blob, sizeof h, cudaMemcpyDeviceToHost, stream_of(ctx)), "codec_outlier_count");
    check(cudaStreamSynchronize(stream_of(ctx)), "codec_outlier_count");
    if (h.magic != codec_format::kBlobMagic) throw std::invalid_argument("not a codec blob (bad magic)");
    return h.codec == static_cast<std::uint8_t>(Codec::outlier_int4) ? h.outlier_channels : 0;
}

CodecStats codec_error(const KernelContext& ctx, ConstAct original, ConstAct decoded, std::size_t n) {
    CodecStats stats;
    const DType dtype = activation_type("codec_error", {original, decoded});
    if (n == 0) return stats;  // nothing to compare: no error (the CPU's sums are 0 too)
    const unsigned blocks = std::min<std::size_t>(ceil_div(n, kErrorThreads), kErrorBlocks);
    const std::size_t need = sizeof(double) * (3 * std::size_t{blocks} + 3);
    if (!ctx.reduction_scratch || ctx.reduction_scratch_bytes < need)
        throw std::invalid_argument("codec_error: the reduction scratch is missing or too small");
    auto* partials = static_cast<double*>(ctx.reduction_scratch);
    double* result = partials + 3 * blocks;
    with_activation_type(dtype, "codec_error", [&](auto tag) {
        using T = typename decltype(tag)::type;
        ADACC_LAUNCH(error_partials_kernel<T>, blocks, kErrorThreads, 0, ctx.stream)(
            device_ptr<T>(original), device_ptr<T>(decoded), n, partials);
    });
    check_launch("codec_error (partials)");
    ADACC_LAUNCH(error_finish_kernel, 1, kErrorThreads, 0, ctx.stream)(partials, blocks, result);
    check_launch("codec_error (finish)");
    double sums[3];
    check(cudaMemcpyAsync(sums, result, sizeof sums, cudaMemcpyDeviceToHost, stream_of(ctx)), "codec_error");
    check(cudaStreamSynchronize(stream_of(ctx)), "codec_error");
    const double err2 = sums[0], ref2 = sums[1];
    stats.relative_l2 = ref2 > 0.0 ? std::sqrt(err2 / ref2)
                                   : (err2 > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
    stats.max_abs_error = static_cast<float>(sums[2]);
    return stats;
}

}  // namespace adacc::cuda
