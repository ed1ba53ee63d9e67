// Group INT4: the naive symmetric group codec (mode `quant`) and the outlier-separated one for
// Linear/LayerNorm inputs (docs/design.md, 'Codecs'), which quantizes its non-outlier channels with
// the very same group kernel. The blob layouts, sizes and header are kernels/codec_format.cpp's;
// the entry points that dispatch to each family are in codecs.cpp.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/codecs.h"

namespace adacc::cpu {

using namespace codec_detail;

namespace {

// ---- The symmetric group kernel (shared by both codecs of this file). ----

// max |x| over x[0, n), n >= 1.
float abs_max(const float* x, std::size_t n) {
#if ADACC_CODEC_AVX512
    __m512 m = _mm512_setzero_ps();
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
    if (i < n) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_maskz_loadu_ps(first_lanes(n - i), x + i)));
    return reduce_max(m);
#else
    float m = 0.0f;
    for (std::size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
    return m;
#endif
}

// Codes of x[0, n) at scale s into nibbles first .. first + n - 1 of a row's codes. The vector
// path needs the group to start on a byte (even `first`: always so for even G); it writes whole
// bytes, leaving the high nibble of a last, odd element 0.
void quantize_sym(const float* x, std::size_t n, float s, std::uint8_t* row_codes, std::size_t first) {
#if ADACC_CODEC_AVX512
    if (first % 2 == 0) {
        std::uint8_t* out = row_codes + first / 2;
        if (s == 0.0f) {
            std::memset(out, 0, (n + 1) / 2);
            return;
        }
        const __m512 vs = _mm512_set1_ps(s);
        std::size_t i = 0;
        for (; i + 16 <= n; i += 16)
            store_code_bytes(out + i / 2, pack_nibbles(round_clip(_mm512_div_ps(_mm512_loadu_ps(x + i), vs))), 8);
        if (i < n) {  // masked-off lanes load 0 and so code 0
            const __m512 v = _mm512_maskz_loadu_ps(first_lanes(n - i), x + i);
            store_code_bytes(out + i / 2, pack_nibbles(round_clip(_mm512_div_ps(v, vs))), (n - i + 1) / 2);
        }
        return;
    }
#endif
    for (std::size_t i = 0; i < n; ++i) put_nibble(row_codes, first + i, s == 0.0f ? 0 : round_clip(x[i] / s));
}

// x^[0, n) = q * s from nibbles first .. first + n - 1 of a row's codes.
void dequantize_sym(const std::uint8_t* row_codes, std::size_t first, std::size_t n, float s, float* out) {
#if ADACC_CODEC_AVX512
    if (first % 2 == 0) {
        const std::uint8_t* in = row_codes + first / 2;
        const __m512 vs = _mm512_set1_ps(s);
        std::size_t i = 0;
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(out + i,
                             _mm512_mul_ps(_mm512_cvtepi32_ps(unpack_nibbles(load_code_bytes(in + i / 2, 8))), vs));
        if (i < n) {
            const __m512i q = unpack_nibbles(load_code_bytes(in + i / 2, (n - i + 1) / 2));
            _mm512_mask_storeu_ps(out + i, first_lanes(n - i), _mm512_mul_ps(_mm512_cvtepi32_ps(q), vs));
        }
        return;
    }
#endif
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<float>(get_nibble(row_codes, first + i)) * s;
}

// One group: scale s = max|x| / 7, then its codes.
void quantize_group(const float* x, std::size_t n, float* scale, std::uint8_t* row_codes, std::size_t first) {
    const float s = abs_max(x, n) / 7.0f;
    *scale = s;
    quantize_sym(x, n, s, row_codes, first);
}

// A whole row of `cols` elements in groups of G.
void quantize_row(const float* x, std::size_t cols, std::size_t G, float* scales, std::uint8_t* row_codes) {
    for (std::size_t g = 0, j = 0; j < cols; ++g, j += G)
        quantize_group(x + j, std::min(G, cols - j), scales + g, row_codes, j);
}
void dequantize_row(const std::uint8_t* row_codes, const float* scales, std::size_t cols, std::size_t G, float* out) {
    for (std::size_t g = 0, j = 0; j < cols; ++g, j += G)
        dequantize_sym(row_codes, j, std::min(G, cols - j), scales[g], out + j);
}

// ---- Outlier channel selection. ----

// sums[j] = Sh_j in the codec's order (codec_format.h, kOutlierSumRows): each chunk of rows
// summed into chunk[j] in row order from 0.0, then added to sums[j] in chunk order. Each thread
// takes a slice of the columns and streams that slice of every row, so the result does not
// depend on the thread count.
void outlier_channel_sums(const float* src, std::size_t rows, std::size_t cols, double* chunk, double* sums) {
#pragma omp parallel
    {
        std::size_t begin, end;
        thread_share(cols, omp_get_num_threads(), omp_get_thread_num(), begin, end);
        for (std::size_t j = begin; j < end; ++j) sums[j] = 0.0;
        for (std::size_t first = 0; first < rows; first += kOutlierSumRows) {
            for (std::size_t j = begin; j < end; ++j) chunk[j] = 0.0;
            for (std::size_t i = first; i < std::min(rows, first + kOutlierSumRows); ++i) {
                const float* x = src + i * cols;
#pragma omp simd
                for (std::size_t j = begin; j < end; ++j) chunk[j] += std::fabs(static_cast<double>(x[j]));
            }
            for (std::size_t j = begin; j < end; ++j) sums[j] += chunk[j];
        }
    }
}

// Fills idx[0, k) with the outlier channels, ascending, and returns k. sums, chunk and idx: the
// codec's scratch (outlier_scratch_layout); Z_j is left in sums when std > 0, else Sh_j.
std::size_t select_outliers(const float* src, std::size_t rows, std::size_t cols, float z, std::size_t cap,
                            double* sums, double* chunk, std::int32_t* idx) {
    if (cap == 0 || cols == 0) return 0;
    outlier_channel_sums(src, rows, cols, chunk, sums);
    double mean = 0.0;
    for (std::size_t j = 0; j < cols; ++j) mean += sums[j];
    mean /= static_cast<double>(cols);
    double var = 0.0;
    for (std::size_t j = 0; j < cols; ++j) var = std::fma(sums[j] - mean, sums[j] - mean, var);
    const double std_dev = std::sqrt(var / static_cast<double>(cols));
    if (!(std_dev > 0.0)) return 0;  // all channels alike (or non-finite data): no outliers
    std::size_t k = 0;
    for (std::size_t j = 0; j < cols; ++j) {
        sums[j] = (sums[j] - mean) / std_dev;  // Z_j, in place
        if (sums[j] > static_cast<double>(z)) idx[k++] = static_cast<std::int32_t>(j);
    }
    if (k > cap) {  // keep the cap largest Z (ties: lower channel); std::sort does not allocate
        std::sort(idx, idx + k, [sums](std::int32_t a, std::int32_t b) {
            return sums[a] > sums[b] || (sums[a] == sums[b] && a < b);
        });
        k = cap;
        std::sort(idx, idx + k);
    }
    return k;
}

// The next group of the compacted row: its n kept elements start at column p (advanced past
// leading outliers) and, when an outlier falls inside them, are gathered into buf. Returns where
// the group's values are; `t` is the index of the next outlier at or after p.
const float* gather_group(const float* x, std::size_t n, const std::int32_t* idx, std::size_t k, std::size_t& p,
                          std::size_t& t, float* buf) {
    while (t < k && static_cast<std::size_t>(idx[t]) == p) ++t, ++p;
    if (t == k || static_cast<std::size_t>(idx[t]) >= p + n) {  // no outlier inside: use in place
        p += n;
        return x + p - n;
    }
    for (std::size_t m = 0; m < n;) {
        const std::size_t stop = t < k ? std::min<std::size_t>(idx[t], p + n - m) : p + n - m;
        std::memcpy(buf + m, x + p, (stop - p) * sizeof(float));
        m += stop - p;
        p = stop;
        while (t < k && static_cast<std::size_t>(idx[t]) == p) ++t, ++p;
    }
    return buf;
}

// The inverse: scatters the group's n decoded values (in buf) to the kept columns from p on.
void scatter_group(const float* buf, std::size_t n, const std::int32_t* idx, std::size_t k, std::size_t& p,
                   std::size_t& t, float* out) {
    for (std::size_t m = 0; m < n;) {
        while (t < k && static_cast<std::size_t>(idx[t]) == p) ++t, ++p;
        const std::size_t stop = t < k ? std::min<std::size_t>(idx[t], p + n - m) : p + n - m;
        std::memcpy(out + p, buf + m, (stop - p) * sizeof(float));
        m += stop - p;
        p = stop;
    }
}

}  // namespace

// ---- group_int4 ----

namespace codec_detail {

std::size_t compress_group_int4(const float* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                                void* dst) {
    write_header(dst, Codec::group_int4, rows, cols, params, 0);
    const CodecLayout L = codec_layout(Codec::group_int4, rows, cols, params);
    if (rows == 0 || cols == 0) return L.total;
    auto* blob = static_cast<std::uint8_t*>(dst);
    float* scales = reinterpret_cast<float*>(blob + L.scales);
    std::uint8_t* codes = blob + L.codes;
    const std::size_t G = params.group_size, groups = ceil_div(cols, G), row_bytes = ceil_div(cols, 2);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < rows; ++i)
        quantize_row(src + i * cols, cols, G, scales + i * groups, codes + i * row_bytes);
    zero_padding(scales, 4 * rows * groups);
    zero_padding(codes, rows * row_bytes);
    return L.total;
}

void decompress_group_int4(const void* blob_ptr, std::size_t rows, std::size_t cols, float* dst) {
    const BlobHeader& h = read_header(blob_ptr, Codec::group_int4, rows, cols);
    const CodecLayout L = codec_layout(Codec::group_int4, rows, cols, header_params(h));
    if (rows == 0 || cols == 0) return;
    const auto* blob = static_cast<const std::uint8_t*>(blob_ptr);
    const float* scales = reinterpret_cast<const float*>(blob + L.scales);
    const std::uint8_t* codes = blob + L.codes;
    const std::size_t G = h.group_size, groups = ceil_div(cols, G), row_bytes = ceil_div(cols, 2);
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < rows; ++i)
        dequantize_row(codes + i * row_bytes, scales + i * groups, cols, G, dst + i * cols);
}

// ---- outlier_int4 ----

std::size_t compress_outlier_int4(const float* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                                  void* dst, void* scratch) {
    check_params(params);
    if (!scratch && rows > 0 && outlier_channel_cap(cols, params) > 0)
        throw std::invalid_argument("outlier_int4 compress needs codec_scratch_bytes() of scratch");
    const OutlierScratch at = outlier_scratch_layout(rows, cols);
    auto* scratch_bytes = static_cast<std::uint8_t*>(scratch);
    auto* sums = reinterpret_cast<double*>(scratch_bytes + at.sums);
    auto* chunk = reinterpret_cast<double*>(scratch_bytes + at.chunk_sums);
    auto* idx = reinterpret_cast<std::int32_t*>(scratch_bytes + at.channels);
    const std::size_t k = rows == 0 ? 0
                                    : select_outliers(src, rows, cols, params.outlier_z,
                                                      outlier_channel_cap(cols, params), sums, chunk, idx);
    write_header(dst, Codec::outlier_int4, rows, cols, params, k);
    const CodecLayout L = codec_layout(Codec::outlier_int4, rows, cols, params, k);
    auto* blob = static_cast<std::uint8_t*>(dst);
    const std::size_t c = cols - k, G = params.group_size, groups = ceil_div(c, G), row_bytes = ceil_div(c, 2);
    auto* indices = reinterpret_cast<std::int32_t*>(blob + L.indices);
    float* outliers = reinterpret_cast<float*>(blob + L.outliers);
    float* scales = reinterpret_cast<float*>(blob + L.scales);
    std::uint8_t* codes = blob + L.codes;
    if (k > 0) {
        std::memcpy(indices, idx, 4 * k);
        zero_padding(indices, 4 * k);
    }
    if (rows == 0 || cols == 0) return L.total;
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < rows; ++i) {
        const float* x = src + i * cols;
        if (k == 0) {  // nothing to separate: exactly group_int4
            quantize_row(x, cols, G, scales + i * groups, codes + i * row_bytes);
            continue;
        }
        alignas(64) float buf[kMaxGroupSize];  // a group that straddles an outlier, compacted
        std::size_t p = 0, t = 0;
        for (std::size_t g = 0, j = 0; j < c; ++g, j += G) {
            const std::size_t n = std::min(G, c - j);
            quantize_group(gather_group(x, n, idx, k, p, t, buf), n, scales + i * groups + g, codes + i * row_bytes, j);
        }
        // After the sequential pass, so these scattered reads hit the cache.
        for (std::size_t t2 = 0; t2 < k; ++t2) outliers[i * k + t2] = x[idx[t2]];
    }
    if (k > 0) zero_padding(outliers, 4 * rows * k);
    if (c > 0) {
        zero_padding(scales, 4 * rows * groups);
        zero_padding(codes, rows * row_bytes);
    }
    return L.total;
}

void decompress_outlier_int4(const void* blob_ptr, std::size_t rows, std::size_t cols, float* dst) {
    const BlobHeader& h = read_header(blob_ptr, Codec::outlier_int4, rows, cols);
    const std::size_t k = h.outlier_channels;
    const CodecLayout L = codec_layout(Codec::outlier_int4, rows, cols, header_params(h), k);
    if (rows == 0 || cols == 0) return;
    const auto* blob = static_cast<const std::uint8_t*>(blob_ptr);
    const std::size_t c = cols - k, G = h.group_size, groups = ceil_div(c, G), row_bytes = ceil_div(c, 2);
    const auto* idx = reinterpret_cast<const std::int32_t*>(blob + L.indices);
    const float* outliers = reinterpret_cast<const float*>(blob + L.outliers);
    const float* scales = reinterpret_cast<const float*>(blob + L.scales);
    const std::uint8_t* codes = blob + L.codes;
    for (std::size_t t = 0; t < k; ++t)
        if (idx[t] < 0 || static_cast<std::size_t>(idx[t]) >= cols || (t > 0 && idx[t] <= idx[t - 1]))
            throw std::invalid_argument("corrupt outlier_int4 blob: channel indices");
#pragma omp parallel for schedule(static)
    for (std::size_t i = 0; i < rows; ++i) {
        float* out = dst + i * cols;
        if (k == 0) {
            dequantize_row(codes + i * row_bytes, scales + i * groups, cols, G, out);
            continue;
        }
        alignas(64) float buf[kMaxGroupSize];
        std::size_t p = 0, t = 0;
        for (std::size_t g = 0, j = 0; j < c; ++g, j += G) {
            const std::size_t n = std::min(G, c - j);
            while (t < k && static_cast<std::size_t>(idx[t]) == p) ++t, ++p;
            if (t == k || static_cast<std::size_t>(idx[t]) >= p + n) {  // no outlier inside: decode in place
                dequantize_sym(codes + i * row_bytes, j, n, scales[i * groups + g], out + p);
                p += n;
            } else {
                dequantize_sym(codes + i * row_bytes, j, n, scales[i * groups + g], buf);
                scatter_group(buf, n, idx, k, p, t, out);
            }
        }
        for (std::size_t t2 = 0; t2 < k; ++t2) out[idx[t2]] = outliers[i * k + t2];
    }
}

}  // namespace codec_detail
}  // namespace adacc::cpu
