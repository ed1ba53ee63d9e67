#include "src/activation_plan.h"

#include <stdexcept>

namespace adacc {

const char* policy_name(Policy p) {
    switch (p) {
        case Policy::keep: return "keep";
        case Policy::recompute: return "recompute";
        case Policy::compress: return "compress";
    }
    return "?";
}

cpu::Codec adacc_codec(TensorKind kind) {
    switch (kind) {
        case TensorKind::qkv: return cpu::Codec::channel_int4;
        case TensorKind::att: return cpu::Codec::asym_int4;
        case TensorKind::att_mask:
        case TensorKind::res1_mask:
        case TensorKind::res2_mask: return cpu::Codec::bitpack;
        default: return cpu::Codec::outlier_int4;
    }
}

ActivationPlan::ActivationPlan(const BlockGraph& block, int n_layer)
    : n_layer_(n_layer), plannable_(kNumTensorKinds, false),
      policies_(static_cast<std::size_t>(n_layer) * kNumTensorKinds) {
    for (const auto& t : block.tensors())
        plannable_[static_cast<int>(t.kind)] = t.saved && !t.tiny && t.kind != TensorKind::x;
}

void ActivationPlan::set(int layer, TensorKind kind, TensorPolicy policy) {
    if (plannable_[static_cast<int>(kind)]) policies_[index(layer, kind)] = policy;
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
            const bool mask = t.dtype == DType::u8;
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
                    plan.set(l, t.kind, {Policy::compress, mask ? cpu::Codec::bitpack : cpu::Codec::group_int4});
                    break;
                case MemoryMode::adacc:
                case MemoryMode::recompute_opt:
                    throw std::logic_error("planned memory modes need the planner (plan_adacc)");
            }
        }
    return plan;
}

}  // namespace adacc
