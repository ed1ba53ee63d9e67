// Group INT4 on CUDA: the naive symmetric group codec (mode `quant`) and the outlier-separated one
// for Linear/LayerNorm inputs, which quantizes its non-outlier channels with the very same row
// kernel (kernels/cpu/codec_group_int4.cpp is the twin; formats in kernels/codec_format.h).
//
// group_int4 compress is one kernel, a block per row. Where the rows are packed and a group's
// 16-byte packs fit on a warp's lanes (G = 64), group_quantize_packed_kernel's one pass: each
// thread loads its packs, a group's lanes share their max |x| by shuffles (s = max / 7), and each
// codes its pack from registers. Otherwise group_quantize_kernel's two: its warps take the row's
// groups (max |x|, s = max / 7), a barrier, then each thread codes a pack of elements (codecs.cuh:
// store_row_codes; one byte of two gathered elements at a time for outlier_int4's kept columns).
// Decoding into packed rows goes a pack at a time: without outliers a pack's codes and its scale
// in one load each; with them one search of the channel indices a pack, not one an element.
// outlier_int4 adds three kernels before it, and decides k on the device:
//   1. Sh_j = sum_i |x_ij| in double, in the codec's order (codec_format.h: kOutlierSumRows),
//      as the CPU adds, so the blob matches its byte for byte: a thread per column and chunk of
//      rows adds the chunk, then a thread per column adds the chunks' sums;
//   2. one block: mean and population std of Sh (sequential, as the CPU), Z_j in place, the
//      candidates Z_j > z, the cap largest (ties to the lower channel) by counting ranks, and a
//      fixed-order prefix sum that writes the ascending channel indices into the blob, the
//      header with k, and the compacted order of the kept columns into scratch;
//   3. the row kernel reads k from the blob's header, the kept columns through that map, and
//      stores the outlier channels exactly.
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/codecs.cuh"

namespace adacc::cuda::codec_detail {
namespace {

// ---- Block scans (fixed order; every thread of the block must call them). ----

// Exclusive prefix sum of v over the block in thread order; `total` gets the block's sum.
// `warp_totals` is __shared__ int[32] of the caller.
__device__ inline int block_exclusive_scan(int v, int* warp_totals, int& total) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    int inclusive = v;
    for (int offset = 1; offset < 32; offset <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += n;
    }
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        int t = lane < warps ? warp_totals[lane] : 0;
        for (int offset = 1; offset < 32; offset <<= 1) {
            const int n = __shfl_up_sync(0xffffffffu, t, offset);
            if (lane >= offset) t += n;
        }
        warp_totals[lane] = t;  // inclusive over warps
    }
    __syncthreads();
    const int before = (warp > 0 ? warp_totals[warp - 1] : 0) + inclusive - v;
    total = warp_totals[warps - 1];
    __syncthreads();  // warp_totals may be reused
    return before;
}

// ---- The symmetric group row kernel (both codecs). ----

// Block 0 of a quantize kernel writes the blob's frame: the header where the host made it (k
// known there), and the zero padding of every section.
__device__ inline void store_quantize_frame(std::uint8_t* blob, const QuantLayout& L, std::size_t rows, std::size_t k,
                                            unsigned groups, unsigned row_bytes, const BlobHeader* header) {
    if (blockIdx.x != 0) return;
    const int tid = threadIdx.x;
    if (header && tid == 0) store_header(blob, *header);
    zero_padding(blob, L.indices, 4 * k, tid, blockDim.x);
    zero_padding(blob, L.outliers, 4 * rows * k, tid, blockDim.x);
    zero_padding(blob, L.scales, std::size_t{4} * rows * groups, tid, blockDim.x);
    zero_padding(blob, L.codes, rows * row_bytes, tid, blockDim.x);
}

// group_int4's rows in one pass (codecs.cuh: quantize_packed_rows): a group's max |x| by
// shuffles among its lanes, its scale stored by its first lane, each pack coded from registers.
template <typename T>
__global__ void __launch_bounds__(kRowThreads)
    group_quantize_packed_kernel(const T* src, std::size_t rows, std::size_t cols, int group_size, BlobHeader header,
                                 std::uint8_t* blob) {
    constexpr int P = kPack<T>;
    const unsigned c = static_cast<unsigned>(cols), G = static_cast<unsigned>(group_size), group_lanes = G / P;
    const unsigned groups = (c + G - 1) / G, row_bytes = c / 2;
    const QuantLayout L = quant_layout(rows, cols, G, 0);
    store_quantize_frame(blob, L, rows, 0, groups, row_bytes, &header);
    float* scales = reinterpret_cast<float*>(blob + L.scales);
    std::uint8_t* codes = blob + L.codes;
    quantize_packed_rows(
        src, rows, c, group_lanes,
        [](const float(&v)[P], bool) {  // a pack past the row is zeros: max 0, the identity
            float m = 0.0f;
            for (int j = 0; j < P; ++j) m = fmaxf(m, fabsf(v[j]));
            return GroupStats{m, 0.0f};
        },
        [](GroupStats x, GroupStats y) {
            return GroupStats{fmaxf(x.a, y.a), 0.0f};
        },
        [=](std::size_t i, unsigned p, const float(&v)[P], GroupStats group) {
            const float s = group.a / 7.0f;
            if (p % group_lanes == 0) scales[i * groups + p / group_lanes] = s;
            store_pack_codes<T>(codes + i * row_bytes, p * P, c, v,
                                [s](float value, unsigned) { return sym_code(value, s); });
        });
}

// Writes rows [blockIdx.x, +gridDim.x, ...) of a group_int4 blob, or of an outlier_int4 blob
// with kDeviceK: then k and the channel indices are already in the blob (outlier_select_kernel)
// and the row's kept values are x[keep[m]], m < c = cols - k. Without kDeviceK, k = 0 and block
// 0 writes `header`. Block 0 also zeroes every section's padding.
// With `staged` (launched with cols T's of dynamic shared memory) the block first copies each row
// into shared memory in 16-byte packs, all in flight, and both passes read it there: outlier_int4's
// kept columns are a gather through the channel map, which from global memory waited on a load
// per group and lane, then again per code byte.
template <bool kDeviceK, typename T>
__global__ void group_quantize_kernel(const T* src, std::size_t rows, std::size_t cols, int group_size,
                                      const std::int32_t* keep, BlobHeader header, bool staged, std::uint8_t* blob) {
    ADACC_DYNAMIC_SHARED(T, stage);
    // k: the selection's, from the blob; else the header's to be written (0).
    const std::size_t k =
        kDeviceK ? reinterpret_cast<const BlobHeader*>(blob)->outlier_channels : header.outlier_channels;
    const unsigned c = static_cast<unsigned>(cols - k), G = static_cast<unsigned>(group_size);
    const unsigned groups = (c + G - 1) / G, row_bytes = (c + 1) / 2;
    const QuantLayout L = quant_layout(rows, cols, G, k);
    const auto* idx = reinterpret_cast<const std::int32_t*>(blob + L.indices);
    float* outliers = reinterpret_cast<float*>(blob + L.outliers);
    float* scales = reinterpret_cast<float*>(blob + L.scales);
    std::uint8_t* codes = blob + L.codes;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, warps = blockDim.x / 32;
    store_quantize_frame(blob, L, rows, k, groups, row_bytes, kDeviceK ? nullptr : &header);
    const bool gather = k > 0;
    // Contiguous rows (no gather) read as 128-bit packs in both passes, whole groups of packs in
    // the max pass: from the stage always (one row, 16-byte aligned), from the source where its
    // rows are packed.
    constexpr int P = kPack<T>;
    const bool source_packed = rows_packed(src, cols);
    const bool packed = !gather && (staged || source_packed), group_packs = packed && G % P == 0;
    for (std::size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        const T* x = src + i * cols;
        if (staged) {
            // A plain store: store_pack's st.global would fault on a shared address.
            for (unsigned e = tid * P; e < cols; e += blockDim.x * P) {
                const Pack<T> pack = load_raw_pack(x, e, cols, source_packed);
                if (e + P <= cols)
                    *reinterpret_cast<Pack<T>*>(stage + e) = pack;
                else
                    for (int j = 0; j < P; ++j)  // constant indices: the pack stays in registers
                        if (e + j < cols) stage[e + j] = pack.v[j];
            }
            __syncthreads();
            x = stage;
        }
        auto value = [x, keep, gather](unsigned m) { return to_f32(x[gather ? keep[m] : m]); };
        float* row_scales = scales + i * groups;
        // Scales: max |x| is exact whatever the order, so a warp (or, for G < 32, a thread) per group.
        if (G >= 32) {
            for (unsigned g = warp; g < groups; g += warps) {
                const unsigned end = g * G + G < c ? g * G + G : c;
                float m = 0.0f;
                if (group_packs) {  // the group's packs; past the row's end they read 0, no larger |x|
                    for (unsigned e = g * G + lane * P; e < end; e += 32 * P) {
                        float v[P];
                        load_pack(v, x, e, c, true);
                        for (int j = 0; j < P; ++j) m = fmaxf(m, fabsf(v[j]));
                    }
                } else {
                    for (unsigned e = g * G + lane; e < end; e += 32) m = fmaxf(m, fabsf(value(e)));
                }
                m = warp_max(m);
                if (lane == 0) row_scales[g] = m / 7.0f;
            }
        } else {
            for (unsigned g = tid; g < groups; g += blockDim.x) {
                const unsigned end = g * G + G < c ? g * G + G : c;
                float m = 0.0f;
                for (unsigned e = g * G; e < end; ++e) m = fmaxf(m, fabsf(value(e)));
                row_scales[g] = m / 7.0f;
            }
        }
        __syncthreads();  // the row's scales (global memory) are visible to the whole block
        // Codes: gathered kept columns one byte (elements 2b, 2b + 1; a last odd element's high
        // nibble 0) per thread, contiguous rows by packs (store_row_codes, the same bytes).
        std::uint8_t* row_codes = codes + i * row_bytes;
        auto code = [row_scales, G](float v, unsigned e) { return sym_code(v, row_scales[e / G]); };
        if (gather) {
            for (unsigned b = tid; b < row_bytes; b += blockDim.x) {
                const unsigned e = 2 * b;
                row_codes[b] = pack_codes(code(value(e), e), e + 1 < c ? code(value(e + 1), e + 1) : 0);
            }
        } else {
            store_row_codes(row_codes, x, c, packed, code);
        }
        // The outlier channels, exactly (row-major rows x k).
        for (std::size_t t = tid; t < k; t += blockDim.x) outliers[i * k + t] = to_f32(x[idx[t]]);
        // The next row writes other scales, and this row's are not rewritten; but it overwrites
        // the stage this one reads.
        if (staged) __syncthreads();
    }
}

// The rows of a blob without outliers into packed rows whose groups are whole packs: a thread
// decodes a pack from one load of its codes (2 or 4 bytes) and one of its scale, and stores it
// whole. The values are the per-element path's (store_decoded_rows): code times scale in fp32.
template <typename T>
__device__ inline void decode_packed_rows(T* dst, std::size_t rows, unsigned cols, unsigned G, const float* scales,
                                          unsigned groups, const std::uint8_t* codes, unsigned row_bytes) {
    constexpr int P = kPack<T>;
    using Word = std::conditional_t<P == 8, std::uint32_t, std::uint16_t>;  // a pack's P / 2 code bytes
    const unsigned packs = cols / P;
    for (std::size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        const auto* row_codes = reinterpret_cast<const Word*>(codes + i * row_bytes);
        const float* row_scales = scales + i * groups;
        for (unsigned p = threadIdx.x; p < packs; p += blockDim.x) {
            const Word word = row_codes[p];
            const float s = row_scales[p * P / G];
            Pack<T> pack;
            for (int e = 0; e < P; ++e) {
                const int nibble = (word >> (4 * e)) & 15;  // element e: byte e / 2, low nibble first
                pack.v[e] = from_f32<T>(static_cast<float>((nibble ^ 8) - 8) * s);
            }
            store_whole_pack(dst + i * cols + static_cast<std::size_t>(p) * P, pack);
        }
    }
}

// How many of the k ascending outlier channel indices lie below column j (a binary search).
__device__ inline unsigned outliers_below(const std::int32_t* idx, std::size_t k, unsigned j) {
    unsigned lo = 0, hi = static_cast<unsigned>(k);
    while (lo < hi) {
        const unsigned mid = (lo + hi) / 2;
        if (static_cast<unsigned>(idx[mid]) < j)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// Column j of an outlier_int4 row whose channel indices have `below` of them before j: the
// channel's exact value where j is one (and `below` then counts it, for the next column), else the
// code of its place among the kept columns times its group's scale.
__device__ inline float outlier_row_value(const std::uint8_t* row_codes, const float* row_scales,
                                          const float* row_outliers, const std::int32_t* idx, std::size_t k, unsigned G,
                                          unsigned j, unsigned& below) {
    if (below < k && static_cast<unsigned>(idx[below]) == j) return row_outliers[below++];
    const unsigned m = j - below;  // its place among the kept columns
    return static_cast<float>(get_code(row_codes, m)) * row_scales[m / G];
}

// The rows of an outlier_int4 blob (k > 0, valid indices) into packed rows: a thread searches the
// channel indices once for its pack's first column, then walks the pack's columns with
// outlier_row_value, and stores the pack whole. The values are the per-element path's, without a
// search per element.
template <typename T>
__device__ inline void decode_outlier_packed_rows(T* dst, std::size_t rows, unsigned cols, unsigned G, std::size_t k,
                                                  const std::int32_t* idx, const float* outliers, const float* scales,
                                                  unsigned groups, const std::uint8_t* codes, unsigned row_bytes) {
    constexpr int P = kPack<T>;
    const unsigned packs = cols / P;
    for (std::size_t i = blockIdx.x; i < rows; i += gridDim.x) {
        const std::uint8_t* row_codes = codes + i * row_bytes;
        const float* row_scales = scales + i * groups;
        const float* row_outliers = outliers + i * k;
        for (unsigned p = threadIdx.x; p < packs; p += blockDim.x) {
            const unsigned first = p * P;
            unsigned below = outliers_below(idx, k, first);  // outlier channels before the pack
            Pack<T> pack;
            for (int e = 0; e < P; ++e)
                pack.v[e] =
                    from_f32<T>(outlier_row_value(row_codes, row_scales, row_outliers, idx, k, G, first + e, below));
            store_whole_pack(dst + i * cols + first, pack);
        }
    }
}

// Decodes rows of a group_int4 or outlier_int4 blob; G and k come from its header. A header
// that does not match (codec, rows, cols), or outlier indices that are not ascending channels
// below cols, decode to NaN (the CPU's decompress throws there).
template <typename T>
__global__ void group_dequantize_kernel(const std::uint8_t* blob, std::size_t rows, std::size_t cols, Codec codec,
                                        T* dst) {
    __shared__ int bad_of[kRowThreads];
    const BlobHeader& h = *reinterpret_cast<const BlobHeader*>(blob);
    const bool header_good = header_ok(h, codec, rows, cols);
    // group_int4 ignores the header's k, as the CPU does.
    const std::size_t k = header_good && codec == Codec::outlier_int4 ? h.outlier_channels : 0;
    const unsigned G = header_good ? h.group_size : 1;
    const unsigned c = static_cast<unsigned>(cols - k), groups = (c + G - 1) / G, row_bytes = (c + 1) / 2;
    const QuantLayout L = quant_layout(rows, cols, G, k);
    const auto* idx = reinterpret_cast<const std::int32_t*>(blob + L.indices);
    const float* outliers = reinterpret_cast<const float*>(blob + L.outliers);
    const float* scales = reinterpret_cast<const float*>(blob + L.scales);
    const std::uint8_t* codes = blob + L.codes;
    const int tid = threadIdx.x;
    bool bad = !header_good;
    if (k > 0) {  // (uniform in the block) validate the channel indices before reading through them
        int mine = 0;
        for (std::size_t t = tid; t < k; t += blockDim.x)
            if (idx[t] < 0 || static_cast<std::size_t>(idx[t]) >= cols || (t > 0 && idx[t] <= idx[t - 1])) mine = 1;
        bad_of[tid] = mine;
        __syncthreads();
        for (int t = 0; t < kRowThreads; ++t) bad = bad || bad_of[t];  // launched with kRowThreads
    }
    constexpr int P = kPack<T>;
    if (!bad && rows_packed(dst, cols)) {
        if (k > 0) {
            decode_outlier_packed_rows(dst, rows, static_cast<unsigned>(cols), G, k, idx, outliers, scales, groups,
                                       codes, row_bytes);
            return;
        }
        if (G % P == 0 && reinterpret_cast<std::uintptr_t>(codes) % 4 == 0) {
            decode_packed_rows(dst, rows, static_cast<unsigned>(cols), G, scales, groups, codes, row_bytes);
            return;
        }
    }
    store_decoded_rows(dst, rows, cols, [=](std::size_t i, unsigned j) {
        if (bad) return quiet_nan();
        const std::uint8_t* row_codes = codes + i * row_bytes;
        const float* row_scales = scales + i * groups;
        if (k == 0) return static_cast<float>(get_code(row_codes, j)) * row_scales[j / G];
        unsigned below = outliers_below(idx, k, j);
        return outlier_row_value(row_codes, row_scales, outliers + i * k, idx, k, G, j, below);
    });
}

// ---- Outlier channel selection. ----

constexpr int kSumThreads = 256;  // one column a thread
constexpr int kSumBatch = 8;      // values loaded before they are added

// 0.0 + load(0) + load(1) + ... + load(n - 1), added in that order. The loads of a batch are
// issued before its additions, so they overlap while the additions wait on one another.
template <typename Load>
__device__ inline double add_in_order(std::size_t n, Load load) {
    double acc = 0.0;
    std::size_t i = 0;
    for (; i + kSumBatch <= n; i += kSumBatch) {
        double v[kSumBatch];
        ADACC_UNROLL
        for (int r = 0; r < kSumBatch; ++r) v[r] = load(i + r);
        ADACC_UNROLL
        for (int r = 0; r < kSumBatch; ++r) acc += v[r];
    }
    for (; i < n; ++i) acc += load(i);
    return acc;
}

// chunk_sums[c * cols + j] = sum of |x_ij| over chunk c's rows (codec_format.h, kOutlierSumRows),
// in row order from 0.0: the CPU's order exactly (a double sum is not associative, and Sh decides
// which channels are outliers). Block b takes chunk b / column_blocks, and of it the columns of
// block b % column_blocks: a warp reads 32 adjacent columns of a row.
template <typename T>
__global__ void __launch_bounds__(kSumThreads)
    outlier_chunk_sums_kernel(const T* src, std::size_t rows, std::size_t cols, std::size_t column_blocks,
                              double* chunk_sums) {
    const std::size_t chunk = blockIdx.x / column_blocks;
    const std::size_t j = (blockIdx.x % column_blocks) * kSumThreads + threadIdx.x;
    if (j >= cols) return;
    const std::size_t first = chunk * kOutlierSumRows;
    const std::size_t n = rows - first < kOutlierSumRows ? rows - first : kOutlierSumRows;
    const T* x = src + first * cols + j;
    chunk_sums[chunk * cols + j] =
        add_in_order(n, [&](std::size_t i) { return fabs(static_cast<double>(to_f32(x[i * cols]))); });
}

// sums[j] = the chunks' sums of channel j added in chunk order from 0.0 (the CPU's order).
__global__ void __launch_bounds__(kSumThreads)
    outlier_channel_sums_kernel(const double* chunk_sums, std::size_t chunks, std::size_t cols, double* sums) {
    const std::size_t j = static_cast<std::size_t>(blockIdx.x) * kSumThreads + threadIdx.x;
    if (j >= cols) return;
    sums[j] = add_in_order(chunks, [&](std::size_t c) { return chunk_sums[c * cols + j]; });
}

constexpr int kSelectThreads = 256;
constexpr int kStageDoubles = 1024;  // 8 KiB of shared memory

// The CPU's serial sums over channels, in j order from 0.0, on thread 0 (its result is valid
// there only): sum_j Sh_j, or with `squares` the variance's fma(Sh_j - mean, Sh_j - mean, acc).
// The block stages Sh through shared memory in chunks, so the serial chain waits on shared
// memory rather than on global loads.
__device__ inline double serial_sum(const double* sums, std::size_t cols, double mean, bool squares, double* stage) {
    double acc = 0.0;
    for (std::size_t base = 0; base < cols; base += kStageDoubles) {
        const int n = cols - base < kStageDoubles ? static_cast<int>(cols - base) : kStageDoubles;
        for (int t = threadIdx.x; t < n; t += blockDim.x) stage[t] = sums[base + t];
        __syncthreads();
        if (threadIdx.x == 0)
            for (int t = 0; t < n; ++t) acc = squares ? fma(stage[t] - mean, stage[t] - mean, acc) : acc + stage[t];
        __syncthreads();  // before the stage is refilled
    }
    return acc;
}

// One block. In: sums[cols] = Sh. Out: sums = Z (when std > 0), the k chosen channel indices
// (ascending) in the blob's indices section, the header with k, keep[m] = the m-th kept column.
// The CPU's statistics in its order: mean and variance summed serially over j (serial_sum, the
// variance with fma as on the CPU), Z_j = (Sh_j - mean) / std. Above the cap, channel j is kept
// when fewer than cap candidates beat it (larger Z, or equal Z and lower index): the CPU's sort
// order, without sorting.
__global__ void outlier_select_kernel(double* sums, std::size_t cols, double z, std::size_t cap, std::int32_t* keep,
                                      BlobHeader header, std::uint8_t* blob) {
    __shared__ double stats[2];
    __shared__ int warp_totals[32];
    const int tid = threadIdx.x;
    __shared__ double stage[kStageDoubles];
    const double sum = serial_sum(sums, cols, 0.0, false, stage);
    if (tid == 0) stats[0] = sum / static_cast<double>(cols);
    __syncthreads();
    const double var = serial_sum(sums, cols, stats[0], true, stage);
    if (tid == 0) stats[1] = sqrt(var / static_cast<double>(cols));
    __syncthreads();
    const double mean = stats[0], std_dev = stats[1];
    const bool spread = std_dev > 0.0;  // else every channel alike (or non-finite data): no outliers
    if (spread)
        for (std::size_t j = tid; j < cols; j += blockDim.x) sums[j] = (sums[j] - mean) / std_dev;
    __syncthreads();
    int candidates = 0, total = 0;
    if (spread)
        for (std::size_t j = tid; j < cols; j += blockDim.x) candidates += sums[j] > z;
    block_exclusive_scan(candidates, warp_totals, total);
    const bool capped = static_cast<std::size_t>(total) > cap;
    auto* indices = reinterpret_cast<std::int32_t*>(blob + sizeof(BlobHeader));  // the section's place when k > 0
    std::size_t k = 0;
    for (std::size_t base = 0; base < cols; base += blockDim.x) {
        const std::size_t j = base + tid;
        bool chosen = false;
        if (spread && j < cols && sums[j] > z) {
            chosen = true;
            if (capped) {
                const double zj = sums[j];
                std::size_t beaten_by = 0;
                for (std::size_t b = 0; b < cols && beaten_by < cap; ++b) {
                    const double zb = sums[b];
                    beaten_by += zb > z && (zb > zj || (zb == zj && b < j));
                }
                chosen = beaten_by < cap;
            }
        }
        int chosen_here = 0;
        const std::size_t before = k + block_exclusive_scan(chosen ? 1 : 0, warp_totals, chosen_here);
        if (j < cols) {
            if (chosen)
                indices[before] = static_cast<std::int32_t>(j);
            else
                keep[j - before] = static_cast<std::int32_t>(j);
        }
        k += chosen_here;
    }
    if (tid == 0) {
        header.outlier_channels = static_cast<std::uint32_t>(k);
        store_header(blob, header);
    }
}

template <bool kDeviceK, typename T>
void launch_quantize(const KernelContext& ctx, const T* src, std::size_t rows, std::size_t cols, int G,
                     const std::int32_t* keep, const BlobHeader& header, void* dst) {
    const char* what = kDeviceK ? "codec_compress (outlier_int4)" : "codec_compress (group_int4)";
    auto* blob = static_cast<std::uint8_t*>(dst);
    if (!kDeviceK && quantize_in_one_pass(src, cols, G)) {
        ADACC_LAUNCH(group_quantize_packed_kernel<T>, row_blocks(rows), kRowThreads, 0, ctx.stream)
        (src, rows, cols, G, header, blob);
    } else {
        // A row too wide for the block's shared memory is read where it is.
        const std::size_t stage_bytes = cols * sizeof(T);
        const bool staged = stage_bytes <= shared_memory_per_block(what);
        if (staged)
            allow_dynamic_shared(reinterpret_cast<const void*>(&group_quantize_kernel<kDeviceK, T>), stage_bytes, what);
        ADACC_LAUNCH((group_quantize_kernel<kDeviceK, T>), row_blocks(rows), kRowThreads, staged ? stage_bytes : 0,
                     ctx.stream)
        (src, rows, cols, G, keep, header, staged, blob);
    }
    check_launch(what);
}

}  // namespace

// ---- group_int4 ----

template <typename T>
void compress_group_int4(const KernelContext& ctx, const T* src, std::size_t rows, std::size_t cols,
                         const CodecParams& params, void* dst) {
    check_columns(cols);
    const BlobHeader header = codec_format::make_header(Codec::group_int4, rows, cols, params, 0);  // checks params
    launch_quantize<false>(ctx, src, rows, cols, params.group_size, nullptr, header, dst);
}

template <typename T>
void decompress_group_int4(const KernelContext& ctx, const void* blob, std::size_t rows, std::size_t cols, T* dst) {
    check_columns(cols);
    if (rows == 0 || cols == 0) return;
    ADACC_LAUNCH(group_dequantize_kernel<T>, row_blocks(rows), kRowThreads, 0, ctx.stream)
    (static_cast<const std::uint8_t*>(blob), rows, cols, Codec::group_int4, dst);
    check_launch("codec_decompress (group_int4)");
}

// ---- outlier_int4 ----

template <typename T>
void compress_outlier_int4(const KernelContext& ctx, const T* src, std::size_t rows, std::size_t cols,
                           const CodecParams& params, void* dst) {
    check_columns(cols);
    const BlobHeader header = codec_format::make_header(Codec::outlier_int4, rows, cols, params, 0);  // checks params
    const std::size_t cap = outlier_channel_cap(cols, params);
    if (rows == 0 || cap == 0) {  // no outliers possible (cols = 0 gives cap 0): group_int4's rows
        launch_quantize<false>(ctx, src, rows, cols, params.group_size, nullptr, header, dst);
        return;
    }
    if (!ctx.scratch || ctx.scratch_bytes < codec_scratch_bytes(Codec::outlier_int4, rows, cols, params))
        throw std::invalid_argument("outlier_int4 compress needs codec_scratch_bytes() of scratch");
    const OutlierScratch at = outlier_scratch_layout(rows, cols);
    auto* scratch = static_cast<std::uint8_t*>(ctx.scratch);
    auto* sums = reinterpret_cast<double*>(scratch + at.sums);
    auto* chunk_sums = reinterpret_cast<double*>(scratch + at.chunk_sums);
    auto* keep = reinterpret_cast<std::int32_t*>(scratch + at.channels);
    const std::size_t column_blocks = ceil_div(cols, kSumThreads), chunks = ceil_div(rows, kOutlierSumRows);
    ADACC_LAUNCH(outlier_chunk_sums_kernel<T>, column_blocks * chunks, kSumThreads, 0, ctx.stream)
    (src, rows, cols, column_blocks, chunk_sums);
    check_launch("codec_compress (outlier_int4 chunk sums)");
    ADACC_LAUNCH(outlier_channel_sums_kernel, column_blocks, kSumThreads, 0, ctx.stream)
    (chunk_sums, chunks, cols, sums);
    check_launch("codec_compress (outlier_int4 channel sums)");
    ADACC_LAUNCH(outlier_select_kernel, 1, kSelectThreads, 0, ctx.stream)
    (sums, cols, static_cast<double>(params.outlier_z), cap, keep, header, static_cast<std::uint8_t*>(dst));
    check_launch("codec_compress (outlier_int4 selection)");
    launch_quantize<true>(ctx, src, rows, cols, params.group_size, keep, header, dst);
}

template <typename T>
void decompress_outlier_int4(const KernelContext& ctx, const void* blob, std::size_t rows, std::size_t cols, T* dst) {
    check_columns(cols);
    if (rows == 0 || cols == 0) return;
    ADACC_LAUNCH(group_dequantize_kernel<T>, row_blocks(rows), kRowThreads, 0, ctx.stream)
    (static_cast<const std::uint8_t*>(blob), rows, cols, Codec::outlier_int4, dst);
    check_launch("codec_decompress (outlier_int4)");
}

ADACC_INSTANTIATE_INT4_CODEC_TYPES(group_int4);
ADACC_INSTANTIATE_INT4_CODEC_TYPES(outlier_int4);

}  // namespace adacc::cuda::codec_detail
