// Asymmetric group INT4 for softmax probabilities on CUDA (twin: kernels/cpu/codec_asym_int4.cpp).
// Per row group of G: s = (max - min) / 15, o = min + 8 s, q = clip(round((x - o) / s), -8, 7),
// x^ = fma(q, s, o); s = 0 stores code 0 and decodes to min. Same shapes as group_int4's row
// kernels: packed rows whose group is at most a warp's 16-byte packs (G = 64) in one pass
// (codecs.cuh: quantize_packed_rows); other rows a block per row, a warp (or for G < 32 a
// thread) per group for min and max, a barrier, then a pack of codes per thread (codecs.cuh:
// store_row_codes), 128-bit loads where rows are aligned.
//
// Bytes equal the CPU's with one exception: in a group whose values are all zeros of both signs,
// min and max are +-0 depending on the order they are met (fminf/fmaxf here, the CPU's AVX-512
// lane order there; the CPU's scalar and vector paths differ in it too), so the stored scale and
// offset may differ in the sign of zero. The decoded values compare equal (both are zeros).
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/codecs.cuh"

namespace adacc::cuda::codec_detail {
namespace {

// The CPU's ordering of a group's statistics: s from the range, o = fma(8, s, lo) (= lo + 8 s
// exactly, 8 s being exact).
__device__ inline void store_group(float lo, float hi, float* scale, float* offset) {
    const float s = (hi - lo) / 15.0f;
    *scale = s;
    *offset = fmaf(8.0f, s, lo);
}

__device__ inline int asym_code(float x, float s, float o) { return s == 0.0f ? 0 : round_clip((x - o) / s); }

// Block 0 of a quantize kernel writes the header and the padding of every section.
__device__ inline void store_asym_frame(std::uint8_t* blob, const BlobHeader& header, const CodecLayout& L,
                                        std::size_t rows, unsigned groups, unsigned row_bytes) {
    if (blockIdx.x != 0) return;
    const int tid = threadIdx.x;
    if (tid == 0) store_header(blob, header);
    zero_padding(blob, L.scales, std::size_t{4} * rows * groups, tid, blockDim.x);
    zero_padding(blob, L.offsets, std::size_t{4} * rows * groups, tid, blockDim.x);
    zero_padding(blob, L.codes, rows * row_bytes, tid, blockDim.x);
}

template <typename T>
__global__ void asym_quantize_kernel(const T* src, std::size_t rows, std::size_t cols, int group_size,
                                     BlobHeader header, CodecLayout L, std::uint8_t* blob) {
    const unsigned c = static_cast<unsigned>(cols), G = static_cast<unsigned>(group_size);
    const unsigned groups = (c + G - 1) / G, row_bytes = (c + 1) / 2;
    float* scales = reinterpret_cast<float*>(blob + L.scales);
    float* offsets = reinterpret_cast<float*>(blob + L.offsets);
    std::uint8_t* codes = blob + L.codes;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    // Packed rows: 128-bit loads in both passes; whole groups of packs in the min / max pass.
    constexpr int P = kPack<T>;
    const bool packed = rows_packed(src, cols), group_packs = packed && G % P == 0;
    store_asym_frame(blob, header, L, rows, groups, row_bytes);
    for (std::size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        const T* x = src + i * cols;
        float* row_scales = scales + i * groups;
        float* row_offsets = offsets + i * groups;
        if (G >= 32) {
            for (unsigned g = warp; g < groups; g += warps) {
                const unsigned end = g * G + G < c ? g * G + G : c;
                float lo = INFINITY, hi = -INFINITY;
                if (group_packs) {  // whole packs of the group (end is a multiple of P)
                    for (unsigned e = g * G + lane * P; e < end; e += 32 * P) {
                        float v[P];
                        load_pack(v, x, e, c, true);
                        for (int j = 0; j < P; ++j) {
                            lo = fminf(lo, v[j]);
                            hi = fmaxf(hi, v[j]);
                        }
                    }
                } else {
                    for (unsigned e = g * G + lane; e < end; e += 32) {
                        lo = fminf(lo, to_f32(x[e]));
                        hi = fmaxf(hi, to_f32(x[e]));
                    }
                }
                lo = warp_min(lo);
                hi = warp_max(hi);
                if (lane == 0) store_group(lo, hi, row_scales + g, row_offsets + g);
            }
        } else {
            for (unsigned g = tid; g < groups; g += blockDim.x) {
                const unsigned end = g * G + G < c ? g * G + G : c;
                float lo = INFINITY, hi = -INFINITY;
                for (unsigned e = g * G; e < end; ++e) {
                    lo = fminf(lo, to_f32(x[e]));
                    hi = fmaxf(hi, to_f32(x[e]));
                }
                store_group(lo, hi, row_scales + g, row_offsets + g);
            }
        }
        __syncthreads();  // the row's scales and offsets (global memory) are visible to the block
        store_row_codes(codes + i * row_bytes, x, c, packed, [row_scales, row_offsets, G](float v, unsigned e) {
            return asym_code(v, row_scales[e / G], row_offsets[e / G]);
        });
    }
}

// asym_int4's rows in one pass (codecs.cuh: quantize_packed_rows): a group's min and max by
// shuffles among its lanes, its scale and offset stored by its first lane, each pack coded from
// registers. Block 0 writes the header and the padding, as asym_quantize_kernel's.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    asym_quantize_packed_kernel(const T* src, std::size_t rows, std::size_t cols, int group_size, BlobHeader header,
                                CodecLayout L, std::uint8_t* blob) {
    constexpr int P = kPack<T>;
    const unsigned c = static_cast<unsigned>(cols), G = static_cast<unsigned>(group_size), group_lanes = G / P;
    const unsigned groups = (c + G - 1) / G, row_bytes = c / 2;
    store_asym_frame(blob, header, L, rows, groups, row_bytes);
    float* scales = reinterpret_cast<float*>(blob + L.scales);
    float* offsets = reinterpret_cast<float*>(blob + L.offsets);
    std::uint8_t* codes = blob + L.codes;
    quantize_packed_rows(
        src, rows, c, group_lanes,
        [](const float(&v)[P], bool in_row) {  // a pack past the row: (+inf, -inf), the identity
            GroupStats range{INFINITY, -INFINITY};
            for (int j = 0; j < P && in_row; ++j) range = GroupStats{fminf(range.a, v[j]), fmaxf(range.b, v[j])};
            return range;
        },
        [](GroupStats x, GroupStats y) {
            return GroupStats{fminf(x.a, y.a), fmaxf(x.b, y.b)};
        },
        [=](std::size_t i, unsigned p, const float(&v)[P], GroupStats range) {
            float s, o;
            store_group(range.a, range.b, &s, &o);
            const std::size_t g = i * groups + p / group_lanes;
            if (p % group_lanes == 0) {
                scales[g] = s;
                offsets[g] = o;
            }
            store_pack_codes<T>(codes + i * row_bytes, p * P, c, v,
                                [s, o](float value, unsigned) { return asym_code(value, s, o); });
        });
}

// Decodes rows (G from the header); a header that does not match decodes to NaN.
template <typename T>
__global__ void asym_dequantize_kernel(const std::uint8_t* blob, std::size_t rows, std::size_t cols, T* dst) {
    const BlobHeader& h = *reinterpret_cast<const BlobHeader*>(blob);
    const bool good = header_ok(h, Codec::asym_int4, rows, cols);
    const unsigned c = static_cast<unsigned>(cols), G = good ? h.group_size : 1;
    const unsigned groups = (c + G - 1) / G, row_bytes = (c + 1) / 2;
    // The layout of codec_format.h: header, scales, offsets, codes (all present: rows, cols > 0).
    const std::size_t scale_bytes = align64(std::size_t{4} * rows * groups);
    const float* scales = reinterpret_cast<const float*>(blob + sizeof(BlobHeader));
    const float* offsets = reinterpret_cast<const float*>(blob + sizeof(BlobHeader) + scale_bytes);
    const std::uint8_t* codes = blob + sizeof(BlobHeader) + 2 * scale_bytes;
    store_decoded_rows(dst, rows, cols, [=](std::size_t i, unsigned j) {
        if (!good) return quiet_nan();
        const std::size_t g = i * groups + j / G;
        return fmaf(static_cast<float>(get_code(codes + i * row_bytes, j)), scales[g], offsets[g]);
    });
}

}  // namespace

template <typename T>
void compress_asym_int4(const KernelContext& ctx, const T* src, std::size_t rows, std::size_t cols,
                        const CodecParams& params, void* dst) {
    check_columns(cols);
    const BlobHeader header = codec_format::make_header(Codec::asym_int4, rows, cols, params, 0);  // checks params
    const CodecLayout L = codec_layout(Codec::asym_int4, rows, cols, params);
    auto* blob = static_cast<std::uint8_t*>(dst);
    if (quantize_in_one_pass(src, cols, params.group_size)) {
        ADACC_LAUNCH(asym_quantize_packed_kernel<T>, row_blocks(rows), kRowThreads, 0, ctx.stream)
        (src, rows, cols, params.group_size, header, L, blob);
    } else {
        ADACC_LAUNCH(asym_quantize_kernel<T>, row_blocks(rows), kRowThreads, 0, ctx.stream)
        (src, rows, cols, params.group_size, header, L, blob);
    }
    check_launch("codec_compress (asym_int4)");
}

template <typename T>
void decompress_asym_int4(const KernelContext& ctx, const void* blob, std::size_t rows, std::size_t cols, T* dst) {
    check_columns(cols);
    if (rows == 0 || cols == 0) return;
    ADACC_LAUNCH(asym_dequantize_kernel<T>, row_blocks(rows), kRowThreads, 0, ctx.stream)
    (static_cast<const std::uint8_t*>(blob), rows, cols, dst);
    check_launch("codec_decompress (asym_int4)");
}

ADACC_INSTANTIATE_INT4_CODEC_TYPES(asym_int4);

}  // namespace adacc::cuda::codec_detail
