// Activation compression codecs (DESIGN §6): the forms in which the tape stores a tensor whose
// policy is "compress". A tensor is a row-major rows x cols fp32 matrix (a dropout mask: n bytes
// of 0/1). Every codec but bitpack is lossy; each reports its size and, through measure_error,
// its error, which the planner and the monitor read.
//
//   group_int4    naive symmetric group INT4 (mode `quant`): every row is cut into groups of G
//                 consecutive elements (the last group of a row may be shorter), one scale per
//                 group, s = max|x| / 7, q = clip(round_half_even(x / s), -8, 7), x^ = q * s.
//   outlier_int4  Linear/LayerNorm inputs: per channel j, Sh_j = sum_i |x_ij| and
//                 Z_j = (Sh_j - mean(Sh)) / std(Sh) (population std, in double); channels with
//                 Z_j > z are outliers, at most max_outlier_channels of them (the largest Z win,
//                 ties to the lower index). They are stored exactly (fp32) as a dense rows x k
//                 block with their k channel indices (ascending); the other cols - k channels,
//                 compacted in order, are group_int4-quantized row-wise (k = 0 gives group_int4's
//                 values bit for bit).
//   channel_int4  Q, K, V: one symmetric scale per column, s_j = max_i |x_ij| / 7.
//   asym_int4     softmax probabilities: per row groups of G, s = (max - min) / 15,
//                 o = min + 8 s, q = clip(round_half_even((x - o) / s), -8, 7),
//                 x^ = fma(q, s, o); s = 0 decodes every element to min exactly.
//   bitpack       dropout masks, lossless: bit i % 8 of byte i / 8 is (mask[i] != 0).
//
// Scale 0 (an all-zero group or channel) stores code 0 and decodes to 0. Non-finite inputs give
// unspecified (but bounded, memory-safe) codes.
//
// Blob layout. A blob starts 64-byte aligned (the caller guarantees it), every section starts
// at a multiple of 64 bytes from the blob start, and the blob's size is a multiple of 64 (the
// padding is written as zeros, so blobs are deterministic). INT4 codes are packed two per
// byte, low nibble = even element, PER ROW: row i's codes start at byte i * ceil(c / 2) of the
// codes section, where c is the number of quantized columns (odd c leaves the last high nibble
// 0). Scales and offsets are fp32, row-major [row][group]. With A(x) = 64 * ceil(x / 64),
// H = 64 (the header, BlobHeader below), g(c) = ceil(c / G):
//
//   group_int4    H + A(4 * rows * g(cols))                      scales
//                   + A(rows * ceil(cols / 2))                   codes
//   outlier_int4  H + A(4 * k)                                   channel indices (int32, ascending)
//      (k outliers, c = cols - k)
//                   + A(4 * rows * k)                            outlier values (rows x k fp32)
//                   + A(4 * rows * g(c)) + A(rows * ceil(c / 2)) scales, codes of the c others
//   channel_int4  H + A(4 * cols) + A(rows * ceil(cols / 2))     scales, codes
//   asym_int4     H + A(4 * rows * g(cols))                      scales
//                   + A(4 * rows * g(cols))                      offsets
//                   + A(rows * ceil(cols / 2))                   codes
//   bitpack       A(ceil(n / 8))                                 bits (no header: n is the size)
//
// Sections in that order; an empty section takes no bytes. codec_bytes() is exactly these
// formulas; codec_layout() gives every section's offset.
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

enum class Codec : std::uint8_t { group_int4, outlier_int4, channel_int4, asym_int4, bitpack };

// Printable name ("group_int4", ...).
const char* codec_name(Codec codec);

struct CodecParams {
    int group_size = 64;           // G, 1..kMaxGroupSize (even G takes the vectorised path)
    float outlier_z = 3.0f;        // Z-score threshold of the outlier codec
    int max_outlier_channels = 0;  // cap on k; 0 means cols / 16 (the default); clamped to cols
};
inline constexpr int kMaxGroupSize = 4096;

struct CodecStats {
    std::size_t bytes = 0;         // compressed size (compress's return value)
    double relative_l2 = 0;        // ||x - x^|| / ||x||  (0 for bitpack)
    float max_abs_error = 0;       // max |x - x^|        (0 for bitpack)
    float outlier_fraction = 0;    // k / cols            (outlier codec; 0 otherwise)
};

// Byte offsets of a blob's sections from its start and its size. An absent section has offset
// 0 (which is the header's place; bitpack, headerless, has its bits at 0).
struct CodecLayout {
    std::size_t indices = 0, outliers = 0, scales = 0, offsets = 0, codes = 0, total = 0;
};

// The number of outlier channels the outlier codec may keep for `cols` columns.
std::size_t outlier_channel_cap(std::size_t cols, const CodecParams& params);
// Layout and exact size of a blob with `outlier_channels` = k (only the outlier codec reads k).
CodecLayout codec_layout(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                         std::size_t outlier_channels = 0);
std::size_t codec_bytes(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                        std::size_t outlier_channels = 0);
// Exact upper bound of compress's output for any data (the outlier codec: the largest size over
// k = 0..outlier_channel_cap): what the caller reserves up front.
std::size_t codec_max_bytes(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params);
// Scratch compress needs: 0 for all but the outlier codec, A(8 * cols) + A(4 * cols) bytes
// (per-channel Sh and Z in double, candidate channel indices).
std::size_t codec_scratch_bytes(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params);

// Writes the blob of src (rows x cols) into dst (64-byte aligned, capacity >= codec_max_bytes);
// returns its size (== codec_bytes with the k chosen). scratch: codec_scratch_bytes() bytes, 8-byte
// aligned (may be null when that is 0). Throws std::invalid_argument on bad parameters, a missing
// scratch, or Codec::bitpack (masks use compress_mask).
std::size_t compress(Codec codec, const float* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                     void* dst, void* scratch);
// Decodes a blob written by compress with the same codec, rows and cols (checked against the
// blob's header; a mismatch throws std::invalid_argument) into dst (rows x cols).
void decompress(Codec codec, const void* blob, std::size_t rows, std::size_t cols, float* dst);

// Dropout masks (bytes 0/1; any nonzero byte packs as 1). Returns codec_bytes(bitpack, 1, n).
std::size_t compress_mask(const unsigned char* mask, std::size_t n, void* dst);
void decompress_mask(const void* blob, std::size_t n, unsigned char* mask);

// k of an outlier_int4 blob (0 for the other codecs' blobs).
std::size_t codec_outlier_channels(const void* blob);

// Error of a decoded tensor against the original: relative L2 (accumulated in double; 0 when
// both are all zero, +inf when only the original is), max abs. bytes and outlier_fraction are
// left 0 for the caller to fill (compress's return, codec_outlier_channels / cols).
CodecStats measure_error(const float* original, const float* decoded, std::size_t n);

// ---- Shared by the codec files (kernels/cpu/codec_*.cpp); not for callers. ----
namespace codec_detail {

inline constexpr std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }

// The first 64 bytes of every float-codec blob: enough to decode it given rows and cols.
struct BlobHeader {
    std::uint32_t magic;             // kBlobMagic
    std::uint8_t codec;              // Codec
    std::uint8_t version;            // kBlobVersion
    std::uint16_t reserved;
    std::uint32_t group_size;        // G
    std::uint32_t outlier_channels;  // k (outlier codec)
    std::uint64_t rows, cols;
    std::uint8_t padding[32];
};
static_assert(sizeof(BlobHeader) == 64);
inline constexpr std::uint32_t kBlobMagic = 0x43434441;  // "ADCC"
inline constexpr std::uint8_t kBlobVersion = 1;

// Checks params (throws std::invalid_argument) and writes the header.
void write_header(void* blob, Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                  std::size_t outlier_channels);
// Checks the header against codec, rows and cols (throws std::invalid_argument) and returns it.
const BlobHeader& read_header(const void* blob, Codec codec, std::size_t rows, std::size_t cols);
// The params a blob was written with (group size; the outlier count comes from the header).
CodecParams header_params(const BlobHeader& header);

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
