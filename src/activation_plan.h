// Per-(layer, tensor) activation policies (DESIGN §4-§5): every tensor backward needs is kept
// on the tape at full precision, dropped and recomputed before its block's backward, or kept
// as a compressed blob. Memory modes are named plans; the Adacc planner produces others.
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/codecs.h"
#include "models/gpt_block.h"
#include "src/memory_mode.h"

namespace adacc {

enum class Policy : std::uint8_t { keep, recompute, compress };
const char* policy_name(Policy p);

struct TensorPolicy {
    Policy policy = Policy::keep;
    cpu::Codec codec = cpu::Codec::group_int4;  // meaningful for Policy::compress
    bool operator==(const TensorPolicy&) const = default;
};

// DESIGN §3's table: the codec Adacc uses when it compresses tensor `kind`.
cpu::Codec adacc_codec(TensorKind kind);

class ActivationPlan {
public:
    // Everything kept.
    ActivationPlan(const BlockGraph& block, int n_layer);
    // The plan of a fixed mode (std::logic_error for a planned one).
    static ActivationPlan for_mode(MemoryMode mode, const BlockGraph& block, int n_layer);

    const TensorPolicy& at(int layer, TensorKind kind) const { return policies_[index(layer, kind)]; }
    // Sets one tensor's policy; the block input x and layernorm statistics stay kept whatever
    // is asked (the checkpoint anchor and tiny tensors), and transients have no policy.
    void set(int layer, TensorKind kind, TensorPolicy policy);
    int n_layer() const { return n_layer_; }
    // True when some layer does not keep `kind` (it then needs a workspace buffer).
    bool materialized_anywhere(TensorKind kind) const;
    bool operator==(const ActivationPlan&) const = default;

private:
    std::size_t index(int layer, TensorKind kind) const {
        return static_cast<std::size_t>(layer) * kNumTensorKinds + static_cast<std::size_t>(kind);
    }
    int n_layer_;
    std::vector<bool> plannable_;  // per kind: saved, not x, not tiny
    std::vector<TensorPolicy> policies_;
};

}  // namespace adacc
