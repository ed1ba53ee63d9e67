// The block problem's own rules (src/adacc/block_problem.h): which decisions a tensor allows and
// what a plan costs, computed directly, with no solver. The planner's models are checked against
// these (every solution is re-evaluated with evaluate_block), and so are the brute-force tests.
#include "src/adacc/block_problem.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace adacc {

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
        if (t.same_op_as < 0) continue;
        if (static_cast<std::size_t>(t.same_op_as) >= i || ts[t.same_op_as].same_op_as >= 0)
            fail("has same_op_as " + std::to_string(t.same_op_as) + "; it must name an earlier op's first output");
        const PlanTensor& first = ts[t.same_op_as];
        if (t.transient || first.transient) fail("shares an op with a transient; transients are ops of their own");
        if (t.inputs != first.inputs || t.recompute_ms != first.recompute_ms)
            fail("shares an op with '" + first.name + "' but not its inputs and recompute_ms");
    }
}

int op_first_output(const PlanTensor& t, int index) { return t.same_op_as >= 0 ? t.same_op_as : index; }

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
    std::vector<bool> op_paid(ts.size(), false);  // by the op's first output
    for (std::size_t i = 0; i < ts.size(); ++i) {
        const int op = op_first_output(ts[i], static_cast<int>(i));
        if (cost.reruns[i] && !op_paid[op]) {
            cost.extra_ms += ts[i].recompute_ms;
            op_paid[op] = true;
        }
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

}  // namespace

BlockPlan smallest_plan(const BlockProblem& problem) {
    BlockPlan plan;
    for (const auto& t : problem.tensors) plan.push_back(smallest_decision(t));
    return plan;
}

std::size_t min_block_bytes(const BlockProblem& problem) {
    return evaluate_block(problem, smallest_plan(problem)).bytes;
}

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

}  // namespace adacc
