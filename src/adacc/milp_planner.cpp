// The MILP planner's front (src/adacc/milp_planner.h): its options, the dispatch by granularity,
// and the frame every solve shares (src/adacc/milp_planner_call.h). The work is in one file per
// concern:
//   src/adacc/block_problem.cpp   the block problem's rules and exact costs, no solver
//   src/adacc/lp_solve_model.cpp  the lp_solve adapter (the only file that includes lp_solve)
//   src/adacc/block_milp.cpp      the block MILP and the block granularity (solve_block)
//   src/adacc/frontier.cpp        a block's Pareto frontier by a sweep of block MILPs, and its
//                                 independent parts
//   src/adacc/layer_counts.cpp    the global granularity (solve_global): how many layers of each
//                                 class take each frontier point, and why that is exact
#include "src/adacc/milp_planner.h"

#include <cstdio>
#include <stdexcept>

#include "src/adacc/milp_planner_call.h"
#include "src/common/units.h"

namespace adacc {

const char* plan_granularity_name(PlanGranularity g) { return g == PlanGranularity::block ? "block" : "global"; }

PlanGranularity parse_plan_granularity(const std::string& name) {
    if (name == "block") return PlanGranularity::block;
    if (name == "global") return PlanGranularity::global;
    throw std::invalid_argument("planner granularity '" + name + "' is unknown; use block or global");
}

const char* plan_status_name(PlanResult::Status s) {
    switch (s) {
        case PlanResult::optimal: return "optimal";
        case PlanResult::suboptimal: return "suboptimal";
        case PlanResult::infeasible: return "infeasible";
    }
    return "?";
}

namespace {

// "22500 bytes (21.97 KiB)": exact, and readable.
std::string bytes_text(std::size_t bytes) { return std::to_string(bytes) + " bytes (" + format_bytes(bytes) + ")"; }

PlanResult infeasible_result(std::size_t static_bytes, std::size_t transient_bytes, std::size_t budget,
                             std::size_t min_activations) {
    PlanResult r;
    r.status = PlanResult::infeasible;
    r.budget_bytes = budget;
    r.min_possible_bytes = static_bytes + transient_bytes + min_activations;
    r.message = "budget " + bytes_text(budget) + " is infeasible: the smallest plan needs " +
                bytes_text(r.min_possible_bytes) + " (static " + bytes_text(static_bytes) + " + transient " +
                bytes_text(transient_bytes) + " + activations " + bytes_text(min_activations) + ")";
    return r;
}

void check_classes(const std::vector<LayerClass>& classes) {
    for (std::size_t c = 0; c < classes.size(); ++c) {
        if (classes[c].layer_count < 0)
            throw std::invalid_argument("plan problem: layer class " + std::to_string(c) +
                                        " has a negative layer_count");
        validate_problem(classes[c].problem);
    }
}
}  // namespace

namespace milp {

PlanCall start_plan_call(const PlannerOptions& options, PlanGranularity granularity,
                         const std::vector<LayerClass>& classes, std::size_t static_bytes, std::size_t transient_bytes,
                         std::size_t budget_bytes) {
    PlanCall call;
    call.start = lp::Clock::now();
    check_classes(classes);
    call.options = options;
    call.options.granularity = granularity;
    call.deadline = lp::deadline_after(call.start, call.options.time_limit_s);
    for (const auto& c : classes)
        call.min_activations += static_cast<std::size_t>(c.layer_count) * min_block_bytes(c.problem);
    if (budget_bytes < static_bytes + transient_bytes + call.min_activations) {
        call.result = infeasible_result(static_bytes, transient_bytes, budget_bytes, call.min_activations);
        call.result.solve_ms = ms_since(call.start);
        return call;
    }
    call.feasible = true;
    call.available = budget_bytes - static_bytes - transient_bytes;
    call.result.budget_bytes = budget_bytes;
    call.result.min_possible_bytes = static_bytes + transient_bytes + call.min_activations;
    call.result.per_class.resize(classes.size());
    return call;
}

void finish_plan_call(PlanCall& call, std::size_t static_bytes, std::size_t transient_bytes, const std::string& note) {
    PlanResult& r = call.result;
    const PlannerOptions& o = call.options;
    r.objective_ms = r.extra_ms = 0;
    r.activation_bytes = 0;
    r.per_layer.clear();
    int plans = 0;
    for (const auto& cls : r.per_class)
        for (const ClassPlan& p : cls) {
            if (p.layers == 0) continue;
            ++plans;
            r.extra_ms += p.layers * p.extra_ms;
            r.objective_ms += p.layers * (o.time_weight * p.extra_ms + o.memory_weight * static_cast<double>(p.bytes));
            r.activation_bytes += static_cast<std::size_t>(p.layers) * p.bytes;
            for (int l = 0; l < p.layers; ++l) r.per_layer.push_back(p.decisions);
        }
    r.total_bytes = static_bytes + transient_bytes + r.activation_bytes;
    if (r.status == PlanResult::optimal) r.objective_bound_ms = r.objective_ms;
    r.solve_ms = ms_since(call.start);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s (%s): %zu layers, %d distinct plan(s), extra %.3f ms, ",
                  plan_status_name(r.status), plan_granularity_name(o.granularity), r.per_layer.size(), plans,
                  r.extra_ms);
    r.message = buf + bytes_text(r.total_bytes) + " of budget " + bytes_text(r.budget_bytes);
    if (r.status == PlanResult::suboptimal && r.objective_bound_ms > 0) {
        std::snprintf(buf, sizeof buf, "; objective %.6g, proven bound %.6g", r.objective_ms, r.objective_bound_ms);
        r.message += buf;
    }
    if (!note.empty()) r.message += "; " + note;
}

}  // namespace milp

MilpPlanner::MilpPlanner(PlannerOptions options) : options_(options) {
    if (!(options_.time_weight >= 0) || !(options_.memory_weight >= 0))
        throw std::invalid_argument("planner: time_weight and memory_weight must be >= 0");
    if (!(options_.time_limit_s > 0)) throw std::invalid_argument("planner: time_limit_s must be > 0");
    if (!(options_.mip_gap_rel >= 0) || !(options_.mip_gap_abs >= 0))
        throw std::invalid_argument("planner: MIP gaps must be >= 0");
}

PlanResult MilpPlanner::solve(const std::vector<LayerClass>& classes, std::size_t static_bytes,
                              std::size_t transient_bytes, std::size_t budget_bytes) const {
    return options_.granularity == PlanGranularity::block
               ? solve_block(classes, static_bytes, transient_bytes, budget_bytes)
               : solve_global(classes, static_bytes, transient_bytes, budget_bytes);
}

PlanResult MilpPlanner::solve_block(const BlockProblem& problem, int n_layers, std::size_t static_bytes,
                                    std::size_t transient_bytes, std::size_t budget_bytes) const {
    return solve_block(std::vector<LayerClass>{{problem, n_layers}}, static_bytes, transient_bytes, budget_bytes);
}

}  // namespace adacc
