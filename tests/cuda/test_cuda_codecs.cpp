// The activation codecs on CUDA (kernels/cuda/codec*.cu) against their CPU twins
// (kernels/cpu/codecs.h). The blob format is backend-neutral, so for every codec and shape:
//   - the CUDA blob equals the CPU's byte for byte (header, sections, zero padding: the slot is
//     pre-filled with 0xA5, so a padding byte left unwritten shows), and nothing past its exact
//     size is written; the outlier codec's statistics (Sh, mean, std, Z) equal the CPU's bit for
//     bit (summed in the CPU's order; data of magnitudes 2^-30..2^30 makes the order matter);
//   - decoding is bit-identical: CUDA decodes its own blob and the CPU's, the CPU decodes
//     CUDA's, all equal to the CPU decoding its own;
//   - codec_outlier_count equals the CPU's k, and codec_error equals the CPU's measure_error:
//     max_abs_error exactly (a max), relative_l2 within 1e-5 relative (sums of squares in double,
//     in a different order: the two-pass reduction vs OpenMP's).
// Shapes are odd (rows 1, 7, 33; cols 40, 72, 100; odd group sizes, G = 1 and 4096) plus one with
// more rows than a tile of the outlier sums and a chunk of the channel maxima (140 rows).
// Every INT4 case runs again in bf16 (check_codec): the data rounded to bf16 compresses on CUDA
// to the CPU's blob of the same values as floats, byte for byte, and decodes to bf16 bit for bit
// as the CPU's decoded floats rounded to nearest even.
// asym_int4 may differ from the CPU in the sign of a zero scale for a group of zeros of both
// signs (kernels/cuda/codec_asym_int4.cu); the data here has no negative zeros.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "kernels/cpu/codecs.h"
#ifdef ADACC_SIMT_EMULATION
#include "kernels/cuda/codecs.cuh"  // quant_layout, host-callable; the device build's host compiler cannot read it
#endif
#include "kernels/cuda/ops.h"
#include "kernels/rng.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

using Bytes = std::vector<unsigned char>;
using Vec = std::vector<float>;
using Bf16s = std::vector<bf16>;

constexpr unsigned char kFill = 0xA5;
// relative_l2 sums squares in double in another order than the CPU's OpenMP reduction.
constexpr double kErrorRel = 1e-5;

struct Shape {
    std::size_t rows, cols;
    int G;
};
const Shape kShapes[] = {{1, 40, 64}, {7, 72, 64}, {33, 100, 64}, {7, 100, 7}, {33, 72, 16},
                         {5, 40, 1},  {3, 100, 33}, {1, 100, 4096}, {140, 72, 64}};

std::string describe(const char* codec, std::size_t rows, std::size_t cols, int G) {
    return std::string(codec) + " " + std::to_string(rows) + "x" + std::to_string(cols) + " G=" + std::to_string(G);
}

// ---- Data (fixed seeds; no negative zeros: zeros are assigned, never products). ----

float normal(std::uint64_t key, std::uint64_t i) { return static_cast<float>(rng_normal(key, i)); }

// Rows of varied scale; every fifth row all zero, others with a zero first half or a heavy tail.
Vec activations(std::size_t rows, std::size_t cols, std::uint64_t seed) {
    const std::uint64_t key = mix64(seed);
    Vec x(rows * cols);
    for (std::size_t i = 0; i < rows; ++i) {
        const float row_scale = std::exp(6.0f * rng_uniform(key, ~i) - 3.0f);
        for (std::size_t j = 0; j < cols; ++j) {
            float v = normal(key, i * cols + j) * row_scale;
            if (i % 5 == 1 || (i % 5 == 2 && j < cols / 2)) v = 0.0f;
            if (i % 5 == 3 && j % 7 == 0) v *= 40.0f;
            x[i * cols + j] = v;
        }
    }
    return x;
}

// Magnitudes spread over 2^-30 .. 2^30: double sums of them round, so their order shows.
Vec wide_range(std::size_t rows, std::size_t cols, std::uint64_t seed) {
    const std::uint64_t key = mix64(seed);
    Vec x(rows * cols);
    for (std::size_t e = 0; e < x.size(); ++e)
        x[e] = std::ldexp(normal(key, e), static_cast<int>(60.0f * rng_uniform(key, ~e)) - 30);
    return x;
}

// Softmax-like rows in [0, 1] with a causal zero tail (whole groups of +0).
Vec probabilities(std::size_t rows, std::size_t cols, std::uint64_t seed) {
    const std::uint64_t key = mix64(seed);
    Vec x(rows * cols, 0.0f);
    for (std::size_t i = 0; i < rows; ++i) {
        const std::size_t live = 1 + (i * 13) % cols;
        double sum = 0;
        for (std::size_t j = 0; j < live; ++j) sum += x[i * cols + j] = std::exp(2.0f * normal(key, i * cols + j));
        for (std::size_t j = 0; j < live; ++j) x[i * cols + j] = static_cast<float>(x[i * cols + j] / sum);
    }
    return x;
}

// Standard normal data with `channels` scaled by `factor`.
Vec with_outliers(std::size_t rows, std::size_t cols, const std::vector<int>& channels, std::uint64_t seed,
                  float factor = 50.0f) {
    const std::uint64_t key = mix64(seed);
    Vec x(rows * cols);
    for (std::size_t e = 0; e < x.size(); ++e) x[e] = normal(key, e);
    for (int j : channels)
        for (std::size_t i = 0; i < rows; ++i) x[i * cols + j] *= factor;
    return x;
}

// x rounded to bf16 (to nearest even), and bf16 values as floats (exact).
Bf16s rounded_to_bf16(const Vec& x) {
    Bf16s y(x.size());
    std::transform(x.begin(), x.end(), y.begin(), [](float v) { return to_bf16(v); });
    return y;
}
Vec as_floats(const Bf16s& x) {
    Vec y(x.size());
    std::transform(x.begin(), x.end(), y.begin(), [](bf16 v) { return to_float(v); });
    return y;
}

// ---- The CPU side. ----

// A 64-byte-aligned host buffer (blobs must start 64-byte aligned).
struct HostBlob {
    std::vector<unsigned char> storage;
    unsigned char* data;
    explicit HostBlob(std::size_t n) : storage(n + 64, kFill) {
        data = storage.data() + (64 - reinterpret_cast<std::uintptr_t>(storage.data()) % 64) % 64;
    }
};

// The CPU's blob; `scratch_out` gets its scratch afterwards (the outlier codec leaves Sh there,
// or Z in place of it when std > 0).
Bytes cpu_compress(Codec codec, const void* src, std::size_t rows, std::size_t cols, const CodecParams& p,
                   std::vector<double>* scratch_out = nullptr) {
    HostBlob blob(codec_max_bytes(codec, rows, cols, p));
    std::vector<double> scratch(codec_scratch_bytes(codec, rows, cols, p) / 8 + 1);
    const std::size_t n = cpu::compress(codec, src, rows, cols, p, blob.data, scratch.data());
    if (scratch_out) *scratch_out = scratch;
    return Bytes(blob.data, blob.data + n);
}

// The CPU's reading of a blob's k (0 for bitpack, which has no header).
std::size_t cpu_outlier_count(Codec codec, const Bytes& bytes) {
    if (codec == Codec::bitpack) return 0;
    HostBlob blob(bytes.size());
    std::memcpy(blob.data, bytes.data(), bytes.size());
    return cpu::codec_outlier_channels(blob.data);
}

Vec cpu_decompress(Codec codec, const Bytes& bytes, std::size_t rows, std::size_t cols) {
    HostBlob blob(bytes.size());
    std::memcpy(blob.data, bytes.data(), bytes.size());
    Vec y(rows * cols, std::nanf(""));
    cpu::decompress(codec, blob.data, rows, cols, y.data());
    return y;
}

// ---- The CUDA side. ----

void fill_device(void* p, int byte, std::size_t n) {
    ASSERT_EQ(cudaMemset(p, byte, n), cudaSuccess);
}

// A compressed slot of codec_max_bytes on the device, pre-filled with `fill`.
struct DeviceBlob {
    std::size_t max_bytes;
    DeviceArray<unsigned char> slot;
    DeviceBlob(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& p, unsigned char fill)
        : max_bytes(codec_max_bytes(codec, rows, cols, p)), slot(std::max<std::size_t>(1, max_bytes)) {
        fill_device(slot.get(), fill, slot.size());
    }
};

// Compresses on CUDA; returns the blob's exact bytes (its size from the device's k) and checks
// that the rest of the slot kept `fill`.
Bytes cuda_compress(const CudaTestContext& ctx, Codec codec, ConstAct src, std::size_t rows, std::size_t cols,
                    const CodecParams& p, DeviceBlob& blob, unsigned char fill, std::size_t* k_out = nullptr) {
    cuda::codec_compress(ctx.get(), codec, src, rows, cols, p, blob.slot.get());
    const std::size_t k = cuda::codec_outlier_count(ctx.get(), codec, blob.slot.get());
    if (k_out) *k_out = k;
    const std::size_t exact = codec_bytes(codec, rows, cols, p, k);
    const Bytes all = blob.slot.download();
    EXPECT_LE(exact, blob.max_bytes);
    bool untouched = true;
    for (std::size_t i = exact; i < blob.max_bytes; ++i) untouched &= all[i] == fill;
    EXPECT_TRUE(untouched) << codec_name(codec) << " wrote past its " << exact << " bytes";
    return Bytes(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(std::min(exact, all.size())));
}

// Decodes on CUDA into T (float or bf16).
template <typename T = float>
std::vector<T> cuda_decompress(const CudaTestContext& ctx, Codec codec, const void* blob, std::size_t rows,
                               std::size_t cols) {
    DeviceArray<T> y(rows * cols);
    fill_device(y.get(), 0xFF, std::max<std::size_t>(1, rows * cols) * sizeof(T));  // NaN: every element must be written
    cuda::codec_decompress(ctx.get(), codec, blob, rows, cols, y.get());
    return y.download();
}

::testing::AssertionResult bit_equal(const Vec& got, const Vec& want) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
    if (!got.empty() && std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) != 0)
        return all_close(got, want, 0.0) << " (not bit-identical)";
    return ::testing::AssertionSuccess();
}

void expect_error_matches(const CudaTestContext& ctx, ConstAct d_original, ConstAct d_decoded, const Vec& x,
                          const Vec& y, const std::string& what) {
    const CodecStats want = cpu::measure_error(x.data(), y.data(), x.size());
    const CodecStats got = cuda::codec_error(ctx.get(), d_original, d_decoded, x.size());
    if (std::isinf(want.relative_l2)) {
        EXPECT_TRUE(std::isinf(got.relative_l2)) << what;
    } else {
        EXPECT_NEAR(got.relative_l2, want.relative_l2, kErrorRel * want.relative_l2) << what;
    }
    EXPECT_EQ(got.max_abs_error, want.max_abs_error) << what;
    EXPECT_EQ(got.bytes, 0u);
    EXPECT_EQ(got.outlier_fraction, 0.0f);
}

// The outlier codec's selection statistics, bit for bit: Sh summed in the CPU's order, then
// mean, std and Z as the CPU computes them (both leave Z, or Sh when std = 0, in the scratch).
void expect_selection_matches(const CudaTestContext& ctx, Codec codec, std::size_t rows, std::size_t cols,
                              const CodecParams& p, const std::vector<double>& cpu_scratch) {
    if (codec != Codec::outlier_int4 || rows == 0 || outlier_channel_cap(cols, p) == 0) return;
    std::vector<double> z(cols);
    ctx.synchronize();
    EXPECT_EQ(cudaMemcpy(z.data(), ctx.get().scratch, 8 * cols, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(z.data(), cpu_scratch.data(), 8 * cols), 0) << "Z scores differ from the CPU's";
}

constexpr std::size_t kScratchBytes = std::size_t{64} << 10;  // the outlier codec's, for cols <= 2000

// Everything promised for a float codec on one tensor; returns the CUDA blob's k.
std::size_t check_float_codec(const CudaTestContext& ctx, Codec codec, const Vec& x, std::size_t rows, std::size_t cols,
                              const CodecParams& p) {
    const std::string what = describe(codec_name(codec), rows, cols, p.group_size);
    SCOPED_TRACE(what);
    std::vector<double> cpu_scratch;
    const Bytes want_blob = cpu_compress(codec, x.data(), rows, cols, p, &cpu_scratch);
    const std::size_t want_k = cpu_outlier_count(codec, want_blob);
    DeviceArray<float> dx(x);
    DeviceBlob blob(codec, rows, cols, p, kFill);
    std::size_t k = 0;
    const Bytes got_blob = cuda_compress(ctx, codec, dx.get(), rows, cols, p, blob, kFill, &k);
    EXPECT_EQ(k, want_k);
    EXPECT_TRUE(all_equal_bytes(got_blob, want_blob));
    expect_selection_matches(ctx, codec, rows, cols, p, cpu_scratch);

    const Vec want = cpu_decompress(codec, want_blob, rows, cols);
    const Vec got = cuda_decompress(ctx, codec, blob.slot.get(), rows, cols);
    EXPECT_TRUE(bit_equal(got, want)) << "CUDA decoding its own blob";
    DeviceArray<unsigned char> cpu_blob_on_device(want_blob.empty() ? Bytes(1) : want_blob);
    EXPECT_TRUE(bit_equal(cuda_decompress(ctx, codec, cpu_blob_on_device.get(), rows, cols), want))
        << "CUDA decoding the CPU's blob";
    EXPECT_TRUE(bit_equal(cpu_decompress(codec, got_blob, rows, cols), want)) << "the CPU decoding CUDA's blob";

    if (!x.empty()) {
        DeviceArray<float> dy(got);
        expect_error_matches(ctx, dx.get(), dy.get(), x, want, what);
    }
    return k;
}

// The same for x rounded to bf16 on CUDA: its blob is the CPU's blob of those values as floats
// (slot past the exact size untouched, same k and statistics), and CUDA decodes its blob and
// the CPU's to bf16 as the CPU's decoded floats rounded to nearest even, bit for bit.
std::size_t check_bf16_codec(const CudaTestContext& ctx, Codec codec, const Vec& x, std::size_t rows,
                             std::size_t cols, const CodecParams& p) {
    SCOPED_TRACE(describe(codec_name(codec), rows, cols, p.group_size) + " bf16");
    const Bf16s xb = rounded_to_bf16(x);
    const Vec values = as_floats(xb);
    std::vector<double> cpu_scratch;
    const Bytes want_blob = cpu_compress(codec, values.data(), rows, cols, p, &cpu_scratch);
    DeviceArray<bf16> dx(xb);
    DeviceBlob blob(codec, rows, cols, p, kFill);
    std::size_t k = 0;
    const Bytes got_blob = cuda_compress(ctx, codec, dx.get(), rows, cols, p, blob, kFill, &k);
    EXPECT_EQ(k, cpu_outlier_count(codec, want_blob));
    EXPECT_TRUE(all_equal_bytes(got_blob, want_blob));
    expect_selection_matches(ctx, codec, rows, cols, p, cpu_scratch);

    const Bf16s want = rounded_to_bf16(cpu_decompress(codec, want_blob, rows, cols));
    EXPECT_TRUE(all_equal_bytes(cuda_decompress<bf16>(ctx, codec, blob.slot.get(), rows, cols), want))
        << "CUDA decoding its own blob";
    DeviceArray<unsigned char> cpu_blob_on_device(want_blob.empty() ? Bytes(1) : want_blob);
    EXPECT_TRUE(all_equal_bytes(cuda_decompress<bf16>(ctx, codec, cpu_blob_on_device.get(), rows, cols), want))
        << "CUDA decoding the CPU's blob";
    return k;
}

// Both element types; returns the fp32 blob's k.
std::size_t check_codec(const CudaTestContext& ctx, Codec codec, const Vec& x, std::size_t rows, std::size_t cols,
                        const CodecParams& p) {
    check_bf16_codec(ctx, codec, x, rows, cols, p);
    return check_float_codec(ctx, codec, x, rows, cols, p);
}


// ---- Tests. ----

#ifdef ADACC_SIMT_EMULATION
// The device's layout of group/outlier blobs (k known only there) is codec_layout's.
TEST(CudaCodecs, DeviceLayoutMatchesCodecFormat) {
    for (const auto& [rows, cols, G] : kShapes) {
        CodecParams p;
        p.group_size = G;
        for (std::size_t k = 0; k <= cols; ++k) {
            const CodecLayout want = codec_layout(Codec::outlier_int4, rows, cols, p, k);
            const cuda::codec_detail::QuantLayout got = cuda::codec_detail::quant_layout(rows, cols, G, k);
            ASSERT_EQ(got.indices, want.indices) << rows << "x" << cols << " k=" << k;
            ASSERT_EQ(got.outliers, want.outliers);
            ASSERT_EQ(got.scales, want.scales);
            ASSERT_EQ(got.codes, want.codes);
            ASSERT_EQ(got.total, want.total);
        }
        const CodecLayout g = codec_layout(Codec::group_int4, rows, cols, p);
        const auto q = cuda::codec_detail::quant_layout(rows, cols, G, 0);
        EXPECT_EQ(q.scales, g.scales);
        EXPECT_EQ(q.codes, g.codes);
        EXPECT_EQ(q.total, g.total);
    }
}
#endif

TEST(CudaCodecs, GroupInt4MatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const auto& [rows, cols, G] : kShapes) {
        CodecParams p;
        p.group_size = G;
        check_codec(ctx, Codec::group_int4, activations(rows, cols, rows * 31 + cols), rows, cols, p);
    }
}

TEST(CudaCodecs, ChannelInt4MatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const auto& [rows, cols, G] : kShapes) {
        CodecParams p;
        p.group_size = G;  // unused by the codec, but in its header
        check_codec(ctx, Codec::channel_int4, activations(rows, cols, rows * 37 + cols), rows, cols, p);
    }
    // Columns of very different scales, one of them all zero (scale 0).
    const std::size_t rows = 33, cols = 72;
    Vec x = with_outliers(rows, cols, {3, 40, 71}, 5, 100.0f);
    for (std::size_t i = 0; i < rows; ++i) x[i * cols + 10] = 0.0f;
    check_codec(ctx, Codec::channel_int4, x, rows, cols, CodecParams{});
}

TEST(CudaCodecs, AsymInt4MatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (const auto& [rows, cols, G] : kShapes) {
        CodecParams p;
        p.group_size = G;
        check_codec(ctx, Codec::asym_int4, probabilities(rows, cols, rows * 41 + cols), rows, cols, p);
        check_codec(ctx, Codec::asym_int4, activations(rows, cols, rows * 43 + cols), rows, cols, p);
    }
}

// Random activations: the selection runs on the device (k mostly 0 or a few chance channels).
TEST(CudaCodecs, OutlierInt4MatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx(kScratchBytes);
    for (const auto& [rows, cols, G] : kShapes) {
        CodecParams p;
        p.group_size = G;
        p.max_outlier_channels = static_cast<int>(std::max<std::size_t>(1, cols / 8));
        check_codec(ctx, Codec::outlier_int4, activations(rows, cols, rows * 47 + cols), rows, cols, p);
        check_codec(ctx, Codec::outlier_int4, wide_range(rows, cols, rows * 53 + cols), rows, cols, p);
    }
    // More columns than one shared-memory stage of the serial mean / variance (1024).
    CodecParams p;
    p.max_outlier_channels = 20;
    check_codec(ctx, Codec::outlier_int4, wide_range(3, 1100, 59), 3, 1100, p);
}

// A few channels scaled x50: exactly those are chosen (ascending, in the blob) and stored
// exactly, and groups of the compacted rows straddle them.
TEST(CudaCodecs, OutlierInt4PicksPlantedChannels) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx(kScratchBytes);
    struct Case {
        std::size_t rows, cols;
        int G;
        std::vector<int> planted;
    };
    const Case cases[] = {{7, 100, 64, {0, 31, 32, 77, 99}},
                          {33, 72, 16, {5, 6, 40}},
                          {140, 100, 7, {1, 50, 98}},   // two tiles of the channel sums
                          {1, 40, 64, {39}},
                          {3, 1100, 64, {7, 500, 1099}}};
    for (const Case& c : cases) {
        const Vec x = with_outliers(c.rows, c.cols, c.planted, c.rows + c.cols);
        CodecParams p;
        p.group_size = c.G;
        p.max_outlier_channels = 8;
        EXPECT_EQ(check_bf16_codec(ctx, Codec::outlier_int4, x, c.rows, c.cols, p), c.planted.size()) << "bf16";
        const std::size_t k = check_float_codec(ctx, Codec::outlier_int4, x, c.rows, c.cols, p);
        ASSERT_EQ(k, c.planted.size());
        DeviceArray<float> dx(x);
        DeviceBlob blob(Codec::outlier_int4, c.rows, c.cols, p, kFill);
        const Bytes bytes = cuda_compress(ctx, Codec::outlier_int4, dx.get(), c.rows, c.cols, p, blob, kFill);
        const CodecLayout L = codec_layout(Codec::outlier_int4, c.rows, c.cols, p, k);
        std::vector<int> chosen(k);
        std::memcpy(chosen.data(), bytes.data() + L.indices, 4 * k);
        EXPECT_EQ(chosen, c.planted);
        // The outlier channels decode exactly.
        const Vec y = cuda_decompress(ctx, Codec::outlier_int4, blob.slot.get(), c.rows, c.cols);
        for (std::size_t i = 0; i < c.rows; ++i)
            for (int j : c.planted) ASSERT_EQ(y[i * c.cols + j], x[i * c.cols + j]);
    }
}

// More candidates than the cap: the cap largest Z win, ties to the lower channel.
TEST(CudaCodecs, OutlierInt4CapKeepsLargestZAndBreaksTiesLow) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx(kScratchBytes);
    const std::size_t rows = 9, cols = 100;
    Vec x = with_outliers(rows, cols, {}, 3);
    // Graded magnitudes: 3 < 10 < 20 < ...; channels 60, 61, 62 are copies (equal Z).
    const std::vector<int> graded = {3, 10, 20, 30, 45, 60, 61, 62, 90};
    for (std::size_t t = 0; t < graded.size(); ++t)
        for (std::size_t i = 0; i < rows; ++i) x[i * cols + graded[t]] *= 40.0f + 5.0f * static_cast<float>(t);
    for (std::size_t i = 0; i < rows; ++i) x[i * cols + 61] = x[i * cols + 62] = x[i * cols + 60];
    for (int cap : {1, 3, 4, 5, 6, 100}) {
        CodecParams p;
        p.max_outlier_channels = cap;
        p.group_size = 16;
        check_codec(ctx, Codec::outlier_int4, x, rows, cols, p);
    }
    // A low threshold: most channels are candidates and the cap decides.
    CodecParams p;
    p.outlier_z = 0.0f;
    p.max_outlier_channels = 7;
    check_codec(ctx, Codec::outlier_int4, x, rows, cols, p);
}

TEST(CudaCodecs, OutlierInt4EdgeCases) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx(kScratchBytes);
    // |x_ij| = a_i in every column: equal Sh, std 0, k = 0 decided on the device; the sections
    // are then group_int4's.
    {
        const std::size_t rows = 7, cols = 72;
        Vec flat(rows * cols);
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) flat[i * cols + j] = (j * 7 + i) % 3 ? 0.5f + i : -(0.5f + i);
        CodecParams p;
        p.group_size = 16;
        EXPECT_EQ(check_codec(ctx, Codec::outlier_int4, flat, rows, cols, p), 0u);
        const Bytes g = cpu_compress(Codec::group_int4, flat.data(), rows, cols, p);
        DeviceArray<float> dx(flat);
        DeviceBlob blob(Codec::outlier_int4, rows, cols, p, kFill);
        const Bytes o = cuda_compress(ctx, Codec::outlier_int4, dx.get(), rows, cols, p, blob, kFill);
        ASSERT_EQ(o.size(), g.size());
        EXPECT_TRUE(std::equal(o.begin() + 64, o.end(), g.begin() + 64));
    }
    // Every channel an outlier (threshold below every Z, cap = cols): k = cols, no codes at all.
    {
        const std::size_t rows = 5, cols = 40;
        CodecParams p;
        p.outlier_z = -1e30f;
        p.max_outlier_channels = static_cast<int>(cols);
        EXPECT_EQ(check_codec(ctx, Codec::outlier_int4, activations(rows, cols, 9), rows, cols, p), cols);
    }
    // cols < 16: the default cap is 0, no selection runs (no scratch needed).
    {
        CudaTestContext no_scratch;
        check_codec(no_scratch, Codec::outlier_int4, activations(7, 15, 10), 7, 15, CodecParams{});
    }
    // Empty tensors: the header alone (channel_int4 with no rows: zero scales).
    for (Codec codec : {Codec::group_int4, Codec::outlier_int4, Codec::channel_int4, Codec::asym_int4}) {
        check_codec(ctx, codec, Vec{}, 0, 40, CodecParams{});
        check_codec(ctx, codec, Vec{}, 7, 0, CodecParams{});
    }
}

TEST(CudaCodecs, BitpackMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    const std::pair<std::size_t, std::size_t> shapes[] = {{1, 1}, {1, 7}, {1, 8}, {3, 3}, {7, 9}, {1, 63},
                                                          {8, 8}, {5, 13}, {33, 40}, {7, 100}, {1, 4099}};
    for (const auto& [rows, cols] : shapes) {
        const std::size_t n = rows * cols;
        SCOPED_TRACE("bitpack " + std::to_string(rows) + "x" + std::to_string(cols));
        Bytes mask = random_mask(n, n, 0.9f);
        if (n > 5) mask[1] = 2, mask[2] = 255, mask[5] = 128;  // any nonzero byte is a 1
        const Bytes want_blob = cpu_compress(Codec::bitpack, mask.data(), rows, cols, CodecParams{});
        Bytes want_mask(n);
        for (std::size_t i = 0; i < n; ++i) want_mask[i] = mask[i] != 0;
        // The mask both at an aligned address (8-byte loads) and one byte off (byte loads).
        for (std::size_t offset : {0, 1}) {
            Bytes shifted(offset, 7);
            shifted.insert(shifted.end(), mask.begin(), mask.end());
            DeviceArray<unsigned char> dmask(shifted);
            DeviceBlob blob(Codec::bitpack, rows, cols, CodecParams{}, kFill);
            const Bytes got_blob =
                cuda_compress(ctx, Codec::bitpack, dmask.get() + offset, rows, cols, CodecParams{}, blob, kFill);
            EXPECT_TRUE(all_equal_bytes(got_blob, want_blob)) << "offset " << offset;
            // Decoding into a buffer with guard bytes on both sides, at the same offset.
            for (const Bytes* source : {&got_blob, &want_blob}) {
                DeviceArray<unsigned char> dblob(*source);
                DeviceArray<unsigned char> out(offset + n + 16);
                fill_device(out.get(), 0xEE, out.size());
                cuda::codec_decompress(ctx.get(), Codec::bitpack, dblob.get(), rows, cols, out.get() + offset);
                const Bytes back = out.download();
                EXPECT_TRUE(all_equal_bytes(Bytes(back.begin() + offset, back.begin() + offset + n), want_mask));
                for (std::size_t i = 0; i < back.size(); ++i) {
                    if (i < offset || i >= offset + n) {
                        ASSERT_EQ(back[i], 0xEE) << "wrote outside the mask at " << i;
                    }
                }
            }
            HostBlob host(got_blob.size());
            std::memcpy(host.data, got_blob.data(), got_blob.size());
            Bytes cpu_back(n);
            cpu::decompress(Codec::bitpack, host.data, rows, cols, cpu_back.data());
            EXPECT_TRUE(all_equal_bytes(cpu_back, want_mask)) << "the CPU decoding CUDA's blob";
        }
    }
    // An empty mask writes nothing.
    DeviceBlob empty(Codec::bitpack, 0, 5, CodecParams{}, kFill);
    EXPECT_TRUE(cuda_compress(ctx, Codec::bitpack, nullptr, 0, 5, CodecParams{}, empty, kFill).empty());
    EXPECT_EQ(cuda::codec_outlier_count(ctx.get(), Codec::bitpack, empty.slot.get()), 0u);
}

TEST(CudaCodecs, ErrorMatchesTheCpu) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
    for (std::size_t n : {1u, 17u, 1000u, 70001u}) {  // 70001: every block of the first pass has work
        const Vec x = activations(1, n, n);
        Vec y = x;
        const std::uint64_t key = mix64(n + 1);
        for (std::size_t i = 0; i < n; ++i) y[i] += 0.01f * normal(key, i);
        DeviceArray<float> dx(x), dy(y);
        expect_error_matches(ctx, dx.get(), dy.get(), x, y, "n=" + std::to_string(n));
        // bf16 tensors (what a bf16 model's monitor samples): the CPU's sums of their exact values.
        const Bf16s xb = rounded_to_bf16(x), yb = rounded_to_bf16(y);
        DeviceArray<bf16> dxb(xb), dyb(yb);
        expect_error_matches(ctx, dxb.get(), dyb.get(), as_floats(xb), as_floats(yb), "bf16 n=" + std::to_string(n));
    }
    const Vec zeros(10, 0.0f), ones(10, 1.0f);
    DeviceArray<float> dz(zeros), d1(ones);
    DeviceArray<bf16> d1b(rounded_to_bf16(ones));
    EXPECT_THROW(cuda::codec_error(ctx.get(), d1.get(), d1b.get(), 10), std::invalid_argument) << "mixed dtypes";
    EXPECT_EQ(cuda::codec_error(ctx.get(), dz.get(), dz.get(), 10).relative_l2, 0.0);
    EXPECT_TRUE(std::isinf(cuda::codec_error(ctx.get(), dz.get(), d1.get(), 10).relative_l2));
    EXPECT_EQ(cuda::codec_error(ctx.get(), d1.get(), d1.get(), 10).relative_l2, 0.0);
    EXPECT_EQ(cuda::codec_error(ctx.get(), d1.get(), d1.get(), 0).relative_l2, 0.0);
}

// What the CPU's decompress throws on decodes to NaN on the device (it cannot throw); the host
// side still refuses bad parameters and a missing scratch, as the CPU does.
TEST(CudaCodecs, MismatchedBlobsDecodeToNaNAndBadParametersThrow) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx(kScratchBytes);
    const std::size_t rows = 7, cols = 40;
    const Vec x = with_outliers(rows, cols, {3, 30}, 1);
    DeviceArray<float> dx(x);
    auto all_nan = [](const Vec& v) { return std::all_of(v.begin(), v.end(), [](float f) { return std::isnan(f); }); };
    auto all_nan_bf16 = [&](const Bf16s& v) { return all_nan(as_floats(v)); };
    CodecParams p;
    p.max_outlier_channels = 4;
    for (Codec codec : {Codec::group_int4, Codec::outlier_int4, Codec::channel_int4, Codec::asym_int4}) {
        SCOPED_TRACE(codec_name(codec));
        DeviceBlob blob(codec, rows, cols, p, kFill);
        cuda::codec_compress(ctx.get(), codec, dx.get(), rows, cols, p, blob.slot.get());
        EXPECT_FALSE(all_nan(cuda_decompress(ctx, codec, blob.slot.get(), rows, cols)));
        EXPECT_TRUE(all_nan(cuda_decompress(ctx, codec, blob.slot.get(), rows - 1, cols))) << "wrong rows";
        EXPECT_TRUE(all_nan_bf16(cuda_decompress<bf16>(ctx, codec, blob.slot.get(), rows - 1, cols))) << "bf16";
        EXPECT_TRUE(all_nan(cuda_decompress(ctx, codec, blob.slot.get(), rows, cols + 1))) << "wrong cols";
        const Codec other = codec == Codec::asym_int4 ? Codec::group_int4 : Codec::asym_int4;
        EXPECT_TRUE(all_nan(cuda_decompress(ctx, other, blob.slot.get(), rows, cols))) << "wrong codec";
    }
    // Corrupt outlier indices (not ascending; out of range).
    DeviceBlob blob(Codec::outlier_int4, rows, cols, p, kFill);
    Bytes bytes = cuda_compress(ctx, Codec::outlier_int4, dx.get(), rows, cols, p, blob, kFill);
    ASSERT_EQ(cpu_outlier_count(Codec::outlier_int4, bytes), 2u);
    for (std::int32_t bad : {std::int32_t{3}, std::int32_t{40}, std::int32_t{-1}}) {
        Bytes corrupt = bytes;
        std::memcpy(corrupt.data() + 64 + 4, &bad, 4);  // the second index
        DeviceArray<unsigned char> d(corrupt);
        EXPECT_TRUE(all_nan(cuda_decompress(ctx, Codec::outlier_int4, d.get(), rows, cols))) << "index " << bad;
        EXPECT_TRUE(all_nan_bf16(cuda_decompress<bf16>(ctx, Codec::outlier_int4, d.get(), rows, cols))) << "bf16";
        EXPECT_THROW(cpu_decompress(Codec::outlier_int4, corrupt, rows, cols), std::invalid_argument);
    }
    // A blob with no magic.
    DeviceArray<unsigned char> junk(Bytes(4096, 0));
    EXPECT_THROW(cuda::codec_outlier_count(ctx.get(), Codec::group_int4, junk.get()), std::invalid_argument);
    EXPECT_TRUE(all_nan(cuda_decompress(ctx, Codec::group_int4, junk.get(), rows, cols)));
    // Parameters.
    CodecParams bad;
    bad.group_size = 0;
    for (Codec codec : {Codec::group_int4, Codec::outlier_int4, Codec::channel_int4, Codec::asym_int4, Codec::bitpack})
        EXPECT_THROW(cuda::codec_compress(ctx.get(), codec, dx.get(), rows, cols, bad, blob.slot.get()),
                     std::invalid_argument)
            << codec_name(codec);
    bad.group_size = kMaxGroupSize + 1;
    EXPECT_THROW(cuda::codec_compress(ctx.get(), Codec::asym_int4, dx.get(), rows, cols, bad, blob.slot.get()),
                 std::invalid_argument);
    KernelContext no_scratch = ctx.get();
    no_scratch.scratch = nullptr;
    EXPECT_THROW(cuda::codec_compress(no_scratch, Codec::outlier_int4, dx.get(), rows, cols, p, blob.slot.get()),
                 std::invalid_argument);
    no_scratch = ctx.get();
    no_scratch.scratch_bytes = codec_scratch_bytes(Codec::outlier_int4, rows, cols, p) - 1;
    EXPECT_THROW(cuda::codec_compress(no_scratch, Codec::outlier_int4, dx.get(), rows, cols, p, blob.slot.get()),
                 std::invalid_argument);
    // Element types: the INT4 codecs read and write f32 or bf16, never mask bytes.
    DeviceArray<unsigned char> mask(Bytes(rows * cols, 1));
    EXPECT_THROW(cuda::codec_compress(ctx.get(), Codec::group_int4, mask.get(), rows, cols, p, blob.slot.get()),
                 std::logic_error);
    EXPECT_THROW(cuda::codec_decompress(ctx.get(), Codec::group_int4, blob.slot.get(), rows, cols, mask.get()),
                 std::logic_error);
}

}  // namespace
}  // namespace adacc::test
