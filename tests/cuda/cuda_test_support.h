// Support for the CUDA kernels' tests (tests/cuda/): device buffers, a kernel context of the test's
// own (stream, cuBLASLt handle and workspace, reduction scratch) and comparisons with the CPU twin.
// The same test sources run under the SIMT emulation (test_cuda_emulated) and on a GPU
// (test_cuda_device), where ADACC_REQUIRE_CUDA_DEVICE() skips with a message when there is none.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/activation.h"
#include "kernels/kernel_context.h"

namespace adacc::test {

// Empty when a CUDA device can run kernels (always under emulation), else why not.
std::string cuda_device_problem();
bool running_under_emulation();

#define ADACC_REQUIRE_CUDA_DEVICE()                                                          \
    do {                                                                                     \
        const std::string problem = ::adacc::test::cuda_device_problem();                    \
        if (!problem.empty()) GTEST_SKIP() << "no CUDA device (" << problem << "): skipped"; \
    } while (0)

// Device memory of n elements of T, filled from / read back to host vectors.
template <typename T>
class DeviceArray {
public:
    explicit DeviceArray(std::size_t n);
    explicit DeviceArray(const std::vector<T>& host);
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;
    ~DeviceArray();
    T* get() const { return data_; }
    std::size_t size() const { return size_; }
    void upload(const std::vector<T>& host);
    std::vector<T> download() const;

private:
    T* data_ = nullptr;
    std::size_t size_ = 0;
};

// A KernelContext for calling adacc::cuda kernels directly: its own stream, cuBLASLt handle with
// the backend's workspace size, the reduction scratch, and `scratch_bytes` of scratch (codecs).
class CudaTestContext {
public:
    explicit CudaTestContext(std::size_t scratch_bytes = 0);
    CudaTestContext(const CudaTestContext&) = delete;
    CudaTestContext& operator=(const CudaTestContext&) = delete;
    ~CudaTestContext();
    const KernelContext& get() const { return ctx_; }
    void synchronize() const;

private:
    KernelContext ctx_;
    void* blas_ = nullptr;  // cuda::BlasContext
};

// Uniform values in [lo, hi) from a fixed seed (the same vector on every machine).
std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f);
// Dropout-style masks: 1 with probability keep.
std::vector<unsigned char> random_mask(std::size_t n, std::uint64_t seed, float keep);

// Values as elements of E hold them (float: unchanged; bf16: rounded to nearest even, as the
// device's stores round), back as floats, and both ways: what the CPU twin sees of an E input.
template <typename E>
std::vector<E> device_values(const std::vector<float>& v) {
    if constexpr (std::is_same_v<E, float>) {
        return v;
    } else {
        std::vector<E> out(v.size());
        for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
        return out;
    }
}
inline std::vector<float> host_values(const std::vector<float>& v) { return v; }
inline std::vector<float> host_values(const std::vector<bf16>& v) {
    std::vector<float> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
    return out;
}
template <typename E>
std::vector<float> representable(const std::vector<float>& v) {
    return host_values(device_values<E>(v));
}

// Every element within abs + rel * |want|; on failure names the first bad index and the count.
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                                     double abs = 0.0);
// Per-element bounds: |got - want| <= abs[i] + rel |want| (or got == want: infinities) for every
// element; on failure the first bad index, its bound and the count.
::testing::AssertionResult all_within(const std::vector<float>& got, const std::vector<float>& want, double rel,
                                      const std::vector<double>& abs);
::testing::AssertionResult all_equal_bytes(const std::vector<unsigned char>& got,
                                           const std::vector<unsigned char>& want);
// The same for any element type, compared as its bytes (floats, bf16: bit for bit, NaNs included).
template <typename T>
::testing::AssertionResult all_equal_bytes(const std::vector<T>& got, const std::vector<T>& want) {
    auto bytes = [](const std::vector<T>& v) {
        const auto* p = reinterpret_cast<const unsigned char*>(v.data());
        return std::vector<unsigned char>(p, p + v.size() * sizeof(T));
    };
    return all_equal_bytes(bytes(got), bytes(want));
}

// Codec test data (fixed seeds; no negative zeros: zeros are assigned, never products).
// Rows of varied scale; every fifth row all zero, others with a zero first half or a heavy tail.
std::vector<float> codec_activations(std::size_t rows, std::size_t cols, std::uint64_t seed);
// Magnitudes spread over 2^-30 .. 2^30: double sums of them round, so their order shows.
std::vector<float> codec_wide_range(std::size_t rows, std::size_t cols, std::uint64_t seed);
// Softmax-like rows in [0, 1] with a causal zero tail (whole groups of +0).
std::vector<float> codec_probabilities(std::size_t rows, std::size_t cols, std::uint64_t seed);
// Standard normal data with `channels` scaled by `factor`.
std::vector<float> codec_with_outliers(std::size_t rows, std::size_t cols, const std::vector<int>& channels,
                                       std::uint64_t seed, float factor = 50.0f);
// |x_ij| = a_i in every column, signs mixed: equal channel statistics (std 0), so the outlier
// codec chooses no channel.
std::vector<float> codec_flat_rows(std::size_t rows, std::size_t cols);
// Tensors with a few planted outlier channels (codec_with_outliers, seed rows + cols): the
// outlier codec, capped at 8, must choose exactly those (ascending). Groups of the compacted rows
// straddle them; 2085 rows: three chunks of the channel sums (kOutlierSumRows); 1100 columns:
// more than one stage of the serial mean / variance.
struct PlantedOutliers {
    std::size_t rows, cols;
    int G;
    std::vector<int> planted;
};
extern const std::vector<PlantedOutliers> kPlantedOutliers;

}  // namespace adacc::test
