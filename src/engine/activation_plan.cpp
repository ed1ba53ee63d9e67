#include "src/engine/activation_plan.h"

#include <iterator>
#include <stdexcept>
#include <string>

#include "src/common/checksum.h"

namespace adacc {

const char* policy_name(Policy p) {
    switch (p) {
        case Policy::keep: return "keep";
        case Policy::recompute: return "recompute";
        case Policy::compress: return "compress";
    }
    return "?";
}

Codec adacc_codec(TensorKind kind) {
    switch (kind) {
        case TensorKind::qkv: return Codec::channel_int4;
        case TensorKind::att: return Codec::asym_int4;
        case TensorKind::att_mask:
        case TensorKind::res1_mask:
        case TensorKind::res2_mask: return Codec::bitpack;
        default: return Codec::outlier_int4;
    }
}

std::vector<Codec> codecs_that_store(TensorKind kind) {
    if (adacc_codec(kind) == Codec::bitpack) return {Codec::bitpack};
    return {Codec::group_int4, Codec::outlier_int4, Codec::channel_int4, Codec::asym_int4};
}

const char* codec_candidates_name(CodecCandidates c) { return kCodecCandidateNames[static_cast<int>(c)]; }

std::vector<std::string> codec_candidate_names() {
    return {std::begin(kCodecCandidateNames), std::end(kCodecCandidateNames)};
}

CodecCandidates parse_codec_candidates(const std::string& name) {
    for (int i = 0; i < static_cast<int>(std::size(kCodecCandidateNames)); ++i)
        if (name == kCodecCandidateNames[i]) return static_cast<CodecCandidates>(i);
    throw std::invalid_argument("codec candidates '" + name + "' are unknown; use paper, paper+group or all");
}

std::vector<Codec> candidate_codecs(TensorKind kind, CodecCandidates candidates) {
    const Codec paper = adacc_codec(kind);
    switch (candidates) {
        case CodecCandidates::paper: return {paper};
        case CodecCandidates::paper_and_group:
            if (paper == Codec::bitpack || paper == Codec::group_int4) return {paper};
            return {paper, Codec::group_int4};
        case CodecCandidates::all: return codecs_that_store(kind);
    }
    return {paper};
}

ActivationPlan::ActivationPlan(const BlockGraph& block, int n_layer)
    : n_layer_(n_layer),
      plannable_(kNumTensorKinds, false),
      is_mask_(kNumTensorKinds, false),
      policies_(static_cast<std::size_t>(n_layer) * kNumTensorKinds) {
    for (const auto& t : block.tensors()) {
        plannable_[static_cast<int>(t.kind)] = t.saved && !t.tiny && t.kind != TensorKind::x;
        is_mask_[static_cast<int>(t.kind)] = t.dtype == DType::u8;
    }
}

void ActivationPlan::set(int layer, TensorKind kind, TensorPolicy policy) {
    if (!plannable_[static_cast<int>(kind)]) return;
    if (policy.policy == Policy::compress && (policy.codec == Codec::bitpack) != is_mask_[static_cast<int>(kind)])
        throw std::invalid_argument(std::string("codec ") + codec_name(policy.codec) + " cannot compress tensor " +
                                    tensor_kind_name(kind) +
                                    " (masks take bitpack, fp32 and bf16 tensors an INT4 codec)");
    policies_[index(layer, kind)] = policy;
}

bool ActivationPlan::materialized_anywhere(TensorKind kind) const {
    for (int l = 0; l < n_layer_; ++l)
        if (at(l, kind).policy != Policy::keep) return true;
    return false;
}

ActivationPlan ActivationPlan::for_mode(MemoryMode mode, const BlockGraph& block, int n_layer) {
    ActivationPlan plan(block, n_layer);
    for (int l = 0; l < n_layer; ++l)
        for (const auto& t : block.tensors()) {
            switch (mode) {
                case MemoryMode::none: break;
                case MemoryMode::full: plan.set(l, t.kind, {Policy::recompute}); break;
                case MemoryMode::selective:
                    // Megatron's selective recomputation: the attention core (probabilities and
                    // their dropout mask) is recomputed, everything else kept.
                    if (t.kind == TensorKind::att || t.kind == TensorKind::att_mask)
                        plan.set(l, t.kind, {Policy::recompute});
                    break;
                case MemoryMode::quant:
                    // group_int4 for every fp32 tensor; the byte masks can only be bit-packed.
                    plan.set(l, t.kind, {Policy::compress, t.dtype == DType::u8 ? Codec::bitpack : Codec::group_int4});
                    break;
                case MemoryMode::adacc:
                case MemoryMode::recompute_opt:
                    throw std::logic_error("planned memory modes need the planner (plan_adacc)");
            }
        }
    return plan;
}

std::uint64_t plan_fingerprint(const ActivationPlan& plan) {
    Fnv64 digest;
    for (int l = 0; l < plan.n_layer(); ++l)
        for (int k = 0; k < kNumTensorKinds; ++k) {
            const TensorPolicy& p = plan.at(l, static_cast<TensorKind>(k));
            const std::uint64_t word = static_cast<std::uint64_t>(p.policy) << 32 | static_cast<std::uint64_t>(p.codec);
            digest.update(&word, sizeof word);
        }
    return digest.value();
}

}  // namespace adacc
