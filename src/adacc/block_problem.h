// The activation-planning problem in the abstract (docs/design.md, 'The planner'): one block's
// saved tensors, each of which backward needs and which can be kept at full size, compressed, or
// dropped and recomputed by re-running its producing op. It knows nothing of the engine, so the
// planner (src/adacc/milp_planner.h) can be tested against brute-force enumeration. Its rules are
// implemented in src/adacc/block_problem.cpp.
//
// How the engine builds a BlockProblem from its BlockGraph (models/gpt_block.h):
//   * One PlanTensor per tensor the block saves (TensorInfo::saved), in forward order; tensor i's
//     `inputs` may only name earlier tensors (that is what makes it a DAG).
//   * The block input x: must_keep (it is the checkpoint every recompute chain may end at).
//     Layernorm statistics (TensorInfo::tiny): must_keep; their bytes count toward the block.
//   * `bytes` / each compress option's `bytes`: what the tape's slot takes, i.e. 64-byte aligned,
//     and for compression the codec's exact bound (codec_max_bytes, bitpack's exact size for
//     masks). A tensor has one compress option per codec that may store it (the planner picks at
//     most one; src/adacc/budget_planner.h decides which codecs are candidates).
//   * `recompute_ms`: the forward time of the op producing it; `inputs`: the saved tensors that op
//     reads. An op with several outputs (layernorm: y, mean, rstd; CUDA's fused fc GEMM: fch and
//     fch_gelu) is listed once per output, each naming its first output in `same_op_as`: one re-run
//     regenerates them all, so its time is paid once however many of them are dropped.
//   * Non-saved intermediates (transients such as attproj and fcproj) are either
//       - collapsed (the recommended form): the consumer's op is extended with the transient's
//         producer. x2 = residual1(x, attproj, res1_mask) and attproj = matmul(atty), so x2 gets
//         inputs {x, atty, res1_mask} and recompute_ms = t(residual1) + t(attproj matmul);
//       - or listed as PlanTensor with transient = true (never on the tape, re-run exactly when a
//         recompute chain passes through it): attproj {inputs {atty}, recompute_ms t(matmul)},
//         and x2 {inputs {x, attproj, res1_mask}, recompute_ms t(residual1)}.
//     Both give the same optimum (tests/test_milp_planner.cpp checks it on the GPT-2 block).
//   * A dropout mask's op has no inputs (it is regenerated from the saved RNG state): inputs {},
//     recompute_ms the time to regenerate it.
// The memory a plan reaches counts only the tape; the caller adds static memory (parameters,
// gradients, optimizer state) and the transient working set (the largest block's backward
// workspace) as constants.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "src/engine/policy.h"

namespace adacc {

// One way to store a tensor compressed. The planner only weighs bytes and time; the codec and its
// error are the caller's labels (the engine runs the codec; the caller admits options by their
// error before the solve, see src/adacc/budget_planner.h).
struct CompressOption {
    Codec codec = Codec::group_int4;
    std::size_t bytes = 0;      // the tape slot it takes
    double ms = 0;              // compress + decompress time (paid when chosen)
    double relative_error = 0;  // the codec's profiled relative L2 error on this tensor
};

struct PlanTensor {
    std::string name;
    std::size_t bytes = 0;                         // kept at full size
    std::vector<CompressOption> compress_options;  // empty: cannot be compressed
    double recompute_ms = 0;                       // forward time of its producing op (paid when that op re-runs)
    std::vector<int> inputs;                       // indices (< this one's) of the tensors its producing op reads
    bool must_keep = false;                        // block input (checkpoint anchor), tiny statistics
    bool can_recompute = true;
    // Not on the tape at all (an intermediate backward does not read, e.g. attproj): never kept or
    // compressed; its op re-runs only when a recompute chain needs it. bytes/compression ignored.
    bool transient = false;
    // The index of an earlier tensor made by the same op (its first output; -1: none, or this is
    // the first). Both have the same inputs and recompute_ms, and neither is transient.
    int same_op_as = -1;
};

struct BlockProblem {
    std::vector<PlanTensor> tensors;
};

// What a plan does with one tensor of one layer: a Policy (src/engine/policy.h) and, when it
// compresses, which of the tensor's compress options. Transient tensors always read `recompute`
// (they are never stored; whether their op actually re-runs follows from the others).
struct Decision {
    Policy policy = Policy::keep;
    int option = 0;  // compress: index into compress_options; 0 otherwise
    bool operator==(const Decision&) const = default;
};
using BlockPlan = std::vector<Decision>;  // one Decision per tensor

// Throws std::invalid_argument naming the tensor when the problem is malformed: an input index
// not earlier than the tensor, a negative or non-finite cost (compress options included), a
// transient that is must_keep or cannot be recomputed, a same_op_as that is not an earlier first
// output of an op with the same inputs and time (or that joins a transient).
void validate_problem(const BlockProblem& problem);

// The index of the first output of the op that makes tensor `index` (t): its same_op_as, or itself.
int op_first_output(const PlanTensor& t, int index);

// Whether `d` is allowed for tensor t: must_keep -> keep only; transient -> recompute only;
// compress needs `option` to name one of its compress options; recompute needs can_recompute;
// keep is always allowed otherwise (keep and recompute carry option 0).
bool decision_allowed(const PlanTensor& t, const Decision& d);
// Every decision allowed for t: keep, then each compress option, then recompute.
std::vector<Decision> allowed_decisions(const PlanTensor& t);

// The exact cost of one block under a plan, independent of any solver: the ops that re-run are
// the dropped tensors' producers plus, transitively, the producers of every dropped or transient
// input a re-running op reads (a chain stops at a kept or compressed tensor); an op re-runs once
// for all its outputs (same_op_as). Throws std::invalid_argument on a wrong-sized plan or a
// disallowed decision.
struct BlockCost {
    double extra_ms = 0;       // sum over re-run ops of recompute_ms + over compressed of their option's ms
    std::size_t bytes = 0;     // sum over kept of bytes + over compressed of their option's bytes
    std::vector<bool> reruns;  // per tensor: regenerated in backward (dropped, or a transient a chain needs)
};
BlockCost evaluate_block(const BlockProblem& problem, const BlockPlan& plan);

// The plan that puts each tensor at its smallest allowed form (ties: the decision cheaper taken
// alone): the one min_block_bytes measures, and the planner's answer when nothing is left to solve.
BlockPlan smallest_plan(const BlockProblem& problem);
// The fewest tape bytes any plan of the block reaches (each tensor at its smallest allowed form;
// always reachable, since a recompute chain can always reach the block's first tensors).
std::size_t min_block_bytes(const BlockProblem& problem);
// The most (every tensor at its largest allowed form).
std::size_t max_block_bytes(const BlockProblem& problem);

}  // namespace adacc
