// The engine side of the Adacc planner: turns a profile and the block description into the
// abstract planning problem (src/adacc/block_problem.h), solves it with MilpPlanner under the memory
// budget, and turns the answer into an ActivationPlan the model runs. Memory counted: static
// arenas (parameters, gradients, AdamW state), the tape (per-layer slots, 64-byte aligned, codec
// upper bounds), and the workspace — whose materialisation buffers depend on the plan, so the
// solve is repeated with the workspace the previous answer needs until it is consistent.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "src/adacc/milp_planner.h"
#include "src/adacc/profiler.h"
#include "src/engine/activation_plan.h"
#include "src/engine/gpt_model.h"

namespace adacc {

// The defaults of memory.codecs (a name in kCodecCandidateNames) and memory.max_codec_error.
inline constexpr const char* kDefaultCodecCandidates = "paper+group";
inline constexpr float kDefaultMaxCodecError = 0.12f;

// What the planner may compress a tensor with (memory.codecs and memory.max_codec_error). A
// candidate codec becomes one of the tensor's compress options when its profiled relative L2
// error is at most max_error (bitpack is lossless) and no other admitted candidate is as good in
// slot bytes, time and error at once (a dominated codec is never worth choosing: ties go to the
// earlier candidate, the paper's). So a codec worse than plain group INT4 on the tensor at hand
// is chosen only when it buys memory or time, and never beyond the tolerance.
struct CodecChoice {
    CodecCandidates candidates = parse_codec_candidates(kDefaultCodecCandidates);
    double max_error = kDefaultMaxCodecError;
};

// Layers whose problems admit the same compress options form a class (the profiled layers'
// errors differ: layer 0 reads the embeddings, deeper layers the residual stream). `problems[c]`
// is class c's block problem and layer_class[l] model layer l's class.
struct LayerClasses {
    std::vector<BlockProblem> problems;
    std::vector<int> layer_class;
};

struct AdaccPlan {
    ActivationPlan plan;
    CodecParams codec_params;
    PlanResult result;              // the solver's answer (status, solve_ms, objective, ...)
    ModelMemory memory;             // every arena under this plan, as the model will allocate it
    std::vector<TensorKind> kinds;  // the block's planned tensors, in problem order
    // What was solved: one problem per layer class and each model layer's class; the decisions of
    // result.per_layer (in model layer order) index the compress options of their layer's class.
    LayerClasses classes;
    const BlockProblem& problem_of(int layer) const { return classes.problems[classes.layer_class[layer]]; }
    ComputeTarget target;  // whose arenas `memory` counts (device, activation dtype)
};

// Solves for the cheapest plan whose total memory fits `budget_bytes` at B x T, every arena sized
// as `target`'s backend allocates it. With allow_compress false this is mode recompute-opt
// (optimal rematerialisation). Throws UserError when no plan fits, stating the smallest memory
// any plan reaches.
AdaccPlan plan_adacc(const GPTConfig& config, int B, int T, const Profile& profile, std::uint64_t budget_bytes,
                     bool allow_compress, const PlannerOptions& options, const CodecChoice& codecs = {},
                     const ComputeTarget& target = {});

// Largest batch (up to max_batch) at the profile's seq for which plan_adacc finds a plan within `budget_bytes`,
// the profile (measured at any batch) rescaled to each candidate; 0 when not even batch 1 fits.
// Nothing is allocated: this is the planner's exact accounting, so it holds for models larger
// than the machine.
int largest_planned_batch(const GPTConfig& config, const Profile& profile, std::uint64_t budget_bytes,
                          bool allow_compress, const PlannerOptions& options, const CodecChoice& codecs = {},
                          const ComputeTarget& target = {}, int max_batch = 1 << 16);

// The block problem for (config, B, T) from a profile: compress options per `codecs` admitted by
// their error in model layer `layer` (-1: the largest error over layers), slot sizes at the bounds
// of codec_params_for(profile), tensors in `activation`'s element type (exposed for tests and
// `adacc plan`).
BlockProblem build_block_problem(const GPTConfig& config, int B, int T, const Profile& profile, bool allow_compress,
                                 const CodecChoice& codecs = {}, std::vector<TensorKind>* kinds = nullptr,
                                 DType activation = DType::f32, int layer = -1);

// The layer classes of (config, B, T): one block problem per distinct set of admitted compress
// options among the profiled layers (model layers beyond the slice join its deepest layer's).
LayerClasses layer_classes(const GPTConfig& config, int B, int T, const Profile& profile, bool allow_compress,
                           const CodecChoice& codecs, DType activation);

// `adacc plan`'s output: per (layer class, tensor) the decision, codec, its error and bytes;
// predicted tape bytes and added time; solver status and time; then every codec the profile
// measured on each tensor with its error and time and what the planner made of it: chosen (by some
// layer), option (admitted, not chosen), dominated, over tolerance (error > max_error) or not a
// candidate (memory.codecs). "table" or "json".
std::string format_plan(const AdaccPlan& plan, const Profile& profile, const CodecChoice& codecs,
                        const GPTConfig& config, int B, int T, std::uint64_t budget_bytes, const std::string& format);

// Codec parameters for a profile: the outlier-channel cap is twice the most outlier channels any
// tensor showed (at least 4), so the tape's bound is tight but has room for drift.
CodecParams codec_params_for(const Profile& profile, const GPTConfig& config);

}  // namespace adacc
