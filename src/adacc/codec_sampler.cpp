#include "src/adacc/codec_sampler.h"

#include <algorithm>
#include <chrono>

#include "src/engine/backend.h"

namespace adacc {

void CodecSampler::tensor_compressed(Backend& backend, const CompressedTensor& t) {
    const auto start = std::chrono::steady_clock::now();
    CodecSample* entry = nullptr;
    for (auto& s : samples_)
        if (s.kind == t.kind && s.codec == t.codec) entry = &s;
    if (!entry) {
        if (samples_.size() == samples_.capacity()) return;  // never reallocate inside a step
        samples_.push_back({t.kind, t.codec, 0, 0, 0});
        entry = &samples_.back();
    }
    entry->bytes = std::max(entry->bytes, t.exact_bytes);
    if (codec_is_lossless(t.codec)) return;  // bit-packing
    const KernelTable& k = backend.kernels();
    const KernelContext& ctx = backend.context();
    k.codec_decompress(ctx, t.codec, t.blob, t.rows, t.cols, t.decode_buffer);
    const CodecStats stats = k.codec_error(ctx, t.original, t.decode_buffer, t.rows * t.cols);
    entry->relative_error = std::max(entry->relative_error, stats.relative_l2);
    const std::size_t outliers = k.codec_outlier_count(ctx, t.codec, t.blob);
    entry->outlier_fraction = std::max(entry->outlier_fraction, double(outliers) / double(t.cols));
    if (t.codec == Codec::outlier_int4 && outliers >= outlier_channel_cap(t.cols, params_))
        entry->outlier_cap_reached = true;
    ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace adacc
