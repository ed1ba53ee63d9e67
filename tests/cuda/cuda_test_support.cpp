#include "tests/cuda/cuda_test_support.h"

#include <cuda_runtime.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/blas_context.h"
#include "kernels/cuda/device_sizes.h"
#include "kernels/rng.h"
#include "src/cuda/cuda_device.h"

namespace adacc::test {

namespace {
void check(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
}  // namespace

bool running_under_emulation() {
#ifdef ADACC_SIMT_EMULATION
    return true;
#else
    return false;
#endif
}

std::string cuda_device_problem() {
    const CudaDeviceInfo info = cuda_device_info();
    return info.available ? std::string() : info.problem;
}

template <typename T>
DeviceArray<T>::DeviceArray(std::size_t n) : size_(n) {
    check(cudaMalloc(reinterpret_cast<void**>(&data_), (n ? n : 1) * sizeof(T)), "cudaMalloc");
    check(cudaMemset(data_, 0, (n ? n : 1) * sizeof(T)), "cudaMemset");
}
template <typename T>
DeviceArray<T>::DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    upload(host);
}
template <typename T>
DeviceArray<T>::~DeviceArray() {
    cudaFree(data_);
}
template <typename T>
void DeviceArray<T>::upload(const std::vector<T>& host) {
    if (host.size() != size_) throw std::invalid_argument("DeviceArray::upload: size differs");
    check(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
}
template <typename T>
std::vector<T> DeviceArray<T>::download() const {
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<T> host(size_);
    check(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return host;
}
template class DeviceArray<float>;
template class DeviceArray<int>;
template class DeviceArray<unsigned char>;
template class DeviceArray<bf16>;

CudaTestContext::CudaTestContext(std::size_t scratch_bytes) {
    cudaStream_t stream = nullptr;
    check(cudaStreamCreate(&stream), "cudaStreamCreate");
    ctx_.stream = stream;
    auto* blas = new cuda::BlasContext;
    if (cublasLtCreate(&blas->handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasLtCreate failed");
    check(cudaMalloc(&blas->workspace, cuda::kBlasWorkspaceBytes), "cudaMalloc");
    blas->workspace_bytes = cuda::kBlasWorkspaceBytes;
    blas_ = blas;
    ctx_.blas = blas;
    check(cudaMalloc(&ctx_.reduction_scratch, cuda::kReductionScratchBytes), "cudaMalloc");
    ctx_.reduction_scratch_bytes = cuda::kReductionScratchBytes;
    if (cudnn_problem().empty()) ctx_.dnn = cuda::make_dnn_context();  // cuDNN's attention, when it loads
    if (scratch_bytes) {
        check(cudaMalloc(&ctx_.scratch, scratch_bytes), "cudaMalloc");
        ctx_.scratch_bytes = scratch_bytes;
    }
}

CudaTestContext::~CudaTestContext() {
    cudaDeviceSynchronize();
    cuda::destroy_dnn_context(static_cast<cuda::DnnContext*>(ctx_.dnn));
    auto* blas = static_cast<cuda::BlasContext*>(blas_);
    cudaFree(blas->workspace);
    cublasLtDestroy(blas->handle);
    delete blas;
    cudaFree(ctx_.reduction_scratch);
    cudaFree(ctx_.scratch);
    cudaStreamDestroy(static_cast<cudaStream_t>(ctx_.stream));
}

void CudaTestContext::synchronize() const {
    check(cudaStreamSynchronize(static_cast<cudaStream_t>(ctx_.stream)), "cudaStreamSynchronize");
}

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo, float hi) {
    std::vector<float> v(n);
    const std::uint64_t key = mix64(seed);
    for (std::size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng_uniform(key, i);
    return v;
}

std::vector<unsigned char> random_mask(std::size_t n, std::uint64_t seed, float keep) {
    std::vector<unsigned char> m(n);
    const std::uint64_t key = mix64(seed ^ 0x5EED);
    for (std::size_t i = 0; i < n; ++i) m[i] = rng_uniform(key, i) < keep ? 1 : 0;
    return m;
}

::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<float>& want, double rel,
                                     double abs) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
    std::size_t bad = 0, first = 0;
    double worst = 0.0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
        const double limit = abs + rel * std::fabs(static_cast<double>(want[i]));
        if (!(err <= limit)) {  // NaN fails
            if (bad++ == 0) first = i;
            worst = std::isnan(err) ? err : std::max(worst, err);
        }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    std::ostringstream msg;
    msg << bad << " of " << got.size() << " elements differ; first at " << first << ": got " << got[first] << ", want "
        << want[first] << " (worst abs error " << worst << ", rel " << rel << ", abs " << abs << ")";
    return ::testing::AssertionFailure() << msg.str();
}

::testing::AssertionResult all_within(const std::vector<float>& got, const std::vector<float>& want, double rel,
                                      const std::vector<double>& abs) {
    if (got.size() != want.size() || abs.size() != want.size())
        return ::testing::AssertionFailure()
               << "sizes differ: " << got.size() << ", " << want.size() << ", " << abs.size();
    std::size_t bad = 0, first = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
        if (!(got[i] == want[i] || err <= abs[i] + rel * std::fabs(static_cast<double>(want[i]))) && bad++ == 0)
            first = i;  // NaN fails
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << bad << " of " << got.size() << " elements differ; first at " << first
                                         << ": got " << got[first] << ", want " << want[first] << ", bound "
                                         << abs[first] + rel * std::fabs(static_cast<double>(want[first]));
}

::testing::AssertionResult all_equal_bytes(const std::vector<unsigned char>& got,
                                           const std::vector<unsigned char>& want) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
    for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i])
            return ::testing::AssertionFailure()
                   << "byte " << i << " differs: " << int(got[i]) << " vs " << int(want[i]);
    return ::testing::AssertionSuccess();
}

namespace {
float normal(std::uint64_t key, std::uint64_t i) { return static_cast<float>(rng_normal(key, i)); }
}  // namespace

std::vector<float> codec_activations(std::size_t rows, std::size_t cols, std::uint64_t seed) {
    const std::uint64_t key = mix64(seed);
    std::vector<float> x(rows * cols);
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

std::vector<float> codec_wide_range(std::size_t rows, std::size_t cols, std::uint64_t seed) {
    const std::uint64_t key = mix64(seed);
    std::vector<float> x(rows * cols);
    for (std::size_t e = 0; e < x.size(); ++e)
        x[e] = std::ldexp(normal(key, e), static_cast<int>(60.0f * rng_uniform(key, ~e)) - 30);
    return x;
}

std::vector<float> codec_probabilities(std::size_t rows, std::size_t cols, std::uint64_t seed) {
    const std::uint64_t key = mix64(seed);
    std::vector<float> x(rows * cols, 0.0f);
    for (std::size_t i = 0; i < rows; ++i) {
        const std::size_t live = 1 + (i * 13) % cols;
        double sum = 0;
        for (std::size_t j = 0; j < live; ++j) sum += x[i * cols + j] = std::exp(2.0f * normal(key, i * cols + j));
        for (std::size_t j = 0; j < live; ++j) x[i * cols + j] = static_cast<float>(x[i * cols + j] / sum);
    }
    return x;
}

std::vector<float> codec_with_outliers(std::size_t rows, std::size_t cols, const std::vector<int>& channels,
                                       std::uint64_t seed, float factor) {
    const std::uint64_t key = mix64(seed);
    std::vector<float> x(rows * cols);
    for (std::size_t e = 0; e < x.size(); ++e) x[e] = normal(key, e);
    for (int j : channels)
        for (std::size_t i = 0; i < rows; ++i) x[i * cols + j] *= factor;
    return x;
}

std::vector<float> codec_flat_rows(std::size_t rows, std::size_t cols) {
    std::vector<float> x(rows * cols);
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) x[i * cols + j] = (j * 7 + i) % 3 ? 0.5f + i : -(0.5f + i);
    return x;
}

const std::vector<PlantedOutliers> kPlantedOutliers = {{7, 100, 64, {0, 31, 32, 77, 99}}, {33, 72, 16, {5, 6, 40}},
                                                       {140, 100, 7, {1, 50, 98}},        {1, 40, 64, {39}},
                                                       {3, 1100, 64, {7, 500, 1099}},     {2085, 40, 16, {4, 27}}};

}  // namespace adacc::test
