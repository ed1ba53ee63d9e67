// A block's Pareto frontier (extra time vs tape bytes), found by a sweep of block MILPs under a
// falling byte cap, and the split of a block into independent parts, each with its own frontier.
// The global granularity (src/adacc/layer_counts.cpp) chooses among these points;
// MilpPlanner::pareto_frontier returns one sweep.
#pragma once

#include <cstddef>
#include <vector>

#include "src/adacc/block_problem.h"
#include "src/adacc/lp_solve_model.h"
#include "src/adacc/milp_planner.h"

namespace adacc::milp {

// The Pareto sweep for one block (see frontier.cpp): its non-dominated plans with bytes <=
// max_bytes, by decreasing bytes. Counts lp_solve runs in `solves`; `exact` false when the
// deadline or an unproven solve left it incomplete.
std::vector<FrontierPoint> sweep_frontier(const BlockProblem& problem, std::size_t max_bytes, const PlannerOptions& o,
                                          lp::Deadline& deadline, bool& exact, int& solves);

// Independent parts of a block: tensors coupled through transients (a transient's op re-runs
// when any consumer's does) belong together; nothing else couples two tensors' costs (a needed
// input re-runs exactly when it is dropped itself, whoever reads it), so the block's time and
// bytes are sums over parts and any combination of part plans is a block plan.
struct Part {
    std::vector<int> tensors;  // indices into the block, increasing
    BlockProblem problem;      // those tensors, inputs remapped (inputs outside the part dropped)
};
// The block's independent parts, in order of their first tensor; `split` false: the whole block
// as one part (PlannerOptions::split_independent_parts).
std::vector<Part> independent_parts(const BlockProblem& problem, bool split);

}  // namespace adacc::milp
