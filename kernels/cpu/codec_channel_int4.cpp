// Channel-wise symmetric INT4 for Q, K and V (docs/design.md, 'Codecs'): attention's q, k, v differ
// in scale from channel to channel far more than from token to token, so one scale per column
// (s_j = max_i |x_ij| / 7) fits them better than row groups do.
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/codecs.h"

namespace adacc::cpu::codec_detail {
namespace {

// m[j] = max_i |x_ij| for columns [begin, end), streaming the rows in order (m stays in L1).
// Explicit vectors: GCC turns the obvious `omp simd` loop into gathers here.
void column_abs_max(const float* src, std::size_t rows, std::size_t cols, std::size_t begin, std::size_t end,
                    float* m) {
    for (std::size_t j = begin; j < end; ++j) m[j] = 0.0f;
    for (std::size_t i = 0; i < rows; ++i) {
        const float* x = src + i * cols;
        std::size_t j = begin;
#if ADACC_CODEC_AVX512
        for (; j + 16 <= end; j += 16)
            _mm512_storeu_ps(m + j, _mm512_max_ps(_mm512_loadu_ps(m + j), _mm512_abs_ps(_mm512_loadu_ps(x + j))));
#endif
        for (; j < end; ++j) m[j] = std::max(m[j], std::fabs(x[j]));
    }
}

// One row's codes with per-column scales s[0, cols); a column of scale 0 codes 0.
void quantize_row(const float* x, const float* s, std::size_t cols, std::uint8_t* row_codes) {
    std::size_t j = 0;
#if ADACC_CODEC_AVX512
    // x / s with lanes of scale 0 forced to 0 (code 0).
    auto codes16 = [](__m512 v, __m512 vs) {
        const __mmask16 nonzero = _mm512_cmp_ps_mask(vs, _mm512_setzero_ps(), _CMP_NEQ_OQ);
        return pack_nibbles(round_clip(_mm512_maskz_div_ps(nonzero, v, vs)));
    };
    for (; j + 16 <= cols; j += 16)
        store_code_bytes(row_codes + j / 2, codes16(_mm512_loadu_ps(x + j), _mm512_loadu_ps(s + j)), 8);
    if (j < cols) {  // masked-off lanes load scale 0 and so code 0
        const __mmask16 lanes = first_lanes(cols - j);
        store_code_bytes(row_codes + j / 2,
                         codes16(_mm512_maskz_loadu_ps(lanes, x + j), _mm512_maskz_loadu_ps(lanes, s + j)),
                         (cols - j + 1) / 2);
    }
#else
    for (; j < cols; ++j) put_nibble(row_codes, j, s[j] == 0.0f ? 0 : round_clip(x[j] / s[j]));
#endif
}

void dequantize_row(const std::uint8_t* row_codes, const float* s, std::size_t cols, float* out) {
    std::size_t j = 0;
#if ADACC_CODEC_AVX512
    for (; j + 16 <= cols; j += 16) {
        const __m512 q = _mm512_cvtepi32_ps(unpack_nibbles(load_code_bytes(row_codes + j / 2, 8)));
        _mm512_storeu_ps(out + j, _mm512_mul_ps(q, _mm512_loadu_ps(s + j)));
    }
    if (j < cols) {
        const __mmask16 lanes = first_lanes(cols - j);
        const __m512 q = _mm512_cvtepi32_ps(unpack_nibbles(load_code_bytes(row_codes + j / 2, (cols - j + 1) / 2)));
        _mm512_mask_storeu_ps(out + j, lanes, _mm512_mul_ps(q, _mm512_maskz_loadu_ps(lanes, s + j)));
    }
#else
    for (; j < cols; ++j) out[j] = static_cast<float>(get_nibble(row_codes, j)) * s[j];
#endif
}

}  // namespace

std::size_t compress_channel_int4(const float* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                                  void* dst) {
    write_header(dst, Codec::channel_int4, rows, cols, params, 0);
    const CodecLayout L = codec_layout(Codec::channel_int4, rows, cols, params);
    if (cols == 0) return L.total;
    auto* blob = static_cast<std::uint8_t*>(dst);
    float* scales = reinterpret_cast<float*>(blob + L.scales);
    std::uint8_t* codes = blob + L.codes;
    const std::size_t row_bytes = ceil_div(cols, 2);
    // Column max |x| over column ranges (each thread streams its slice of every row, keeping its
    // running maxima in the blob's scale section), then s_j = max / 7.
#pragma omp parallel
    {
        std::size_t begin, end;
        thread_share(cols, omp_get_num_threads(), omp_get_thread_num(), begin, end);
        column_abs_max(src, rows, cols, begin, end, scales);
        for (std::size_t j = begin; j < end; ++j) scales[j] /= 7.0f;
    }
    zero_padding(scales, 4 * cols);
    if (rows == 0) return L.total;
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < rows; ++i) quantize_row(src + i * cols, scales, cols, codes + i * row_bytes);
    zero_padding(codes, rows * row_bytes);
    return L.total;
}

void decompress_channel_int4(const void* blob_ptr, std::size_t rows, std::size_t cols, float* dst) {
    const BlobHeader& h = read_header(blob_ptr, Codec::channel_int4, rows, cols);
    const CodecLayout L = codec_layout(Codec::channel_int4, rows, cols, header_params(h));
    if (rows == 0 || cols == 0) return;
    const auto* blob = static_cast<const std::uint8_t*>(blob_ptr);
    const float* scales = reinterpret_cast<const float*>(blob + L.scales);
    const std::uint8_t* codes = blob + L.codes;
    const std::size_t row_bytes = ceil_div(cols, 2);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < rows; ++i) dequantize_row(codes + i * row_bytes, scales, cols, dst + i * cols);
}

}  // namespace adacc::cpu::codec_detail
