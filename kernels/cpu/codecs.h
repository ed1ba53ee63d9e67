// Activation compression codecs, CPU implementation (docs/design.md, 'Codecs'). The formats
// themselves (what each codec stores, the blob layout, the exact sizes and bounds, the header) are
// backend-neutral and documented in kernels/codec_format.h; this header declares the kernels that
// write and read them on the CPU.
//
// Threads: every kernel runs on the current OpenMP team size (omp_set_num_threads), in
// parallel over rows (column statistics over column ranges); blobs and decoded values do not
// depend on the thread count. compress/decompress never allocate on the heap: the outlier
// codec's per-channel statistics live in a caller-provided scratch buffer (codec_scratch_bytes).
// Speed: even G takes the AVX-512 path; odd G works but runs the scalar loop.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/codec_format.h"

// The kernels use AVX-512 (F, BW, VL) when the build targets it (-march=native on this project's
// machines) and portable scalar loops otherwise; both produce identical blobs.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define ADACC_CODEC_AVX512 1
// GCC 12's AVX-512 headers initialise their "undefined" vectors from themselves, which trips
// -Wuninitialized once inlined into our code (GCC bug 105593); the state at the header's own lines
// is what counts, so it is silenced around the include.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#define ADACC_CODEC_AVX512 0
#endif

namespace adacc::cpu {

// Writes the blob of src (rows x cols elements: fp32, or mask bytes for Codec::bitpack) into dst
// (64-byte aligned, capacity >= codec_max_bytes); returns its size (== codec_bytes with the k
// chosen). scratch: codec_scratch_bytes() bytes, 8-byte aligned (may be null when that is 0).
// Throws std::invalid_argument on bad parameters or a missing scratch.
std::size_t compress(Codec codec, const void* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                     void* dst, void* scratch);
// Decodes a blob written by compress with the same codec, rows and cols into dst (rows x cols
// elements of the codec's type: fp32, or bytes 0/1 for bitpack). The float codecs check the blob's
// header against codec, rows and cols (a mismatch throws std::invalid_argument); bitpack blobs
// have no header.
void decompress(Codec codec, const void* blob, std::size_t rows, std::size_t cols, void* dst);

// k of an outlier_int4 blob (0 for the other float codecs' blobs; bitpack blobs have no header).
std::size_t codec_outlier_channels(const void* blob);

// Error of a decoded fp32 tensor against the original: relative L2 (accumulated in double; 0 when
// both are all zero, +inf when only the original is), max abs. bytes and outlier_fraction are
// left 0 for the caller to fill (compress's return, codec_outlier_channels / cols). Bitpack is
// lossless (codec_is_lossless): its error is 0 without measuring.
CodecStats measure_error(const float* original, const float* decoded, std::size_t n);

// ---- Shared by the codec files (kernels/cpu/codec_*.cpp); not for callers. ----
namespace codec_detail {

using namespace codec_format;  // align64, ceil_div, BlobHeader, check_params, write_header, read_header, ...

// One file per family.
std::size_t compress_group_int4(const float* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                                void* dst);
void decompress_group_int4(const void* blob, std::size_t rows, std::size_t cols, float* dst);
std::size_t compress_outlier_int4(const float* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                                  void* dst, void* scratch);
void decompress_outlier_int4(const void* blob, std::size_t rows, std::size_t cols, float* dst);
std::size_t compress_channel_int4(const float* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                                  void* dst);
void decompress_channel_int4(const void* blob, std::size_t rows, std::size_t cols, float* dst);
std::size_t compress_asym_int4(const float* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                               void* dst);
void decompress_asym_int4(const void* blob, std::size_t rows, std::size_t cols, float* dst);
// n mask bytes (n = rows * cols) -> A(ceil(n / 8)) bytes of bits, and back.
std::size_t compress_bitpack(const unsigned char* mask, std::size_t n, void* dst);
void decompress_bitpack(const void* blob, std::size_t n, unsigned char* mask);

// Zeroes a section's padding, bytes [used, align64(used)), so blobs are deterministic.
void zero_padding(void* section, std::size_t used);

// This thread's share [begin, end) of n columns, in multiples of 16 (whole cache lines of floats).
inline void thread_share(std::size_t n, int threads, int id, std::size_t& begin, std::size_t& end) {
    const std::size_t chunk = ((n + threads - 1) / threads + 15) / 16 * 16;
    begin = std::size_t(id) * chunk < n ? std::size_t(id) * chunk : n;
    end = begin + chunk < n ? begin + chunk : n;
}

// One element's code: round_half_even(clip(v, -8, 7)) where v = x / s already; NaN gives -8,
// exactly as the vector path (vmaxps returns its second operand on NaN). Clipping before
// rounding equals rounding before clipping, the bounds being integers.
inline int round_clip(float v) {
    v = v >= -8.0f ? (v > 7.0f ? 7.0f : v) : -8.0f;
    return static_cast<int>(std::nearbyint(v));  // default rounding mode: half to even
}
// Nibble j of a row's packed codes: even j assigns the low nibble (and clears the high one),
// odd j ORs the high nibble, so a row written in increasing j needs no clearing first.
inline void put_nibble(std::uint8_t* row_codes, std::size_t j, int q) {
    if (j & 1)
        row_codes[j / 2] = static_cast<std::uint8_t>(row_codes[j / 2] | (q & 15) << 4);
    else
        row_codes[j / 2] = static_cast<std::uint8_t>(q & 15);
}
inline int get_nibble(const std::uint8_t* row_codes, std::size_t j) {
    const int nibble = (row_codes[j / 2] >> (j & 1) * 4) & 15;
    return (nibble ^ 8) - 8;  // sign-extend 4 bits
}

#if ADACC_CODEC_AVX512
// Vector forms of the above over 16 lanes (one zmm of floats = 8 code bytes).
inline __mmask16 first_lanes(std::size_t n) { return static_cast<__mmask16>((1u << n) - 1); }  // n <= 16
inline __m512i round_clip(__m512 v) {
    v = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-8.0f)), _mm512_set1_ps(7.0f));
    return _mm512_cvtps_epi32(v);  // MXCSR default rounding: half to even
}
// 16 codes in [-8, 7] -> 8 bytes (low 64 bits), low nibble = even lane: in each 64-bit lane
// (even code | odd code << 32), shifting right by 28 brings the odd code to bits 4..7.
inline __m128i pack_nibbles(__m512i q) {
    const __m512i low = _mm512_and_si512(q, _mm512_set1_epi32(15));
    return _mm512_cvtepi64_epi8(_mm512_or_si512(low, _mm512_srli_epi64(low, 28)));
}
// 8 bytes -> 16 sign-extended codes: byte b goes to a 64-bit lane; b | b << 28 puts the high
// nibble at bit 32 (the odd lane); shifting each 32-bit lane left then arithmetically right by 28
// keeps its low nibble, sign-extended.
inline __m512i unpack_nibbles(__m128i bytes) {
    __m512i v = _mm512_cvtepu8_epi64(bytes);
    v = _mm512_or_si512(v, _mm512_slli_epi64(v, 28));
    return _mm512_srai_epi32(_mm512_slli_epi32(v, 28), 28);
}
// Horizontal max / min of 16 lanes (GCC 12's _mm512_reduce_max_ps trips -Wuninitialized).
inline float reduce_max(__m512 v) {
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    v = _mm512_max_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_max_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(v);
}
inline float reduce_min(__m512 v) {
    v = _mm512_min_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_min_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
    v = _mm512_min_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
    v = _mm512_min_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_cvtss_f32(v);
}
inline __m128i load_code_bytes(const std::uint8_t* p, std::size_t nbytes) {  // nbytes <= 8
    return nbytes == 8 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))
                       : _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << nbytes) - 1), p);
}
inline void store_code_bytes(std::uint8_t* p, __m128i bytes, std::size_t nbytes) {  // nbytes <= 8
    if (nbytes == 8)
        _mm_storel_epi64(reinterpret_cast<__m128i*>(p), bytes);
    else
        _mm_mask_storeu_epi8(p, static_cast<__mmask16>((1u << nbytes) - 1), bytes);
}
#endif

}  // namespace codec_detail
}  // namespace adacc::cpu
