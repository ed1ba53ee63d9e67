#include "models/gpt_params.h"

namespace adacc {

ParameterLayout::ParameterLayout(const GPTConfig& cfg) {
    const std::size_t L = cfg.n_layer, C = cfg.n_embd, Vp = cfg.padded_vocab_size(), T = cfg.max_seq_len;
    struct Spec {
        const char* name;
        std::vector<std::size_t> shape;
        bool per_layer;
        bool decay;
    };
    const Spec specs[kNumParamTensors] = {
        {"wte", {Vp, C}, false, true},           {"wpe", {T, C}, false, true},
        {"ln1w", {L, C}, true, false},           {"ln1b", {L, C}, true, false},
        {"qkvw", {L, 3 * C, C}, true, true},     {"qkvb", {L, 3 * C}, true, false},
        {"attprojw", {L, C, C}, true, true},     {"attprojb", {L, C}, true, false},
        {"ln2w", {L, C}, true, false},           {"ln2b", {L, C}, true, false},
        {"fcw", {L, 4 * C, C}, true, true},      {"fcb", {L, 4 * C}, true, false},
        {"fcprojw", {L, C, 4 * C}, true, true},  {"fcprojb", {L, C}, true, false},
        {"lnfw", {C}, false, false},             {"lnfb", {C}, false, false},
    };
    std::size_t offset = 0;
    for (int i = 0; i < kNumParamTensors; ++i) {
        auto& t = tensors_[i];
        t.name = specs[i].name;
        t.shape = specs[i].shape;
        t.per_layer = specs[i].per_layer;
        t.weight_decay = specs[i].decay;
        t.numel = 1;
        for (auto d : t.shape) t.numel *= d;
        t.offset = offset;
        offset += t.numel;
    }
    total_ = offset;
}

}  // namespace adacc
