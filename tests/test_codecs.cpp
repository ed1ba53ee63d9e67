// Activation compression codecs (kernels/codec_format.h, kernels/cpu/codecs.h) against references written here from the
// specification alone: a scalar quantizer with its own round-half-even, a brute-force double
// Z-score outlier selection, and the byte formulas spelled out independently. Every INT4 codec
// must decode to exactly the reference's values, stay within half a step of its own group or
// channel scale, round-trip exactly representable data exactly, never write past its size, and
// give the same blob on 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/codecs.h"

// compress/decompress must not allocate: this binary counts every malloc.
#include "tests/counting_malloc.h"

using adacc::test::g_allocations;

namespace adacc::cpu {
namespace {

using Vec = std::vector<float>;

// ---- Independent references. ----

std::size_t align64(std::size_t n) { return (n + 63) / 64 * 64; }
std::size_t cdiv(std::size_t a, std::size_t b) { return (a + b - 1) / b; }

// The documented byte formulas.
std::size_t formula_bytes(Codec codec, std::size_t rows, std::size_t cols, std::size_t G, std::size_t k = 0) {
    switch (codec) {
        case Codec::group_int4: return 64 + align64(4 * rows * cdiv(cols, G)) + align64(rows * cdiv(cols, 2));
        case Codec::outlier_int4: {
            const std::size_t c = cols - k;
            return 64 + align64(4 * k) + align64(4 * rows * k) + align64(4 * rows * cdiv(c, G)) +
                   align64(rows * cdiv(c, 2));
        }
        case Codec::channel_int4: return 64 + align64(4 * cols) + align64(rows * cdiv(cols, 2));
        case Codec::asym_int4: return 64 + 2 * align64(4 * rows * cdiv(cols, G)) + align64(rows * cdiv(cols, 2));
        case Codec::bitpack: return align64(cdiv(rows * cols, 8));
    }
    return 0;
}

double round_half_even(double v) {
    if (std::fabs(v - std::trunc(v)) == 0.5) return 2.0 * std::round(v / 2.0);
    return std::round(v);
}
// q = clip(round_half_even(v), -8, 7) for v = x / s computed in float.
float ref_code(float v) { return static_cast<float>(std::clamp(round_half_even(v), -8.0, 7.0)); }

// Per element: the decoded value, the scale of its group/channel, and the largest magnitude of
// its group (the asymmetric codec's offset may round at that magnitude's ulp).
struct Reference {
    Vec decoded, scale, magnitude;
    explicit Reference(std::size_t n) : decoded(n), scale(n), magnitude(n) {}
};

// Symmetric group quantization of one run of values (group_int4 and the outlier codec's rest).
void ref_group_run(const float* x, std::size_t n, std::size_t G, float* dec, float* scale) {
    for (std::size_t j0 = 0; j0 < n; j0 += G) {
        const std::size_t j1 = std::min(n, j0 + G);
        float m = 0;
        for (std::size_t j = j0; j < j1; ++j) m = std::max(m, std::fabs(x[j]));
        const float s = m / 7.0f;
        for (std::size_t j = j0; j < j1; ++j) {
            dec[j] = s == 0.0f ? 0.0f : ref_code(x[j] / s) * s;
            scale[j] = s;
        }
    }
}

Reference ref_group(const Vec& x, std::size_t rows, std::size_t cols, std::size_t G) {
    Reference r(x.size());
    for (std::size_t i = 0; i < rows; ++i)
        ref_group_run(&x[i * cols], cols, G, &r.decoded[i * cols], &r.scale[i * cols]);
    r.magnitude = Vec(x.size(), 0.0f);
    return r;
}

Reference ref_channel(const Vec& x, std::size_t rows, std::size_t cols) {
    Reference r(x.size());
    for (std::size_t j = 0; j < cols; ++j) {
        float m = 0;
        for (std::size_t i = 0; i < rows; ++i) m = std::max(m, std::fabs(x[i * cols + j]));
        const float s = m / 7.0f;
        for (std::size_t i = 0; i < rows; ++i) {
            const float v = x[i * cols + j];
            r.decoded[i * cols + j] = s == 0.0f ? 0.0f : ref_code(v / s) * s;
            r.scale[i * cols + j] = s;
            r.magnitude[i * cols + j] = 0.0f;
        }
    }
    return r;
}

Reference ref_asym(const Vec& x, std::size_t rows, std::size_t cols, std::size_t G) {
    Reference r(x.size());
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j0 = 0; j0 < cols; j0 += G) {
            const std::size_t j1 = std::min(cols, j0 + G);
            const float* row = &x[i * cols];
            const float lo = *std::min_element(row + j0, row + j1), hi = *std::max_element(row + j0, row + j1);
            const float s = (hi - lo) / 15.0f, o = lo + 8.0f * s;
            for (std::size_t j = j0; j < j1; ++j) {
                const float q = s == 0.0f ? 0.0f : ref_code((row[j] - o) / s);
                r.decoded[i * cols + j] = std::fma(q, s, o);
                r.scale[i * cols + j] = s;
                r.magnitude[i * cols + j] = std::max(std::fabs(lo), std::fabs(hi));
            }
        }
    return r;
}

// Z from Sh added in chunks of chunk_rows rows, each in row order from 0.0, then the chunks' sums
// in order (kOutlierSumRows: the codec's order; rows: plain row order); mean, variance (fma) and
// Z as the codec's documentation (codec_format.h) spells them; NaN where std is not > 0, where the
// codec chooses no channel (NaN exceeds no z).
std::vector<double> outlier_z_scores(const Vec& x, std::size_t rows, std::size_t cols, std::size_t chunk_rows) {
    std::vector<double> sh(cols, 0.0);
    for (std::size_t j = 0; j < cols; ++j)
        for (std::size_t first = 0; first < rows; first += chunk_rows) {
            double chunk = 0.0;
            for (std::size_t i = first; i < std::min(rows, first + chunk_rows); ++i)
                chunk += std::fabs(static_cast<double>(x[i * cols + j]));
            sh[j] += chunk;
        }
    double mean = 0.0, var = 0.0;
    for (double s : sh) mean += s;
    mean /= static_cast<double>(cols);
    for (double s : sh) var = std::fma(s - mean, s - mean, var);
    const double sd = std::sqrt(var / static_cast<double>(cols));
    for (double& s : sh) s = sd > 0 ? (s - mean) / sd : std::numeric_limits<double>::quiet_NaN();
    return sh;
}

// Brute-force outlier channels: Z in double (outlier_z_scores, the codec's order), candidates
// Z > z, the `cap` largest Z (ties to the lower channel), ascending.
std::vector<int> ref_outlier_channels(const Vec& x, std::size_t rows, std::size_t cols, double z, std::size_t cap,
                                      std::vector<double>* z_out = nullptr) {
    const std::vector<double> zs = outlier_z_scores(x, rows, cols, kOutlierSumRows);
    std::vector<int> chosen;
    for (std::size_t j = 0; j < cols; ++j)
        if (zs[j] > z) chosen.push_back(static_cast<int>(j));
    std::sort(chosen.begin(), chosen.end(), [&](int a, int b) { return zs[a] > zs[b] || (zs[a] == zs[b] && a < b); });
    if (chosen.size() > cap) chosen.resize(cap);
    std::sort(chosen.begin(), chosen.end());
    if (z_out) *z_out = zs;
    return chosen;
}

Reference ref_outlier(const Vec& x, std::size_t rows, std::size_t cols, std::size_t G, const std::vector<int>& out) {
    Reference r(x.size());
    std::vector<bool> is_out(cols, false);
    for (int j : out) is_out[j] = true;
    Vec rest, dec, scale;
    for (std::size_t i = 0; i < rows; ++i) {
        rest.clear();
        for (std::size_t j = 0; j < cols; ++j)
            if (!is_out[j]) rest.push_back(x[i * cols + j]);
        dec.assign(rest.size(), 0.0f);
        scale.assign(rest.size(), 0.0f);
        ref_group_run(rest.data(), rest.size(), G, dec.data(), scale.data());
        for (std::size_t j = 0, c = 0; j < cols; ++j) {
            const std::size_t e = i * cols + j;
            if (is_out[j]) {
                r.decoded[e] = x[e];
                r.scale[e] = 0.0f;
            } else {
                r.decoded[e] = dec[c];
                r.scale[e] = scale[c++];
            }
            r.magnitude[e] = 0.0f;
        }
    }
    return r;
}

// ---- Buffers and data. ----

constexpr std::size_t kGuard = 256;
constexpr unsigned char kFill = 0xA5;

// A 64-byte-aligned blob of `capacity` bytes followed by kGuard guard bytes, all pre-filled.
struct Blob {
    std::vector<unsigned char> storage;
    unsigned char* data;
    std::size_t capacity;
    explicit Blob(std::size_t cap, unsigned char fill = kFill) : storage(cap + kGuard + 64, fill), capacity(cap) {
        const auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
        data = storage.data() + (64 - addr % 64) % 64;
    }
    // Everything after the first `used` bytes, up to the end of the guard, is untouched.
    bool untouched_after(std::size_t used) const {
        for (std::size_t i = used; i < capacity + kGuard; ++i)
            if (data[i] != kFill) return false;
        return true;
    }
};

// Random activations: rows with varied scales, some all-zero stretches, exact zeros, heavy tails.
Vec random_activations(std::size_t rows, std::size_t cols, std::mt19937& gen) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
    std::uniform_int_distribution<int> pick(0, 19);
    Vec x(rows * cols);
    for (std::size_t i = 0; i < rows; ++i) {
        const float row_scale = std::exp(uni(gen));
        const int kind = pick(gen);
        for (std::size_t j = 0; j < cols; ++j) {
            float v = normal(gen) * row_scale;
            if (kind == 0) v = 0.0f;                      // an all-zero row
            if (kind == 1 && j % 3 == 0) v = 0.0f;        // sparse
            if (kind == 2 && pick(gen) == 0) v *= 40.0f;  // heavy tail
            if (kind == 3 && j < cols / 2) v = 0.0f;      // a zero stretch (whole groups)
            x[i * cols + j] = v;
        }
    }
    return x;
}

// Softmax-like rows in [0, 1] with a causal zero tail.
Vec random_probabilities(std::size_t rows, std::size_t cols, std::mt19937& gen) {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    Vec x(rows * cols, 0.0f);
    for (std::size_t i = 0; i < rows; ++i) {
        const std::size_t live = 1 + i % cols;
        double sum = 0;
        for (std::size_t j = 0; j < live; ++j) sum += x[i * cols + j] = std::exp(normal(gen));
        for (std::size_t j = 0; j < live; ++j) x[i * cols + j] = static_cast<float>(x[i * cols + j] / sum);
    }
    return x;
}

// Normal activations with `count` channels (distinct, spread) scaled by 50..100.
Vec activations_with_outliers(std::size_t rows, std::size_t cols, std::size_t count, std::mt19937& gen,
                              std::vector<int>* planted = nullptr) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> boost(50.0f, 100.0f);
    Vec x(rows * cols);
    for (auto& v : x) v = normal(gen);
    std::vector<int> channels(cols);
    std::iota(channels.begin(), channels.end(), 0);
    std::shuffle(channels.begin(), channels.end(), gen);
    channels.resize(count);
    std::sort(channels.begin(), channels.end());
    for (int j : channels) {
        const float b = boost(gen);
        for (std::size_t i = 0; i < rows; ++i) x[i * cols + j] *= b;
    }
    if (planted) *planted = channels;
    return x;
}

struct Compressed {
    Blob blob;
    std::size_t bytes;
};

Compressed compress_checked(Codec codec, const Vec& x, std::size_t rows, std::size_t cols, const CodecParams& p) {
    Compressed c{Blob(codec_max_bytes(codec, rows, cols, p)), 0};
    std::vector<unsigned char> scratch(codec_scratch_bytes(codec, rows, cols, p) + 8);
    void* scratch_ptr = scratch.data() + (8 - reinterpret_cast<std::uintptr_t>(scratch.data()) % 8) % 8;
    c.bytes = compress(codec, x.data(), rows, cols, p, c.blob.data, scratch_ptr);
    EXPECT_LE(c.bytes, c.blob.capacity);
    EXPECT_TRUE(c.blob.untouched_after(c.bytes)) << codec_name(codec) << " wrote past its " << c.bytes << " bytes";
    return c;
}

Vec decompress_vec(Codec codec, const Compressed& c, std::size_t rows, std::size_t cols) {
    Vec y(rows * cols, std::nanf(""));
    decompress(codec, c.blob.data, rows, cols, y.data());
    return y;
}

std::vector<int> blob_outlier_channels(const Compressed& c, std::size_t rows, std::size_t cols, const CodecParams& p) {
    const std::size_t k = codec_outlier_channels(c.blob.data);
    const CodecLayout L = codec_layout(Codec::outlier_int4, rows, cols, p, k);
    std::vector<int> idx(k);
    if (k) std::memcpy(idx.data(), c.blob.data + L.indices, 4 * k);
    return idx;
}

// Restores the OpenMP thread count when a test changes it.
struct ThreadCount {
    int saved = omp_get_max_threads();
    explicit ThreadCount(int n) { omp_set_num_threads(n); }
    ~ThreadCount() { omp_set_num_threads(saved); }
};

// ---- Property tests over shapes. ----

struct Case {
    std::size_t rows, cols;
    int G;
};
const Case kCases[] = {{1, 1, 64},      {3, 5, 64},    {7, 100, 64},  {17, 129, 64}, {4, 64, 64},
                       {33, 200, 48},   {9, 77, 7},    {5, 31, 1},    {2, 300, 16},  {65, 3, 2},
                       {6, 1000, 4096}, {40, 768, 64}, {11, 257, 33}, {128, 96, 32}};

void expect_within_half_step(const Vec& x, const Vec& y, const Reference& ref, const char* codec) {
    for (std::size_t e = 0; e < x.size(); ++e) {
        const double bound = ref.scale[e] * (0.5 + 4e-6) + 2.5e-7 * ref.magnitude[e] + 1e-37;
        ASSERT_LE(std::fabs(static_cast<double>(x[e]) - y[e]), bound)
            << codec << " element " << e << " x=" << x[e] << " decoded=" << y[e] << " scale=" << ref.scale[e];
    }
}

void expect_equal_values(const Vec& want, const Vec& got, const char* codec) {
    for (std::size_t e = 0; e < want.size(); ++e) ASSERT_EQ(want[e], got[e]) << codec << " element " << e;
}

class CodecProperty : public ::testing::TestWithParam<Case> {};

TEST_P(CodecProperty, MatchesReferenceWithinHalfStepOnOneAndTwoThreads) {
    const auto [rows, cols, G] = GetParam();
    std::mt19937 gen(static_cast<unsigned>(rows * 7919 + cols * 31 + G));
    CodecParams p;
    p.group_size = G;
    p.max_outlier_channels = static_cast<int>(std::max<std::size_t>(1, cols / 8));
    const Vec act = random_activations(rows, cols, gen);
    // Planted outlier channels (when there are enough columns) so that groups straddle them.
    Vec act_out = cols >= 16 ? activations_with_outliers(rows, cols, std::max<std::size_t>(1, cols / 50), gen) : act;
    const Vec prob = random_probabilities(rows, cols, gen);

    struct Run {
        Codec codec;
        const Vec* x;
    };
    for (const Run& run :
         {Run{Codec::group_int4, &act}, Run{Codec::outlier_int4, &act}, Run{Codec::outlier_int4, &act_out},
          Run{Codec::channel_int4, &act}, Run{Codec::asym_int4, &prob}, Run{Codec::asym_int4, &act}}) {
        const Vec& x = *run.x;
        const char* name = codec_name(run.codec);
        Reference ref(0);
        std::size_t k = 0;
        switch (run.codec) {
            case Codec::group_int4: ref = ref_group(x, rows, cols, G); break;
            case Codec::channel_int4: ref = ref_channel(x, rows, cols); break;
            case Codec::asym_int4: ref = ref_asym(x, rows, cols, G); break;
            case Codec::outlier_int4: {
                const auto chosen = ref_outlier_channels(x, rows, cols, p.outlier_z, outlier_channel_cap(cols, p));
                k = chosen.size();
                ref = ref_outlier(x, rows, cols, G, chosen);
                break;
            }
            case Codec::bitpack: break;
        }
        std::vector<unsigned char> blob_1thread;
        for (int threads : {1, 2}) {
            ThreadCount tc(threads);
            const Compressed c = compress_checked(run.codec, x, rows, cols, p);
            EXPECT_EQ(c.bytes, formula_bytes(run.codec, rows, cols, G, k)) << name;
            EXPECT_EQ(c.bytes, codec_bytes(run.codec, rows, cols, p, k)) << name;
            if (run.codec == Codec::outlier_int4) {
                EXPECT_EQ(codec_outlier_channels(c.blob.data), k);
            }
            const Vec y = decompress_vec(run.codec, c, rows, cols);
            expect_equal_values(ref.decoded, y, name);
            expect_within_half_step(x, y, ref, name);
            if (threads == 1)
                blob_1thread.assign(c.blob.data, c.blob.data + c.bytes);
            else
                EXPECT_TRUE(std::equal(blob_1thread.begin(), blob_1thread.end(), c.blob.data))
                    << name << ": 2-thread blob differs from 1-thread blob";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CodecProperty, ::testing::ValuesIn(kCases), [](const auto& info) {
    return "r" + std::to_string(info.param.rows) + "_c" + std::to_string(info.param.cols) + "_g" +
           std::to_string(info.param.G);
});

// ---- Exactly representable data round-trips exactly. ----

// Random dyadic scale 2^e per group/channel, codes in [-7, 7] with one +-7 each (so the codec
// recomputes exactly that scale).
TEST(Codecs, RepresentableValuesRoundTripExactly) {
    std::mt19937 gen(7);
    std::uniform_int_distribution<int> code(-7, 7), expo(-8, 8), coin(0, 1);
    const std::size_t rows = 13, cols = 150;
    for (int G : {64, 16, 7}) {
        CodecParams p;
        p.group_size = G;
        // group_int4: per row group.
        Vec x(rows * cols);
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j0 = 0; j0 < cols; j0 += G) {
                const float s = std::ldexp(1.0f, expo(gen));
                for (std::size_t j = j0; j < std::min(cols, j0 + G); ++j) x[i * cols + j] = code(gen) * s;
                x[i * cols + j0] = (coin(gen) ? 7 : -7) * s;
            }
        auto c = compress_checked(Codec::group_int4, x, rows, cols, p);
        expect_equal_values(x, decompress_vec(Codec::group_int4, c, rows, cols), "group_int4");
        // outlier_int4 with k = 0 on the same data (no channel stands out: cap 0 would be the
        // default cols/16, so set a threshold no channel reaches).
        CodecParams po = p;
        po.outlier_z = 1e9f;
        c = compress_checked(Codec::outlier_int4, x, rows, cols, po);
        EXPECT_EQ(codec_outlier_channels(c.blob.data), 0u);
        expect_equal_values(x, decompress_vec(Codec::outlier_int4, c, rows, cols), "outlier_int4 k=0");
        // asym_int4: per group min m (dyadic) and step s, values m + (q + 8) s with q = -8 and 7 present.
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j0 = 0; j0 < cols; j0 += G) {
                const int e = expo(gen);
                const float s = std::ldexp(1.0f, e), m = std::ldexp(static_cast<float>(code(gen) * 9), e);
                const std::size_t j1 = std::min(cols, j0 + G);
                for (std::size_t j = j0; j < j1; ++j) x[i * cols + j] = m + (code(gen) + 7) * s;
                x[i * cols + j0] = m;
                if (j1 - j0 > 1) x[i * cols + j0 + 1] = m + 15 * s;
            }
        c = compress_checked(Codec::asym_int4, x, rows, cols, p);
        expect_equal_values(x, decompress_vec(Codec::asym_int4, c, rows, cols), "asym_int4");
    }
    // channel_int4: per column.
    Vec x(rows * cols);
    for (std::size_t j = 0; j < cols; ++j) {
        const float s = std::ldexp(1.0f, expo(gen));
        for (std::size_t i = 0; i < rows; ++i) x[i * cols + j] = code(gen) * s;
        x[(j % rows) * cols + j] = (coin(gen) ? 7 : -7) * s;
    }
    const auto c = compress_checked(Codec::channel_int4, x, rows, cols, CodecParams{});
    expect_equal_values(x, decompress_vec(Codec::channel_int4, c, rows, cols), "channel_int4");
}

// Outlier codec with k > 0: exactly representable data on the kept channels (in compacted
// order) and huge planted channels, which are stored exactly and must be the ones chosen.
TEST(Codecs, OutlierCodecRoundTripsRepresentableDataWithOutliers) {
    std::mt19937 gen(11);
    std::uniform_int_distribution<int> code(-7, 7), expo(-4, 4);
    const std::size_t rows = 40, cols = 203, G = 32;
    const std::vector<int> planted = {0, 31, 32, 100, 101, 202};
    std::vector<bool> is_out(cols, false);
    for (int j : planted) is_out[j] = true;
    Vec x(rows * cols);
    for (std::size_t i = 0; i < rows; ++i) {
        std::size_t c = 0;
        float s = 1.0f;
        for (std::size_t j = 0; j < cols; ++j) {
            if (is_out[j]) {
                x[i * cols + j] = 1000.0f + static_cast<float>(j) + 0.123f * static_cast<float>(i);
                continue;
            }
            if (c % G == 0) s = std::ldexp(1.0f, expo(gen));
            x[i * cols + j] = (c % G == 0 ? 7 : code(gen)) * s;
            ++c;
        }
    }
    CodecParams p;
    p.group_size = G;
    const auto c = compress_checked(Codec::outlier_int4, x, rows, cols, p);
    EXPECT_EQ(blob_outlier_channels(c, rows, cols, p), planted);
    EXPECT_EQ(c.bytes, formula_bytes(Codec::outlier_int4, rows, cols, G, planted.size()));
    expect_equal_values(x, decompress_vec(Codec::outlier_int4, c, rows, cols), "outlier_int4");
}

// The outlier codec adds Sh in its documented order, whatever the thread count: on magnitudes
// spread over 2^-30 .. 2^30 double sums round, so the order shows (plain row order gives other
// Z), and the codec's Z (left in its scratch) equal those of the documented order bit for bit.
TEST(Codecs, OutlierSumsFollowTheDocumentedChunkOrder) {
    const std::size_t rows = 2 * kOutlierSumRows + 37, cols = 24;
    std::mt19937 gen(71);
    std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
    std::uniform_int_distribution<int> exponent(-30, 30);
    Vec x(rows * cols);
    for (float& v : x) v = std::ldexp(mantissa(gen), exponent(gen)) * (gen() % 2 ? 1.0f : -1.0f);
    const std::vector<double> want = outlier_z_scores(x, rows, cols, kOutlierSumRows);
    EXPECT_NE(want, outlier_z_scores(x, rows, cols, rows)) << "the data does not show the order";
    CodecParams p;
    p.max_outlier_channels = static_cast<int>(cols);
    for (int threads : {1, 2}) {
        ThreadCount tc(threads);
        std::vector<double> scratch(codec_scratch_bytes(Codec::outlier_int4, rows, cols, p) / 8 + 1);
        Blob blob(codec_max_bytes(Codec::outlier_int4, rows, cols, p));
        compress(Codec::outlier_int4, x.data(), rows, cols, p, blob.data, scratch.data());
        EXPECT_EQ(std::vector<double>(scratch.begin(), scratch.begin() + cols), want) << threads << " threads";
    }
}

// ---- The outlier codec's purpose. ----

TEST(Codecs, OutlierCodecBeatsGroupInt4On1PercentOutlierChannels) {
    std::mt19937 gen(3);
    const std::size_t rows = 512, cols = 768;
    std::vector<int> planted;
    const Vec x = activations_with_outliers(rows, cols, 8, gen, &planted);  // ~1% of channels, 50-100x
    CodecParams p;
    const auto g = compress_checked(Codec::group_int4, x, rows, cols, p);
    const auto o = compress_checked(Codec::outlier_int4, x, rows, cols, p);
    const CodecStats eg = measure_error(x.data(), decompress_vec(Codec::group_int4, g, rows, cols).data(), x.size());
    const CodecStats eo = measure_error(x.data(), decompress_vec(Codec::outlier_int4, o, rows, cols).data(), x.size());
    EXPECT_EQ(blob_outlier_channels(o, rows, cols, p), planted);
    EXPECT_LE(eo.relative_l2 * 5.0, eg.relative_l2) << "outlier " << eo.relative_l2 << " group " << eg.relative_l2;
    // The price: 8 channels of fp32 on top of the group codes.
    EXPECT_EQ(o.bytes, formula_bytes(Codec::outlier_int4, rows, cols, 64, 8));
}

TEST(Codecs, OutlierCodecWithoutOutliersEqualsGroupInt4BitForBit) {
    std::mt19937 gen(5);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (const auto& [rows, cols, G] : {Case{64, 768, 64}, Case{31, 203, 48}, Case{5, 17, 3}}) {
        // |x_ij| = a_i for every j: every channel's Sh is the same sum, so std = 0 and k = 0.
        Vec flat(rows * cols);
        for (std::size_t i = 0; i < rows; ++i) {
            const float a = std::fabs(normal(gen)) + 0.01f;
            for (std::size_t j = 0; j < cols; ++j) flat[i * cols + j] = (gen() & 1) ? a : -a;
        }
        // Plain Gaussian data whose brute-force selection is empty at z = 3.
        Vec gauss(rows * cols);
        for (auto& v : gauss) v = normal(gen);
        CodecParams p;
        p.group_size = G;
        for (const Vec* x : {&flat, &gauss}) {
            if (!ref_outlier_channels(*x, rows, cols, p.outlier_z, outlier_channel_cap(cols, p)).empty()) continue;
            const auto g = compress_checked(Codec::group_int4, *x, rows, cols, p);
            const auto o = compress_checked(Codec::outlier_int4, *x, rows, cols, p);
            EXPECT_EQ(codec_outlier_channels(o.blob.data), 0u);
            EXPECT_EQ(o.bytes, g.bytes);
            // Same sections after the header (which names the codec).
            EXPECT_EQ(std::memcmp(o.blob.data + 64, g.blob.data + 64, g.bytes - 64), 0);
            expect_equal_values(decompress_vec(Codec::group_int4, g, rows, cols),
                                decompress_vec(Codec::outlier_int4, o, rows, cols), "outlier_int4 k=0");
        }
    }
}

// ---- Z-score selection. ----

TEST(Codecs, OutlierSelectionMatchesBruteForceZScores) {
    std::mt19937 gen(17);
    for (const auto& [rows, cols, G] : {Case{300, 512, 64}, Case{17, 97, 16}, Case{1, 64, 64}}) {
        std::uniform_real_distribution<float> heavy(1.0f, 30.0f);
        std::normal_distribution<float> normal(0.0f, 1.0f);
        // Channels with graded magnitudes: a continuum of Z values around the thresholds.
        std::vector<float> channel_scale(cols);
        for (auto& s : channel_scale) s = (gen() % 10 == 0) ? heavy(gen) : 1.0f;
        Vec x(rows * cols);
        for (std::size_t i = 0; i < rows; ++i)
            for (std::size_t j = 0; j < cols; ++j) x[i * cols + j] = normal(gen) * channel_scale[j];
        for (float z : {1.0f, 2.0f, 3.0f, 3.5f}) {
            for (int cap : {0, 2, 5, 1000}) {
                CodecParams p;
                p.group_size = G;
                p.outlier_z = z;
                p.max_outlier_channels = cap;
                std::vector<double> zs;
                const auto want = ref_outlier_channels(x, rows, cols, z, outlier_channel_cap(cols, p), &zs);
                const auto c = compress_checked(Codec::outlier_int4, x, rows, cols, p);
                const auto got = blob_outlier_channels(c, rows, cols, p);
                EXPECT_EQ(got, want) << "rows " << rows << " cols " << cols << " z " << z << " cap " << cap;
                // The cap keeps the largest Z: nothing left out beats anything kept.
                std::vector<bool> kept(cols, false);
                for (int j : got) kept[j] = true;
                double weakest_kept = std::numeric_limits<double>::infinity(), strongest_left = -1e300;
                for (std::size_t j = 0; j < cols; ++j) {
                    if (kept[j])
                        weakest_kept = std::min(weakest_kept, zs[j]);
                    else if (zs[j] > z)
                        strongest_left = std::max(strongest_left, zs[j]);
                }
                if (!got.empty()) {
                    EXPECT_GE(weakest_kept, strongest_left);
                }
                for (int j : got) EXPECT_GT(zs[j], z);
                EXPECT_LE(got.size(), outlier_channel_cap(cols, p));
                EXPECT_EQ(c.bytes, formula_bytes(Codec::outlier_int4, rows, cols, G, got.size()));
            }
        }
    }
}

TEST(Codecs, OutlierCapKeepsLargestZ) {
    std::mt19937 gen(23);
    const std::size_t rows = 200, cols = 640;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Vec x(rows * cols);
    for (auto& v : x) v = normal(gen);
    // 12 outlier channels with strictly increasing magnitude: the cap of 5 must keep the last 5.
    const std::vector<int> planted = {3, 50, 51, 99, 200, 201, 333, 400, 512, 513, 600, 639};
    for (std::size_t t = 0; t < planted.size(); ++t)
        for (std::size_t i = 0; i < rows; ++i) x[i * cols + planted[t]] *= 40.0f + 5.0f * t;
    CodecParams p;
    p.max_outlier_channels = 5;
    const auto c = compress_checked(Codec::outlier_int4, x, rows, cols, p);
    EXPECT_EQ(blob_outlier_channels(c, rows, cols, p), (std::vector<int>{400, 512, 513, 600, 639}));
    // The default cap (cols / 16 = 40) keeps all twelve.
    const auto all = compress_checked(Codec::outlier_int4, x, rows, cols, CodecParams{});
    EXPECT_EQ(blob_outlier_channels(all, rows, cols, CodecParams{}), planted);
}

// ---- Sizes. ----

TEST(Codecs, SizesMatchTheDocumentedFormulas) {
    for (const auto& [rows, cols, G] : kCases) {
        CodecParams p;
        p.group_size = G;
        for (Codec codec : {Codec::group_int4, Codec::channel_int4, Codec::asym_int4, Codec::bitpack}) {
            EXPECT_EQ(codec_bytes(codec, rows, cols, p), formula_bytes(codec, rows, cols, G)) << codec_name(codec);
            EXPECT_EQ(codec_max_bytes(codec, rows, cols, p), formula_bytes(codec, rows, cols, G));
            EXPECT_EQ(codec_bytes(codec, rows, cols, p) % 64, 0u);
        }
        std::size_t most = 0;
        for (std::size_t k = 0; k <= outlier_channel_cap(cols, p); ++k) {
            EXPECT_EQ(codec_bytes(Codec::outlier_int4, rows, cols, p, k),
                      formula_bytes(Codec::outlier_int4, rows, cols, G, k));
            most = std::max(most, formula_bytes(Codec::outlier_int4, rows, cols, G, k));
        }
        EXPECT_EQ(codec_max_bytes(Codec::outlier_int4, rows, cols, p), most);
    }
    // Concrete numbers for a GPT-2 small activation (4096 x 768, G = 64): 12 groups per row.
    CodecParams p;
    EXPECT_EQ(codec_bytes(Codec::group_int4, 4096, 768, p), 64u + 4 * 4096 * 12 + 4096 * 384);
    EXPECT_EQ(codec_bytes(Codec::outlier_int4, 4096, 768, p, 8), 64u + 64 + 4 * 4096 * 8 + 4 * 4096 * 12 + 4096 * 380);
    EXPECT_EQ(outlier_channel_cap(768, p), 48u);
    EXPECT_EQ(codec_bytes(Codec::bitpack, 1, 1000001, p), 125056u);
    // Layout: sections in the documented order, 64-byte aligned.
    const CodecLayout L = codec_layout(Codec::outlier_int4, 10, 100, p, 3);
    EXPECT_EQ(L.indices, 64u);
    EXPECT_EQ(L.outliers, 128u);
    EXPECT_EQ(L.scales, 128u + 128);
    EXPECT_EQ(L.codes, 256u + 128);
    EXPECT_EQ(L.total, 384u + 512);
}

TEST(Codecs, BlobsAreDeterministicWhateverTheBufferHeld) {
    std::mt19937 gen(29);
    const std::size_t rows = 9, cols = 77;
    const Vec x = random_activations(rows, cols, gen);
    for (Codec codec : {Codec::group_int4, Codec::outlier_int4, Codec::channel_int4, Codec::asym_int4}) {
        CodecParams p;
        p.group_size = 16;
        Blob a(codec_max_bytes(codec, rows, cols, p), 0x00), b(codec_max_bytes(codec, rows, cols, p), 0xFF);
        std::vector<double> scratch(codec_scratch_bytes(codec, rows, cols, p) / 8 + 1);
        const std::size_t na = compress(codec, x.data(), rows, cols, p, a.data, scratch.data());
        const std::size_t nb = compress(codec, x.data(), rows, cols, p, b.data, scratch.data());
        ASSERT_EQ(na, nb);
        EXPECT_EQ(std::memcmp(a.data, b.data, na), 0) << codec_name(codec) << ": padding not zeroed";
    }
}

// ---- Bit-packing. ----

TEST(Codecs, BitpackIsLosslessOnRandomMasks) {
    std::mt19937 gen(31);
    for (std::size_t n : {1u, 7u, 8u, 9u, 63u, 64u, 65u, 127u, 1001u, 4099u, 1000003u}) {
        for (int threads : {1, 2}) {
            ThreadCount tc(threads);
            std::vector<unsigned char> mask(n);
            for (auto& m : mask) m = (gen() % 10) < 9 ? 1 : 0;  // dropout p = 0.1
            Blob blob(codec_max_bytes(Codec::bitpack, 1, n, CodecParams{}));
            const std::size_t bytes = compress(Codec::bitpack, mask.data(), 1, n, CodecParams{}, blob.data, nullptr);
            EXPECT_EQ(bytes, align64((n + 7) / 8));
            EXPECT_EQ(bytes, codec_bytes(Codec::bitpack, 1, n, CodecParams{}));
            EXPECT_TRUE(blob.untouched_after(bytes));
            // Bit i % 8 of byte i / 8, padding zero.
            for (std::size_t i = 0; i < n; ++i) ASSERT_EQ((blob.data[i / 8] >> (i % 8)) & 1, mask[i]) << i;
            for (std::size_t i = n; i < 8 * bytes; ++i) ASSERT_EQ((blob.data[i / 8] >> (i % 8)) & 1, 0) << i;
            std::vector<unsigned char> back(n + 64, 0xEE);
            decompress(Codec::bitpack, blob.data, 1, n, back.data());
            EXPECT_TRUE(std::equal(mask.begin(), mask.end(), back.begin())) << "n = " << n;
            for (std::size_t i = n; i < back.size(); ++i) ASSERT_EQ(back[i], 0xEE) << "wrote past the mask";
            // Only rows * cols matters: the same mask as n x 1 packs to the same bytes.
            Blob tall(codec_max_bytes(Codec::bitpack, n, 1, CodecParams{}));
            ASSERT_EQ(compress(Codec::bitpack, mask.data(), n, 1, CodecParams{}, tall.data, nullptr), bytes);
            EXPECT_EQ(std::memcmp(tall.data, blob.data, bytes), 0) << "n = " << n;
        }
    }
    // Any nonzero byte packs as 1.
    std::vector<unsigned char> mask = {0, 2, 255, 0, 1, 0, 0, 128, 7};
    Blob blob(64);
    compress(Codec::bitpack, mask.data(), 1, mask.size(), CodecParams{}, blob.data, nullptr);
    std::vector<unsigned char> back(mask.size());
    decompress(Codec::bitpack, blob.data, 1, mask.size(), back.data());
    EXPECT_EQ(back, (std::vector<unsigned char>{0, 1, 1, 0, 1, 0, 0, 1, 1}));
}

// ---- Error measurement. ----

TEST(Codecs, MeasureErrorMatchesDoubleReference) {
    std::mt19937 gen(37);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (std::size_t n : {1u, 17u, 100003u}) {
        Vec x(n), y(n);
        for (std::size_t i = 0; i < n; ++i) {
            x[i] = normal(gen) * 3.0f;
            y[i] = x[i] + normal(gen) * 0.01f;
        }
        double err = 0, ref = 0, mx = 0;
        for (std::size_t i = 0; i < n; ++i) {
            const double d = static_cast<double>(x[i]) - y[i];
            err += d * d;
            ref += static_cast<double>(x[i]) * x[i];
            mx = std::max(mx, std::fabs(d));
        }
        const CodecStats s = measure_error(x.data(), y.data(), n);
        EXPECT_NEAR(s.relative_l2, std::sqrt(err / ref), 1e-12 * std::sqrt(err / ref));
        EXPECT_EQ(s.max_abs_error, static_cast<float>(mx));
        EXPECT_EQ(s.bytes, 0u);
        EXPECT_EQ(s.outlier_fraction, 0.0f);
    }
    Vec zeros(10, 0.0f), ones(10, 1.0f);
    EXPECT_EQ(measure_error(zeros.data(), zeros.data(), 10).relative_l2, 0.0);
    EXPECT_TRUE(std::isinf(measure_error(zeros.data(), ones.data(), 10).relative_l2));
    EXPECT_EQ(measure_error(ones.data(), ones.data(), 10).relative_l2, 0.0);
}

// ---- No heap allocation (the tape calls these inside the training step). ----

TEST(Codecs, CompressAndDecompressDoNotAllocate) {
    if (!ADACC_COUNT_ALLOCATIONS) GTEST_SKIP() << "AddressSanitizer owns malloc";
    std::mt19937 gen(41);
    const std::size_t rows = 96, cols = 200;
    std::vector<int> planted;
    const Vec x = activations_with_outliers(rows, cols, 3, gen, &planted);
    Vec y(rows * cols);
    std::vector<unsigned char> mask(rows * cols), back(rows * cols);
    for (auto& m : mask) m = gen() & 1;
    const CodecParams p;
    const Codec codecs[] = {Codec::group_int4, Codec::outlier_int4, Codec::channel_int4, Codec::asym_int4};
    std::vector<Blob> blobs;
    for (Codec codec : codecs) blobs.emplace_back(codec_max_bytes(codec, rows, cols, p));
    Blob mask_blob(codec_max_bytes(Codec::bitpack, rows, cols, p));
    std::vector<double> scratch(codec_scratch_bytes(Codec::outlier_int4, rows, cols, p) / 8 + 1);
    auto run_all = [&] {
        for (std::size_t c = 0; c < std::size(codecs); ++c) {
            compress(codecs[c], x.data(), rows, cols, p, blobs[c].data, scratch.data());
            decompress(codecs[c], blobs[c].data, rows, cols, y.data());
        }
        compress(Codec::bitpack, mask.data(), rows, cols, p, mask_blob.data, nullptr);
        decompress(Codec::bitpack, mask_blob.data, rows, cols, back.data());
        measure_error(x.data(), y.data(), x.size());
    };
    // Two threads: libgomp mallocs a fresh team for every parallel region of a 1-thread run
    // (every kernel of the engine alike), but reuses its team of 2 once built.
    ThreadCount tc(2);
    run_all();  // warm-up: OpenMP builds its thread team on first use
    const long before = g_allocations.load();
    run_all();
    EXPECT_EQ(g_allocations.load() - before, 0);
    EXPECT_EQ(back, mask);
    EXPECT_EQ(codec_outlier_channels(blobs[1].data), planted.size());
}

// ---- Misuse. ----

TEST(Codecs, RejectsBadParametersAndMismatchedBlobs) {
    const std::size_t rows = 4, cols = 10;
    Vec x(rows * cols, 1.0f), y(rows * cols);
    CodecParams bad;
    bad.group_size = 0;
    Blob blob(4096);
    EXPECT_THROW(compress(Codec::group_int4, x.data(), rows, cols, bad, blob.data, nullptr), std::invalid_argument);
    bad.group_size = kMaxGroupSize + 1;
    EXPECT_THROW(codec_bytes(Codec::group_int4, rows, cols, bad), std::invalid_argument);
    // Bitpack reads no parameter but refuses bad ones like every codec; its headerless blob is
    // no float codec's.
    std::vector<unsigned char> mask(rows * cols, 1);
    EXPECT_THROW(compress(Codec::bitpack, mask.data(), rows, cols, bad, blob.data, nullptr), std::invalid_argument);
    Blob bits(codec_max_bytes(Codec::bitpack, rows, cols, CodecParams{}));
    compress(Codec::bitpack, mask.data(), rows, cols, CodecParams{}, bits.data, nullptr);
    EXPECT_THROW(decompress(Codec::group_int4, bits.data, rows, cols, y.data()), std::invalid_argument);
    Vec wide(rows * 32, 1.0f);  // 32 columns: the outlier cap is 2, so scratch is needed
    EXPECT_THROW(compress(Codec::outlier_int4, wide.data(), rows, 32, CodecParams{}, blob.data, nullptr),
                 std::invalid_argument);
    compress(Codec::group_int4, x.data(), rows, cols, CodecParams{}, blob.data, nullptr);
    EXPECT_THROW(decompress(Codec::group_int4, blob.data, rows + 1, cols, y.data()), std::invalid_argument);
    EXPECT_THROW(decompress(Codec::asym_int4, blob.data, rows, cols, y.data()), std::invalid_argument);
    EXPECT_NO_THROW(decompress(Codec::group_int4, blob.data, rows, cols, y.data()));
    EXPECT_EQ(y, x);  // 1.0 = 7 * (1/7) rounds back exactly
}

TEST(Codecs, EmptyTensors) {
    Blob blob(4096);
    for (Codec codec : {Codec::group_int4, Codec::outlier_int4, Codec::channel_int4, Codec::asym_int4}) {
        EXPECT_EQ(compress(codec, nullptr, 0, 5, CodecParams{}, blob.data, nullptr),
                  codec_bytes(codec, 0, 5, CodecParams{}));
        decompress(codec, blob.data, 0, 5, nullptr);
    }
    EXPECT_EQ(compress(Codec::bitpack, nullptr, 0, 5, CodecParams{}, blob.data, nullptr), 0u);
    EXPECT_EQ(compress(Codec::bitpack, nullptr, 1, 0, CodecParams{}, blob.data, nullptr), 0u);
    decompress(Codec::bitpack, blob.data, 0, 5, nullptr);
}

}  // namespace
}  // namespace adacc::cpu
