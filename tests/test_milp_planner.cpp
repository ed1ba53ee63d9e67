// MilpPlanner (src/adacc/milp_planner.h) against brute-force enumeration: the block form on random
// small problems (every keep / compress-with-each-codec / recompute assignment; tensors have up
// to three compress options, as the codec choice gives them), the global form over every
// per-layer choice on small layer counts, the Pareto frontier against all plans, and the GPT-2
// block's real shape (sizes from BlockGraph, DAG from its ops).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kernels/codec_format.h"
#include "models/gpt_block.h"
#include "models/gpt_config.h"
#include "src/adacc/lp_solve_model.h"
#include "src/adacc/milp_planner.h"
#include "src/engine/activation_plan.h"

namespace adacc {
namespace {

// ---------------------------------------------------------------- brute force

struct Point {
    double t;
    std::size_t b;
    BlockPlan plan;
};

// Every valid plan of the block with its exact cost (evaluate_block is the model's definition:
// re-runs by closure over dropped and transient inputs).
std::vector<Point> all_plans(const BlockProblem& p) {
    const auto& ts = p.tensors;
    std::vector<std::vector<Decision>> options(ts.size());
    for (std::size_t i = 0; i < ts.size(); ++i) options[i] = allowed_decisions(ts[i]);
    std::vector<Point> out;
    std::vector<std::size_t> digit(ts.size(), 0);
    BlockPlan plan(ts.size());
    while (true) {
        for (std::size_t i = 0; i < ts.size(); ++i) plan[i] = options[i][digit[i]];
        const BlockCost c = evaluate_block(p, plan);
        out.push_back({c.extra_ms, c.bytes, plan});
        std::size_t i = 0;
        while (i < ts.size() && ++digit[i] == options[i].size()) digit[i++] = 0;
        if (i == ts.size()) break;
    }
    return out;
}

double weighted(const PlannerOptions& o, double t, std::size_t b) {
    return o.time_weight * t + o.memory_weight * static_cast<double>(b);
}

// The cheapest objective of n_layers copies of one block plan within the budget.
std::optional<double> brute_block(const std::vector<Point>& plans, int n_layers, std::size_t static_bytes,
                                  std::size_t transient_bytes, std::size_t budget, const PlannerOptions& o) {
    std::optional<double> best;
    for (const Point& p : plans) {
        if (static_bytes + transient_bytes + n_layers * p.b > budget) continue;
        const double v = n_layers * weighted(o, p.t, p.b);
        if (!best || v < *best) best = v;
    }
    return best;
}

// The cheapest objective over every per-layer choice (layers of a class interchangeable: their
// choices are enumerated as multisets, which covers every assignment up to order).
std::optional<double> brute_global(const std::vector<LayerClass>& classes, std::size_t static_bytes,
                                   std::size_t transient_bytes, std::size_t budget, const PlannerOptions& o) {
    if (budget < static_bytes + transient_bytes) return std::nullopt;
    const std::size_t avail = budget - static_bytes - transient_bytes;
    std::vector<std::vector<std::pair<double, std::size_t>>> values;  // per class: distinct (t, b)
    for (const auto& c : classes) {
        std::vector<std::pair<double, std::size_t>> v;
        for (const Point& p : all_plans(c.problem)) v.push_back({p.t, p.b});
        std::sort(v.begin(), v.end());
        v.erase(std::unique(v.begin(), v.end()), v.end());
        values.push_back(std::move(v));
    }
    std::optional<double> best;
    std::function<void(std::size_t, int, std::size_t, std::size_t, double)> rec =
        [&](std::size_t c, int left, std::size_t from, std::size_t used, double cost) {
            if (c == classes.size()) {
                if (!best || cost < *best) best = cost;
                return;
            }
            if (left == 0) {
                if (c + 1 < classes.size())
                    rec(c + 1, classes[c + 1].layer_count, 0, used, cost);
                else
                    rec(c + 1, 0, 0, used, cost);
                return;
            }
            for (std::size_t i = from; i < values[c].size(); ++i) {
                const auto& [t, b] = values[c][i];
                if (used + b > avail) continue;
                rec(c, left - 1, i, used + b, cost + weighted(o, t, b));
            }
        };
    rec(0, classes.empty() ? 0 : classes[0].layer_count, 0, 0, 0.0);
    return best;
}

// The non-dominated (t, b) values of all plans, by decreasing bytes.
std::vector<std::pair<double, std::size_t>> brute_frontier(const BlockProblem& p) {
    std::vector<std::pair<std::size_t, double>> v;
    for (const Point& q : all_plans(p)) v.push_back({q.b, q.t});
    std::sort(v.begin(), v.end());
    std::vector<std::pair<double, std::size_t>> front;
    for (const auto& [b, t] : v)
        if (front.empty() || t < front.back().first) front.push_back({t, b});
    std::reverse(front.begin(), front.end());
    return front;
}

// ---------------------------------------------------------------- random problems

struct RandomSpec {
    int min_tensors = 1, max_tensors = 12;
    bool transients = true;
};

std::size_t plan_count(const BlockProblem& p) {
    std::size_t count = 1;
    for (const auto& t : p.tensors) count *= allowed_decisions(t).size();
    return count;
}

// dense: nearly every tensor may be kept, compressed or dropped, no transients. A compressible
// tensor has one to three compress options (codecs) of random size and time; options are removed
// from the last tensors until at most `max_plans` plans remain, to keep brute force fast.
BlockProblem random_problem(std::mt19937& rng, int n, bool dense = false, std::size_t max_plans = 400000) {
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    auto chance = [&](double p) { return u01(rng) < p; };
    BlockProblem p;
    for (int i = 0; i < n; ++i) {
        PlanTensor t;
        t.name = std::string("t").append(std::to_string(i));
        // Sizes: sometimes multiples of 64 (as the tape's slots are), sometimes any integer.
        t.bytes = 1 + rng() % 1000;
        if (chance(0.4)) t.bytes *= 64;
        if (chance(dense ? 0.95 : 0.5)) {
            const int options = chance(0.5) ? 1 : (chance(0.6) ? 2 : 3);
            for (int o = 0; o < options; ++o)
                t.compress_options.push_back(
                    {static_cast<Codec>(o), 1 + rng() % t.bytes, chance(0.1) ? 0.0 : 5.0 * u01(rng), u01(rng)});
        }
        t.recompute_ms = chance(0.1) ? 0.0 : 10.0 * u01(rng);
        for (int j = 0; j < i; ++j)
            if (chance(0.3)) t.inputs.push_back(j);
        t.must_keep = i == 0 ? chance(0.7) : chance(dense ? 0.0 : 0.1);
        t.can_recompute = chance(dense ? 0.95 : 0.85);
        if (i > 0 && !t.must_keep && !dense && chance(0.15)) t.transient = true, t.can_recompute = true;
        // Another output of an earlier op (same inputs and time): one re-run regenerates both.
        if (i > 0 && !t.transient && chance(0.2)) {
            const int j = static_cast<int>(rng() % i);
            const int first = p.tensors[j].same_op_as >= 0 ? p.tensors[j].same_op_as : j;
            if (!p.tensors[first].transient) {
                t.same_op_as = first;
                t.inputs = p.tensors[first].inputs;
                t.recompute_ms = p.tensors[first].recompute_ms;
            }
        }
        p.tensors.push_back(std::move(t));
    }
    for (std::size_t i = p.tensors.size(); i-- > 0 && plan_count(p) > max_plans;)
        while (p.tensors[i].compress_options.size() > 1 && plan_count(p) > max_plans)
            p.tensors[i].compress_options.pop_back();
    return p;
}

// How many layer plans of a result compress some tensor with an option other than its first.
int plans_choosing_a_later_option(const PlanResult& r) {
    int n = 0;
    for (const BlockPlan& plan : r.per_layer)
        for (const Decision& d : plan) n += d.policy == Policy::compress && d.option > 0;
    return n;
}

// A budget between "clearly infeasible" and "everything kept", in bytes.
std::size_t random_budget(std::mt19937& rng, std::size_t fixed, std::size_t min_act, std::size_t max_act) {
    std::uniform_real_distribution<double> frac(-0.3, 1.15);
    const double f = frac(rng);
    const double b = static_cast<double>(fixed) + static_cast<double>(min_act) +
                     f * static_cast<double>(max_act - min_act + 1) + (f < 0 ? f * static_cast<double>(min_act) : 0);
    return b < 0 ? 0 : static_cast<std::size_t>(b);
}

// The planner's options for a test of what it solves: a time limit no machine reaches, so that a
// loaded or sanitized machine gets the same (optimal) answer; what the limit does is
// TimeLimitGivesAFeasibleFlaggedPlan's subject, and how fast it solves is scripts/bench_planner.sh's.
PlannerOptions untimed_options() {
    PlannerOptions o;
    o.time_limit_s = 600;
    return o;
}

PlannerOptions random_weights(std::mt19937& rng) {
    PlannerOptions o = untimed_options();
    if (rng() % 4 == 0) o.memory_weight = 1e-3 * (rng() % 100) / 100.0;
    if (rng() % 8 == 0) o.time_weight = 0.5;
    return o;
}

bool close(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

// The result's own numbers agree with its plans, and the plans fit.
void check_consistent(const PlanResult& r, const std::vector<LayerClass>& classes, std::size_t static_bytes,
                      std::size_t transient_bytes, std::size_t budget, const PlannerOptions& o) {
    ASSERT_NE(r.status, PlanResult::infeasible);
    int layers = 0;
    for (const auto& c : classes) layers += c.layer_count;
    ASSERT_EQ(static_cast<int>(r.per_layer.size()), layers);
    ASSERT_EQ(r.per_class.size(), classes.size());
    double objective = 0, extra = 0;
    std::size_t bytes = 0;
    int l = 0;
    for (std::size_t c = 0; c < classes.size(); ++c) {
        int in_class = 0;
        for (const ClassPlan& p : r.per_class[c]) {
            const BlockCost cost = evaluate_block(classes[c].problem, p.decisions);
            EXPECT_EQ(cost.bytes, p.bytes);
            EXPECT_TRUE(close(cost.extra_ms, p.extra_ms));
            in_class += p.layers;
            for (int i = 0; i < p.layers; ++i, ++l) EXPECT_EQ(r.per_layer[l], p.decisions);
            objective += p.layers * weighted(o, cost.extra_ms, cost.bytes);
            extra += p.layers * cost.extra_ms;
            bytes += p.layers * cost.bytes;
        }
        EXPECT_EQ(in_class, classes[c].layer_count);
    }
    EXPECT_EQ(bytes, r.activation_bytes);
    EXPECT_EQ(r.total_bytes, static_bytes + transient_bytes + bytes);
    EXPECT_LE(r.total_bytes, budget);
    EXPECT_TRUE(close(objective, r.objective_ms)) << objective << " vs " << r.objective_ms;
    EXPECT_TRUE(close(extra, r.extra_ms));
}

// ---------------------------------------------------------------- the block form

TEST(MilpPlanner, BlockFormMatchesBruteForceOnRandomProblems) {
    std::mt19937 rng(20240605);
    int feasible = 0, infeasible = 0, later_options = 0;
    std::size_t enumerated = 0, largest = 0;
    for (int instance = 0; instance < 200; ++instance) {
        const int n = 1 + static_cast<int>(rng() % 12);
        const BlockProblem p = random_problem(rng, n);
        const int L = 1 + static_cast<int>(rng() % 4);
        const std::size_t static_bytes = rng() % 5000, transient_bytes = rng() % 3000;
        const std::size_t budget =
            random_budget(rng, static_bytes + transient_bytes, L * min_block_bytes(p), L * max_block_bytes(p));
        PlannerOptions o = random_weights(rng);
        const auto plans = all_plans(p);
        enumerated += plans.size();
        largest = std::max(largest, plans.size());
        const auto expected = brute_block(plans, L, static_bytes, transient_bytes, budget, o);
        for (bool literal : {false, true}) {
            SCOPED_TRACE("instance " + std::to_string(instance) + " n=" + std::to_string(n) +
                         " L=" + std::to_string(L) + (literal ? " literal model" : " reduced model"));
            o.literal_model = literal;
            const PlanResult r = MilpPlanner(o).solve_block(p, L, static_bytes, transient_bytes, budget);
            // The smallest memory any plan reaches, by brute force.
            std::size_t min_b = plans[0].b;
            for (const Point& q : plans) min_b = std::min(min_b, q.b);
            EXPECT_EQ(r.min_possible_bytes, static_bytes + transient_bytes + L * min_b);
            if (!expected) {
                EXPECT_EQ(r.status, PlanResult::infeasible) << r.message;
                EXPECT_NE(r.message.find("infeasible"), std::string::npos);
                EXPECT_NE(r.message.find(std::to_string(r.min_possible_bytes)), std::string::npos) << r.message;
                continue;
            }
            ASSERT_EQ(r.status, PlanResult::optimal) << r.message;
            EXPECT_TRUE(close(r.objective_ms, *expected)) << r.objective_ms << " vs brute force " << *expected;
            check_consistent(r, {{p, L}}, static_bytes, transient_bytes, budget, o);
            EXPECT_EQ(r.per_class[0].size(), 1u);  // one plan for every layer
            later_options += plans_choosing_a_later_option(r);
        }
        (expected ? feasible : infeasible)++;
    }
    std::printf("200 instances: %d feasible, %d infeasible; %zu plans enumerated, at most %zu for one\n", feasible,
                infeasible, enumerated, largest);
    EXPECT_GE(feasible, 100);
    EXPECT_GE(infeasible, 20);
    EXPECT_GT(later_options, 0) << "no optimum chose a second or third codec: the codec choice went untested";
}

TEST(MilpPlanner, BlockFormMatchesBruteForceOnDenseProblems) {
    // Up to 10^6 plans each (3 to 5 decisions per tensor): the MILP's branch and bound has real
    // work to do.
    std::mt19937 rng(31337);
    int feasible = 0;
    for (int instance = 0; instance < 20; ++instance) {
        const BlockProblem p = random_problem(rng, 9 + static_cast<int>(rng() % 4), true, 1000000);
        const int L = 1 + static_cast<int>(rng() % 48);
        const std::size_t budget = random_budget(rng, 1000, L * min_block_bytes(p), L * max_block_bytes(p));
        const PlannerOptions o = random_weights(rng);
        const auto plans = all_plans(p);
        const auto expected = brute_block(plans, L, 600, 400, budget, o);
        SCOPED_TRACE("instance " + std::to_string(instance) + " plans=" + std::to_string(plans.size()));
        const PlanResult r = MilpPlanner(o).solve_block(p, L, 600, 400, budget);
        if (!expected) {
            EXPECT_EQ(r.status, PlanResult::infeasible);
            continue;
        }
        ++feasible;
        ASSERT_EQ(r.status, PlanResult::optimal) << r.message;
        EXPECT_TRUE(close(r.objective_ms, *expected)) << r.objective_ms << " vs brute force " << *expected;
        check_consistent(r, {{p, L}}, 600, 400, budget, o);
    }
    EXPECT_GE(feasible, 8);
}

TEST(MilpPlanner, BlockFormWithSeveralClassesMatchesBruteForce) {
    // Block granularity with two classes: one plan per class (joint MILP).
    std::mt19937 rng(77);
    for (int instance = 0; instance < 30; ++instance) {
        SCOPED_TRACE("instance " + std::to_string(instance));
        std::vector<LayerClass> classes = {{random_problem(rng, 1 + rng() % 6), 1 + static_cast<int>(rng() % 3)},
                                           {random_problem(rng, 1 + rng() % 6), 1 + static_cast<int>(rng() % 3)}};
        std::size_t min_act = 0, max_act = 0;
        for (const auto& c : classes)
            min_act += c.layer_count * min_block_bytes(c.problem),
                max_act += c.layer_count * max_block_bytes(c.problem);
        const std::size_t budget = random_budget(rng, 100, min_act, max_act);
        const PlannerOptions o = random_weights(rng);
        std::optional<double> expected;
        const auto a = all_plans(classes[0].problem), b = all_plans(classes[1].problem);
        for (const Point& x : a)
            for (const Point& y : b) {
                if (100 + classes[0].layer_count * x.b + classes[1].layer_count * y.b > budget) continue;
                const double v =
                    classes[0].layer_count * weighted(o, x.t, x.b) + classes[1].layer_count * weighted(o, y.t, y.b);
                if (!expected || v < *expected) expected = v;
            }
        const PlanResult r = MilpPlanner(o).solve_block(classes, 60, 40, budget);
        if (!expected) {
            EXPECT_EQ(r.status, PlanResult::infeasible);
            continue;
        }
        ASSERT_EQ(r.status, PlanResult::optimal) << r.message;
        EXPECT_TRUE(close(r.objective_ms, *expected)) << r.objective_ms << " vs " << *expected;
        check_consistent(r, classes, 60, 40, budget, o);
    }
}

// ---------------------------------------------------------------- the global form

TEST(MilpPlanner, GlobalFormMatchesBruteForceOverPerLayerChoices) {
    std::mt19937 rng(4242);
    int feasible = 0, mixed = 0;
    for (int instance = 0; instance < 60; ++instance) {
        const int n_classes = 1 + static_cast<int>(rng() % 2);
        std::vector<LayerClass> classes;
        int layers = 0;
        for (int c = 0; c < n_classes; ++c) {
            const int L = 1 + static_cast<int>(rng() % (n_classes == 1 ? 3 : 2));
            // Sometimes the second class is a copy of the first (identical parts are merged).
            const bool copy = c == 1 && rng() % 3 == 0;
            classes.push_back({copy ? classes[0].problem : random_problem(rng, 4 + static_cast<int>(rng() % 2)), L});
            layers += L;
        }
        std::size_t min_act = 0, max_act = 0;
        for (const auto& c : classes)
            min_act += c.layer_count * min_block_bytes(c.problem),
                max_act += c.layer_count * max_block_bytes(c.problem);
        const std::size_t static_bytes = rng() % 500, transient_bytes = rng() % 500;
        const std::size_t budget = random_budget(rng, static_bytes + transient_bytes, min_act, max_act);
        const PlannerOptions base = random_weights(rng);
        const auto expected = brute_global(classes, static_bytes, transient_bytes, budget, base);
        for (bool split : {true, false}) {
            SCOPED_TRACE("instance " + std::to_string(instance) + " classes=" + std::to_string(n_classes) +
                         " layers=" + std::to_string(layers) + (split ? " split" : " whole-block frontier"));
            PlannerOptions o = base;
            o.granularity = PlanGranularity::global;
            o.split_independent_parts = split;
            const PlanResult r = MilpPlanner(o).solve(classes, static_bytes, transient_bytes, budget);
            if (!expected) {
                EXPECT_EQ(r.status, PlanResult::infeasible) << r.message;
                continue;
            }
            ASSERT_EQ(r.status, PlanResult::optimal) << r.message;
            EXPECT_TRUE(close(r.objective_ms, *expected)) << r.objective_ms << " vs brute force " << *expected;
            check_consistent(r, classes, static_bytes, transient_bytes, budget, o);
            // Never worse than one plan per class.
            PlannerOptions ob = base;
            const PlanResult block = MilpPlanner(ob).solve_block(classes, static_bytes, transient_bytes, budget);
            if (block.status != PlanResult::infeasible) {
                EXPECT_LE(r.objective_ms, block.objective_ms * (1 + 1e-9) + 1e-9);
            }
            if (split) {
                for (const auto& c : r.per_class) mixed += c.size() > 1;
            }
        }
        feasible += expected.has_value();
    }
    EXPECT_GE(feasible, 40);
    EXPECT_GT(mixed, 0);  // some optimum mixes plans within a class
}

TEST(MilpPlanner, FrontierIsExactlyTheParetoSetOfAllPlans) {
    std::mt19937 rng(99);
    const MilpPlanner planner;
    for (int instance = 0; instance < 50; ++instance) {
        SCOPED_TRACE("instance " + std::to_string(instance));
        const BlockProblem p = random_problem(rng, 1 + static_cast<int>(rng() % 10));
        bool exact = false;
        const auto frontier = planner.pareto_frontier(p, std::numeric_limits<std::size_t>::max(), &exact);
        EXPECT_TRUE(exact);
        const auto expected = brute_frontier(p);
        ASSERT_EQ(frontier.size(), expected.size());
        const auto plans = all_plans(p);
        for (std::size_t i = 0; i < frontier.size(); ++i) {
            const FrontierPoint& f = frontier[i];
            const BlockCost c = evaluate_block(p, f.decisions);
            EXPECT_EQ(c.bytes, f.bytes);
            EXPECT_EQ(c.extra_ms, f.extra_ms);
            EXPECT_EQ(f.bytes, expected[i].second);
            EXPECT_TRUE(close(f.extra_ms, expected[i].first));
            if (i > 0) {
                EXPECT_LT(f.bytes, frontier[i - 1].bytes);
                EXPECT_GT(f.extra_ms, frontier[i - 1].extra_ms);
            }
            for (const Point& q : plans)  // nothing dominates a frontier point
                EXPECT_FALSE(q.t <= f.extra_ms && q.b <= f.bytes && (q.t < f.extra_ms || q.b < f.bytes));
        }
        // A byte cap cuts the frontier at the cap.
        if (frontier.size() > 2) {
            const std::size_t cap = frontier[1].bytes;
            const auto cut = planner.pareto_frontier(p, cap);
            ASSERT_EQ(cut.size(), frontier.size() - 1);
            EXPECT_EQ(cut[0].bytes, cap);
        }
    }
}

// ---------------------------------------------------------------- limits and errors

TEST(MilpPlanner, InfeasibleBudgetNamesTheSmallestPlan) {
    BlockProblem p;
    p.tensors = {{"x", 1000, {}, 0, {}, true},
                 {"a", 4000, {{Codec::group_int4, 500, 1.0}}, 3.0, {0}},
                 {"b", 2000, {}, 0, {1}, false, /*can_recompute=*/false}};
    // Smallest: x kept (1000) + a dropped (0) + b kept (2000) = 3000 per layer.
    EXPECT_EQ(min_block_bytes(p), 3000u);
    for (auto g : {PlanGranularity::block, PlanGranularity::global}) {
        PlannerOptions o = untimed_options();
        o.granularity = g;
        const PlanResult r = MilpPlanner(o).solve({{p, 4}}, 10000, 500, 10000 + 500 + 4 * 3000 - 1);
        EXPECT_EQ(r.status, PlanResult::infeasible);
        EXPECT_EQ(r.min_possible_bytes, 10000u + 500 + 12000);
        EXPECT_NE(r.message.find("22500 bytes"), std::string::npos) << r.message;
        const PlanResult ok = MilpPlanner(o).solve({{p, 4}}, 10000, 500, 10000 + 500 + 4 * 3000);
        ASSERT_EQ(ok.status, PlanResult::optimal) << ok.message;
        EXPECT_EQ(ok.total_bytes, 22500u);
        EXPECT_DOUBLE_EQ(ok.extra_ms, 4 * 3.0);
        // Below static + transient alone.
        EXPECT_EQ(MilpPlanner(o).solve({{p, 4}}, 10000, 500, 9000).status, PlanResult::infeasible);
    }
}

TEST(MilpPlanner, TimeLimitGivesAFeasibleFlaggedPlan) {
    std::mt19937 rng(5);
    const BlockProblem p = random_problem(rng, 12);
    PlannerOptions o;
    o.time_limit_s = 1e-9;  // expires before any solve
    const std::size_t budget = 100 + 8 * (min_block_bytes(p) + max_block_bytes(p)) / 2;
    for (auto g : {PlanGranularity::block, PlanGranularity::global}) {
        o.granularity = g;
        const PlanResult r = MilpPlanner(o).solve({{p, 8}}, 100, 0, budget);
        EXPECT_EQ(r.status, PlanResult::suboptimal) << r.message;
        EXPECT_NE(r.message.find("time limit"), std::string::npos) << r.message;
        check_consistent(r, {{p, 8}}, 100, 0, budget, o);
    }
}

TEST(MilpPlanner, RejectsMalformedProblemsAndOptions) {
    BlockProblem p;
    p.tensors.resize(2);
    p.tensors[0].name = "x", p.tensors[1].name = "y";
    p.tensors[0].bytes = p.tensors[1].bytes = 64;
    p.tensors[0].inputs = {1};  // not an earlier tensor
    EXPECT_THROW(MilpPlanner().solve_block(p, 1, 0, 0, 1000), std::invalid_argument);
    p.tensors[0].inputs = {};
    p.tensors[1].recompute_ms = -1;
    EXPECT_THROW(MilpPlanner().solve_block(p, 1, 0, 0, 1000), std::invalid_argument);
    p.tensors[1].recompute_ms = 1;
    p.tensors[1].transient = true;
    p.tensors[1].must_keep = true;
    EXPECT_THROW(validate_problem(p), std::invalid_argument);
    PlannerOptions o;
    o.memory_weight = -1;
    EXPECT_THROW(MilpPlanner{o}, std::invalid_argument);
    EXPECT_EQ(parse_plan_granularity("global"), PlanGranularity::global);
    EXPECT_THROW(parse_plan_granularity("layer"), std::invalid_argument);
    EXPECT_THROW(evaluate_block(p, {{Policy::keep}}), std::invalid_argument);
    // A compress option that is not there, or an option on a keep.
    BlockProblem q;
    q.tensors = {{"a", 64, {{Codec::group_int4, 32, 1.0}}, 1.0, {}}};
    EXPECT_NO_THROW(evaluate_block(q, {{Policy::compress, 0}}));
    EXPECT_THROW(evaluate_block(q, {{Policy::compress, 1}}), std::invalid_argument);
    EXPECT_THROW(evaluate_block(q, {{Policy::keep, 1}}), std::invalid_argument);
    q.tensors[0].compress_options[0].ms = -1;
    EXPECT_THROW(validate_problem(q), std::invalid_argument);
}

// An op with two outputs (CUDA's fused fc GEMM writes fch and fch_gelu): dropping both re-runs it
// once, so its time is paid once, in the cost and in both of the planner's models.
TEST(MilpPlanner, AnOpWithSeveralDroppedOutputsIsPaidOnce) {
    BlockProblem p;
    p.tensors = {{"x", 128, {}, 0, {}, true}, {"fch", 512, {}, 5.0, {0}}, {"fch_gelu", 512, {}, 5.0, {0}}};
    p.tensors[2].same_op_as = 1;
    EXPECT_DOUBLE_EQ(evaluate_block(p, {{}, {Policy::recompute}, {Policy::recompute}}).extra_ms, 5.0);
    EXPECT_DOUBLE_EQ(evaluate_block(p, {{}, {Policy::keep}, {Policy::recompute}}).extra_ms, 5.0);
    EXPECT_DOUBLE_EQ(evaluate_block(p, {{}, {Policy::keep}, {Policy::keep}}).extra_ms, 0.0);
    for (const bool literal : {false, true}) {
        PlannerOptions o = untimed_options();
        o.literal_model = literal;
        const PlanResult r = MilpPlanner(o).solve({{p, 2}}, 0, 0, 2 * 128);
        ASSERT_EQ(r.status, PlanResult::optimal) << r.message;
        EXPECT_DOUBLE_EQ(r.extra_ms, 2 * 5.0) << "two layers, one re-run each";
    }
    BlockProblem other_inputs = p;
    other_inputs.tensors[2].inputs.clear();
    EXPECT_THROW(validate_problem(other_inputs), std::invalid_argument);
    BlockProblem not_first = p;
    not_first.tensors.push_back(p.tensors[2]);
    not_first.tensors[3].same_op_as = 2;  // names a second output, not the op's first
    EXPECT_THROW(validate_problem(not_first), std::invalid_argument);
}

// ---------------------------------------------------------------- the memory row's tightening

// Two binary items to pick, by value (the objective is minimised: -value), within a memory row:
// item 0 is worth 10 and weighs 10 units, item 1 is worth 5 and weighs 9.
lp::Model two_items(double rhs) { return lp::Model({lp::Column{}, lp::Column{}}, {}, {-10.0, -5.0}, {10.0, 9.0}, rhs); }

// solve_to_fit on two_items(10) with a memory unit of `unit` bytes and `overshoot` standing in for
// the caller's exact check, without a time limit; the answer goes to x and the solves are counted.
lp::Model::Fit fit_two_items(double unit, std::vector<double>& x, int& solves,
                             const std::function<std::optional<std::size_t>(const std::vector<double>&)>& overshoot) {
    lp::Model model = two_items(10);
    lp::Deadline deadline = lp::deadline_after(lp::Clock::now(), 600);
    return model.solve_to_fit(10, unit, deadline, untimed_options(), x, solves, overshoot);
}

// lp::Model::solve_to_fit tightens the memory row by the overshoot the caller's exact check
// reports (at least one unit), gives up after kFitTries, and stops at an unusable answer. Its
// callers' checks never report a slip with lp_solve on real problems, so the loop is driven here
// by a check that says whatever the test needs.
TEST(MilpPlanner, SolveToFitTightensTheMemoryRowByTheOvershoot) {
    const PlannerOptions o = untimed_options();
    std::vector<double> x;
    {
        // rhs 10 takes item 0; 3 bytes over at unit 1 leaves rhs 7, where neither fits (a
        // tightening by one unit, to 9, would take item 1).
        int solves = 0, checks = 0;
        const auto fit = fit_two_items(1.0, x, solves, [&](const std::vector<double>& a) {
            ++checks;
            return std::optional<std::size_t>(a[0] > 0.5 ? 3 : 0);
        });
        EXPECT_TRUE(fit.fits);
        EXPECT_EQ(fit.outcome, lp::Model::Outcome::optimal);
        EXPECT_EQ(solves, 2);
        EXPECT_EQ(checks, 2);
        EXPECT_NEAR(x[0], 0.0, 1e-9);
        EXPECT_NEAR(x[1], 0.0, 1e-9);
    }
    {
        // 3 bytes over at a unit of 10 bytes: one unit tighter (rhs 9) takes item 1.
        int solves = 0;
        const auto fit = fit_two_items(10.0, x, solves, [&](const std::vector<double>& a) {
            return std::optional<std::size_t>(a[0] > 0.5 ? 3 : 0);
        });
        EXPECT_TRUE(fit.fits);
        EXPECT_EQ(solves, 2);
        EXPECT_NEAR(x[0], 0.0, 1e-9);
        EXPECT_NEAR(x[1], 1.0, 1e-9);
    }
    {
        // Always over: kFitTries solves, then no fit (an answer was found: the outcome says so).
        int solves = 0;
        const auto fit =
            fit_two_items(1.0, x, solves, [](const std::vector<double>&) { return std::optional<std::size_t>(1); });
        EXPECT_FALSE(fit.fits);
        EXPECT_EQ(fit.outcome, lp::Model::Outcome::optimal);
        EXPECT_EQ(solves, lp::Model::kFitTries);
    }
    {
        // An unusable answer ends the search at once.
        int solves = 0;
        const auto fit =
            fit_two_items(1.0, x, solves, [](const std::vector<double>&) { return std::optional<std::size_t>(); });
        EXPECT_FALSE(fit.fits);
        EXPECT_EQ(solves, 1);
    }
    {
        // No answer (item 0 required by a row, with room for 5 units only): infeasible, never checked.
        lp::Model model({lp::Column{}, lp::Column{}}, {lp::Row{{0}, {1.0}, lp::RowType::eq, 1.0}}, {-10.0, -5.0},
                        {10.0, 9.0}, 5);
        lp::Deadline deadline = lp::deadline_after(lp::Clock::now(), 600);
        int solves = 0, checks = 0;
        const auto fit = model.solve_to_fit(5, 1.0, deadline, o, x, solves, [&](const std::vector<double>&) {
            ++checks;
            return std::optional<std::size_t>(0);
        });
        EXPECT_FALSE(fit.fits);
        EXPECT_EQ(fit.outcome, lp::Model::Outcome::infeasible);
        EXPECT_EQ(checks, 0);
    }
}

TEST(MilpPlanner, EdgeCases) {
    // Nothing to decide (everything must be kept), and zero layers.
    BlockProblem p;
    p.tensors = {{"x", 100, {}, 0, {}, true}, {"s", 8, {}, 0, {}, true}};
    for (auto g : {PlanGranularity::block, PlanGranularity::global}) {
        PlannerOptions o = untimed_options();
        o.granularity = g;
        const PlanResult r = MilpPlanner(o).solve({{p, 3}}, 0, 0, 324);
        ASSERT_EQ(r.status, PlanResult::optimal) << r.message;
        EXPECT_EQ(r.activation_bytes, 324u);
        EXPECT_EQ(MilpPlanner(o).solve({{p, 3}}, 0, 0, 323).status, PlanResult::infeasible);
        const PlanResult none = MilpPlanner(o).solve({{p, 0}}, 10, 0, 10);
        ASSERT_EQ(none.status, PlanResult::optimal) << none.message;
        EXPECT_TRUE(none.per_layer.empty());
    }
}

// ---------------------------------------------------------------- the GPT-2 block

// The engine-side mapping documented in src/adacc/block_problem.h: the block's saved tensors in forward
// order (x and the layernorm statistics must_keep), 64-byte-aligned sizes, compressed sizes from
// the codecs' exact bounds, op times from FLOPs at 100 GFLOP/s or the output bytes at 10 GB/s
// (whichever is longer), codec time = both directions at 10 GB/s. collapse: transients (attproj,
// fcproj) folded into their consumer's op; otherwise listed with transient = true.
BlockProblem gpt_block_problem(const GPTConfig& cfg, const BlockGraph& g, int B, int T, bool collapse) {
    const std::size_t N = static_cast<std::size_t>(B) * T;
    const CodecParams params;
    auto align64 = [](std::size_t b) { return (b + 63) / 64 * 64; };
    auto op_ms = [&](const OpInfo& op) {
        std::size_t out_bytes = 0;
        for (TensorKind o : op.outputs) out_bytes += g.tensor(o).bytes();
        return std::max(op.forward_flops / 100e9, static_cast<double>(out_bytes) / 10e9) * 1e3;
    };
    BlockProblem p;
    int index[kNumTensorKinds];
    std::fill(index, index + kNumTensorKinds, -1);
    std::function<void(const OpInfo&, std::vector<int>&, double&)> expand = [&](const OpInfo& op, std::vector<int>& in,
                                                                                double& ms) {
        ms += op_ms(op);
        for (TensorKind u : op.inputs) {
            const int idx = index[static_cast<int>(u)];
            if (idx >= 0) {
                if (std::find(in.begin(), in.end(), idx) == in.end()) in.push_back(idx);
            } else {
                expand(*g.producer(u), in, ms);  // a collapsed transient
            }
        }
    };
    for (const TensorInfo& t : g.tensors()) {
        if (t.kind == TensorKind::out || t.numel == 0) continue;  // out is the next block's x; absent tensors
        const bool transient = !t.saved;
        if (transient && collapse) continue;
        PlanTensor pt;
        pt.name = t.name;
        if (t.kind == TensorKind::x || t.tiny) {
            pt.bytes = align64(t.bytes());
            pt.must_keep = true;
        } else {
            const OpInfo* op = g.producer(t.kind);
            if (collapse) {
                expand(*op, pt.inputs, pt.recompute_ms);
            } else {
                pt.recompute_ms = op_ms(*op);
                for (TensorKind u : op->inputs) pt.inputs.push_back(index[static_cast<int>(u)]);
            }
            if (transient) {
                pt.transient = true;
            } else {
                pt.bytes = align64(t.bytes());
                const std::size_t rows = t.kind == TensorKind::att ? N * cfg.n_head : N;
                const std::size_t packed = align64(codec_max_bytes(adacc_codec(t.kind), rows, t.numel / rows, params));
                pt.compress_options = {
                    {adacc_codec(t.kind), packed, 2.0 * static_cast<double>(pt.bytes + packed) / 10e9 * 1e3}};
            }
        }
        index[static_cast<int>(t.kind)] = static_cast<int>(p.tensors.size());
        p.tensors.push_back(std::move(pt));
    }
    return p;
}

TEST(MilpPlanner, GptBlockShapeMatchesBruteForce) {
    GPTConfig cfg = *gpt_preset("gpt-117m");
    cfg.dropout = 0.1f;  // the three dropout masks are saved tensors too
    const int B = 8, T = 1024;
    const BlockGraph g(cfg, B, T);
    const BlockProblem collapsed = gpt_block_problem(cfg, g, B, T, true);
    const BlockProblem with_transients = gpt_block_problem(cfg, g, B, T, false);
    // 16 saved tensors: x, ln1 (+mean, rstd), qkv, att, att_mask, atty, res1_mask, x2, ln2
    // (+mean, rstd), fch, fch_gelu, res2_mask; 11 of them planned.
    ASSERT_EQ(collapsed.tensors.size(), 16u);
    ASSERT_EQ(with_transients.tensors.size(), 18u);
    // The DAG: x2's recompute reads x, atty and res1_mask once attproj is collapsed into it.
    const auto& x2 = collapsed.tensors[9];
    ASSERT_EQ(x2.name, "x2");
    std::vector<std::string> x2_inputs;
    for (int i : x2.inputs) x2_inputs.push_back(collapsed.tensors[i].name);
    EXPECT_EQ(x2_inputs, (std::vector<std::string>{"x", "atty", "res1_mask"}));
    EXPECT_EQ(collapsed.tensors[5].name, "att");
    EXPECT_EQ(collapsed.tensors[5].bytes, static_cast<std::size_t>(B) * cfg.n_head * T * T * 4);

    const auto plans = all_plans(collapsed);
    EXPECT_EQ(plans.size(), 177147u);  // 3^11
    const auto plans_t = all_plans(with_transients);
    const std::size_t static_bytes = static_cast<std::size_t>(cfg.parameter_count()) * 16;
    const std::size_t transient_bytes = max_block_bytes(collapsed);
    const int L = cfg.n_layer;
    const std::size_t lo = min_block_bytes(collapsed), hi = max_block_bytes(collapsed);
    EXPECT_EQ(lo, min_block_bytes(with_transients));
    for (double f : {-0.01, 0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.7, 0.9, 1.0}) {
        SCOPED_TRACE("budget fraction " + std::to_string(f));
        const std::size_t budget = static_bytes + transient_bytes + L * lo +
                                   static_cast<std::size_t>(f * static_cast<double>(L * (hi - lo))) - (f < 0 ? 1 : 0);
        const PlannerOptions o = untimed_options();
        const auto expected = brute_block(plans, L, static_bytes, transient_bytes, budget, o);
        const auto expected_t = brute_block(plans_t, L, static_bytes, transient_bytes, budget, o);
        ASSERT_EQ(expected.has_value(), expected_t.has_value());
        const PlanResult r = MilpPlanner(o).solve_block(collapsed, L, static_bytes, transient_bytes, budget);
        const PlanResult rt = MilpPlanner(o).solve_block(with_transients, L, static_bytes, transient_bytes, budget);
        if (!expected) {
            EXPECT_EQ(r.status, PlanResult::infeasible);
            EXPECT_EQ(rt.status, PlanResult::infeasible);
            continue;
        }
        EXPECT_TRUE(close(*expected, *expected_t));  // collapsing transients changes nothing
        ASSERT_EQ(r.status, PlanResult::optimal) << r.message;
        ASSERT_EQ(rt.status, PlanResult::optimal) << rt.message;
        EXPECT_TRUE(close(r.objective_ms, *expected)) << r.objective_ms << " vs " << *expected;
        EXPECT_TRUE(close(rt.objective_ms, *expected)) << rt.objective_ms << " vs " << *expected;
        check_consistent(r, {{collapsed, L}}, static_bytes, transient_bytes, budget, o);

        // The global form: per-layer plans, never worse, the same with or without transients.
        PlannerOptions og = untimed_options();
        og.granularity = PlanGranularity::global;
        const PlanResult gl = MilpPlanner(og).solve({{collapsed, L}}, static_bytes, transient_bytes, budget);
        const PlanResult gt = MilpPlanner(og).solve({{with_transients, L}}, static_bytes, transient_bytes, budget);
        ASSERT_EQ(gl.status, PlanResult::optimal) << gl.message;
        ASSERT_EQ(gt.status, PlanResult::optimal) << gt.message;
        EXPECT_LE(gl.objective_ms, r.objective_ms * (1 + 1e-9));
        EXPECT_TRUE(close(gl.objective_ms, gt.objective_ms)) << gl.objective_ms << " vs " << gt.objective_ms;
        check_consistent(gl, {{collapsed, L}}, static_bytes, transient_bytes, budget, og);
    }
}

}  // namespace
}  // namespace adacc
