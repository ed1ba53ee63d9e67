// The Adacc monitor's eyes inside forward (docs/design.md, 'The monitor and re-planning'): a
// ModelObserver that, on sampled steps, decodes every compressed tensor right after its compression
// and records per tensor kind the worst blob size, outlier fraction and relative error over layers,
// per tensor kind and codec.
#pragma once

#include <utility>
#include <vector>

#include "src/adacc/policy_monitor.h"
#include "src/engine/model_observer.h"

namespace adacc {

class CodecSampler final : public ModelObserver {
public:
    explicit CodecSampler(const CodecParams& params = {}) : params_(params) {
        // One per kind and codec: sampling never reallocates inside a step.
        samples_.reserve(kNumTensorKinds * kNumCodecs);
    }
    void set_codec_params(const CodecParams& params) { params_ = params; }

    // The last forward's statistics, one entry per compressed (tensor kind, codec).
    const std::vector<CodecSample>& samples() const { return samples_; }
    // Time spent sampling since the last call (ms): the monitor's cost inside forward.
    double take_ms() { return std::exchange(ms_, 0.0); }

    bool wants_compressed_tensors() const override { return true; }
    void forward_started() override { samples_.clear(); }
    void tensor_compressed(Backend& backend, const CompressedTensor& tensor) override;

private:
    CodecParams params_;
    std::vector<CodecSample> samples_;
    double ms_ = 0;
};

}  // namespace adacc
