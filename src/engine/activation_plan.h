// Per-(layer, tensor) activation policies (docs/design.md, 'The tape' and 'Memory modes'): every
// tensor backward needs is kept on the tape at full precision, dropped and recomputed before its
// block's backward, or kept as a compressed blob. Memory modes are named plans; the Adacc planner
// produces others.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "models/gpt_block.h"
#include "src/engine/memory_mode.h"
#include "src/engine/policy.h"

namespace adacc {

struct TensorPolicy {
    Policy policy = Policy::keep;
    Codec codec = Codec::group_int4;  // meaningful for Policy::compress (bitpack for the u8 masks)
    bool operator==(const TensorPolicy&) const = default;
};

// The table of docs/design.md, 'Codecs' (the Adacc paper's per-layer-type choice): the codec Adacc
// uses for tensor `kind` when the planner's candidates are the paper's.
Codec adacc_codec(TensorKind kind);
// Every codec that can store a block tensor of `kind`: bitpack for the dropout masks, the four
// INT4 codecs (group, outlier, channel, asymmetric) for activations.
std::vector<Codec> codecs_that_store(TensorKind kind);

// Which of those the planner may choose from (memory.codecs): the paper's codec only, the paper's
// and plain group INT4 (the default: the paper's table verified against the baseline codec on
// the tensor at hand), or every codec that can store the tensor.
enum class CodecCandidates { paper, paper_and_group, all };
inline constexpr const char* kCodecCandidateNames[] = {"paper", "paper+group", "all"};
const char* codec_candidates_name(CodecCandidates c);
// std::invalid_argument naming the choices otherwise.
CodecCandidates parse_codec_candidates(const std::string& name);
std::vector<std::string> codec_candidate_names();
std::vector<Codec> candidate_codecs(TensorKind kind, CodecCandidates candidates);

class ActivationPlan {
public:
    // Everything kept.
    ActivationPlan(const BlockGraph& block, int n_layer);
    // The plan of a fixed mode (std::logic_error for a planned one).
    static ActivationPlan for_mode(MemoryMode mode, const BlockGraph& block, int n_layer);

    const TensorPolicy& at(int layer, TensorKind kind) const { return policies_[index(layer, kind)]; }
    // Sets one tensor's policy; the block input x and layernorm statistics stay kept whatever
    // is asked (the checkpoint anchor and tiny tensors), and transients have no policy. A compress
    // policy's codec must take the tensor's element type (bitpack for the u8 masks, a float codec
    // otherwise): std::invalid_argument if not.
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
    std::vector<bool> is_mask_;    // per kind: a byte mask (bitpack only) rather than activations (INT4 codecs)
    std::vector<TensorPolicy> policies_;
};

// A 64-bit digest of every layer's policy and codec: equal plans have equal fingerprints, so the
// ranks of a job and a run's log can name the plan they run (format_digest prints it).
std::uint64_t plan_fingerprint(const ActivationPlan& plan);

}  // namespace adacc
