// The activation codecs on CUDA (kernels/cuda/codec*.cu) beyond their twin comparison (the table
// of tests/cuda/test_cuda_ops.cpp compresses and decodes every codec on odd shapes in fp32 and bf16
// on both backends: blobs byte for byte, statistics, k, decoded values and codec_error): the
// device's layout of a blob, which outlier channels are chosen, edge cases, special tensors for
// the error measure, and what is refused or decodes to NaN.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "kernels/cpu/codecs.h"
#ifdef ADACC_SIMT_EMULATION
#include "kernels/cuda/codecs.cuh"  // quant_layout, host-callable; the device build's host compiler cannot read it
#endif
#include "kernels/cuda/ops.h"
#include "tests/cuda/cuda_test_support.h"

namespace adacc::test {
namespace {

using Bytes = std::vector<unsigned char>;
using Vec = std::vector<float>;
using Bf16s = std::vector<bf16>;

constexpr unsigned char kFill = 0xA5;

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

// The CPU's blob.
Bytes cpu_compress(Codec codec, const void* src, std::size_t rows, std::size_t cols, const CodecParams& p) {
    HostBlob blob(codec_max_bytes(codec, rows, cols, p));
    std::vector<double> scratch(codec_scratch_bytes(codec, rows, cols, p) / 8 + 1);
    const std::size_t n = cpu::compress(codec, src, rows, cols, p, blob.data, scratch.data());
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

void fill_device(void* p, int byte, std::size_t n) { ASSERT_EQ(cudaMemset(p, byte, n), cudaSuccess); }

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
    fill_device(y.get(), 0xFF,
                std::max<std::size_t>(1, rows * cols) * sizeof(T));  // NaN: every element must be written
    cuda::codec_decompress(ctx.get(), codec, blob, rows, cols, y.get());
    return y.download();
}

// The outlier codec's scratch for every shape here (at most 22 KiB; the codec throws when short).
constexpr std::size_t kScratchBytes = std::size_t{64} << 10;

// ---- Tests. ----

#ifdef ADACC_SIMT_EMULATION
struct Shape {
    std::size_t rows, cols;
    int G;
};
const Shape kShapes[] = {{1, 40, 64}, {7, 72, 64},  {33, 100, 64},  {7, 100, 7},  {33, 72, 16},
                         {5, 40, 1},  {3, 100, 33}, {1, 100, 4096}, {140, 72, 64}};

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

// Planted outlier channels (kPlantedOutliers, x50): exactly those are chosen, ascending in the
// blob, in fp32 and bf16, and they decode exactly (the table compares these blobs with the CPU's).
TEST(CudaCodecs, OutlierInt4PicksPlantedChannels) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx(kScratchBytes);
    for (const PlantedOutliers& c : kPlantedOutliers) {
        SCOPED_TRACE(std::to_string(c.rows) + "x" + std::to_string(c.cols) + " G=" + std::to_string(c.G));
        const Vec x = codec_with_outliers(c.rows, c.cols, c.planted, c.rows + c.cols);
        CodecParams p;
        p.group_size = c.G;
        p.max_outlier_channels = 8;
        auto chosen = [&](const Bytes& bytes, std::size_t k) {
            std::vector<int> indices(k);
            std::memcpy(indices.data(), bytes.data() + codec_layout(Codec::outlier_int4, c.rows, c.cols, p, k).indices,
                        4 * k);
            return indices;
        };
        {
            DeviceArray<bf16> dx(rounded_to_bf16(x));
            DeviceBlob blob(Codec::outlier_int4, c.rows, c.cols, p, kFill);
            std::size_t k = 0;
            const Bytes bytes = cuda_compress(ctx, Codec::outlier_int4, dx.get(), c.rows, c.cols, p, blob, kFill, &k);
            ASSERT_EQ(k, c.planted.size()) << "bf16";
            EXPECT_EQ(chosen(bytes, k), c.planted) << "bf16";
        }
        DeviceArray<float> dx(x);
        DeviceBlob blob(Codec::outlier_int4, c.rows, c.cols, p, kFill);
        std::size_t k = 0;
        const Bytes bytes = cuda_compress(ctx, Codec::outlier_int4, dx.get(), c.rows, c.cols, p, blob, kFill, &k);
        ASSERT_EQ(k, c.planted.size());
        EXPECT_EQ(chosen(bytes, k), c.planted);
        // The outlier channels decode exactly.
        const Vec y = cuda_decompress(ctx, Codec::outlier_int4, blob.slot.get(), c.rows, c.cols);
        for (std::size_t i = 0; i < c.rows; ++i)
            for (int j : c.planted) ASSERT_EQ(y[i * c.cols + j], x[i * c.cols + j]);
    }
}

// What the outlier codec chooses at the edges (the table compares these blobs with the CPU's):
// equal channel statistics (std 0) choose none, and the sections are then group_int4's; a
// threshold below every Z with cap = cols chooses every channel (no codes at all).
TEST(CudaCodecs, OutlierInt4EdgeCases) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx(kScratchBytes);
    {
        const std::size_t rows = 7, cols = 72;
        const Vec flat = codec_flat_rows(rows, cols);
        CodecParams p;
        p.group_size = 16;
        const Bytes g = cpu_compress(Codec::group_int4, flat.data(), rows, cols, p);
        DeviceArray<float> dx(flat);
        DeviceBlob blob(Codec::outlier_int4, rows, cols, p, kFill);
        std::size_t k = 1;
        const Bytes o = cuda_compress(ctx, Codec::outlier_int4, dx.get(), rows, cols, p, blob, kFill, &k);
        EXPECT_EQ(k, 0u);
        ASSERT_EQ(o.size(), g.size());
        EXPECT_TRUE(std::equal(o.begin() + 64, o.end(), g.begin() + 64));
    }
    {
        const std::size_t rows = 5, cols = 40;
        CodecParams p;
        p.outlier_z = -1e30f;
        p.max_outlier_channels = static_cast<int>(cols);
        DeviceArray<float> dx(codec_activations(rows, cols, 9));
        DeviceBlob blob(Codec::outlier_int4, rows, cols, p, kFill);
        std::size_t k = 0;
        cuda_compress(ctx, Codec::outlier_int4, dx.get(), rows, cols, p, blob, kFill, &k);
        EXPECT_EQ(k, cols);
    }
}

// codec_error of special tensors (the table compares it with the CPU's on ordinary ones): mixed
// dtypes are refused; zero error is 0, an error against a zero tensor infinite, an empty one 0.
TEST(CudaCodecs, ErrorOfSpecialTensors) {
    ADACC_REQUIRE_CUDA_DEVICE();
    CudaTestContext ctx;
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
    const Vec x = codec_with_outliers(rows, cols, {3, 30}, 1);
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
