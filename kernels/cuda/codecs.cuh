// Activation compression codecs on CUDA: what the codec files (kernels/cuda/codec_*.cu) share,
// the device twin of kernels/cpu/codecs.h. The formats (sections, sizes, header) are
// kernels/codec_format.h's and backend-neutral: a blob written here decodes on the CPU and vice
// versa, byte for byte the CPU's blob (see each file for the one exception).
//
// Device rules the codecs follow:
// - codec_compress only queues kernels: the header, every section and every padding byte are
//   written by the kernels (block 0 writes the header and the sections' zero padding), nothing
//   is read back. The outlier codec's k is decided on the device and read there from the blob's
//   header by the kernels after it.
// - Decoding reads the parameters (group size, k) from the blob's header on the device. A header
//   that does not match the codec and shape (what the CPU's decompress throws on), or an outlier
//   blob with corrupt channel indices, decodes to NaN everywhere instead: a device cannot throw,
//   and this keeps every access in bounds while making the failure visible.
// - No atomics; every reduction has a fixed order (max/min are exact, so their order is free).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "kernels/codec_format.h"
#include "kernels/cuda/cuda_common.cuh"

namespace adacc::cuda::codec_detail {

using codec_format::BlobHeader;

// ---- The host entry points of each codec file (dispatched by codecs.cu). ----

// The INT4 codecs read and decode to activations of type T (float or __nv_bfloat16; each file
// instantiates both): values are loaded with to_f32 and coded in fp32, so a bf16 tensor gives
// the blob of the fp32 tensor of the same values (bf16 -> fp32 is exact), and decoded values are
// computed in fp32 and stored with from_f32 (bf16: the fp32 value rounded to nearest even).
template <typename T>
void compress_group_int4(const KernelContext& ctx, const T* src, std::size_t rows, std::size_t cols,
                         const CodecParams& params, void* dst);
template <typename T>
void decompress_group_int4(const KernelContext& ctx, const void* blob, std::size_t rows, std::size_t cols, T* dst);
template <typename T>
void compress_outlier_int4(const KernelContext& ctx, const T* src, std::size_t rows, std::size_t cols,
                           const CodecParams& params, void* dst);
template <typename T>
void decompress_outlier_int4(const KernelContext& ctx, const void* blob, std::size_t rows, std::size_t cols, T* dst);
template <typename T>
void compress_channel_int4(const KernelContext& ctx, const T* src, std::size_t rows, std::size_t cols,
                           const CodecParams& params, void* dst);
template <typename T>
void decompress_channel_int4(const KernelContext& ctx, const void* blob, std::size_t rows, std::size_t cols, T* dst);
template <typename T>
void compress_asym_int4(const KernelContext& ctx, const T* src, std::size_t rows, std::size_t cols,
                        const CodecParams& params, void* dst);
template <typename T>
void decompress_asym_int4(const KernelContext& ctx, const void* blob, std::size_t rows, std::size_t cols, T* dst);
// The float and bf16 instances of one INT4 codec's entry points, written once in its file.
#define ADACC_INSTANTIATE_INT4_CODEC(codec, T)                                                                   \
    template void compress_##codec(const KernelContext&, const T*, std::size_t, std::size_t, const CodecParams&, \
                                   void*);                                                                       \
    template void decompress_##codec(const KernelContext&, const void*, std::size_t, std::size_t, T*)
#define ADACC_INSTANTIATE_INT4_CODEC_TYPES(codec) \
    ADACC_INSTANTIATE_INT4_CODEC(codec, float);   \
    ADACC_INSTANTIATE_INT4_CODEC(codec, __nv_bfloat16)

// n mask bytes -> A(ceil(n / 8)) bytes of bits, and back.
void compress_bitpack(const KernelContext& ctx, const unsigned char* mask, std::size_t n, void* dst);
void decompress_bitpack(const KernelContext& ctx, const void* blob, std::size_t n, unsigned char* mask);

// ---- Shapes. ----

// Row kernels: one block of kRowThreads per row, grid-striding when rows exceed kMaxRowBlocks.
inline constexpr int kRowThreads = 128;
inline constexpr std::size_t kMaxRowBlocks = 65535;
inline unsigned row_blocks(std::size_t rows) {
    return static_cast<unsigned>(rows == 0 ? 1 : (rows < kMaxRowBlocks ? rows : kMaxRowBlocks));
}

// Row-local indices are 32-bit on the device (a row of 2^31 floats is far beyond any activation).
inline void check_columns(std::size_t cols) {
    if (cols >= (std::size_t{1} << 31)) throw std::invalid_argument("codec: more than 2^31 - 1 columns");
}

// codec_format's align64 / ceil_div, callable on the device too.
__host__ __device__ inline std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }
__host__ __device__ inline std::size_t div_up(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// The layout of a group_int4 / outlier_int4 blob (k = 0: group_int4's, which outlier_int4 with
// no outliers shares), computed where k is known: on the device for the outlier codec. The same
// formulas as codec_layout (kernels/codec_format.cpp); tests/cuda/test_cuda_codecs.cpp checks
// them equal.
struct QuantLayout {
    std::size_t indices, outliers, scales, codes, total;
};
__host__ __device__ inline QuantLayout quant_layout(std::size_t rows, std::size_t cols, std::size_t G, std::size_t k) {
    const std::size_t c = cols - k;
    const std::size_t bytes[4] = {4 * k, 4 * rows * k, 4 * rows * div_up(c, G), rows * div_up(c, 2)};
    std::size_t offset[4] = {0, 0, 0, 0}, at = sizeof(BlobHeader);
    for (int s = 0; s < 4; ++s)  // sections in order; an empty one takes no bytes (offset 0)
        if (bytes[s] > 0) {
            offset[s] = at;
            at += align64(bytes[s]);
        }
    return QuantLayout{offset[0], offset[1], offset[2], offset[3], at};
}

// codec_format::check_header as a predicate, for the device.
__host__ __device__ inline bool header_ok(const BlobHeader& h, Codec codec, std::size_t rows, std::size_t cols) {
    return h.magic == codec_format::kBlobMagic && h.version == codec_format::kBlobVersion &&
           h.codec == static_cast<std::uint8_t>(codec) && h.rows == rows && h.cols == cols && h.group_size >= 1 &&
           h.group_size <= static_cast<std::uint32_t>(kMaxGroupSize) && h.outlier_channels <= cols;
}

// ---- Codes (the CPU's codec_detail::round_clip / put_nibble / get_nibble). ----

// round_half_even(clip(v, -8, 7)); NaN gives -8, as on the CPU.
__device__ inline int round_clip(float v) {
    v = v >= -8.0f ? (v > 7.0f ? 7.0f : v) : -8.0f;
    return static_cast<int>(rintf(v));  // round to nearest, ties to even
}
// A symmetric code at scale s (scale 0 codes 0). x / s is IEEE division (no fast math).
__device__ inline int sym_code(float x, float s) { return s == 0.0f ? 0 : round_clip(x / s); }
// Two codes in one byte: low nibble = even element.
__device__ inline std::uint8_t pack_codes(int even, int odd) {
    return static_cast<std::uint8_t>((even & 15) | (odd & 15) << 4);
}
// Code j of a row's packed codes, sign-extended.
__device__ inline int get_code(const std::uint8_t* row_codes, std::size_t j) {
    const int nibble = (row_codes[j / 2] >> (j & 1) * 4) & 15;
    return (nibble ^ 8) - 8;
}

// ---- Blob pieces written by block 0 of a compress kernel. ----

// The 64-byte header (padding zero, as make_header left it); one thread writes it.
__device__ inline void store_header(void* blob, const BlobHeader& h) { *static_cast<BlobHeader*>(blob) = h; }
// Zeroes the padding of a section of `used` bytes at `offset`: bytes [used, align64(used)), split
// over the calling threads (thread `t` of `threads`). Nothing for an absent section (used = 0).
__device__ inline void zero_padding(std::uint8_t* blob, std::size_t offset, std::size_t used, int t, int threads) {
    for (std::size_t b = used + t; b < align64(used); b += threads) blob[offset + b] = 0;
}

// What a blob that fails header_ok decodes to.
__device__ inline float quiet_nan() { return nanf(""); }

// Whether a row-major tensor's rows can be moved as packs: 16-byte aligned, cols a multiple of
// the pack (so every row starts aligned).
template <typename T>
__host__ __device__ inline bool rows_packed(const T* p, std::size_t cols) {
    return cols % kPack<T> == 0 && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// The row walk of the dequantize kernels: dst[i][j] = decode(i, j) (an fp32 value, stored as T)
// for rows [blockIdx.x, +gridDim.x, ...), a block's threads taking packs of the row's columns
// (128-bit stores where the rows are packed).
template <typename T, typename Decode>
__device__ inline void store_decoded_rows(T* dst, std::size_t rows, std::size_t cols, Decode decode) {
    constexpr int P = kPack<T>;
    const bool packed = rows_packed(dst, cols);
    for (std::size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        T* row = dst + i * cols;
        if (packed) {  // whole packs: one 128-bit store each
            for (unsigned j = threadIdx.x * P; j < cols; j += blockDim.x * P) {
                Pack<T> pack;
                for (int e = 0; e < P; ++e) pack.v[e] = from_f32<T>(decode(i, j + e));
                store_whole_pack(row + j, pack);
            }
        } else {
            for (unsigned j = threadIdx.x; j < cols; j += blockDim.x) row[j] = from_f32<T>(decode(i, j));
        }
    }
}

// The code bytes of the pack of kPack<T> values v at element e of a row of c (element e + j is
// v[j]; those at or past c code nothing): code element a of value x as code(x, a). Byte b of the
// row holds elements 2b, 2b + 1 (a last odd element's high nibble 0), as the CPU writes them; a
// whole pack's kPack / 2 bytes go as one 2- or 4-byte store where they are aligned.
template <typename T, typename Code>
__device__ inline void store_pack_codes(std::uint8_t* row_codes, unsigned e, unsigned c, const float (&v)[kPack<T>],
                                        Code code) {
    constexpr int P = kPack<T>, B = P / 2;  // B code bytes a pack: 4 (bf16) or 2 (fp32)
    std::uint8_t bytes[B];
    for (int h = 0; h < B; ++h) {
        const unsigned a = e + 2 * h;
        bytes[h] = pack_codes(a < c ? code(v[2 * h], a) : 0, a + 1 < c ? code(v[2 * h + 1], a + 1) : 0);
    }
    std::uint8_t* out = row_codes + e / 2;
    if (e + P <= c && reinterpret_cast<std::uintptr_t>(out) % B == 0) {
        using Word = std::conditional_t<B == 4, std::uint32_t, std::uint16_t>;
        Word word = 0;
        for (int h = 0; h < B; ++h) word = static_cast<Word>(word | static_cast<Word>(bytes[h]) << (8 * h));
        *reinterpret_cast<Word*>(out) = word;
    } else {
        for (int h = 0; h < B && e + 2 * h < c; ++h) out[h] = bytes[h];
    }
}

// ---- One-pass quantization of packed rows. ----

// Packs a thread of a one-pass row loads before it uses the first (kRowThreads threads: rows up to
// 4096 bf16 or 2048 fp32 values in one round).
inline constexpr int kQuantizeLoads = 4;

// Whether a group codec's rows can take quantize_packed_rows: packed, and a group's 16-byte packs
// fit on adjacent lanes of a warp (G = 64: 8 lanes in bf16, 16 in fp32).
template <typename T>
bool quantize_in_one_pass(const T* src, std::size_t cols, int G) {
    constexpr int P = kPack<T>;
    return rows_packed(src, cols) && G % P == 0 && G / P <= 32 && 32 % (G / P) == 0;
}

// A group's statistics: two floats (group_int4's max |x| and an unused one, asym_int4's min and max).
struct GroupStats {
    float a, b;
};

// The rows of a group codec in one pass (quantize_in_one_pass): thread t owns packs t, t +
// blockDim, ... of a row, so a group's `group_lanes` packs are on adjacent lanes of one warp. Each
// thread loads kQuantizeLoads packs at once; a pack's statistics stats(v, in_row) (the identity
// for a pack past the row) meet their group's by shuffles through merge, and emit(i, p, v, group)
// codes pack p of row i from registers: one read of the row, no barrier. A group's statistics are
// exact whatever the order they merge in where merge is a max or a min (as both codecs'), so the
// blobs are the two-pass kernels'.
template <typename T, typename Stats, typename Merge, typename Emit>
__device__ inline void quantize_packed_rows(const T* src, std::size_t rows, unsigned c, unsigned group_lanes,
                                            Stats stats, Merge merge, Emit emit) {
    constexpr int P = kPack<T>;
    const unsigned packs = c / P;
    for (std::size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        const T* x = src + i * c;
        // Every thread runs the same rounds (the shuffles need every lane).
        for (unsigned round = 0; round < packs; round += kQuantizeLoads * blockDim.x) {
            Pack<T> loaded[kQuantizeLoads];
            ADACC_UNROLL
            for (int u = 0; u < kQuantizeLoads; ++u) {
                const unsigned p = round + u * blockDim.x + threadIdx.x;
                loaded[u] = load_raw_pack(x, static_cast<long>(p) * P, c, true);
            }
            ADACC_UNROLL
            for (int u = 0; u < kQuantizeLoads; ++u) {
                const unsigned p = round + u * blockDim.x + threadIdx.x;
                float v[P];
                unpack(v, loaded[u]);
                GroupStats group = stats(v, p < packs);
                for (unsigned lanes = 1; lanes < group_lanes; lanes <<= 1) {
                    const GroupStats other{__shfl_xor_sync(0xffffffffu, group.a, static_cast<int>(lanes)),
                                           __shfl_xor_sync(0xffffffffu, group.b, static_cast<int>(lanes))};
                    group = merge(group, other);
                }
                if (p < packs) emit(i, p, v, group);
            }
        }
    }
}

// The code bytes of a row of c values x (the quantize kernels' second pass): a block's threads
// take packs of kPack elements (an even number: kPack / 2 whole bytes), loaded as 128-bit packs
// where `packed`. The pack changes the loads and stores, never a byte.
template <typename T, typename Code>
__device__ inline void store_row_codes(std::uint8_t* row_codes, const T* x, unsigned c, bool packed, Code code) {
    constexpr int P = kPack<T>;
    for (unsigned e = threadIdx.x * P; e < c; e += blockDim.x * P) {
        float v[P];
        load_pack(v, x, e, c, packed);
        store_pack_codes<T>(row_codes, e, c, v, code);
    }
}

}  // namespace adacc::cuda::codec_detail
