// What happens to one saved tensor of one layer between forward and backward: the word the
// engine (ActivationPlan, the tape) and the planner (BlockProblem, the MILP) share.
#pragma once

#include <cstdint>

namespace adacc {

enum class Policy : std::uint8_t {
    keep,       // on the tape at full size
    recompute,  // dropped; its producing op re-runs before the block's backward
    compress,   // on the tape as a codec's blob; decompressed before the block's backward
};
const char* policy_name(Policy p);  // "keep" | "recompute" | "compress"

}  // namespace adacc
