// Asymmetric group INT4 for softmax probabilities (docs/design.md, 'Codecs'): values lie in [0, 1]
// and a group's range rarely reaches down to -max, so a symmetric code would waste half its 16
// levels. Per row group of G: s = (max - min) / 15, o = min + 8 s (the middle of the range, so the
// codes are the same signed [-8, 7] nibbles as elsewhere), q = clip(round((x - o) / s), -8, 7),
// x^ = fma(q, s, o). A constant group (s = 0; causal softmax's masked-out tail is all zeros)
// stores code 0 and decodes to min exactly.
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/codecs.h"

namespace adacc::cpu::codec_detail {
namespace {

// min and max over x[0, n), n >= 1.
void min_max(const float* x, std::size_t n, float& lo, float& hi) {
#if ADACC_CODEC_AVX512
    __m512 vlo = _mm512_set1_ps(std::numeric_limits<float>::infinity()), vhi = _mm512_sub_ps(_mm512_setzero_ps(), vlo);
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        vlo = _mm512_min_ps(vlo, v);
        vhi = _mm512_max_ps(vhi, v);
    }
    if (i < n) {
        const __mmask16 lanes = first_lanes(n - i);
        const __m512 v = _mm512_maskz_loadu_ps(lanes, x + i);
        vlo = _mm512_mask_min_ps(vlo, lanes, vlo, v);
        vhi = _mm512_mask_max_ps(vhi, lanes, vhi, v);
    }
    lo = reduce_min(vlo);
    hi = reduce_max(vhi);
#else
    lo = hi = x[0];
    for (std::size_t i = 1; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
#endif
}

// Codes of x[0, n) into nibbles first .. first + n - 1 of a row's codes (vector path: even
// `first`, whole bytes written, the high nibble of a last, odd element 0).
void quantize_asym(const float* x, std::size_t n, float s, float o, std::uint8_t* row_codes, std::size_t first) {
#if ADACC_CODEC_AVX512
    if (first % 2 == 0) {
        std::uint8_t* out = row_codes + first / 2;
        if (s == 0.0f) {
            std::memset(out, 0, (n + 1) / 2);
            return;
        }
        const __m512 vs = _mm512_set1_ps(s), vo = _mm512_set1_ps(o);
        std::size_t i = 0;
        for (; i + 16 <= n; i += 16) {
            const __m512 v = _mm512_div_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vo), vs);
            store_code_bytes(out + i / 2, pack_nibbles(round_clip(v)), 8);
        }
        if (i < n) {  // masked-off lanes must code 0
            const __mmask16 lanes = first_lanes(n - i);
            const __m512 v = _mm512_div_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, x + i), vo), vs);
            store_code_bytes(out + i / 2, pack_nibbles(_mm512_maskz_mov_epi32(lanes, round_clip(v))), (n - i + 1) / 2);
        }
        return;
    }
#endif
    for (std::size_t i = 0; i < n; ++i) put_nibble(row_codes, first + i, s == 0.0f ? 0 : round_clip((x[i] - o) / s));
}

void dequantize_asym(const std::uint8_t* row_codes, std::size_t first, std::size_t n, float s, float o, float* out) {
#if ADACC_CODEC_AVX512
    if (first % 2 == 0) {
        const std::uint8_t* in = row_codes + first / 2;
        const __m512 vs = _mm512_set1_ps(s), vo = _mm512_set1_ps(o);
        std::size_t i = 0;
        for (; i + 16 <= n; i += 16) {
            const __m512 q = _mm512_cvtepi32_ps(unpack_nibbles(load_code_bytes(in + i / 2, 8)));
            _mm512_storeu_ps(out + i, _mm512_fmadd_ps(q, vs, vo));
        }
        if (i < n) {
            const __m512 q = _mm512_cvtepi32_ps(unpack_nibbles(load_code_bytes(in + i / 2, (n - i + 1) / 2)));
            _mm512_mask_storeu_ps(out + i, first_lanes(n - i), _mm512_fmadd_ps(q, vs, vo));
        }
        return;
    }
#endif
    for (std::size_t i = 0; i < n; ++i) out[i] = std::fma(static_cast<float>(get_nibble(row_codes, first + i)), s, o);
}

}  // namespace

std::size_t compress_asym_int4(const float* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                               void* dst) {
    write_header(dst, Codec::asym_int4, rows, cols, params, 0);
    const CodecLayout L = codec_layout(Codec::asym_int4, rows, cols, params);
    if (rows == 0 || cols == 0) return L.total;
    auto* blob = static_cast<std::uint8_t*>(dst);
    float* scales = reinterpret_cast<float*>(blob + L.scales);
    float* offsets = reinterpret_cast<float*>(blob + L.offsets);
    std::uint8_t* codes = blob + L.codes;
    const std::size_t G = params.group_size, groups = ceil_div(cols, G), row_bytes = ceil_div(cols, 2);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < rows; ++i) {
        const float* x = src + i * cols;
        for (std::size_t g = 0, j = 0; j < cols; ++g, j += G) {
            const std::size_t n = std::min(G, cols - j);
            float lo, hi;
            min_max(x + j, n, lo, hi);
            const float s = (hi - lo) / 15.0f;
            const float o = std::fma(8.0f, s, lo);  // = lo + 8 s exactly (8 s is exact)
            scales[i * groups + g] = s;
            offsets[i * groups + g] = o;
            quantize_asym(x + j, n, s, o, codes + i * row_bytes, j);
        }
    }
    zero_padding(scales, 4 * rows * groups);
    zero_padding(offsets, 4 * rows * groups);
    zero_padding(codes, rows * row_bytes);
    return L.total;
}

void decompress_asym_int4(const void* blob_ptr, std::size_t rows, std::size_t cols, float* dst) {
    const BlobHeader& h = read_header(blob_ptr, Codec::asym_int4, rows, cols);
    const CodecLayout L = codec_layout(Codec::asym_int4, rows, cols, header_params(h));
    if (rows == 0 || cols == 0) return;
    const auto* blob = static_cast<const std::uint8_t*>(blob_ptr);
    const float* scales = reinterpret_cast<const float*>(blob + L.scales);
    const float* offsets = reinterpret_cast<const float*>(blob + L.offsets);
    const std::uint8_t* codes = blob + L.codes;
    const std::size_t G = h.group_size, groups = ceil_div(cols, G), row_bytes = ceil_div(cols, 2);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t g = 0, j = 0; j < cols; ++g, j += G)
            dequantize_asym(codes + i * row_bytes, j, std::min(G, cols - j), scales[i * groups + g],
                            offsets[i * groups + g], dst + i * cols + j);
}

}  // namespace adacc::cpu::codec_detail
