// The global granularity, MilpPlanner::solve_global: each class's (or each independent part's)
// Pareto frontier (src/adacc/frontier.h), then a small integer program choosing how many layers
// take each frontier point.
//
// ---- The global form and why it is exact ----
// Layers interact only through the shared memory budget: a layer's plan changes its own extra
// time and its own tape bytes, nothing else (the recompute chains stay inside the block; the block
// input is always kept). The total is therefore sum over layers of (time_l, bytes_l) with the
// constraint sum bytes_l <= budget - static - transient. Take any optimal per-layer assignment.
// Replace each layer's plan P by a frontier plan F of its class with time(F) <= time(P) and
// bytes(F) <= bytes(P) (one exists by definition of the Pareto frontier): the budget still holds
// and the objective time_weight * time + memory_weight * bytes (both weights >= 0) does not
// increase. So some optimum uses frontier plans only. Layers of one class are interchangeable
// (equal sizes and costs), so only the number n_{c,p} of layers of class c using frontier plan p
// matters: minimise sum n_{c,p} * cost_{c,p} subject to sum_p n_{c,p} = L_c and
// sum n_{c,p} * bytes_{c,p} <= available: a small integer program instead of one binary per
// tensor per layer (which lp_solve cannot solve for 48 layers). A plan whose bytes exceed the
// available memory minus every other layer's minimum can never be used, so each sweep
// (src/adacc/frontier.cpp) starts there.
//
// Independent parts (PlannerOptions::split_independent_parts, the default). The same argument
// applies inside a block: a block's time and bytes are sums over its independent parts (tensors
// coupled through transients; see independent_parts), and any combination of part plans is a
// block plan, so a layer's plan is one frontier point per part and the integer program counts,
// per class and part, the layers using each part-frontier point. For the GPT-2 block with its
// transients collapsed every tensor is its own part (at most three points each), against ~110
// points for the block frontier at gpt-1.5b: the integer program shrinks from hundreds of
// near-equivalent columns to a few dozen. Parts with identical frontiers (ln1/ln2, the two
// residual dropout masks, equal parts of different classes) are merged: only their summed counts
// matter.
// Solving the counts program. lp_solve's branch and bound alone can spend seconds proving
// optimality among many near-equal count vectors (costs proportional to bytes make whole families
// of ties), so it is given (1) a greedy incumbent (every layer at its smallest point, then moves
// by best time saved per byte, then by best saving) and (2) upper bounds on every count from
// reduced costs against that incumbent (ip_bounds: any assignment costing no more than the
// incumbent satisfies them, so an optimum does). Should the time limit still stop it, the better
// of its best and the greedy assignment is used, flagged suboptimal, with the proven bound.
#include "src/adacc/milp_planner.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "src/adacc/frontier.h"
#include "src/adacc/lp_solve_model.h"
#include "src/adacc/milp_planner_call.h"

namespace adacc {

namespace {

// ---- The layer-count integer program's helpers ----
// Group k (a class's independent part) has `layers` layers, each taking one of its frontier
// points p at cost[p] (weighted objective) and bytes[p] (above the group's smallest point, which
// is the last). Sum of counts = layers per group; sum of counts * bytes <= spare.
struct IpGroup {
    int layers = 0;
    std::vector<double> cost;
    std::vector<std::size_t> bytes;
};
using IpCounts = std::vector<std::vector<int>>;

double counts_cost(const std::vector<IpGroup>& g, const IpCounts& n) {
    double total = 0;
    for (std::size_t k = 0; k < g.size(); ++k)
        for (std::size_t p = 0; p < g[k].cost.size(); ++p) total += n[k][p] * g[k].cost[p];
    return total;
}

// A good feasible assignment: every layer at its smallest point, then moves of layers between
// points, best cost saved per byte first (as many layers at once as fit), then best saving.
IpCounts greedy_counts(const std::vector<IpGroup>& g, std::size_t spare) {
    IpCounts n(g.size());
    std::size_t used = 0;
    for (std::size_t k = 0; k < g.size(); ++k) {
        n[k].assign(g[k].cost.size(), 0);
        if (!n[k].empty()) n[k].back() = g[k].layers;
    }
    for (int phase = 0; phase < 2; ++phase) {
        while (true) {
            double best = 0;
            std::size_t bk = 0, bp = 0, bq = 0;
            bool found = false;
            for (std::size_t k = 0; k < g.size(); ++k)
                for (std::size_t p = 0; p < g[k].cost.size(); ++p) {
                    if (n[k][p] == 0) continue;
                    for (std::size_t q = 0; q < g[k].cost.size(); ++q) {
                        const double dc = g[k].cost[q] - g[k].cost[p];
                        if (!(dc < 0)) continue;
                        const bool grows = g[k].bytes[q] > g[k].bytes[p];
                        const std::size_t db = grows ? g[k].bytes[q] - g[k].bytes[p] : 0;
                        if (used + db > spare) continue;
                        const double score = phase == 0 ? (db > 0 ? dc / static_cast<double>(db) : -HUGE_VAL) : dc;
                        if (!found || score < best) best = score, bk = k, bp = p, bq = q, found = true;
                    }
                }
            if (!found) break;
            const bool grows = g[bk].bytes[bq] > g[bk].bytes[bp];
            const std::size_t db = grows ? g[bk].bytes[bq] - g[bk].bytes[bp] : 0;
            const std::size_t freed = grows ? 0 : g[bk].bytes[bp] - g[bk].bytes[bq];
            std::size_t moves = static_cast<std::size_t>(n[bk][bp]);
            if (phase == 1) moves = 1;
            if (db > 0) moves = std::min(moves, (spare - used) / db);
            n[bk][bp] -= static_cast<int>(moves);
            n[bk][bq] += static_cast<int>(moves);
            used = used + moves * db - moves * freed;
        }
    }
    return n;
}

// Upper bounds on the counts that keep every assignment costing at most `incumbent` (so an
// optimal one, as the incumbent is feasible). For any lambda >= 0, with
// mu_k = min_p (cost_p + lambda * bytes_p) and d_p = cost_p + lambda * bytes_p - mu_k >= 0, every
// feasible n has cost(n) >= z(lambda) + sum d_p n_p, where z(lambda) = sum_k layers_k mu_k -
// lambda * spare (add lambda * (spare - sum bytes * n) >= 0 to the cost). So
// cost(n) <= incumbent implies n_p <= (incumbent - z) / d_p. lambda maximises z (the LP bound),
// found by a ternary search on the concave z.
struct IpBounds {
    std::vector<std::vector<int>> upper;  // per group, per point
    double z = 0;                         // the lower bound z(lambda)
};
IpBounds ip_bounds(const std::vector<IpGroup>& g, std::size_t spare, double incumbent) {
    const double S = static_cast<double>(spare);
    auto z_of = [&](double lambda) {
        double z = -lambda * S;
        for (const IpGroup& grp : g) {
            double mu = HUGE_VAL;
            for (std::size_t p = 0; p < grp.cost.size(); ++p)
                mu = std::min(mu, grp.cost[p] + lambda * static_cast<double>(grp.bytes[p]));
            if (!grp.cost.empty()) z += grp.layers * mu;
        }
        return z;
    };
    double hi = 0;  // beyond it, every group's smallest point is the cheapest
    for (const IpGroup& grp : g)
        for (std::size_t p = 0; p + 1 < grp.cost.size(); ++p)
            if (grp.bytes[p] > grp.bytes.back())
                hi = std::max(hi,
                              (grp.cost.back() - grp.cost[p]) / static_cast<double>(grp.bytes[p] - grp.bytes.back()));
    double lo = 0;
    hi *= 2;
    for (int it = 0; it < 200 && hi > lo; ++it) {
        const double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
        if (z_of(m1) < z_of(m2))
            lo = m1;
        else
            hi = m2;
    }
    double lambda = (lo + hi) / 2;
    if (z_of(0) >= z_of(lambda)) lambda = 0;
    const double z = z_of(lambda);
    const double slack = std::max(0.0, incumbent - z) + 1e-9 * std::max(1.0, std::fabs(incumbent));
    IpBounds out;
    out.z = z;
    auto& upper = out.upper;
    upper.resize(g.size());
    for (std::size_t k = 0; k < g.size(); ++k) {
        double mu = HUGE_VAL;
        for (std::size_t p = 0; p < g[k].cost.size(); ++p)
            mu = std::min(mu, g[k].cost[p] + lambda * static_cast<double>(g[k].bytes[p]));
        for (std::size_t p = 0; p < g[k].cost.size(); ++p) {
            const double d = g[k].cost[p] + lambda * static_cast<double>(g[k].bytes[p]) - mu;
            const double bound = d > 0 ? std::floor(slack / d) : HUGE_VAL;
            upper[k].push_back(bound >= g[k].layers ? g[k].layers : static_cast<int>(bound));
        }
    }
    return out;
}

// ---- From the classes to the counts program, and back ----
// One group per (class, independent part of its block): its frontier, up to its minimum plus all
// the spare memory (the most one layer's part can take).
struct FrontierGroup {
    std::size_t cls;
    milp::Part part;
    std::size_t min_bytes;
    std::vector<FrontierPoint> frontier;
};

// Every class's groups with their frontiers; `exact` turns false where a sweep hit the time limit.
std::vector<FrontierGroup> frontier_groups(const std::vector<LayerClass>& classes, std::size_t spare,
                                           const PlannerOptions& o, lp::Deadline& deadline, PlanResult& r,
                                           bool& exact) {
    std::vector<FrontierGroup> groups;
    for (std::size_t c = 0; c < classes.size(); ++c) {
        if (classes[c].layer_count == 0) continue;
        for (milp::Part& part : milp::independent_parts(classes[c].problem, o.split_independent_parts)) {
            FrontierGroup g{c, std::move(part), 0, {}};
            g.min_bytes = min_block_bytes(g.part.problem);
            bool ok = true;
            g.frontier = milp::sweep_frontier(g.part.problem, g.min_bytes + spare, o, deadline, ok, r.lp_solves);
            exact = exact && ok;
            r.frontier_points += static_cast<int>(g.frontier.size());
            groups.push_back(std::move(g));
        }
    }
    return groups;
}

// The integer program's groups: groups with identical frontiers (the same bytes and costs point by
// point: ln1 and ln2, two dropout masks, equal parts of two classes) merged into one, since only
// their summed counts matter; that removes symmetric solutions. members[j]: merged group j's groups.
struct MergedGroups {
    std::vector<IpGroup> ip;
    std::vector<std::vector<std::size_t>> members;
};
MergedGroups merge_identical_frontiers(const std::vector<FrontierGroup>& groups, const std::vector<LayerClass>& classes,
                                       const PlannerOptions& o) {
    MergedGroups m;
    for (std::size_t k = 0; k < groups.size(); ++k) {
        const auto& f = groups[k].frontier;
        auto same = [&](std::size_t j) {
            const auto& h = groups[m.members[j][0]].frontier;
            if (h.size() != f.size()) return false;
            for (std::size_t p = 0; p < f.size(); ++p)
                if (h[p].bytes != f[p].bytes || h[p].extra_ms != f[p].extra_ms) return false;
            return true;
        };
        std::size_t j = 0;
        while (j < m.ip.size() && !same(j)) ++j;
        if (j == m.ip.size()) {
            IpGroup g;
            for (const auto& p : f) {
                g.cost.push_back(o.time_weight * p.extra_ms + o.memory_weight * static_cast<double>(p.bytes));
                g.bytes.push_back(p.bytes - groups[k].min_bytes);
            }
            m.ip.push_back(std::move(g));
            m.members.emplace_back();
        }
        m.ip[j].layers += classes[groups[k].cls].layer_count;
        m.members[j].push_back(k);
    }
    return m;
}

// The counts program for lp_solve: one integer column per (merged group, point), bounded by
// ip_bounds, a row per group (its counts add up to its layers), memory in units of the gcd of
// every point's bytes above its group's minimum. offset[j]: group j's first column.
struct CountsProgram {
    std::vector<lp::Column> cols;
    std::vector<lp::Row> rows;
    std::vector<double> objective, memory;
    std::vector<int> offset;
    double unit = 1.0;
};
CountsProgram counts_program(const std::vector<IpGroup>& ip, const IpBounds& bounds) {
    CountsProgram prog;
    std::size_t gcd_all = 0;
    for (const IpGroup& g : ip)
        for (std::size_t b : g.bytes) gcd_all = std::gcd(gcd_all, b);
    prog.unit = gcd_all == 0 ? 1.0 : static_cast<double>(gcd_all);
    for (std::size_t j = 0; j < ip.size(); ++j) {
        prog.offset.push_back(static_cast<int>(prog.cols.size()));
        lp::Row sum{{}, {}, lp::RowType::eq, static_cast<double>(ip[j].layers)};
        for (std::size_t p = 0; p < ip[j].cost.size(); ++p) {
            sum.idx.push_back(static_cast<int>(prog.cols.size()));
            sum.val.push_back(1);
            prog.cols.push_back(lp::Column{0, static_cast<double>(bounds.upper[j][p]), true});
            prog.objective.push_back(ip[j].cost[p]);
            prog.memory.push_back(static_cast<double>(ip[j].bytes[p]) / prog.unit);
        }
        prog.rows.push_back(std::move(sum));
    }
    return prog;
}

// Whether counts are an assignment: non-negative, each group's adding up to its layers; `used`:
// their bytes, in exact integer arithmetic (lp_solve's tolerances are not).
bool counts_are_assignment(const std::vector<IpGroup>& ip, const IpCounts& n, std::size_t& used) {
    used = 0;
    for (std::size_t j = 0; j < ip.size(); ++j) {
        long total = 0;
        for (std::size_t p = 0; p < ip[j].cost.size(); ++p) {
            if (n[j][p] < 0) return false;
            total += n[j][p];
            used += static_cast<std::size_t>(n[j][p]) * ip[j].bytes[p];
        }
        if (total != ip[j].layers) return false;
    }
    return true;
}

// The counts to use: lp_solve's (each answer checked exactly, lp::Model::solve_to_fit), or the
// greedy incumbent where it found none or, stopped by the time limit, a worse one. `optimal`:
// lp_solve proved its counts optimal; `note`: what went wrong.
struct CountsSolution {
    IpCounts counts;
    bool solved = false, optimal = false;
    std::string note;
};
CountsSolution solve_counts(const std::vector<IpGroup>& ip, const CountsProgram& prog, const IpCounts& incumbent,
                            std::size_t spare, lp::Deadline& deadline, const PlannerOptions& o, int& lp_solves) {
    CountsSolution out;
    if (prog.cols.empty()) {  // no layers
        out.solved = out.optimal = true;
        return out;
    }
    const double rhs = std::floor(static_cast<double>(spare) / prog.unit);
    lp::Model model(prog.cols, prog.rows, prog.objective, prog.memory, rhs);
    std::vector<double> x;
    IpCounts n;
    const lp::Model::Fit fit =
        model.solve_to_fit(rhs, prog.unit, deadline, o, x, lp_solves, [&](const std::vector<double>& answer) {
            n.assign(ip.size(), {});
            for (std::size_t j = 0; j < ip.size(); ++j)
                for (std::size_t p = 0; p < ip[j].cost.size(); ++p)
                    n[j].push_back(static_cast<int>(std::llround(answer[prog.offset[j] + p])));
            std::size_t used = 0;
            if (!counts_are_assignment(ip, n, used)) {
                out.note = "lp_solve returned inconsistent layer counts";
                return std::optional<std::size_t>();
            }
            return std::optional<std::size_t>(used > spare ? used - spare : 0);
        });
    if (fit.outcome == lp::Model::Outcome::failed || fit.outcome == lp::Model::Outcome::infeasible)
        out.note = fit.outcome == lp::Model::Outcome::failed
                       ? "lp_solve found no layer assignment within the time limit"
                       : "lp_solve reported the layer assignment infeasible although one fits";
    if (fit.fits) {
        out.solved = true;
        out.optimal = fit.outcome == lp::Model::Outcome::optimal;
        out.counts = out.optimal || counts_cost(ip, n) <= counts_cost(ip, incumbent) ? n : incumbent;
    } else {  // the greedy assignment fits
        out.counts = incumbent;
        out.note += "; using the greedy layer assignment";
    }
    return out;
}

// Layer plans from merged counts: a merged group's points, listed in frontier order, go to its
// groups in turn; in each group, layer l of the class takes the l-th point; equal consecutive
// layer plans are merged into one ClassPlan of r.per_class.
void set_layer_plans(const std::vector<FrontierGroup>& groups, const MergedGroups& merged,
                     const std::vector<LayerClass>& classes, const IpCounts& n, PlanResult& r) {
    const auto& ip = merged.ip;
    const auto& members = merged.members;
    std::vector<std::vector<int>> point_of_layer(groups.size());  // per group, per layer
    for (std::size_t j = 0; j < ip.size(); ++j) {
        std::size_t member = 0;
        for (std::size_t p = 0; p < ip[j].cost.size(); ++p)
            for (int i = 0; i < n[j][p]; ++i) {
                while (static_cast<int>(point_of_layer[members[j][member]].size()) ==
                       classes[groups[members[j][member]].cls].layer_count)
                    ++member;
                point_of_layer[members[j][member]].push_back(static_cast<int>(p));
            }
    }
    for (std::size_t c = 0; c < classes.size(); ++c) {
        r.per_class[c].clear();
        const int L = classes[c].layer_count;
        std::vector<BlockPlan> layer(L, BlockPlan(classes[c].problem.tensors.size()));
        for (std::size_t k = 0; k < groups.size(); ++k) {
            if (groups[k].cls != c) continue;
            for (int l = 0; l < L; ++l)
                for (std::size_t t = 0; t < groups[k].part.tensors.size(); ++t)
                    layer[l][groups[k].part.tensors[t]] = groups[k].frontier[point_of_layer[k][l]].decisions[t];
        }
        for (int l = 0; l < L; ++l) {
            if (!r.per_class[c].empty() && r.per_class[c].back().decisions == layer[l]) {
                ++r.per_class[c].back().layers;
                continue;
            }
            const BlockCost cost = evaluate_block(classes[c].problem, layer[l]);
            r.per_class[c].push_back({layer[l], 1, cost.extra_ms, cost.bytes});
        }
    }
}

}  // namespace

PlanResult MilpPlanner::solve_global(const std::vector<LayerClass>& classes, std::size_t static_bytes,
                                     std::size_t transient_bytes, std::size_t budget_bytes) const {
    milp::PlanCall call =
        milp::start_plan_call(options_, PlanGranularity::global, classes, static_bytes, transient_bytes, budget_bytes);
    if (!call.feasible) return call.result;
    const PlannerOptions& o = call.options;
    lp::Deadline& deadline = call.deadline;
    const std::size_t spare = call.available - call.min_activations;  // memory above every layer's minimum
    PlanResult& r = call.result;

    bool exact = true;
    const std::vector<FrontierGroup> groups = frontier_groups(classes, spare, o, deadline, r, exact);
    const MergedGroups merged = merge_identical_frontiers(groups, classes, o);
    // Incumbent and reduced-cost bounds (see ip_bounds): lp_solve's branch and bound alone can
    // wander for seconds among the many near-equal count vectors of a 48-layer model.
    const IpCounts incumbent = greedy_counts(merged.ip, spare);
    const IpBounds bounds = ip_bounds(merged.ip, spare, counts_cost(merged.ip, incumbent));
    const CountsSolution solution =
        solve_counts(merged.ip, counts_program(merged.ip, bounds), incumbent, spare, deadline, o, r.lp_solves);
    set_layer_plans(groups, merged, classes, solution.counts, r);

    std::string note = solution.note;
    r.status = solution.solved && solution.optimal && exact ? PlanResult::optimal : PlanResult::suboptimal;
    if (!exact) note = (note.empty() ? "" : note + "; ") + "time limit reached while building the Pareto frontiers";
    if (solution.solved && !solution.optimal)
        note = (note.empty() ? "" : note + "; ") +
               (deadline.fired ? "time limit reached in the layer assignment" : "layer assignment not proven optimal");
    if (r.status == PlanResult::suboptimal && exact) r.objective_bound_ms = bounds.z;
    milp::finish_plan_call(call, static_bytes, transient_bytes, note);
    return call.result;
}

}  // namespace adacc
