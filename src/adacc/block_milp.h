// The block MILP (docs/design.md, 'The planner'): one block's keep / compress / recompute
// decisions as lp_solve columns and rows (literal or reduced, see block_milp.cpp), and a plan read
// back from a solution. MilpPlanner::solve_block (block_milp.cpp) solves it for every layer class
// at once; the frontier sweep (src/adacc/frontier.h) solves it under a falling byte cap.
#pragma once

#include <cstddef>
#include <vector>

#include "src/adacc/block_problem.h"
#include "src/adacc/lp_solve_model.h"

namespace adacc::milp {

// One block's model: columns, rows, and per tensor which columns encode its decision.
struct BlockModel {
    std::vector<lp::Column> cols;
    std::vector<double> time;   // per column: ms contributed when it is 1
    std::vector<double> bytes;  // per column: memory units contributed when it is 1 (may be negative)
    std::vector<lp::Row> rows;
    double const_bytes = 0;                   // memory units independent of the columns
    std::vector<int> keep_col, drop_col;      // -1: absent
    std::vector<std::vector<int>> comp_cols;  // per tensor, one column per compress option (-1: absent)
};

// Memory in units of `unit` bytes (gcd_unit: every row integral); `literal`: the model of
// docs/design.md as stated (PlannerOptions::literal_model) instead of the reduced one.
BlockModel build_block_model(const BlockProblem& problem, double unit, bool literal);
// The plan a solution x (one value per column of m) encodes.
BlockPlan decode(const BlockProblem& problem, const BlockModel& m, const double* x);
// The gcd of every tape size the problems hold (kept and compressed; 1 when there are none).
std::size_t gcd_unit(const std::vector<const BlockProblem*>& problems);

}  // namespace adacc::milp
