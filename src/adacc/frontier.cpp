// A block's Pareto frontier and its independent parts (src/adacc/frontier.h), and
// MilpPlanner::pareto_frontier.
//
// The frontier comes from a sweep of the block MILP minimising extra time under a byte cap: start
// with the cap at its largest, and after each plan (t, b) cap the bytes at b - 1; a plan of equal
// time and fewer bytes found later shows the previous one was dominated (a final filter drops
// it). The sweep ends at the smallest bytes any plan reaches. Each point is then non-dominated and
// every non-dominated (time, bytes) value is met, since a cap between two consecutive points
// admits nothing faster than the next point.
#include "src/adacc/frontier.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/adacc/block_milp.h"

namespace adacc::milp {

namespace {

// The frontier point of the smallest plan, which every budget the problem admits can hold.
FrontierPoint smallest_point(const BlockProblem& problem) {
    FrontierPoint p;
    p.decisions = smallest_plan(problem);
    const BlockCost cost = evaluate_block(problem, p.decisions);
    p.extra_ms = cost.extra_ms;
    p.bytes = cost.bytes;
    return p;
}

// The points no other point beats in both bytes and time (equal times up to rounding count as
// equal: fewer bytes wins), from the most bytes (and least time) to the fewest.
std::vector<FrontierPoint> non_dominated(std::vector<FrontierPoint> points) {
    std::sort(points.begin(), points.end(), [](const FrontierPoint& a, const FrontierPoint& b) {
        return a.bytes != b.bytes ? a.bytes < b.bytes : a.extra_ms < b.extra_ms;
    });
    std::vector<FrontierPoint> kept;
    for (auto& p : points) {
        if (!kept.empty()) {
            const double best = kept.back().extra_ms;
            if (p.extra_ms >= best - 1e-12 * std::max(1.0, std::fabs(best))) continue;
        }
        kept.push_back(std::move(p));
    }
    std::reverse(kept.begin(), kept.end());
    return kept;
}

}  // namespace

std::vector<FrontierPoint> sweep_frontier(const BlockProblem& problem, std::size_t max_bytes, const PlannerOptions& o,
                                          lp::Deadline& deadline, bool& exact, int& solves) {
    exact = true;
    std::vector<FrontierPoint> points;
    const std::size_t min_b = min_block_bytes(problem);
    if (max_bytes < min_b) return points;
    const double unit = static_cast<double>(gcd_unit({&problem}));
    const BlockModel m = build_block_model(problem, unit, o.literal_model);
    if (m.cols.empty()) {  // nothing to decide: the one plan there is
        points.push_back(smallest_point(problem));
        return points;
    }
    std::size_t cap = std::min(max_bytes, max_block_bytes(problem));
    auto rhs_for = [&](std::size_t cap_bytes) {
        return std::floor(static_cast<double>(cap_bytes) / unit) - m.const_bytes;
    };
    lp::Model model(m.cols, m.rows, m.time, m.bytes, rhs_for(cap));
    std::vector<double> x;
    while (true) {
        FrontierPoint p;
        const lp::Model::Fit fit =
            model.solve_to_fit(rhs_for(cap), unit, deadline, o, x, solves, [&](const std::vector<double>& answer) {
                p.decisions = decode(problem, m, answer.data());
                const BlockCost cost = evaluate_block(problem, p.decisions);
                p.extra_ms = cost.extra_ms;
                p.bytes = cost.bytes;
                return std::optional<std::size_t>(cost.bytes > cap ? cost.bytes - cap : 0);
            });
        // cap >= min_b, so a plan exists: without one, lp_solve stopped early or lost it numerically.
        if (!fit.fits) {
            exact = false;
            break;
        }
        if (fit.outcome == lp::Model::Outcome::suboptimal) exact = false;
        points.push_back(std::move(p));
        if (points.back().bytes <= min_b) break;
        cap = points.back().bytes - 1;
    }
    if (!exact) points.push_back(smallest_point(problem));  // keep the answer usable: it is always there
    return non_dominated(std::move(points));
}

std::vector<Part> independent_parts(const BlockProblem& problem, bool split) {
    const auto& ts = problem.tensors;
    if (!split) {
        Part whole{{}, problem};
        for (std::size_t i = 0; i < ts.size(); ++i) whole.tensors.push_back(static_cast<int>(i));
        return {whole};
    }
    std::vector<int> parent(ts.size());
    std::iota(parent.begin(), parent.end(), 0);
    auto find = [&](int i) {
        while (parent[i] != i) i = parent[i] = parent[parent[i]];
        return i;
    };
    for (std::size_t i = 0; i < ts.size(); ++i) {
        for (int p : ts[i].inputs)
            if (ts[p].transient) parent[find(static_cast<int>(i))] = find(p);
        if (ts[i].same_op_as >= 0) parent[find(static_cast<int>(i))] = find(ts[i].same_op_as);  // one re-run
    }
    std::vector<Part> parts;
    std::vector<int> part_of_root(ts.size(), -1), local(ts.size(), -1);
    for (std::size_t i = 0; i < ts.size(); ++i) {
        const int root = find(static_cast<int>(i));
        if (part_of_root[root] < 0) {
            part_of_root[root] = static_cast<int>(parts.size());
            parts.emplace_back();
        }
        Part& part = parts[part_of_root[root]];
        local[i] = static_cast<int>(part.tensors.size());
        part.tensors.push_back(static_cast<int>(i));
        PlanTensor t = ts[i];
        t.inputs.clear();
        for (int p : ts[i].inputs)
            if (find(p) == root) t.inputs.push_back(local[p]);
        if (t.same_op_as >= 0) t.same_op_as = local[t.same_op_as];
        part.problem.tensors.push_back(std::move(t));
    }
    return parts;
}

}  // namespace adacc::milp

namespace adacc {

std::vector<FrontierPoint> MilpPlanner::pareto_frontier(const BlockProblem& problem, std::size_t max_bytes,
                                                        bool* exact) const {
    validate_problem(problem);
    lp::Deadline deadline = lp::deadline_after(lp::Clock::now(), options_.time_limit_s);
    bool ok = true;
    int solves = 0;
    auto points = milp::sweep_frontier(problem, max_bytes, options_, deadline, ok, solves);
    if (exact) *exact = ok;
    return points;
}

}  // namespace adacc
