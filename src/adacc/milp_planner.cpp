// The MILP planner (docs/design.md, 'The planner') and the block-problem helpers of
// src/adacc/block_problem.h.
//
// ---- The block model ----
// docs/design.md, 'The planner' states it with binaries keep_i + comp_i + drop_i = 1 and run_i per
// tensor, run_i >= drop_i, and run_p >= run_i + drop_p - 1 for every input p of i. A tensor may be
// compressible by several codecs (its compress options): comp_i is then one binary per option,
// comp_io, and keep_i + sum_o comp_io + drop_i = 1 (one binary per (tensor, option)). A compressed
// tensor stops a recompute chain whatever its codec, so the options differ only in their own bytes
// and time. PlannerOptions::literal_model builds exactly that. The default builds an equivalent,
// smaller model:
//   * keep_i = 1 - sum_o comp_io - drop_i is eliminated (sum_o comp_io + drop_i <= 1), and
//     variables exist only for the choices a tensor allows (must_keep tensors have none) and
//     worth making: a compress option that another option of the tensor matches or beats in both
//     bytes and time gets no column (swapping it for that one never costs anything).
//   * For a tensor backward reads, run_i = drop_i at any optimum: a dropped tensor must be
//     regenerated (run_i >= drop_i), and a kept or compressed one never needs its op re-run,
//     because the chain rows only force run_p when drop_p = 1 (then run_p >= drop_p = 1 holds
//     already). So run_i is replaced by drop_i, and the chain rows through such inputs vanish
//     (run_p >= run_i + drop_p - 1 reads drop_p >= run_i + drop_p - 1, i.e. run_i <= 1).
//   * A transient tensor has drop = 1 fixed and a binary run_t; its chain rows remain:
//     run_t >= run_i for every consumer i (run_i being drop_i or another transient's run).
//     (run_t could be continuous, the smallest feasible value given the other binaries being the
//     0/1 chain closure; it is kept integer because lp_solve's "minimum objective step" logic,
//     see Model::solve, misbehaved worst on such mixed models.)
// Memory is counted in units of the gcd of all sizes, so every row is integral; the solution
// found is re-evaluated exactly (evaluate_block) and, should lp_solve's tolerances have let the
// memory row slip by a unit, the row is tightened and the model solved again.
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
// available memory minus every other layer's minimum can never be used, so each sweep starts
// there.
// The frontier comes from a sweep of the block MILP minimising extra time under a byte cap: start
// with the cap at its largest, and after each plan (t, b) cap the bytes at b - 1; a plan of equal
// time and fewer bytes found later shows the previous one was dominated (a final filter drops
// it). The sweep ends at the smallest bytes any plan reaches. Each point is then non-dominated and
// every non-dominated (time, bytes) value is met, since a cap between two consecutive points
// admits nothing faster than the next point.
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
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <stdexcept>

#include <lpsolve/lp_lib.h>

#include "src/common/units.h"

namespace adacc {

// ---------------------------------------------------------------- block_problem.h

void validate_problem(const BlockProblem& problem) {
    const auto& ts = problem.tensors;
    for (std::size_t i = 0; i < ts.size(); ++i) {
        const PlanTensor& t = ts[i];
        auto fail = [&](const std::string& why) {
            throw std::invalid_argument("plan problem: tensor " + std::to_string(i) + " '" + t.name + "' " + why);
        };
        for (int p : t.inputs)
            if (p < 0 || static_cast<std::size_t>(p) >= i)
                fail("has input " + std::to_string(p) + "; inputs must be earlier tensors (indices 0.." +
                     std::to_string(static_cast<long>(i) - 1) + ")");
        if (!(t.recompute_ms >= 0) || !std::isfinite(t.recompute_ms)) fail("has a negative or non-finite recompute_ms");
        for (const CompressOption& c : t.compress_options)
            if (!(c.ms >= 0) || !std::isfinite(c.ms))
                fail(std::string("has a negative or non-finite time for compress option ") + codec_name(c.codec));
        if (t.transient && t.must_keep) fail("is transient and must_keep");
        if (t.transient && !t.can_recompute) fail("is transient but cannot be recomputed");
    }
}

bool decision_allowed(const PlanTensor& t, const Decision& d) {
    if (d.policy != Policy::compress && d.option != 0) return false;
    if (t.transient) return d.policy == Policy::recompute;
    if (t.must_keep) return d.policy == Policy::keep;
    switch (d.policy) {
        case Policy::keep: return true;
        case Policy::compress: return d.option >= 0 && static_cast<std::size_t>(d.option) < t.compress_options.size();
        case Policy::recompute: return t.can_recompute;
    }
    return false;
}

std::vector<Decision> allowed_decisions(const PlanTensor& t) {
    std::vector<Decision> out;
    std::vector<Decision> all{{Policy::keep, 0}};
    for (std::size_t o = 0; o < t.compress_options.size(); ++o) all.push_back({Policy::compress, static_cast<int>(o)});
    all.push_back({Policy::recompute, 0});
    for (const Decision& d : all)
        if (decision_allowed(t, d)) out.push_back(d);
    return out;
}

BlockCost evaluate_block(const BlockProblem& problem, const BlockPlan& plan) {
    const auto& ts = problem.tensors;
    if (plan.size() != ts.size())
        throw std::invalid_argument("evaluate_block: plan has " + std::to_string(plan.size()) + " decisions for " +
                                    std::to_string(ts.size()) + " tensors");
    BlockCost cost;
    cost.reruns.assign(ts.size(), false);
    for (std::size_t i = 0; i < ts.size(); ++i) {
        if (!decision_allowed(ts[i], plan[i]))
            throw std::invalid_argument("evaluate_block: tensor '" + ts[i].name + "' cannot be " +
                                        policy_name(plan[i].policy) + " (option " + std::to_string(plan[i].option) +
                                        ")");
        if (plan[i].policy == Policy::recompute && !ts[i].transient) cost.reruns[i] = true;
    }
    // Inputs are earlier tensors, so one backward sweep closes the chains.
    for (std::size_t i = ts.size(); i-- > 0;)
        if (cost.reruns[i])
            for (int p : ts[i].inputs)
                if (plan[p].policy == Policy::recompute) cost.reruns[p] = true;
    for (std::size_t i = 0; i < ts.size(); ++i) {
        if (cost.reruns[i]) cost.extra_ms += ts[i].recompute_ms;
        if (plan[i].policy == Policy::compress) {
            const CompressOption& c = ts[i].compress_options[plan[i].option];
            cost.extra_ms += c.ms;
            cost.bytes += c.bytes;
        }
        if (plan[i].policy == Policy::keep) cost.bytes += ts[i].bytes;
    }
    return cost;
}

namespace {

// The bytes and time one decision costs taken alone (a recompute's chain not counted).
std::size_t decision_bytes(const PlanTensor& t, const Decision& d) {
    if (d.policy == Policy::keep) return t.bytes;
    if (d.policy == Policy::compress) return t.compress_options[d.option].bytes;
    return 0;
}
double decision_ms(const PlanTensor& t, const Decision& d) {
    if (d.policy == Policy::compress) return t.compress_options[d.option].ms;
    return d.policy == Policy::recompute ? t.recompute_ms : 0.0;
}

// The smallest-bytes decision of one tensor (ties: the cheaper one taken alone).
Decision smallest_decision(const PlanTensor& t) {
    const std::vector<Decision> allowed = allowed_decisions(t);
    Decision best = allowed.front();
    for (const Decision& d : allowed) {
        const std::size_t b = decision_bytes(t, d), best_b = decision_bytes(t, best);
        if (b < best_b || (b == best_b && decision_ms(t, d) < decision_ms(t, best))) best = d;
    }
    return best;
}

BlockPlan smallest_plan(const BlockProblem& problem) {
    BlockPlan plan;
    for (const auto& t : problem.tensors) plan.push_back(smallest_decision(t));
    return plan;
}

}  // namespace

std::size_t min_block_bytes(const BlockProblem& problem) { return evaluate_block(problem, smallest_plan(problem)).bytes; }

std::size_t max_block_bytes(const BlockProblem& problem) {
    std::size_t total = 0;
    for (const auto& t : problem.tensors) {
        if (t.transient) continue;
        std::size_t b = 0;
        for (const Decision& d : allowed_decisions(t)) b = std::max(b, decision_bytes(t, d));
        total += b;
    }
    return total;
}

// ---------------------------------------------------------------- milp_planner.h

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

using Clock = std::chrono::steady_clock;

std::string fmt_bytes(std::size_t b) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%zu bytes (%.3f GiB)", b, static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
    return buf;
}

// The whole call's time limit; lp_solve polls it through its abort callback.
struct Deadline {
    Clock::time_point end;
    bool fired = false;
    double remaining_s() const { return std::chrono::duration<double>(end - Clock::now()).count(); }
};

int __WINAPI abort_if_late(lprec*, void* handle) {
    auto* d = static_cast<Deadline*>(handle);
    if (Clock::now() >= d->end) d->fired = true;
    return d->fired ? TRUE : FALSE;
}

// RAII for an lp_solve model, quiet.
class Lp {
public:
    explicit Lp(int columns) : lp_(make_lp(0, columns)) {
        if (!lp_) throw std::runtime_error("lp_solve: make_lp failed");
        set_verbose(lp_, NEUTRAL);
        char none[] = "";
        set_outputfile(lp_, none);
    }
    ~Lp() { delete_lp(lp_); }
    Lp(const Lp&) = delete;
    Lp& operator=(const Lp&) = delete;
    lprec* get() const { return lp_; }

private:
    lprec* lp_;
};

struct Col {
    double lb = 0, ub = 1;
    bool integer = true;
    double time = 0;   // ms contributed when the column is 1
    double bytes = 0;  // memory units contributed when the column is 1 (may be negative)
};
struct Row {
    std::vector<int> idx;  // 0-based columns
    std::vector<double> val;
    int type;  // LE, GE, EQ
    double rhs;
};

// One block's model: columns, rows, and per tensor which columns encode its decision.
struct BlockModel {
    std::vector<Col> cols;
    std::vector<Row> rows;
    double const_bytes = 0;  // memory units independent of the columns
    std::vector<int> keep_col, drop_col;     // -1: absent
    std::vector<std::vector<int>> comp_cols;  // per tensor, one column per compress option (-1: absent)
};

int add_col(BlockModel& m, Col c) {
    m.cols.push_back(c);
    return static_cast<int>(m.cols.size()) - 1;
}

// Whether another of the options matches or beats option o in both bytes and time (ties: the
// earlier one wins). Such an option never improves a plan, so the reduced model gives it no column.
bool dominated_option(const std::vector<CompressOption>& options, std::size_t o) {
    for (std::size_t p = 0; p < options.size(); ++p) {
        if (p == o) continue;
        const bool as_good = options[p].bytes <= options[o].bytes && options[p].ms <= options[o].ms;
        const bool equal = options[p].bytes == options[o].bytes && options[p].ms == options[o].ms;
        if (as_good && (!equal || p < o)) return true;
    }
    return false;
}

BlockModel build_block_model(const BlockProblem& problem, double unit, bool literal) {
    const auto& ts = problem.tensors;
    const std::size_t n = ts.size();
    BlockModel m;
    m.keep_col.assign(n, -1);
    m.drop_col.assign(n, -1);
    m.comp_cols.resize(n);
    if (literal) {
        std::vector<int> run(n);
        for (std::size_t i = 0; i < n; ++i) {
            const PlanTensor& t = ts[i];
            const double b = t.transient ? 0 : static_cast<double>(t.bytes) / unit;
            Col keep{0, 1, true, 0, b}, drop{0, 1, true, 0, 0};
            if (t.must_keep) keep.lb = 1;
            if (t.transient) keep.ub = 0, drop.lb = 1;
            if (!decision_allowed(t, {Policy::recompute, 0})) drop.ub = 0;
            m.keep_col[i] = add_col(m, keep);
            Row one_of{{m.keep_col[i]}, {1}, EQ, 1};  // keep + sum of comp + drop = 1
            for (std::size_t o = 0; o < t.compress_options.size(); ++o) {
                const CompressOption& c = t.compress_options[o];
                Col comp{0, 1, true, c.ms, t.transient ? 0 : static_cast<double>(c.bytes) / unit};
                if (!decision_allowed(t, {Policy::compress, static_cast<int>(o)})) comp.ub = 0;
                m.comp_cols[i].push_back(add_col(m, comp));
                one_of.idx.push_back(m.comp_cols[i].back());
                one_of.val.push_back(1);
            }
            m.drop_col[i] = add_col(m, drop);
            one_of.idx.push_back(m.drop_col[i]);
            one_of.val.push_back(1);
            run[i] = add_col(m, Col{0, 1, true, t.recompute_ms, 0});
            m.rows.push_back(std::move(one_of));
            if (!t.transient)  // a transient's op runs only when a chain needs it
                m.rows.push_back({{run[i], m.drop_col[i]}, {1, -1}, GE, 0});  // run >= drop
            for (int p : t.inputs)  // run_p >= run_i + drop_p - 1
                m.rows.push_back({{run[p], run[i], m.drop_col[p]}, {1, -1, -1}, GE, -1});
        }
        return m;
    }
    // Reduced model (see the top of this file). run[i]: the column that is 1 when i's op re-runs.
    std::vector<int> run(n, -1);
    for (std::size_t i = 0; i < n; ++i) {
        const PlanTensor& t = ts[i];
        if (t.transient) {
            run[i] = add_col(m, Col{0, 1, true, t.recompute_ms, 0});
            continue;
        }
        const double b = static_cast<double>(t.bytes) / unit;
        m.const_bytes += b;  // kept unless a column below says otherwise
        Row at_most_one{{}, {}, LE, 1};  // sum of comp + drop <= 1
        for (std::size_t o = 0; o < t.compress_options.size(); ++o) {
            if (!decision_allowed(t, {Policy::compress, static_cast<int>(o)}) ||
                dominated_option(t.compress_options, o)) {
                m.comp_cols[i].push_back(-1);
                continue;
            }
            const CompressOption& c = t.compress_options[o];
            m.comp_cols[i].push_back(add_col(m, Col{0, 1, true, c.ms, static_cast<double>(c.bytes) / unit - b}));
            at_most_one.idx.push_back(m.comp_cols[i].back());
        }
        if (decision_allowed(t, {Policy::recompute, 0})) {
            run[i] = m.drop_col[i] = add_col(m, Col{0, 1, true, t.recompute_ms, -b});
            at_most_one.idx.push_back(m.drop_col[i]);
        }
        at_most_one.val.assign(at_most_one.idx.size(), 1);
        if (at_most_one.idx.size() > 1) m.rows.push_back(std::move(at_most_one));
    }
    for (std::size_t i = 0; i < n; ++i) {
        if (run[i] < 0) continue;
        for (int p : ts[i].inputs)
            if (ts[p].transient) m.rows.push_back({{run[p], run[i]}, {1, -1}, GE, 0});  // run_p >= run_i
    }
    return m;
}

BlockPlan decode(const BlockProblem& problem, const BlockModel& m, const double* x) {
    BlockPlan plan;
    for (std::size_t i = 0; i < problem.tensors.size(); ++i) {
        const PlanTensor& t = problem.tensors[i];
        Decision d{Policy::keep, 0};
        if (t.transient)
            d.policy = Policy::recompute;
        else if (t.must_keep)
            d.policy = Policy::keep;
        else if (m.drop_col[i] >= 0 && x[m.drop_col[i]] > 0.5)
            d.policy = Policy::recompute;
        else
            for (std::size_t o = 0; o < m.comp_cols[i].size(); ++o)
                if (m.comp_cols[i][o] >= 0 && x[m.comp_cols[i][o]] > 0.5) d = {Policy::compress, static_cast<int>(o)};
        plan.push_back(d);
    }
    return plan;
}

std::size_t gcd_unit(const std::vector<const BlockProblem*>& problems) {
    std::size_t g = 0;
    for (const BlockProblem* p : problems)
        for (const auto& t : p->tensors) {
            if (t.transient) continue;
            g = std::gcd(g, t.bytes);
            for (const CompressOption& c : t.compress_options) g = std::gcd(g, c.bytes);
        }
    return g == 0 ? 1 : g;
}

// Everything one lp_solve model needs: columns (with objective and memory coefficients), rows,
// and the memory row (always the last one added, number `memory_row` in lp_solve's 1-based rows).
class Model {
public:
    Model(const std::vector<Col>& cols, const std::vector<Row>& rows, const std::vector<double>& objective,
          const std::vector<double>& memory, double memory_rhs)
        : lp_(static_cast<int>(cols.size())), ncols_(static_cast<int>(cols.size())) {
        lprec* lp = lp_.get();
        std::vector<int> colno;
        std::vector<double> val;
        for (int j = 0; j < ncols_; ++j) {
            set_bounds(lp, j + 1, cols[j].lb, cols[j].ub);
            if (cols[j].integer) set_int(lp, j + 1, TRUE);
        }
        for (int j = 0; j < ncols_; ++j)
            if (objective[j] != 0) colno.push_back(j + 1), val.push_back(objective[j]);
        set_obj_fnex(lp, static_cast<int>(colno.size()), val.data(), colno.data());
        set_minim(lp);
        set_add_rowmode(lp, TRUE);
        for (const Row& r : rows) {
            colno.clear();
            for (int j : r.idx) colno.push_back(j + 1);
            std::vector<double> v = r.val;
            add_constraintex(lp, static_cast<int>(colno.size()), v.data(), colno.data(), r.type, r.rhs);
        }
        colno.clear();
        val.clear();
        for (int j = 0; j < ncols_; ++j)
            if (memory[j] != 0) colno.push_back(j + 1), val.push_back(memory[j]);
        add_constraintex(lp, static_cast<int>(colno.size()), val.data(), colno.data(), LE, memory_rhs);
        memory_row_ = static_cast<int>(rows.size()) + 1;
        set_add_rowmode(lp, FALSE);
    }
    void set_memory_rhs(double rhs) { set_rh(lp_.get(), memory_row_, rhs); }

    enum class Outcome { optimal, suboptimal, infeasible, failed };
    // Solves within the deadline; x gets the solution on optimal/suboptimal.
    Outcome solve(Deadline& deadline, const PlannerOptions& o, std::vector<double>& x, int& solves) {
        const double remaining = deadline.remaining_s();
        if (remaining <= 0) {
            deadline.fired = true;
            return Outcome::failed;
        }
        lprec* lp = lp_.get();
        set_timeout(lp, static_cast<long>(std::ceil(remaining)));
        put_abortfunc(lp, abort_if_late, &deadline);
        set_mip_gap(lp, TRUE, o.mip_gap_abs);
        set_mip_gap(lp, FALSE, o.mip_gap_rel);
        ++solves;
        // lp_solve 5.5.2 prunes, with its default solution limit of 1, every node that does not
        // improve on the incumbent by a "minimum objective step" (lprec::bb_deltaOF) it derives
        // from the objective's coefficients (MIP_stepOF). With fractional costs that step is
        // bogus (0.0014 ms, even 1e30) and the optimum is skipped while OPTIMAL is reported; the
        // brute-force tests caught it. Any limit above 1 turns the step off (it only changes which
        // of several equal-cost optima is returned).
        set_solutionlimit(lp, 2);
        const int rc = ::solve(lp);
        Outcome out = Outcome::failed;
        if (rc == OPTIMAL || rc == PRESOLVED)
            out = Outcome::optimal;
        else if (rc == SUBOPTIMAL)
            // lp_solve also says SUBOPTIMAL when the MIP gap pruned the search; only a stop on
            // the deadline leaves the optimum unproven beyond the gap asked for.
            out = deadline.fired ? Outcome::suboptimal : Outcome::optimal;
        else if (rc == INFEASIBLE)
            out = Outcome::infeasible;
        // Should a later lp_solve compute the step anyway, the answer is not proven optimal.
        if (out == Outcome::optimal && lp->bb_deltaOF > 0) out = Outcome::suboptimal;
        if (out == Outcome::optimal || out == Outcome::suboptimal) {
            x.assign(ncols_, 0.0);
            if (ncols_ > 0) get_variables(lp, x.data());
        }
        return out;
    }

private:
    Lp lp_;
    int ncols_;
    int memory_row_ = 0;
};

PlanResult infeasible_result(std::size_t static_bytes, std::size_t transient_bytes, std::size_t budget,
                             std::size_t min_activations) {
    PlanResult r;
    r.status = PlanResult::infeasible;
    r.budget_bytes = budget;
    r.min_possible_bytes = static_bytes + transient_bytes + min_activations;
    r.message = "budget " + fmt_bytes(budget) + " is infeasible: the smallest plan needs " +
                fmt_bytes(r.min_possible_bytes) + " (static " + fmt_bytes(static_bytes) + " + transient " +
                fmt_bytes(transient_bytes) + " + activations " + fmt_bytes(min_activations) + ")";
    return r;
}

void check_classes(const std::vector<LayerClass>& classes) {
    for (std::size_t c = 0; c < classes.size(); ++c) {
        if (classes[c].layer_count < 0)
            throw std::invalid_argument("plan problem: layer class " + std::to_string(c) + " has a negative layer_count");
        validate_problem(classes[c].problem);
    }
}

// Fills the totals, per-layer decisions and the summary message from per_class.
void finish(PlanResult& r, const PlannerOptions& o, std::size_t static_bytes, std::size_t transient_bytes,
            Clock::time_point t0, const std::string& note) {
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
    r.solve_ms = ms_since(t0);
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s (%s): %zu layers, %d distinct plan(s), extra %.3f ms, ",
                  plan_status_name(r.status), plan_granularity_name(o.granularity), r.per_layer.size(), plans,
                  r.extra_ms);
    r.message = buf + fmt_bytes(r.total_bytes) + " of budget " + fmt_bytes(r.budget_bytes);
    if (r.status == PlanResult::suboptimal && r.objective_bound_ms > 0) {
        std::snprintf(buf, sizeof buf, "; objective %.6g, proven bound %.6g", r.objective_ms, r.objective_bound_ms);
        r.message += buf;
    }
    if (!note.empty()) r.message += "; " + note;
}

// The Pareto sweep for one class (see the top of this file). Counts solves; `exact` false when
// the deadline or an unproven solve left it incomplete.
std::vector<FrontierPoint> sweep_frontier(const BlockProblem& problem, std::size_t max_bytes,
                                          const PlannerOptions& o, Deadline& deadline, bool& exact, int& solves) {
    exact = true;
    std::vector<FrontierPoint> points;
    const std::size_t min_b = min_block_bytes(problem);
    if (max_bytes < min_b) return points;
    const double unit = static_cast<double>(gcd_unit({&problem}));
    const BlockModel m = build_block_model(problem, unit, o.literal_model);
    if (m.cols.empty()) {  // nothing to decide: the one plan there is
        FrontierPoint p;
        p.decisions = smallest_plan(problem);
        const BlockCost cost = evaluate_block(problem, p.decisions);
        p.extra_ms = cost.extra_ms;
        p.bytes = cost.bytes;
        points.push_back(std::move(p));
        return points;
    }
    std::vector<double> objective, memory;
    for (const Col& c : m.cols) objective.push_back(c.time), memory.push_back(c.bytes);
    std::size_t cap = std::min(max_bytes, max_block_bytes(problem));
    auto rhs_for = [&](std::size_t cap_bytes) { return std::floor(static_cast<double>(cap_bytes) / unit) - m.const_bytes; };
    Model model(m.cols, m.rows, objective, memory, rhs_for(cap));
    std::vector<double> x;
    while (true) {
        double rhs = rhs_for(cap);
        bool got = false;
        for (int attempt = 0; attempt < 4 && !got; ++attempt) {
            model.set_memory_rhs(rhs);
            const auto out = model.solve(deadline, o, x, solves);
            if (out == Model::Outcome::failed || out == Model::Outcome::infeasible) {
                // cap >= min_b, so a plan exists: lp_solve stopped early or lost it numerically.
                exact = false;
                break;
            }
            if (out == Model::Outcome::suboptimal) exact = false;
            FrontierPoint p;
            p.decisions = decode(problem, m, x.data());
            const BlockCost cost = evaluate_block(problem, p.decisions);
            if (cost.bytes > cap) {  // tolerance slip: tighten and retry
                rhs -= std::max(1.0, std::ceil(static_cast<double>(cost.bytes - cap) / unit));
                continue;
            }
            p.extra_ms = cost.extra_ms;
            p.bytes = cost.bytes;
            points.push_back(std::move(p));
            got = true;
        }
        if (!got) {
            exact = false;
            break;
        }
        if (points.back().bytes <= min_b) break;
        cap = points.back().bytes - 1;
    }
    if (!exact) {  // keep the answer usable: the smallest plan is always there
        FrontierPoint p;
        p.decisions = smallest_plan(problem);
        const BlockCost cost = evaluate_block(problem, p.decisions);
        p.extra_ms = cost.extra_ms;
        p.bytes = cost.bytes;
        points.push_back(std::move(p));
    }
    // Non-dominated filter (equal times up to rounding count as equal: fewer bytes wins).
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

// Independent parts of a block: tensors coupled through transients (a transient's op re-runs
// when any consumer's does) belong together; nothing else couples two tensors' costs (a needed
// input re-runs exactly when it is dropped itself, whoever reads it), so the block's time and
// bytes are sums over parts and any combination of part plans is a block plan.
struct Part {
    std::vector<int> tensors;  // indices into the block, increasing
    BlockProblem problem;      // those tensors, inputs remapped (inputs outside the part dropped)
};

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
    for (std::size_t i = 0; i < ts.size(); ++i)
        for (int p : ts[i].inputs)
            if (ts[p].transient) parent[find(static_cast<int>(i))] = find(p);
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
        part.problem.tensors.push_back(std::move(t));
    }
    return parts;
}

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
                hi = std::max(hi, (grp.cost.back() - grp.cost[p]) / static_cast<double>(grp.bytes[p] - grp.bytes.back()));
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

}  // namespace

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

PlanResult MilpPlanner::solve_block(const std::vector<LayerClass>& classes, std::size_t static_bytes,
                                    std::size_t transient_bytes, std::size_t budget_bytes) const {
    const auto t0 = Clock::now();
    check_classes(classes);
    PlannerOptions o = options_;
    o.granularity = PlanGranularity::block;
    Deadline deadline{t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.time_limit_s))};

    std::size_t min_act = 0;
    for (const auto& c : classes) min_act += static_cast<std::size_t>(c.layer_count) * min_block_bytes(c.problem);
    if (budget_bytes < static_bytes + transient_bytes + min_act) {
        PlanResult r = infeasible_result(static_bytes, transient_bytes, budget_bytes, min_act);
        r.solve_ms = ms_since(t0);
        return r;
    }
    const std::size_t avail = budget_bytes - static_bytes - transient_bytes;

    // One model: each class's block columns, scaled by its layer count in objective and memory.
    std::vector<const BlockProblem*> problems;
    for (const auto& c : classes) problems.push_back(&c.problem);
    const double unit = static_cast<double>(gcd_unit(problems));
    std::vector<BlockModel> models;
    std::vector<int> offset;
    std::vector<Col> cols;
    std::vector<Row> rows;
    std::vector<double> objective, memory;
    double const_bytes = 0;
    for (const auto& c : classes) {
        models.push_back(build_block_model(c.problem, unit, o.literal_model));
        const BlockModel& m = models.back();
        const int off = static_cast<int>(cols.size());
        offset.push_back(off);
        const double L = c.layer_count;
        for (const Col& col : m.cols) {
            cols.push_back(col);
            objective.push_back(L * (o.time_weight * col.time + o.memory_weight * unit * col.bytes));
            memory.push_back(L * col.bytes);
        }
        for (Row r : m.rows) {
            for (int& j : r.idx) j += off;
            rows.push_back(std::move(r));
        }
        const_bytes += L * m.const_bytes;
    }

    PlanResult r;
    r.budget_bytes = budget_bytes;
    r.min_possible_bytes = static_bytes + transient_bytes + min_act;
    r.per_class.resize(classes.size());
    auto set_plans = [&](const std::vector<BlockPlan>& plans) {
        for (std::size_t c = 0; c < classes.size(); ++c) {
            r.per_class[c].clear();
            if (classes[c].layer_count == 0) continue;
            const BlockCost cost = evaluate_block(classes[c].problem, plans[c]);
            r.per_class[c].push_back({plans[c], classes[c].layer_count, cost.extra_ms, cost.bytes});
        }
    };
    auto total_bytes = [&](const std::vector<BlockPlan>& plans) {
        std::size_t total = 0;
        for (std::size_t c = 0; c < classes.size(); ++c)
            total += static_cast<std::size_t>(classes[c].layer_count) * evaluate_block(classes[c].problem, plans[c]).bytes;
        return total;
    };

    std::string note;
    bool solved = false;
    if (!cols.empty()) {
        double rhs = std::floor(static_cast<double>(avail) / unit) - const_bytes;
        Model model(cols, rows, objective, memory, rhs);
        std::vector<double> x;
        for (int attempt = 0; attempt < 4 && !solved; ++attempt) {
            model.set_memory_rhs(rhs);
            const auto out = model.solve(deadline, o, x, r.lp_solves);
            if (out == Model::Outcome::failed || out == Model::Outcome::infeasible) {
                note = out == Model::Outcome::failed ? "lp_solve found no plan within the time limit"
                                                     : "lp_solve reported infeasible although a plan fits";
                break;
            }
            std::vector<BlockPlan> plans;
            for (std::size_t c = 0; c < classes.size(); ++c)
                plans.push_back(decode(classes[c].problem, models[c], x.data() + offset[c]));
            const std::size_t total = total_bytes(plans);
            if (total > avail) {
                rhs -= std::max(1.0, std::ceil(static_cast<double>(total - avail) / unit));
                continue;
            }
            set_plans(plans);
            r.status = out == Model::Outcome::optimal ? PlanResult::optimal : PlanResult::suboptimal;
            if (out == Model::Outcome::suboptimal)
                note = deadline.fired ? "time limit reached; best plan found so far" : "lp_solve did not prove optimality";
            solved = true;
        }
    } else {
        solved = true;  // nothing to decide
        r.status = PlanResult::optimal;
        std::vector<BlockPlan> plans;
        for (const auto& c : classes) plans.push_back(smallest_plan(c.problem));
        set_plans(plans);
    }
    if (!solved) {  // a plan fits (checked above): fall back to the smallest one
        std::vector<BlockPlan> plans;
        for (const auto& c : classes) plans.push_back(smallest_plan(c.problem));
        set_plans(plans);
        r.status = PlanResult::suboptimal;
        note += "; using the smallest plan";
    }
    finish(r, o, static_bytes, transient_bytes, t0, note);
    return r;
}

std::vector<FrontierPoint> MilpPlanner::pareto_frontier(const BlockProblem& problem, std::size_t max_bytes,
                                                        bool* exact) const {
    validate_problem(problem);
    Deadline deadline{Clock::now() +
                      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.time_limit_s))};
    bool ok = true;
    int solves = 0;
    auto points = sweep_frontier(problem, max_bytes, options_, deadline, ok, solves);
    if (exact) *exact = ok;
    return points;
}

PlanResult MilpPlanner::solve_global(const std::vector<LayerClass>& classes, std::size_t static_bytes,
                                     std::size_t transient_bytes, std::size_t budget_bytes) const {
    const auto t0 = Clock::now();
    check_classes(classes);
    PlannerOptions o = options_;
    o.granularity = PlanGranularity::global;
    Deadline deadline{t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.time_limit_s))};

    std::size_t min_act = 0;
    for (const auto& c : classes) min_act += static_cast<std::size_t>(c.layer_count) * min_block_bytes(c.problem);
    if (budget_bytes < static_bytes + transient_bytes + min_act) {
        PlanResult r = infeasible_result(static_bytes, transient_bytes, budget_bytes, min_act);
        r.solve_ms = ms_since(t0);
        return r;
    }
    const std::size_t avail = budget_bytes - static_bytes - transient_bytes;
    const std::size_t spare = avail - min_act;  // memory above every layer's minimum

    PlanResult r;
    r.budget_bytes = budget_bytes;
    r.min_possible_bytes = static_bytes + transient_bytes + min_act;
    r.per_class.resize(classes.size());

    // One group per (class, independent part of its block): its frontier and its layer count.
    struct Group {
        std::size_t cls;
        Part part;
        std::size_t min_bytes;
        std::vector<FrontierPoint> frontier;
    };
    std::vector<Group> groups;
    bool exact = true;
    for (std::size_t c = 0; c < classes.size(); ++c) {
        if (classes[c].layer_count == 0) continue;
        for (Part& part : independent_parts(classes[c].problem, o.split_independent_parts)) {
            Group g{c, std::move(part), 0, {}};
            g.min_bytes = min_block_bytes(g.part.problem);
            bool ok = true;
            // One layer's part can take at most its minimum plus all the spare memory.
            g.frontier = sweep_frontier(g.part.problem, g.min_bytes + spare, o, deadline, ok, r.lp_solves);
            exact = exact && ok;
            r.frontier_points += static_cast<int>(g.frontier.size());
            groups.push_back(std::move(g));
        }
    }

    // The integer program over counts. Groups with identical frontiers (the same bytes and costs
    // point by point: ln1 and ln2, two dropout masks, equal parts of two classes) are merged into
    // one, since only their summed counts matter; that removes symmetric solutions.
    std::vector<IpGroup> ip;
    std::vector<std::vector<std::size_t>> members;  // per merged group: its groups
    for (std::size_t k = 0; k < groups.size(); ++k) {
        const auto& f = groups[k].frontier;
        auto same = [&](std::size_t j) {
            const auto& h = groups[members[j][0]].frontier;
            if (h.size() != f.size()) return false;
            for (std::size_t p = 0; p < f.size(); ++p)
                if (h[p].bytes != f[p].bytes || h[p].extra_ms != f[p].extra_ms) return false;
            return true;
        };
        std::size_t j = 0;
        while (j < ip.size() && !same(j)) ++j;
        if (j == ip.size()) {
            IpGroup g;
            for (const auto& p : f) {
                g.cost.push_back(o.time_weight * p.extra_ms + o.memory_weight * static_cast<double>(p.bytes));
                g.bytes.push_back(p.bytes - groups[k].min_bytes);
            }
            ip.push_back(std::move(g));
            members.emplace_back();
        }
        ip[j].layers += classes[groups[k].cls].layer_count;
        members[j].push_back(k);
    }
    // Incumbent and reduced-cost bounds (see ip_bounds): lp_solve's branch and bound alone can
    // wander for seconds among the many near-equal count vectors of a 48-layer model.
    const IpCounts incumbent = greedy_counts(ip, spare);
    const IpBounds bounds = ip_bounds(ip, spare, counts_cost(ip, incumbent));

    // Memory in units of the gcd of every point's bytes above its group's minimum.
    std::size_t gcd_all = 0;
    for (const IpGroup& g : ip)
        for (std::size_t b : g.bytes) gcd_all = std::gcd(gcd_all, b);
    const double unit = gcd_all == 0 ? 1.0 : static_cast<double>(gcd_all);
    std::vector<Col> cols;
    std::vector<Row> rows;
    std::vector<double> objective, memory;
    std::vector<int> offset;
    for (std::size_t j = 0; j < ip.size(); ++j) {
        offset.push_back(static_cast<int>(cols.size()));
        Row sum{{}, {}, EQ, static_cast<double>(ip[j].layers)};
        for (std::size_t p = 0; p < ip[j].cost.size(); ++p) {
            sum.idx.push_back(static_cast<int>(cols.size()));
            sum.val.push_back(1);
            cols.push_back(Col{0, static_cast<double>(bounds.upper[j][p]), true, 0, 0});
            objective.push_back(ip[j].cost[p]);
            memory.push_back(static_cast<double>(ip[j].bytes[p]) / unit);
        }
        rows.push_back(std::move(sum));
    }
    auto counts_of = [&](const std::vector<double>& x) {
        IpCounts n(ip.size());
        for (std::size_t j = 0; j < ip.size(); ++j)
            for (std::size_t p = 0; p < ip[j].cost.size(); ++p)
                n[j].push_back(static_cast<int>(std::llround(x[offset[j] + p])));
        return n;
    };
    // Layer plans from merged counts: a merged group's points, listed in frontier order, go to
    // its groups in turn; in each group, layer l of the class takes the l-th point; equal
    // consecutive layer plans are merged into one ClassPlan.
    auto set_counts = [&](const IpCounts& n) {
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
    };
    // Whether counts are an assignment that fits (exact integer arithmetic).
    auto fits = [&](const IpCounts& n, std::size_t& used) {
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
    };

    std::string note;
    bool solved = false;
    bool ip_optimal = false;
    double rhs = std::floor(static_cast<double>(spare) / unit);
    Model model(cols, rows, objective, memory, rhs);
    std::vector<double> x;
    if (cols.empty()) {  // no layers
        set_counts(IpCounts{});
        solved = ip_optimal = true;
    }
    for (int attempt = 0; attempt < 4 && !solved; ++attempt) {
        model.set_memory_rhs(rhs);
        const auto out = model.solve(deadline, o, x, r.lp_solves);
        if (out == Model::Outcome::failed || out == Model::Outcome::infeasible) {
            note = out == Model::Outcome::failed ? "lp_solve found no layer assignment within the time limit"
                                                 : "lp_solve reported the layer assignment infeasible although one fits";
            break;
        }
        const IpCounts n = counts_of(x);
        std::size_t used = 0;
        if (!fits(n, used)) {
            if (used > spare) {  // tolerance slip: tighten
                rhs -= std::max(1.0, std::ceil(static_cast<double>(used - spare) / unit));
                continue;
            }
            note = "lp_solve returned inconsistent layer counts";
            break;
        }
        ip_optimal = out == Model::Outcome::optimal;
        // A run stopped by the time limit may hold a worse assignment than the greedy one.
        set_counts(ip_optimal || counts_cost(ip, n) <= counts_cost(ip, incumbent) ? n : incumbent);
        solved = true;
    }
    if (!solved) {  // the greedy assignment fits
        set_counts(incumbent);
        note += "; using the greedy layer assignment";
    }
    r.status = solved && ip_optimal && exact ? PlanResult::optimal : PlanResult::suboptimal;
    if (!exact) note = (note.empty() ? "" : note + "; ") + "time limit reached while building the Pareto frontiers";
    if (solved && !ip_optimal)
        note = (note.empty() ? "" : note + "; ") +
               (deadline.fired ? "time limit reached in the layer assignment" : "layer assignment not proven optimal");
    if (r.status == PlanResult::suboptimal && exact) r.objective_bound_ms = bounds.z;
    finish(r, o, static_bytes, transient_bytes, t0, note);
    return r;
}

}  // namespace adacc
