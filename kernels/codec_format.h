// Activation compression codecs (docs/design.md, 'Codecs'), backend-neutral part: the forms in
// which the tape stores a tensor whose policy is "compress", their blob layout and exact sizes.
// Everything here is pure arithmetic on shapes and parameters, the same for every backend; the
// kernels that write and read blobs live with their backend (the CPU's in kernels/cpu/codecs.h).
//
// A tensor is a row-major rows x cols matrix of activations (fp32, or bf16 on CUDA, read as the
// floats they are: a bf16 tensor gives the blob of the same values in fp32), or, for bitpack,
// rows * cols bytes of a dropout mask (0/1). Every codec but bitpack is lossy;
// each reports its size and, through measure_error, its error, which the planner and the monitor
// read.
//
//   group_int4    naive symmetric group INT4 (mode `quant`): every row is cut into groups of G
//                 consecutive elements (the last group of a row may be shorter), one scale per
//                 group, s = max|x| / 7, q = clip(round_half_even(x / s), -8, 7), x^ = q * s.
//   outlier_int4  Linear/LayerNorm inputs: per channel j, Sh_j = sum_i |x_ij| (in double, in
//                 the order kOutlierSumRows below defines) and
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
//   bitpack       dropout masks, lossless: bit i % 8 of byte i / 8 is (mask[i] != 0), for the
//                 n = rows * cols mask bytes (any nonzero byte packs as 1 and unpacks as 1).
//
// Scale 0 (an all-zero group or channel) stores code 0 and decodes to 0. Non-finite inputs give
// unspecified (but bounded, memory-safe) codes.
//
// Blob layout. A blob starts 64-byte aligned (the caller guarantees it), every section starts
// at a multiple of 64 bytes from the blob start, and the blob's size is a multiple of 64 (the
// padding is written as zeros, so blobs are deterministic). INT4 codes are packed two per
// byte, low nibble = even element, PER ROW: row i's codes start at byte i * ceil(c / 2) of the
// codes section, where c is the number of quantized columns (odd c leaves the last high nibble
// 0). Scales and offsets are fp32, row-major [row][group]. With A(x) = 64 * ceil(x / 64)
// (align64 below), H = 64 (the header, BlobHeader below), g(c) = ceil(c / G):
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
#pragma once

#include <cstddef>
#include <cstdint>

namespace adacc {

enum class Codec : std::uint8_t { group_int4, outlier_int4, channel_int4, asym_int4, bitpack };
inline constexpr int kNumCodecs = static_cast<int>(Codec::bitpack) + 1;

// Printable name ("group_int4", ...).
const char* codec_name(Codec codec);
// True for bitpack: the decoded tensor equals the original, so there is no error to measure.
inline constexpr bool codec_is_lossless(Codec codec) { return codec == Codec::bitpack; }

struct CodecParams {
    int group_size = 64;           // G, 1..kMaxGroupSize (even G takes the CPU's vectorised path)
    float outlier_z = 3.0f;        // Z-score threshold of the outlier codec
    int max_outlier_channels = 0;  // cap on k; 0 means cols / 16 (the default); clamped to cols
};
inline constexpr int kMaxGroupSize = 4096;

struct CodecStats {
    std::size_t bytes = 0;       // compressed size (compress's return value)
    double relative_l2 = 0;      // ||x - x^|| / ||x||  (0 for bitpack)
    float max_abs_error = 0;     // max |x - x^|        (0 for bitpack)
    float outlier_fraction = 0;  // k / cols            (outlier codec; 0 otherwise)
};

// Byte offsets of a blob's sections from its start and its size. An absent section has offset
// 0 (which is the header's place; bitpack, headerless, has its bits at 0).
struct CodecLayout {
    std::size_t indices = 0, outliers = 0, scales = 0, offsets = 0, codes = 0, total = 0;
};

// The number of outlier channels the outlier codec may keep for `cols` columns.
std::size_t outlier_channel_cap(std::size_t cols, const CodecParams& params);
// Layout and exact size of a blob with `outlier_channels` = k (only the outlier codec reads k).
// Throws std::invalid_argument on bad parameters (every codec, bitpack included).
CodecLayout codec_layout(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                         std::size_t outlier_channels = 0);
std::size_t codec_bytes(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                        std::size_t outlier_channels = 0);
// THE compressed-slot bound: the exact upper bound of compress's output for any data, what a
// caller reserves up front (the tape's slot, the planner's compressed size, the profile's bound).
// For every codec, bitpack included: the outlier codec's is the largest size over
// k = 0..outlier_channel_cap; the others' size does not depend on the data, so it is exact
// (bitpack's A(ceil(rows * cols / 8)) depends only on rows * cols, however they are split).
std::size_t codec_max_bytes(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params);
// Scratch compress needs: 0 for all but the outlier codec, whose scratch is OutlierScratch below.
std::size_t codec_scratch_bytes(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params);

// The outlier codec sums Sh_j over chunks of kOutlierSumRows consecutive rows: each chunk in row
// order from 0.0, then the chunks' sums in chunk order from 0.0. Double addition is not
// associative and Sh decides which channels are outliers, so every backend adds in this one
// order; it lets a GPU sum the chunks in parallel where one serial chain over every row would
// take a millisecond.
inline constexpr std::size_t kOutlierSumRows = 1024;
// The outlier codec's scratch, byte offsets from its (64-byte aligned) start: Sh and then Z per
// channel (cols doubles, first, where the tests read them), the candidate channel indices (cols
// int32), and the chunks' sums (chunk-major, ceil(rows / kOutlierSumRows) x cols doubles).
struct OutlierScratch {
    std::size_t sums = 0, channels = 0, chunk_sums = 0, total = 0;
};
OutlierScratch outlier_scratch_layout(std::size_t rows, std::size_t cols);

// ---- The blob format's pieces, for the backends' codec implementations; not for callers. ----
namespace codec_format {

// A(x): section sizes and offsets are rounded up to 64 bytes.
inline constexpr std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }
inline constexpr std::size_t ceil_div(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// The first 64 bytes of every float-codec blob: enough to decode it given rows and cols.
struct BlobHeader {
    std::uint32_t magic;   // kBlobMagic
    std::uint8_t codec;    // Codec
    std::uint8_t version;  // kBlobVersion
    std::uint16_t reserved;
    std::uint32_t group_size;        // G
    std::uint32_t outlier_channels;  // k (outlier codec)
    std::uint64_t rows, cols;
    std::uint8_t padding[32];
};
static_assert(sizeof(BlobHeader) == 64);
inline constexpr std::uint32_t kBlobMagic = 0x43434441;  // "ADCC"
inline constexpr std::uint8_t kBlobVersion = 1;

// Throws std::invalid_argument unless 1 <= group_size <= kMaxGroupSize and max_outlier_channels >= 0.
void check_params(const CodecParams& params);
// Checks params and returns the header of a blob (padding and reserved bytes zero).
BlobHeader make_header(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                       std::size_t outlier_channels);
// Throws std::invalid_argument unless `header` is a valid header of a codec blob of rows x cols.
void check_header(const BlobHeader& header, Codec codec, std::size_t rows, std::size_t cols);
// The params a blob was written with (group size; the outlier count comes from the header).
CodecParams header_params(const BlobHeader& header);

// The same on a blob in host-addressable memory: make_header copied to the blob's first 64 bytes,
// and check_header of those bytes (returned).
void write_header(void* blob, Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                  std::size_t outlier_channels);
const BlobHeader& read_header(const void* blob, Codec codec, std::size_t rows, std::size_t cols);

}  // namespace codec_format
}  // namespace adacc
