// What every MilpPlanner solve shares, whatever its granularity (src/adacc/milp_planner.cpp): the
// call's preamble (classes validated, the deadline set, the budget checked against the smallest
// plan) and its ending (totals, per-layer plans and the summary message from per_class).
// solve_block (block_milp.cpp) and solve_global (layer_counts.cpp) each start and finish with them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "src/adacc/lp_solve_model.h"
#include "src/adacc/milp_planner.h"

namespace adacc::milp {

struct PlanCall {
    lp::Clock::time_point start;
    PlannerOptions options;           // the planner's, with the granularity of this solve
    lp::Deadline deadline;            // start + options.time_limit_s
    std::size_t min_activations = 0;  // the smallest tape bytes over all layers
    std::size_t available = 0;        // budget - static - transient (when feasible)
    // feasible: budget, min_possible_bytes and per_class (one entry per class) filled in;
    // infeasible: the finished answer (status, message, solve_ms).
    bool feasible = false;
    PlanResult result;
};
// Throws std::invalid_argument on a malformed class (see validate_problem) or a negative
// layer_count.
PlanCall start_plan_call(const PlannerOptions& options, PlanGranularity granularity,
                         const std::vector<LayerClass>& classes, std::size_t static_bytes, std::size_t transient_bytes,
                         std::size_t budget_bytes);

// Fills the result's totals, per-layer decisions, solve time and summary message from its
// per_class; `note` (may be empty) ends the message.
void finish_plan_call(PlanCall& call, std::size_t static_bytes, std::size_t transient_bytes, const std::string& note);

}  // namespace adacc::milp
