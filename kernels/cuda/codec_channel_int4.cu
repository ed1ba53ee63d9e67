// Channel-wise symmetric INT4 for Q, K and V on CUDA (twin: kernels/cpu/codec_channel_int4.cpp):
// one scale per column, s_j = max_i |x_ij| / 7.
//
// Compress is three kernels: partial column maxima over row chunks (a 2D grid, so every SM
// streams part of the tensor) into ctx.reduction_scratch; their maximum per column, / 7, into
// the blob's scale section (block 0 also writes the header); then a block per row packs the
// codes. A maximum is exact whatever the order, so the scales equal the CPU's bit for bit.
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/codecs.cuh"
#include "kernels/cuda/device_sizes.h"

namespace adacc::cuda::codec_detail {
namespace {

constexpr int kMaxThreads = 256;  // 8 warps over 32 columns
constexpr int kMaxCols = 32;      // columns per block of the column maxima: one per lane
constexpr std::size_t kRowsPerChunk = 128;
constexpr int kScaleThreads = 256;

// partial[chunk * cols + j] = max |x_ij| over the rows of chunk blockIdx.y, columns
// blockIdx.x * 32 + lane: each warp strides the chunk's rows, then the 8 warps' maxima meet in
// shared memory.
template <typename T>
__global__ void channel_abs_max_kernel(const T* src, std::size_t rows, std::size_t cols, std::size_t rows_per_chunk,
                                       float* partial) {
    __shared__ float warp_max_of[kMaxThreads / 32][kMaxCols];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const std::size_t j = static_cast<std::size_t>(blockIdx.x) * kMaxCols + lane;
    const std::size_t begin = blockIdx.y * rows_per_chunk;
    const std::size_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
    float m = 0.0f;
    if (j < cols)
        for (std::size_t i = begin + warp; i < end; i += warps) m = fmaxf(m, fabsf(to_f32(src[i * cols + j])));
    warp_max_of[warp][lane] = m;
    __syncthreads();
    if (warp == 0 && j < cols) {
        for (int w = 1; w < warps; ++w) m = fmaxf(m, warp_max_of[w][lane]);
        partial[blockIdx.y * cols + j] = m;
    }
}

// scales[j] = max over the chunks' partial maxima / 7 (0 for no rows); block 0 writes the
// header and the padding of both sections.
__global__ void channel_scales_kernel(const float* partial, std::size_t chunks, std::size_t rows, std::size_t cols,
                                      BlobHeader header, CodecLayout L, std::uint8_t* blob) {
    const std::size_t j = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (blockIdx.x == 0) {
        if (threadIdx.x == 0) store_header(blob, header);
        zero_padding(blob, L.scales, 4 * cols, threadIdx.x, blockDim.x);
        zero_padding(blob, L.codes, rows * div_up(cols, 2), threadIdx.x, blockDim.x);
    }
    if (j >= cols) return;
    float m = 0.0f;
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) m = fmaxf(m, partial[chunk * cols + j]);
    reinterpret_cast<float*>(blob + L.scales)[j] = m / 7.0f;
}

// One block per row (store_row_codes), each column with its scale.
template <typename T>
__global__ void channel_quantize_kernel(const T* src, std::size_t rows, std::size_t cols, CodecLayout L,
                                        std::uint8_t* blob) {
    const float* scales = reinterpret_cast<const float*>(blob + L.scales);
    const unsigned c = static_cast<unsigned>(cols), row_bytes = (c + 1) / 2;
    const bool packed = rows_packed(src, cols);
    for (std::size_t i = blockIdx.x; i < rows; i += gridDim.x)
        store_row_codes(blob + L.codes + i * row_bytes, src + i * cols, c, packed,
                        [scales](float v, unsigned e) { return sym_code(v, scales[e]); });
}

// Decodes rows; a header that does not match decodes to NaN.
template <typename T>
__global__ void channel_dequantize_kernel(const std::uint8_t* blob, std::size_t rows, std::size_t cols, CodecLayout L,
                                          T* dst) {
    const bool good = header_ok(*reinterpret_cast<const BlobHeader*>(blob), Codec::channel_int4, rows, cols);
    const float* scales = reinterpret_cast<const float*>(blob + L.scales);
    const std::uint8_t* codes = blob + L.codes;
    const unsigned row_bytes = static_cast<unsigned>((cols + 1) / 2);
    store_decoded_rows(dst, rows, cols, [=](std::size_t i, unsigned j) {
        return good ? static_cast<float>(get_code(codes + i * row_bytes, j)) * scales[j] : quiet_nan();
    });
}

}  // namespace

template <typename T>
void compress_channel_int4(const KernelContext& ctx, const T* src, std::size_t rows, std::size_t cols,
                           const CodecParams& params, void* dst) {
    check_columns(cols);
    const BlobHeader header = codec_format::make_header(Codec::channel_int4, rows, cols, params, 0);  // checks params
    const CodecLayout L = codec_layout(Codec::channel_int4, rows, cols, params);
    auto* blob = static_cast<std::uint8_t*>(dst);
    if (cols == 0) {  // the header alone; the scale kernel writes it with nothing else to do
        ADACC_LAUNCH(channel_scales_kernel, 1, kScaleThreads, 0, ctx.stream)(nullptr, 0, rows, cols, header, L, blob);
        check_launch("codec_compress (channel_int4 scales)");
        return;
    }
    // Row chunks: enough to spread the rows over the SMs, bounded by the reduction scratch.
    std::size_t chunks = div_up(rows, kRowsPerChunk);
    const std::size_t fit = ctx.reduction_scratch_bytes / (4 * cols);
    if (chunks > fit) chunks = fit;
    if (chunks > 65535) chunks = 65535;
    if (rows > 0 && (chunks == 0 || !ctx.reduction_scratch))
        throw std::invalid_argument(
            "channel_int4 compress: the reduction scratch cannot hold one row of column maxima");
    auto* partial = static_cast<float*>(ctx.reduction_scratch);
    if (rows > 0) {
        const std::size_t rows_per_chunk = div_up(rows, chunks);
        chunks = div_up(rows, rows_per_chunk);
        ADACC_LAUNCH(channel_abs_max_kernel<T>, dim3(ceil_div(cols, kMaxCols), static_cast<unsigned>(chunks)),
                     kMaxThreads, 0, ctx.stream)
        (src, rows, cols, rows_per_chunk, partial);
        check_launch("codec_compress (channel_int4 column maxima)");
    } else {
        chunks = 0;  // no rows: every scale is 0
    }
    ADACC_LAUNCH(channel_scales_kernel, ceil_div(cols, kScaleThreads), kScaleThreads, 0, ctx.stream)
    (partial, chunks, rows, cols, header, L, blob);
    check_launch("codec_compress (channel_int4 scales)");
    if (rows == 0) return;
    ADACC_LAUNCH(channel_quantize_kernel<T>, row_blocks(rows), kRowThreads, 0, ctx.stream)(src, rows, cols, L, blob);
    check_launch("codec_compress (channel_int4 codes)");
}

template <typename T>
void decompress_channel_int4(const KernelContext& ctx, const void* blob, std::size_t rows, std::size_t cols, T* dst) {
    check_columns(cols);
    if (rows == 0 || cols == 0) return;
    // channel_int4 has no parameter in its layout (the group size is unused), so it is known here.
    const CodecLayout L = codec_layout(Codec::channel_int4, rows, cols, CodecParams{});
    ADACC_LAUNCH(channel_dequantize_kernel<T>, row_blocks(rows), kRowThreads, 0, ctx.stream)
    (static_cast<const std::uint8_t*>(blob), rows, cols, L, dst);
    check_launch("codec_decompress (channel_int4)");
}

ADACC_INSTANTIATE_INT4_CODEC_TYPES(channel_int4);

}  // namespace adacc::cuda::codec_detail
