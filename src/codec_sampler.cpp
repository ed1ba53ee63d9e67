#include "src/codec_sampler.h"

#include <algorithm>
#include <chrono>

#include "kernels/cpu/codecs.h"

namespace adacc {

void CodecSampler::tensor_compressed(Backend& backend, const CompressedTensor& t) {
    const auto start = std::chrono::steady_clock::now();
    CodecSample* entry = nullptr;
    for (auto& s : samples_)
        if (s.kind == t.kind) entry = &s;
    if (!entry) {
        if (samples_.size() == samples_.capacity()) return;  // never reallocate inside a step
        samples_.push_back({t.kind, 0, 0, 0});
        entry = &samples_.back();
    }
    entry->bytes = std::max(entry->bytes, t.exact_bytes);
    if (t.codec == cpu::Codec::bitpack) return;  // bit-packing is lossless
    const std::size_t numel = t.rows * t.cols;
    cpu::decompress(t.codec, t.blob, t.rows, t.cols, t.decode_buffer);
    const cpu::CodecStats stats = cpu::measure_error(static_cast<const float*>(t.original), t.decode_buffer, numel);
    entry->relative_error = std::max(entry->relative_error, stats.relative_l2);
    const std::size_t outliers = cpu::codec_outlier_channels(t.blob);
    entry->outlier_fraction = std::max(entry->outlier_fraction, double(outliers) / double(t.cols));
    if (t.codec == cpu::Codec::outlier_int4 && outliers >= cpu::outlier_channel_cap(t.cols, params_))
        entry->outlier_cap_reached = true;
    ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace adacc
