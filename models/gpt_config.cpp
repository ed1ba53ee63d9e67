#include "models/gpt_config.h"

#include <algorithm>
#include <cstdio>

namespace adacc {

std::int64_t GPTConfig::parameter_count() const {
    const std::int64_t C = n_embd, L = n_layer;
    return std::int64_t(padded_vocab_size()) * C + std::int64_t(max_seq_len) * C + L * (12 * C * C + 13 * C) + 2 * C;
}

std::int64_t GPTConfig::unpadded_parameter_count() const {
    return parameter_count() - std::int64_t(padded_vocab_size() - vocab_size) * n_embd;
}

double GPTConfig::flops_per_token(int T) const {
    return 6.0 * static_cast<double>(parameter_count()) + 6.0 * n_layer * n_embd * static_cast<double>(T);
}

bool same_shape(const GPTConfig& a, const GPTConfig& b) {
    for (const auto& field : kGPTShapeFields)
        if (a.*field.member != b.*field.member) return false;
    return true;
}

namespace {
constexpr const char* kAttentionNames[] = {"materialized", "fused", "cudnn"};
}

const char* attention_impl_name(AttentionImpl impl) { return kAttentionNames[static_cast<int>(impl)]; }

std::vector<std::string> attention_impl_names() { return {std::begin(kAttentionNames), std::end(kAttentionNames)}; }

std::optional<AttentionImpl> parse_attention_impl(const std::string& name) {
    for (int i = 0; i < static_cast<int>(std::size(kAttentionNames)); ++i)
        if (name == kAttentionNames[i]) return static_cast<AttentionImpl>(i);
    return std::nullopt;
}

int GPTConfig::classifier_rows(int N, std::size_t element_bytes) const {
    if (classifier_chunk > 0) return std::min(N, classifier_chunk);
    const std::size_t fit = kAutoClassifierChunkBytes / (static_cast<std::size_t>(padded_vocab_size()) * element_bytes);
    return static_cast<int>(std::clamp<std::size_t>(fit, 1, static_cast<std::size_t>(N)));
}

std::optional<std::string> GPTConfig::validate() const {
    auto positive = [](int v) { return v > 0; };
    if (!positive(n_layer)) return "model.n_layer must be >= 1 (got " + std::to_string(n_layer) + ")";
    if (!positive(n_embd)) return "model.n_embd must be >= 1 (got " + std::to_string(n_embd) + ")";
    if (!positive(n_head)) return "model.n_head must be >= 1 (got " + std::to_string(n_head) + ")";
    if (n_embd % n_head != 0)
        return "model.n_embd (" + std::to_string(n_embd) + ") must be divisible by model.n_head (" +
               std::to_string(n_head) + ")";
    if (vocab_size < 2 || vocab_size > 65536)
        return "model.vocab_size must be in [2, 65536] (tokens are stored as uint16; got " +
               std::to_string(vocab_size) + ")";
    if (classifier_chunk < 0)
        return "model.classifier_chunk must be >= 0 tokens (0: auto; got " + std::to_string(classifier_chunk) + ")";
    if (!positive(max_seq_len)) return "model.max_seq_len must be >= 1 (got " + std::to_string(max_seq_len) + ")";
    if (!(dropout >= 0.0f && dropout < 1.0f))
        return "model.dropout must be in [0, 1) (got " + std::to_string(dropout) + ")";
    // Every size is computed in 64-bit integers: keep the parameter count (and 16 bytes per
    // parameter: weights, gradients, AdamW m and v) far from overflowing them.
    const long double params = (static_cast<long double>(padded_vocab_size()) + max_seq_len) * n_embd +
                               static_cast<long double>(n_layer) * (12.0L * n_embd * n_embd + 13.0L * n_embd) +
                               2.0L * n_embd;
    if (params > kMaxParameters) {
        char count[32];
        std::snprintf(count, sizeof count, "%.3g", static_cast<double>(params));
        return "the model (n_layer " + std::to_string(n_layer) + ", n_embd " + std::to_string(n_embd) +
               ", max_seq_len " + std::to_string(max_seq_len) + ") would have about " + count +
               " parameters, more than the 2^50 any machine can hold: use smaller dimensions";
    }
    return std::nullopt;
}

namespace {
struct NamedPreset {
    const char* name;
    GPTConfig config;
};
// GPT-2 vocab and context for the paper sizes; the tiny ones are for tests and the quickstart.
const NamedPreset kPresets[] = {
    {"gpt-117m", {12, 768, 12, 50257, 1024, 0.0f}},  {"gpt-345m", {24, 1024, 16, 50257, 1024, 0.0f}},
    {"gpt-762m", {36, 1280, 20, 50257, 1024, 0.0f}}, {"gpt-1.5b", {48, 1600, 25, 50257, 1024, 0.0f}},
    {"gpt-4.7b", {40, 3072, 24, 50257, 1024, 0.0f}}, {"gpt-small-cpu", {4, 256, 4, 50257, 256, 0.0f}},
    {"gpt-tiny", {2, 64, 4, 50257, 64, 0.0f}},       {"gpt-micro", {2, 16, 2, 97, 16, 0.0f}},
};
}  // namespace

std::optional<GPTConfig> gpt_preset(const std::string& name) {
    for (const auto& p : kPresets)
        if (name == p.name) return p.config;
    return std::nullopt;
}

std::vector<std::string> gpt_preset_names() {
    std::vector<std::string> names;
    for (const auto& p : kPresets) names.push_back(p.name);
    return names;
}

}  // namespace adacc
