// The block MILP (src/adacc/block_milp.h) and the block granularity, MilpPlanner::solve_block:
// one plan per layer class, all classes in one model.
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
//     see lp::Model::solve in src/adacc/lp_solve_model.cpp, misbehaved worst on such mixed models.)
//   * An op with several droppable outputs (same_op_as) re-runs once for all: a binary run_g with
//     the op's time and run_g >= drop_i for each of them, whose drop columns then carry no time
//     (the literal model shares one run column among them likewise).
// Memory is counted in units of the gcd of all sizes, so every row is integral; the solution
// found is re-evaluated exactly (evaluate_block) and, should lp_solve's tolerances have let the
// memory row slip by a unit, the row is tightened and the model solved again.
#include "src/adacc/block_milp.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <string>

#include "src/adacc/milp_planner_call.h"

namespace adacc::milp {

namespace {

int add_col(BlockModel& m, lp::Column c, double time, double bytes) {
    m.cols.push_back(c);
    m.time.push_back(time);
    m.bytes.push_back(bytes);
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

// The columns' index tables of a model of n tensors, every entry "no column" yet.
BlockModel empty_block_model(std::size_t n) {
    BlockModel m;
    m.keep_col.assign(n, -1);
    m.drop_col.assign(n, -1);
    m.comp_cols.resize(n);
    return m;
}

// The model as docs/design.md states it (PlannerOptions::literal_model).
BlockModel literal_block_model(const BlockProblem& problem, double unit) {
    const auto& ts = problem.tensors;
    const std::size_t n = ts.size();
    BlockModel m = empty_block_model(n);
    std::vector<int> run(n);
    for (std::size_t i = 0; i < n; ++i) {
        const PlanTensor& t = ts[i];
        const bool shares_run = t.same_op_as >= 0;  // the op's first output holds its run column
        const double b = t.transient ? 0 : static_cast<double>(t.bytes) / unit;
        lp::Column keep, drop;
        if (t.must_keep) keep.lb = 1;
        if (t.transient) keep.ub = 0, drop.lb = 1;
        if (!decision_allowed(t, {Policy::recompute, 0})) drop.ub = 0;
        m.keep_col[i] = add_col(m, keep, 0, b);
        lp::Row one_of{{m.keep_col[i]}, {1}, lp::RowType::eq, 1};  // keep + sum of comp + drop = 1
        for (std::size_t o = 0; o < t.compress_options.size(); ++o) {
            const CompressOption& c = t.compress_options[o];
            lp::Column comp;
            if (!decision_allowed(t, {Policy::compress, static_cast<int>(o)})) comp.ub = 0;
            m.comp_cols[i].push_back(add_col(m, comp, c.ms, t.transient ? 0 : static_cast<double>(c.bytes) / unit));
            one_of.idx.push_back(m.comp_cols[i].back());
            one_of.val.push_back(1);
        }
        m.drop_col[i] = add_col(m, drop, 0, 0);
        one_of.idx.push_back(m.drop_col[i]);
        one_of.val.push_back(1);
        run[i] = shares_run ? run[t.same_op_as] : add_col(m, {}, t.recompute_ms, 0);
        m.rows.push_back(std::move(one_of));
        if (!t.transient)  // a transient's op runs only when a chain needs it
            m.rows.push_back({{run[i], m.drop_col[i]}, {1, -1}, lp::RowType::ge, 0});  // run >= drop
        // run_p >= run_i + drop_p - 1
        for (int p : t.inputs) m.rows.push_back({{run[p], run[i], m.drop_col[p]}, {1, -1, -1}, lp::RowType::ge, -1});
    }
    return m;
}

// The reduced model (see the top of this file).
BlockModel reduced_block_model(const BlockProblem& problem, double unit) {
    const auto& ts = problem.tensors;
    const std::size_t n = ts.size();
    BlockModel m = empty_block_model(n);
    // run[i]: the column that is 1 when i's op re-runs.
    std::vector<int> run(n, -1);
    std::vector<int> droppable_outputs(n, 0), shared_run(n, -1);  // per op, by its first output
    for (std::size_t i = 0; i < n; ++i)
        if (!ts[i].transient && decision_allowed(ts[i], {Policy::recompute, 0}))
            ++droppable_outputs[op_first_output(ts[i], static_cast<int>(i))];
    for (std::size_t i = 0; i < n; ++i) {
        const PlanTensor& t = ts[i];
        if (t.transient) {
            run[i] = add_col(m, {}, t.recompute_ms, 0);
            continue;
        }
        const double b = static_cast<double>(t.bytes) / unit;
        m.const_bytes += b;                               // kept unless a column below says otherwise
        lp::Row at_most_one{{}, {}, lp::RowType::le, 1};  // sum of comp + drop <= 1
        for (std::size_t o = 0; o < t.compress_options.size(); ++o) {
            if (!decision_allowed(t, {Policy::compress, static_cast<int>(o)}) ||
                dominated_option(t.compress_options, o)) {
                m.comp_cols[i].push_back(-1);
                continue;
            }
            const CompressOption& c = t.compress_options[o];
            m.comp_cols[i].push_back(add_col(m, {}, c.ms, static_cast<double>(c.bytes) / unit - b));
            at_most_one.idx.push_back(m.comp_cols[i].back());
        }
        if (decision_allowed(t, {Policy::recompute, 0})) {
            const int op = op_first_output(t, static_cast<int>(i));
            const bool shared = droppable_outputs[op] > 1;  // then run_g carries the time
            run[i] = m.drop_col[i] = add_col(m, {}, shared ? 0.0 : t.recompute_ms, -b);
            at_most_one.idx.push_back(m.drop_col[i]);
            if (shared) {
                if (shared_run[op] < 0) shared_run[op] = add_col(m, {}, t.recompute_ms, 0);
                run[i] = shared_run[op];
                m.rows.push_back({{run[i], m.drop_col[i]}, {1, -1}, lp::RowType::ge, 0});  // run_g >= drop_i
            }
        }
        at_most_one.val.assign(at_most_one.idx.size(), 1);
        if (at_most_one.idx.size() > 1) m.rows.push_back(std::move(at_most_one));
    }
    for (std::size_t i = 0; i < n; ++i) {
        if (run[i] < 0) continue;
        for (int p : ts[i].inputs)
            if (ts[p].transient) m.rows.push_back({{run[p], run[i]}, {1, -1}, lp::RowType::ge, 0});  // run_p >= run_i
    }
    return m;
}

}  // namespace

BlockModel build_block_model(const BlockProblem& problem, double unit, bool literal) {
    return literal ? literal_block_model(problem, unit) : reduced_block_model(problem, unit);
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

}  // namespace adacc::milp

namespace adacc {

namespace {

// One lp_solve model for every class: each class's block columns, scaled by its layer count in
// objective and memory, at offset[c]; memory in units of the gcd of every size.
struct ClassesModel {
    std::vector<milp::BlockModel> models;
    std::vector<int> offset;
    std::vector<lp::Column> cols;
    std::vector<lp::Row> rows;
    std::vector<double> objective, memory;
    double const_bytes = 0;  // in units: what the kept-by-default tensors hold
    double unit = 1;
};
ClassesModel classes_model(const std::vector<LayerClass>& classes, const PlannerOptions& o) {
    ClassesModel cm;
    std::vector<const BlockProblem*> problems;
    for (const auto& c : classes) problems.push_back(&c.problem);
    cm.unit = static_cast<double>(milp::gcd_unit(problems));
    for (const auto& c : classes) {
        cm.models.push_back(milp::build_block_model(c.problem, cm.unit, o.literal_model));
        const milp::BlockModel& m = cm.models.back();
        const int off = static_cast<int>(cm.cols.size());
        cm.offset.push_back(off);
        const double L = c.layer_count;
        for (std::size_t j = 0; j < m.cols.size(); ++j) {
            cm.cols.push_back(m.cols[j]);
            cm.objective.push_back(L * (o.time_weight * m.time[j] + o.memory_weight * cm.unit * m.bytes[j]));
            cm.memory.push_back(L * m.bytes[j]);
        }
        for (lp::Row r : m.rows) {
            for (int& j : r.idx) j += off;
            cm.rows.push_back(std::move(r));
        }
        cm.const_bytes += L * m.const_bytes;
    }
    return cm;
}

// Every class's plan in r.per_class, one ClassPlan for all its layers.
void set_class_plans(const std::vector<LayerClass>& classes, const std::vector<BlockPlan>& plans, PlanResult& r) {
    for (std::size_t c = 0; c < classes.size(); ++c) {
        r.per_class[c].clear();
        if (classes[c].layer_count == 0) continue;
        const BlockCost cost = evaluate_block(classes[c].problem, plans[c]);
        r.per_class[c].push_back({plans[c], classes[c].layer_count, cost.extra_ms, cost.bytes});
    }
}

std::vector<BlockPlan> smallest_plans(const std::vector<LayerClass>& classes) {
    std::vector<BlockPlan> plans;
    for (const auto& c : classes) plans.push_back(smallest_plan(c.problem));
    return plans;
}

// The plans' bytes over all layers, evaluated exactly.
std::size_t plans_bytes(const std::vector<LayerClass>& classes, const std::vector<BlockPlan>& plans) {
    std::size_t total = 0;
    for (std::size_t c = 0; c < classes.size(); ++c)
        total += static_cast<std::size_t>(classes[c].layer_count) * evaluate_block(classes[c].problem, plans[c]).bytes;
    return total;
}

// lp_solve on the classes' model within the call's available bytes: the plans it found,
// re-evaluated exactly (lp::Model::solve_to_fit), and its outcome, or nullopt with `note` saying
// why when lp_solve gave none.
struct ClassPlans {
    std::vector<BlockPlan> plans;
    lp::Model::Outcome outcome;
};
std::optional<ClassPlans> solve_classes(const std::vector<LayerClass>& classes, const ClassesModel& cm,
                                        milp::PlanCall& call, std::string& note) {
    const std::size_t avail = call.available;
    const double rhs = std::floor(static_cast<double>(avail) / cm.unit) - cm.const_bytes;
    lp::Model model(cm.cols, cm.rows, cm.objective, cm.memory, rhs);
    std::vector<double> x;
    std::vector<BlockPlan> plans;
    const lp::Model::Fit fit = model.solve_to_fit(
        rhs, cm.unit, call.deadline, call.options, x, call.result.lp_solves, [&](const std::vector<double>& answer) {
            plans.clear();
            for (std::size_t c = 0; c < classes.size(); ++c)
                plans.push_back(milp::decode(classes[c].problem, cm.models[c], answer.data() + cm.offset[c]));
            const std::size_t total = plans_bytes(classes, plans);
            return std::optional<std::size_t>(total > avail ? total - avail : 0);
        });
    if (fit.outcome == lp::Model::Outcome::failed || fit.outcome == lp::Model::Outcome::infeasible)
        note = fit.outcome == lp::Model::Outcome::failed ? "lp_solve found no plan within the time limit"
                                                         : "lp_solve reported infeasible although a plan fits";
    if (!fit.fits) return std::nullopt;
    return ClassPlans{std::move(plans), fit.outcome};
}

}  // namespace

PlanResult MilpPlanner::solve_block(const std::vector<LayerClass>& classes, std::size_t static_bytes,
                                    std::size_t transient_bytes, std::size_t budget_bytes) const {
    milp::PlanCall call =
        milp::start_plan_call(options_, PlanGranularity::block, classes, static_bytes, transient_bytes, budget_bytes);
    if (!call.feasible) return call.result;
    PlanResult& r = call.result;
    const ClassesModel cm = classes_model(classes, call.options);
    std::string note;
    if (cm.cols.empty()) {  // nothing to decide
        set_class_plans(classes, smallest_plans(classes), r);
        r.status = PlanResult::optimal;
    } else if (const auto solved = solve_classes(classes, cm, call, note)) {
        set_class_plans(classes, solved->plans, r);
        r.status = solved->outcome == lp::Model::Outcome::optimal ? PlanResult::optimal : PlanResult::suboptimal;
        if (solved->outcome == lp::Model::Outcome::suboptimal)
            note = call.deadline.fired ? "time limit reached; best plan found so far"
                                       : "lp_solve did not prove optimality";
    } else {  // a plan fits (start_plan_call checked): fall back to the smallest one
        set_class_plans(classes, smallest_plans(classes), r);
        r.status = PlanResult::suboptimal;
        note += "; using the smallest plan";
    }
    milp::finish_plan_call(call, static_bytes, transient_bytes, note);
    return call.result;
}

}  // namespace adacc
