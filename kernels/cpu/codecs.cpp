// The CPU codecs' entry points (kernels/cpu/codecs.h): compress and decompress dispatch to one
// file per family (codec_*.cpp), the outlier count of a blob, the padding helper and the error
// measurement.
#include "kernels/cpu/codecs.h"
#include "kernels/cpu/ops.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace adacc::cpu {

using namespace codec_detail;

namespace codec_detail {

void zero_padding(void* section, std::size_t used) {
    std::memset(static_cast<std::uint8_t*>(section) + used, 0, align64(used) - used);
}

}  // namespace codec_detail

std::size_t compress(Codec codec, const void* src, std::size_t rows, std::size_t cols, const CodecParams& params,
                     void* dst, void* scratch) {
    const auto* x = static_cast<const float*>(src);
    switch (codec) {
    case Codec::group_int4: return compress_group_int4(x, rows, cols, params, dst);
    case Codec::outlier_int4: return compress_outlier_int4(x, rows, cols, params, dst, scratch);
    case Codec::channel_int4: return compress_channel_int4(x, rows, cols, params, dst);
    case Codec::asym_int4: return compress_asym_int4(x, rows, cols, params, dst);
    case Codec::bitpack:
        check_params(params);  // refused for every codec alike, though bitpack reads none
        return compress_bitpack(static_cast<const unsigned char*>(src), rows * cols, dst);
    }
    throw std::invalid_argument("compress: unknown codec");
}

void decompress(Codec codec, const void* blob, std::size_t rows, std::size_t cols, void* dst) {
    auto* y = static_cast<float*>(dst);
    switch (codec) {
    case Codec::group_int4: return decompress_group_int4(blob, rows, cols, y);
    case Codec::outlier_int4: return decompress_outlier_int4(blob, rows, cols, y);
    case Codec::channel_int4: return decompress_channel_int4(blob, rows, cols, y);
    case Codec::asym_int4: return decompress_asym_int4(blob, rows, cols, y);
    case Codec::bitpack: return decompress_bitpack(blob, rows * cols, static_cast<unsigned char*>(dst));
    }
    throw std::invalid_argument("decompress: unknown codec");
}

std::size_t codec_outlier_channels(const void* blob) {
    const auto& h = *static_cast<const BlobHeader*>(blob);
    if (h.magic != kBlobMagic) throw std::invalid_argument("not a codec blob (bad magic)");
    return h.codec == static_cast<std::uint8_t>(Codec::outlier_int4) ? h.outlier_channels : 0;
}

CodecStats measure_error(const float* original, const float* decoded, std::size_t n) {
    double err2 = 0.0, ref2 = 0.0, max_err = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : err2, ref2) reduction(max : max_err)
    for (std::size_t i = 0; i < n; ++i) {
        const double x = original[i], d = x - static_cast<double>(decoded[i]);
        err2 += d * d;
        ref2 += x * x;
        max_err = std::max(max_err, std::fabs(d));
    }
    CodecStats stats;
    stats.relative_l2 = ref2 > 0.0 ? std::sqrt(err2 / ref2) : (err2 > 0.0 ? std::numeric_limits<double>::infinity() : 0.0);
    stats.max_abs_error = static_cast<float>(max_err);
    return stats;
}

// ---- the codec kernels of kernels/ops.inc ----

// The CPU's codecs read and write fp32 (mask bytes for bitpack): as<> refuses anything else.
static const void* codec_elements(Codec codec, ConstAct tensor) {
    return codec == Codec::bitpack ? static_cast<const void*>(tensor.as<unsigned char>()) : tensor.as<float>();
}
static void* codec_elements(Codec codec, Act tensor) {
    return codec == Codec::bitpack ? static_cast<void*>(tensor.as<unsigned char>()) : tensor.as<float>();
}

void codec_compress(const KernelContext& ctx, Codec codec, ConstAct src, std::size_t rows, std::size_t cols,
                    const CodecParams& params, void* dst) {
    compress(codec, codec_elements(codec, src), rows, cols, params, dst, ctx.scratch);
}

void codec_decompress(const KernelContext& ctx, Codec codec, const void* blob, std::size_t rows, std::size_t cols,
                      Act dst) {
    decompress(codec, blob, rows, cols, codec_elements(codec, dst));
}

std::size_t codec_outlier_count(const KernelContext& ctx, Codec codec, const void* blob) {
    return codec == Codec::bitpack ? 0 : codec_outlier_channels(blob);  // bitpack blobs have no header
}

CodecStats codec_error(const KernelContext& ctx, ConstAct original, ConstAct decoded, std::size_t n) {
    return measure_error(original.as<float>(), decoded.as<float>(), n);
}

}  // namespace adacc::cpu
