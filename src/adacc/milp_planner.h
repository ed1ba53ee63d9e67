// The Adacc planner (docs/design.md, 'The planner'): the cheapest keep / compress / recompute plan
// whose memory fits a budget, as a mixed-integer program solved with lp_solve. It works on the
// abstract problem of src/adacc/block_problem.h (no engine types), so tests compare it with
// brute-force enumeration. milp_planner.cpp lists the files that implement it, one per concern.
//
// Two granularities:
//   block   one plan per layer class, applied to all its layers (the Adacc paper's approach; with a
//           single class: one block solved, applied to every layer). One small MILP.
//   global  layers may differ: for each class, the Pareto frontier of block plans (extra time vs
//           bytes) is computed by a sweep of block MILPs, then a small integer program chooses how
//           many layers of each class use each frontier plan. Exact (see layer_counts.cpp); avoids
//           the one-binary-per-tensor-per-layer model that lp_solve cannot solve for 48 layers.
//           By default the frontier is taken per independent part of the block (tensors coupled
//           through transients; every tensor of the collapsed GPT-2 block), which is just as exact
//           and keeps the integer program small (split_independent_parts).
//
// Memory: static + transient + sum over layers of the block's tape bytes <= budget.
// Objective (what objective_ms reports): sum over layers of
//   time_weight * extra_ms(layer plan) + memory_weight * bytes(layer plan)
// (memory_weight in ms per byte; with the defaults it is the added backward time per step in ms).
#pragma once

#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "src/adacc/block_problem.h"

namespace adacc {

enum class PlanGranularity { block, global };
const char* plan_granularity_name(PlanGranularity g);
// "block" | "global"; std::invalid_argument otherwise.
PlanGranularity parse_plan_granularity(const std::string& name);

struct PlannerOptions {
    PlanGranularity granularity = PlanGranularity::block;
    double time_limit_s = 2.0;   // whole call (every lp_solve run in it together)
    double mip_gap_rel = 1e-9;   // lp_solve's relative and absolute MIP gaps
    double mip_gap_abs = 1e-9;   // (ms of objective)
    double time_weight = 1.0;    // >= 0
    double memory_weight = 0.0;  // >= 0, ms per byte
    // Build the model of docs/design.md, 'The planner' literally (keep/comp/drop binaries summing
    // to 1, run binaries with run >= drop and the chain rows for every input) instead of the
    // equivalent reduced one (see block_milp.cpp). Same optimum, more variables; for
    // cross-checking.
    bool literal_model = false;
    // Global form: split each block into independent parts (tensors coupled only through
    // transients belong together) and build one frontier per part instead of one per block. Exact
    // either way (see layer_counts.cpp); the parts' frontiers are far smaller. False: the
    // block-level frontier (docs/design.md, 'The planner'), for cross-checking.
    bool split_independent_parts = true;
};

// Layers whose tensors have equal sizes and costs form a class; `problem` describes one of them.
struct LayerClass {
    BlockProblem problem;
    int layer_count = 0;
};

// One point of a class's Pareto frontier: a block plan no other plan beats in both extra time and
// bytes. Frontiers are listed by decreasing bytes (increasing time).
struct FrontierPoint {
    BlockPlan decisions;
    double extra_ms = 0;
    std::size_t bytes = 0;
};

// How many layers of a class use one block plan.
struct ClassPlan {
    BlockPlan decisions;
    int layers = 0;
    double extra_ms = 0;    // per layer
    std::size_t bytes = 0;  // per layer
};

struct PlanResult {
    enum Status { optimal, suboptimal, infeasible };
    Status status = infeasible;
    double objective_ms = 0;           // the weighted objective over all layers
    double objective_bound_ms = 0;     // proven lower bound on the optimum (= objective_ms when optimal;
                                       // 0 when unknown)
    double extra_ms = 0;               // added time over all layers (recompute + compress/decompress)
    std::size_t activation_bytes = 0;  // tape bytes over all layers
    std::size_t total_bytes = 0;       // static + transient + activation_bytes
    std::size_t budget_bytes = 0;
    std::size_t min_possible_bytes = 0;  // static + transient + the smallest activations any plan reaches
    double solve_ms = 0;                 // wall time of the whole call
    // Per layer, per tensor. Layers are numbered class by class: class 0's layer_count layers
    // first, then class 1's, and so on (within a class, layers using the same plan are adjacent).
    std::vector<BlockPlan> per_layer;
    // Per class, the plans its layers use (block granularity: exactly one).
    std::vector<std::vector<ClassPlan>> per_class;
    int frontier_points = 0;  // global: frontier points over all classes
    int lp_solves = 0;        // lp_solve runs made
    // infeasible: "budget B is infeasible: the smallest plan needs Y bytes (...)"; suboptimal:
    // why (time limit, gap); optimal: a one-line summary.
    std::string message;
};
const char* plan_status_name(PlanResult::Status s);

class MilpPlanner {
public:
    // Throws std::invalid_argument on negative weights, a non-positive time limit or negative gaps.
    explicit MilpPlanner(PlannerOptions options = {});
    const PlannerOptions& options() const { return options_; }

    // By options().granularity.
    PlanResult solve(const std::vector<LayerClass>& classes, std::size_t static_bytes, std::size_t transient_bytes,
                     std::size_t budget_bytes) const;
    // One decision per tensor, applied to all n_layers layers.
    PlanResult solve_block(const BlockProblem& problem, int n_layers, std::size_t static_bytes,
                           std::size_t transient_bytes, std::size_t budget_bytes) const;
    // One plan per class, applied to all of the class's layers (one joint MILP).
    PlanResult solve_block(const std::vector<LayerClass>& classes, std::size_t static_bytes,
                           std::size_t transient_bytes, std::size_t budget_bytes) const;
    // Per-layer plans from each class's frontier; layers may mix plans.
    PlanResult solve_global(const std::vector<LayerClass>& classes, std::size_t static_bytes,
                            std::size_t transient_bytes, std::size_t budget_bytes) const;

    // The exact Pareto frontier (extra time vs bytes) of the block's plans with bytes <= max_bytes,
    // by decreasing bytes. `exact` (when given) is set false when the time limit cut the sweep
    // short or a solve was not proven optimal; the points are then valid plans, not necessarily
    // all non-dominated ones.
    std::vector<FrontierPoint> pareto_frontier(const BlockProblem& problem,
                                               std::size_t max_bytes = std::numeric_limits<std::size_t>::max(),
                                               bool* exact = nullptr) const;

private:
    PlannerOptions options_;
};

}  // namespace adacc
