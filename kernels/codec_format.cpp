// The codecs' blob format: names, layouts and sizes (the formulas documented in codec_format.h)
// and the header every float-codec blob starts with. Backend-neutral: no kernel here.
#include "kernels/codec_format.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace adacc {

using namespace codec_format;

const char* codec_name(Codec codec) {
    switch (codec) {
        case Codec::group_int4: return "group_int4";
        case Codec::outlier_int4: return "outlier_int4";
        case Codec::channel_int4: return "channel_int4";
        case Codec::asym_int4: return "asym_int4";
        case Codec::bitpack: return "bitpack";
    }
    return "unknown";
}

std::size_t outlier_channel_cap(std::size_t cols, const CodecParams& params) {
    const std::size_t cap =
        params.max_outlier_channels > 0 ? static_cast<std::size_t>(params.max_outlier_channels) : cols / 16;
    return std::min(cap, cols);
}

CodecLayout codec_layout(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                         std::size_t outlier_channels) {
    check_params(params);
    CodecLayout L;
    std::size_t at = codec == Codec::bitpack ? 0 : sizeof(BlobHeader);
    auto section = [&at](std::size_t bytes) {
        if (bytes == 0) return std::size_t(0);
        const std::size_t offset = at;
        at += align64(bytes);
        return offset;
    };
    const std::size_t G = static_cast<std::size_t>(params.group_size);
    switch (codec) {
        case Codec::group_int4:
            L.scales = section(4 * rows * ceil_div(cols, G));
            L.codes = section(rows * ceil_div(cols, 2));
            break;
        case Codec::outlier_int4: {
            if (outlier_channels > cols) throw std::invalid_argument("more outlier channels than columns");
            const std::size_t k = outlier_channels, c = cols - k;
            L.indices = section(4 * k);
            L.outliers = section(4 * rows * k);
            L.scales = section(4 * rows * ceil_div(c, G));
            L.codes = section(rows * ceil_div(c, 2));
            break;
        }
        case Codec::channel_int4:
            L.scales = section(4 * cols);
            L.codes = section(rows * ceil_div(cols, 2));
            break;
        case Codec::asym_int4:
            L.scales = section(4 * rows * ceil_div(cols, G));
            L.offsets = section(4 * rows * ceil_div(cols, G));
            L.codes = section(rows * ceil_div(cols, 2));
            break;
        case Codec::bitpack: L.codes = section(ceil_div(rows * cols, 8)); break;
    }
    L.total = at;
    return L;
}

std::size_t codec_bytes(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                        std::size_t outlier_channels) {
    return codec_layout(codec, rows, cols, params, outlier_channels).total;
}

std::size_t codec_max_bytes(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params) {
    if (codec != Codec::outlier_int4) return codec_bytes(codec, rows, cols, params);
    // Each outlier adds 4 * rows bytes of fp32 but saves codes and sometimes a scale column, so
    // the size is not monotone in k for tiny G: take the maximum over every k the codec may pick.
    std::size_t most = 0;
    for (std::size_t k = 0; k <= outlier_channel_cap(cols, params); ++k)
        most = std::max(most, codec_bytes(codec, rows, cols, params, k));
    return most;
}

std::size_t codec_scratch_bytes(Codec codec, std::size_t rows, std::size_t cols, const CodecParams&) {
    return codec == Codec::outlier_int4 ? outlier_scratch_layout(rows, cols).total : 0;
}

OutlierScratch outlier_scratch_layout(std::size_t rows, std::size_t cols) {
    OutlierScratch s;
    s.channels = align64(8 * cols);
    s.chunk_sums = s.channels + align64(4 * cols);
    s.total = s.chunk_sums + align64(8 * cols * ceil_div(rows, kOutlierSumRows));
    return s;
}

namespace codec_format {

void check_params(const CodecParams& params) {
    if (params.group_size < 1 || params.group_size > kMaxGroupSize)
        throw std::invalid_argument("codec group_size must be in [1, " + std::to_string(kMaxGroupSize) + "], got " +
                                    std::to_string(params.group_size));
    if (params.max_outlier_channels < 0) throw std::invalid_argument("codec max_outlier_channels must be >= 0");
}

BlobHeader make_header(Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                       std::size_t outlier_channels) {
    check_params(params);
    BlobHeader h;
    std::memset(&h, 0, sizeof h);
    h.magic = kBlobMagic;
    h.codec = static_cast<std::uint8_t>(codec);
    h.version = kBlobVersion;
    h.group_size = static_cast<std::uint32_t>(params.group_size);
    h.outlier_channels = static_cast<std::uint32_t>(outlier_channels);
    h.rows = rows;
    h.cols = cols;
    return h;
}

void check_header(const BlobHeader& h, Codec codec, std::size_t rows, std::size_t cols) {
    if (h.magic != kBlobMagic || h.version != kBlobVersion)
        throw std::invalid_argument("not a codec blob (bad magic or version)");
    if (h.codec != static_cast<std::uint8_t>(codec))
        throw std::invalid_argument(std::string("blob holds codec ") + codec_name(static_cast<Codec>(h.codec)) +
                                    ", not " + codec_name(codec));
    if (h.rows != rows || h.cols != cols)
        throw std::invalid_argument("blob shape " + std::to_string(h.rows) + "x" + std::to_string(h.cols) +
                                    " does not match " + std::to_string(rows) + "x" + std::to_string(cols));
    if (h.group_size < 1 || h.group_size > static_cast<std::uint32_t>(kMaxGroupSize) || h.outlier_channels > cols)
        throw std::invalid_argument("corrupt codec blob header");
}

CodecParams header_params(const BlobHeader& header) {
    CodecParams p;
    p.group_size = static_cast<int>(header.group_size);
    return p;
}

void write_header(void* blob, Codec codec, std::size_t rows, std::size_t cols, const CodecParams& params,
                  std::size_t outlier_channels) {
    const BlobHeader h = make_header(codec, rows, cols, params, outlier_channels);
    std::memcpy(blob, &h, sizeof h);
}

const BlobHeader& read_header(const void* blob, Codec codec, std::size_t rows, std::size_t cols) {
    const auto& h = *static_cast<const BlobHeader*>(blob);
    check_header(h, codec, rows, cols);
    return h;
}

}  // namespace codec_format
}  // namespace adacc
