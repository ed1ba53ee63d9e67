#include "src/adacc/budget_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/engine/memory_report.h"

namespace adacc {

namespace {

double op_time(const Profile& profile, const std::string& op_name) {
    for (std::size_t i = 0; i < profile.op_names.size(); ++i)
        if (profile.op_names[i] == op_name) return profile.op_ms[i];
    return 0.0;
}

// The saved tensors op `op` reads, with transient inputs (attproj, fcproj) replaced by the
// inputs of their producers; `ms` accumulates the forward time of the collapsed producers.
void collect_inputs(const BlockGraph& block, const Profile& profile, const OpInfo& op, std::vector<TensorKind>& inputs,
                    double& ms) {
    for (TensorKind in : op.inputs) {
        if (in == TensorKind::x || block.tensor(in).saved) {
            inputs.push_back(in);
            continue;
        }
        const OpInfo* producer = block.producer(in);
        ms += op_time(profile, producer->name);
        collect_inputs(block, profile, *producer, inputs, ms);
    }
}

// The compress options of one tensor: the candidates within the error tolerance that no other
// admitted candidate matches or beats in bytes, time and error at once (see CodecChoice).
std::vector<CompressOption> compress_options(const GPTConfig& config, const TensorInfo& info, int B, int T,
                                             const TensorProfile& measured, const CodecParams& params,
                                             const CodecChoice& choice, int layer) {
    std::vector<CompressOption> admitted;
    for (Codec codec : candidate_codecs(info.kind, choice.candidates)) {
        const CodecMeasurement* m = measured.find(codec);
        if (m == nullptr) continue;
        const double error = layer_error(*m, layer);
        if (error > choice.max_error) continue;
        admitted.push_back({codec, tape_aligned(compressed_bound(config, info, codec, B, T, params)),
                            m->compress_ms + m->decompress_ms, error});
    }
    auto as_good = [](const CompressOption& a, const CompressOption& b) {  // a is no worse than b anywhere
        return a.bytes <= b.bytes && a.ms <= b.ms && a.relative_error <= b.relative_error;
    };
    std::vector<CompressOption> kept;
    for (std::size_t i = 0; i < admitted.size(); ++i) {
        bool dominated = false;
        for (std::size_t j = 0; j < admitted.size() && !dominated; ++j)
            dominated = j != i && as_good(admitted[j], admitted[i]) && (j < i || !as_good(admitted[i], admitted[j]));
        if (!dominated) kept.push_back(admitted[i]);
    }
    return kept;
}

// `classes` with codec `codec` removed from every tensor's compress options.
LayerClasses without_codec(LayerClasses classes, Codec codec) {
    for (BlockProblem& problem : classes.problems)
        for (PlanTensor& t : problem.tensors)
            std::erase_if(t.compress_options, [&](const CompressOption& o) { return o.codec == codec; });
    return classes;
}

bool same_options(const BlockProblem& a, const BlockProblem& b) {
    for (std::size_t i = 0; i < a.tensors.size(); ++i) {
        const auto &x = a.tensors[i].compress_options, &y = b.tensors[i].compress_options;
        if (x.size() != y.size()) return false;
        for (std::size_t o = 0; o < x.size(); ++o)
            if (x[o].codec != y[o].codec) return false;
    }
    return true;
}

// The solver numbers layers class by class; the model numbers them 0 .. L-1. Class c's answers
// go to its layers in increasing order.
std::vector<BlockPlan> in_model_order(const LayerClasses& classes, const std::vector<BlockPlan>& by_class) {
    std::vector<BlockPlan> out(classes.layer_class.size());
    std::size_t next = 0;
    for (int c = 0; c < static_cast<int>(classes.problems.size()); ++c)
        for (std::size_t l = 0; l < out.size(); ++l)
            if (classes.layer_class[l] == c) out[l] = by_class[next++];
    return out;
}

ActivationPlan to_activation_plan(const BlockGraph& block, const std::vector<TensorKind>& kinds,
                                  const LayerClasses& classes, const std::vector<BlockPlan>& per_layer) {
    const int n_layer = static_cast<int>(per_layer.size());
    ActivationPlan plan(block, n_layer);
    for (int l = 0; l < n_layer; ++l)
        for (std::size_t i = 0; i < kinds.size(); ++i) {
            const BlockProblem& problem = classes.problems[classes.layer_class[l]];
            const Decision& d = per_layer[l][i];
            switch (d.policy) {
                case Policy::keep: break;
                case Policy::recompute: plan.set(l, kinds[i], {Policy::recompute}); break;
                case Policy::compress:
                    plan.set(l, kinds[i], {Policy::compress, problem.tensors[i].compress_options[d.option].codec});
                    break;
            }
        }
    return plan;
}

}  // namespace

CodecParams codec_params_for(const Profile& profile, const GPTConfig& config) {
    CodecParams params = profile.codec_params;
    double most = 0;
    // Outlier channels are columns: a row's width, whatever the tensor (one sequence of one batch
    // row gives it; only the attention matrices' rows are T wide).
    const int T = std::max(1, profile.seq);
    const BlockGraph graph(config, 1, T);
    for (const auto& t : profile.tensors) {
        const CodecMeasurement* outlier = t.find(Codec::outlier_int4);
        if (outlier == nullptr) continue;
        const double cols =
            static_cast<double>(graph.tensor(t.kind).numel) / static_cast<double>(tensor_rows(config, t.kind, 1, T));
        most = std::max(most, std::round(outlier->outlier_fraction * cols));
    }
    params.max_outlier_channels = std::max(4, static_cast<int>(2 * most));
    return params;
}

BlockProblem build_block_problem(const GPTConfig& config, int B, int T, const Profile& profile, bool allow_compress,
                                 const CodecChoice& codecs, std::vector<TensorKind>* kinds_out, DType activation,
                                 int layer) {
    // The profiled device's ops: their times are what a recompute costs.
    const BlockGraph block(config, B, T, activation, block_fusions(profile.block.device));
    const CodecParams params = codec_params_for(profile, config);
    BlockProblem problem;
    std::vector<TensorKind> kinds;
    auto index_of = [&](TensorKind k) {
        return static_cast<int>(std::find(kinds.begin(), kinds.end(), k) - kinds.begin());
    };
    auto add = [&](TensorKind k, PlanTensor t) {
        kinds.push_back(k);
        problem.tensors.push_back(std::move(t));
    };
    PlanTensor x;
    x.name = "x";
    x.bytes = tape_aligned(block.tensor(TensorKind::x).bytes());
    x.must_keep = true;
    x.can_recompute = false;
    add(TensorKind::x, x);
    for (const OpInfo& op : block.ops()) {
        int first_output = -1;  // the op's first planned output: one re-run makes them all
        for (TensorKind k : op.outputs) {
            const TensorInfo& info = block.tensor(k);
            if (!info.saved || info.numel == 0) continue;
            PlanTensor t;
            t.same_op_as = first_output;
            t.name = info.name;
            t.bytes = tape_aligned(info.bytes());
            t.must_keep = info.tiny;
            double ms = op_time(profile, op.name);
            std::vector<TensorKind> inputs;
            collect_inputs(block, profile, op, inputs, ms);
            t.recompute_ms = ms;
            for (TensorKind in : inputs) t.inputs.push_back(index_of(in));
            const TensorProfile* measured = profile.find(k);
            if (allow_compress && !info.tiny && measured != nullptr)
                t.compress_options = compress_options(config, info, B, T, *measured, params, codecs, layer);
            if (first_output < 0) first_output = static_cast<int>(kinds.size());
            add(k, t);
        }
    }
    if (kinds_out) *kinds_out = kinds;
    return problem;
}

LayerClasses layer_classes(const GPTConfig& config, int B, int T, const Profile& profile, bool allow_compress,
                           const CodecChoice& codecs, DType activation) {
    LayerClasses out;
    out.layer_class.assign(config.n_layer, 0);
    // Only the profiled layers differ (layers beyond the slice take its deepest layer's figures).
    int profiled = 1;
    for (const auto& t : profile.tensors)
        for (const auto& m : t.codecs) profiled = std::max(profiled, static_cast<int>(m.layer_errors.size()));
    std::vector<int> class_of_profiled;
    for (int p = 0; p < profiled; ++p) {
        BlockProblem problem = build_block_problem(config, B, T, profile, allow_compress, codecs, nullptr, activation,
                                                   profiled > 1 ? p : -1);
        int c = 0;
        while (c < static_cast<int>(out.problems.size()) && !same_options(out.problems[c], problem)) ++c;
        if (c == static_cast<int>(out.problems.size())) out.problems.push_back(std::move(problem));
        class_of_profiled.push_back(c);
    }
    for (int l = 0; l < config.n_layer; ++l) out.layer_class[l] = class_of_profiled[profiled_layer(l, profiled)];
    return out;
}

namespace {

// plan_adacc's search: solves candidate layer classes and keeps in `out` the best answer that fits
// as allocated. Memory outside the per-layer block slots (the static arenas, the tape's slots
// outside the blocks: embedding mask, final layernorm; the workspace) comes from the model's own
// accounting: a keep-all plan's tape minus its block slots.
class PlanSearch {
public:
    PlanSearch(const GPTConfig& config, const BlockGraph& block, int B, int T, std::uint64_t budget_bytes,
               const PlannerOptions& options, AdaccPlan& out)
        : config_(config), block_(block), B_(B), T_(T), budget_(budget_bytes), planner_(options), out_(out) {
        const ModelMemory keep_all = memory_of(out.plan);
        std::size_t block_bytes = 0;  // the same in every class: only compress options differ
        for (const auto& t : out.classes.problems.front().tensors) block_bytes += t.bytes;
        tape_outside_blocks_ = keep_all.tape - block_bytes * config.n_layer;
        static_bytes_ = keep_all.static_bytes() + keep_all.backend;  // a GPU backend's fixed memory too
    }

    // Solves `layer_classes`: first assuming every plannable tensor needs a workspace buffer and the
    // codecs their scratch (widest_plan), then with the workspace the last answer really needs.
    // `out` takes an answer that fits as allocated and beats the one it holds; when none fits,
    // infeasible() says why.
    void solve(const LayerClasses& layer_classes) {
        std::vector<LayerClass> classes;
        for (const BlockProblem& problem : layer_classes.problems) classes.push_back({problem, 0});
        for (int c : layer_classes.layer_class) ++classes[c].layer_count;
        std::size_t workspace = memory_of(widest_plan(layer_classes)).workspace();
        double last_ms = 0;
        for (int round = 0; round < 4; ++round) {
            PlanResult result = planner_.solve(classes, static_bytes_, workspace + tape_outside_blocks_, budget_);
            if (result.status == PlanResult::infeasible) {
                if (!have_plan_ && round == 0) infeasible_ = result.message;
                break;
            }
            result.per_layer = in_model_order(layer_classes, result.per_layer);
            const ActivationPlan plan = to_activation_plan(block_, out_.kinds, layer_classes, result.per_layer);
            const ModelMemory memory = memory_of(plan);
            if (memory.total() > budget_) break;  // the answer would not fit as allocated: keep the last one
            if (round > 0 && result.objective_ms >= last_ms) break;
            last_ms = result.objective_ms;
            if (!have_plan_ || result.objective_ms < out_.result.objective_ms) {
                out_.plan = plan;
                out_.result = result;
                out_.memory = memory;
                out_.classes = layer_classes;
                have_plan_ = true;
            }
            if (memory.workspace() >= workspace) break;  // consistent: nothing more to gain
            workspace = memory.workspace();
        }
        if (!have_plan_ && infeasible_.empty())
            infeasible_ = "no plan fits memory.budget " + format_bytes(budget_) + " once the workspace is counted";
    }
    bool have_plan() const { return have_plan_; }
    const std::string& infeasible() const { return infeasible_; }

private:
    ModelMemory memory_of(const ActivationPlan& plan) const {
        return GPTModel::plan_memory(config_, B_, T_, plan, out_.codec_params, ModelUse::training, out_.target);
    }
    // The plan needing the most workspace and scratch: every tensor with compress options compressed
    // (with the outlier codec where it is an option: only it has scratch), every other recomputed.
    ActivationPlan widest_plan(const LayerClasses& layer_classes) const {
        ActivationPlan widest(block_, config_.n_layer);
        for (int l = 0; l < config_.n_layer; ++l)
            for (std::size_t i = 0; i < out_.kinds.size(); ++i) {
                const auto& compress = layer_classes.problems[layer_classes.layer_class[l]].tensors[i].compress_options;
                if (compress.empty()) {
                    widest.set(l, out_.kinds[i], {Policy::recompute});
                    continue;
                }
                Codec codec = compress.front().codec;
                for (const CompressOption& o : compress)
                    if (o.codec == Codec::outlier_int4) codec = o.codec;
                widest.set(l, out_.kinds[i], {Policy::compress, codec});
            }
        return widest;
    }

    const GPTConfig& config_;
    const BlockGraph& block_;  // at B x T in the target's activation dtype
    const int B_, T_;
    const std::uint64_t budget_;
    const MilpPlanner planner_;
    AdaccPlan& out_;
    std::size_t tape_outside_blocks_ = 0, static_bytes_ = 0;
    std::string infeasible_;
    bool have_plan_ = false;
};

}  // namespace

AdaccPlan plan_adacc(const GPTConfig& config, int B, int T, const Profile& profile, std::uint64_t budget_bytes,
                     bool allow_compress, const PlannerOptions& options, const CodecChoice& codecs,
                     const ComputeTarget& target) {
    const DType activation = device_traits(target).activation;
    const BlockGraph block(config, B, T, activation);
    AdaccPlan out{ActivationPlan(block, config.n_layer), codec_params_for(profile, config), {}, {}, {}, {}, target};
    build_block_problem(config, B, T, profile, allow_compress, codecs, &out.kinds, activation);
    out.classes = layer_classes(config, B, T, profile, allow_compress, codecs, activation);
    PlanSearch search(config, block, B, T, budget_bytes, options, out);
    // Candidates: the layer classes, and one plan replicated over every layer (every layer at the
    // worst profiled layer's errors). The workspace is outside the MILP — every tensor kind
    // materialised in any layer takes a buffer — so mixing plans can cost workspace a replicated
    // plan does not pay; the better answer is kept. When the outlier codec's scratch is what does
    // not fit, the plans without it still may: so a budget recompute-opt meets, adacc meets too.
    std::vector<LayerClasses> candidates{out.classes};
    if (out.classes.problems.size() > 1)
        candidates.push_back({{build_block_problem(config, B, T, profile, allow_compress, codecs, nullptr, activation)},
                              std::vector<int>(config.n_layer, 0)});
    for (const LayerClasses& c : candidates) search.solve(c);
    if (!search.have_plan())
        for (const LayerClasses& c : candidates) search.solve(without_codec(c, Codec::outlier_int4));
    if (!search.have_plan())
        throw SettingError("memory.budget", search.infeasible() + "; raise memory.budget or lower training.batch_size");
    return out;
}

int largest_planned_batch(const GPTConfig& config, const Profile& profile, std::uint64_t budget_bytes,
                          bool allow_compress, const PlannerOptions& options, const CodecChoice& codecs,
                          const ComputeTarget& target, int max_batch) {
    auto fits = [&](int B) {
        try {
            plan_adacc(config, B, profile.seq, rescale_profile(profile, config, B), budget_bytes, allow_compress,
                       options, codecs, target);
            return true;
        } catch (const UserError&) {
            return false;
        }
    };
    return largest_fitting_batch(fits, max_batch);
}

namespace {

// What the planner made of codec `codec` on planned tensor i (see format_plan).
std::string codec_verdict(const AdaccPlan& plan, std::size_t i, const CodecMeasurement& m, const CodecChoice& codecs) {
    bool option = false, any_options = false;
    for (std::size_t l = 0; l < plan.result.per_layer.size(); ++l) {
        const Decision& d = plan.result.per_layer[l][i];
        const auto& options = plan.problem_of(static_cast<int>(l)).tensors[i].compress_options;
        any_options = any_options || !options.empty();
        for (std::size_t o = 0; o < options.size(); ++o) {
            if (options[o].codec != m.codec) continue;
            if (d.policy == Policy::compress && d.option == static_cast<int>(o)) return "chosen";
            option = true;
        }
    }
    if (option) return "option";
    const auto candidates = candidate_codecs(plan.kinds[i], codecs.candidates);
    if (std::find(candidates.begin(), candidates.end(), m.codec) == candidates.end()) return "not a candidate";
    if (m.relative_error > codecs.max_error) return "over tolerance";
    return any_options ? "dominated" : "not compressed";  // recompute-opt compresses nothing
}

// The answer's decisions as format_plan prints them: layer classes of the answer (runs of layers
// with the same decisions) and what each tensor of a class stores.
class PlanRows {
public:
    struct Group {
        int first, last;
        BlockPlan decisions;
    };

    PlanRows(const AdaccPlan& plan, const GPTConfig& config, int B, int T)
        : plan_(plan), block_(config, B, T, device_traits(plan.target).activation) {
        const auto& per_layer = plan.result.per_layer;
        for (int l = 0; l < config.n_layer; ++l) {
            // Equal decisions in another class may index other codecs: a class change starts a group.
            if (!groups_.empty() && groups_.back().decisions == per_layer[l] &&
                plan.classes.layer_class[groups_.back().last] == plan.classes.layer_class[l]) {
                groups_.back().last = l;
                continue;
            }
            groups_.push_back({l, l, per_layer[l]});
        }
    }

    const std::vector<Group>& groups() const { return groups_; }
    static std::string layers_text(const Group& g) {
        return g.first == g.last ? std::to_string(g.first) : std::to_string(g.first) + "-" + std::to_string(g.last);
    }
    std::size_t stored_bytes(const Group& g, std::size_t i) const {
        const Decision& d = g.decisions[i];
        if (d.policy == Policy::keep) return block_.tensor(plan_.kinds[i]).bytes();
        if (d.policy == Policy::recompute) return 0;
        return option(g, i)->bytes;
    }
    // The compress option tensor i of the group uses (null: not compressed).
    const CompressOption* option(const Group& g, std::size_t i) const {
        const Decision& d = g.decisions[i];
        return d.policy == Policy::compress ? &plan_.problem_of(g.first).tensors[i].compress_options[d.option]
                                            : nullptr;
    }
    std::string codec_text(const Group& g, std::size_t i) const {
        const CompressOption* o = option(g, i);
        return o ? codec_name(o->codec) : "";
    }
    std::string error_text(const Group& g, std::size_t i) const {
        const CompressOption* o = option(g, i);
        if (!o || codec_is_lossless(o->codec)) return o ? "0" : "";
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.4f", o->relative_error);
        return buf;
    }

private:
    const AdaccPlan& plan_;
    const BlockGraph block_;
    std::vector<Group> groups_;
};

std::string plan_json(const AdaccPlan& plan, const PlanRows& rows, const Profile& profile, const CodecChoice& codecs,
                      std::uint64_t budget_bytes) {
    const PlanResult& r = plan.result;
    nlohmann::json j;
    j["status"] = plan_status_name(r.status);
    j["solve_ms"] = r.solve_ms;
    j["predicted_tape_bytes"] = plan.memory.tape;
    j["predicted_total_bytes"] = plan.memory.total();
    j["predicted_extra_ms"] = r.extra_ms;
    j["budget_bytes"] = budget_bytes;
    j["message"] = r.message;
    j["decisions"] = nlohmann::json::array();
    const auto& groups = rows.groups();
    for (std::size_t g = 0; g < groups.size(); ++g)
        for (std::size_t i = 0; i < plan.kinds.size(); ++i) {
            nlohmann::json row{{"layer_class", g},
                               {"layers", PlanRows::layers_text(groups[g])},
                               {"tensor", tensor_kind_name(plan.kinds[i])},
                               {"decision", policy_name(groups[g].decisions[i].policy)},
                               {"codec", rows.codec_text(groups[g], i)},
                               {"bytes", rows.stored_bytes(groups[g], i)}};
            if (const CompressOption* o = rows.option(groups[g], i)) row["relative_error"] = o->relative_error;
            j["decisions"].push_back(row);
        }
    j["codecs"] = nlohmann::json::array();
    for (std::size_t i = 0; i < plan.kinds.size(); ++i)
        if (const TensorProfile* t = profile.find(plan.kinds[i]))
            for (const CodecMeasurement& m : t->codecs)
                j["codecs"].push_back({{"tensor", t->name},
                                       {"codec", codec_name(m.codec)},
                                       {"relative_error", m.relative_error},
                                       {"outlier_fraction", m.outlier_fraction},
                                       {"ms", m.compress_ms + m.decompress_ms},
                                       {"verdict", codec_verdict(plan, i, m, codecs)}});
    return j.dump(2) + "\n";
}

std::string plan_table(const AdaccPlan& plan, const PlanRows& rows, const Profile& profile, const CodecChoice& codecs,
                       std::uint64_t budget_bytes) {
    const PlanResult& r = plan.result;
    std::string out;
    char line[256];
    std::snprintf(line, sizeof line, "status %s, solved in %.2f ms; %s\n", plan_status_name(r.status), r.solve_ms,
                  r.message.c_str());
    out += line;
    std::snprintf(line, sizeof line, "predicted: tape %s, total %s of budget %s; added time %.2f ms per step\n\n",
                  format_bytes(plan.memory.tape).c_str(), format_bytes(plan.memory.total()).c_str(),
                  format_bytes(budget_bytes).c_str(), r.extra_ms);
    out += line;
    std::snprintf(line, sizeof line, "%-8s %-10s %-10s %-11s %-13s %9s %12s\n", "class", "layers", "tensor", "decision",
                  "codec", "rel_err", "bytes");
    out += line;
    const auto& groups = rows.groups();
    for (std::size_t g = 0; g < groups.size(); ++g)
        for (std::size_t i = 0; i < plan.kinds.size(); ++i) {
            std::snprintf(line, sizeof line, "%-8zu %-10s %-10s %-11s %-13s %9s %12s\n", g,
                          PlanRows::layers_text(groups[g]).c_str(), tensor_kind_name(plan.kinds[i]),
                          policy_name(groups[g].decisions[i].policy), rows.codec_text(groups[g], i).c_str(),
                          rows.error_text(groups[g], i).c_str(), format_bytes(rows.stored_bytes(groups[g], i)).c_str());
            out += line;
        }
    std::snprintf(line, sizeof line, "\ncodecs measured (memory.codecs = %s, memory.max_codec_error = %.4g):\n",
                  codec_candidates_name(codecs.candidates), codecs.max_error);
    out += line;
    std::snprintf(line, sizeof line, "%-10s %-13s %9s %9s %10s  %s\n", "tensor", "codec", "rel_err", "outliers", "ms",
                  "planner");
    out += line;
    for (std::size_t i = 0; i < plan.kinds.size(); ++i)
        if (const TensorProfile* t = profile.find(plan.kinds[i]))
            for (const CodecMeasurement& m : t->codecs) {
                std::snprintf(line, sizeof line, "%-10s %-13s %9.4f %9.4f %10.3f  %s\n", t->name.c_str(),
                              codec_name(m.codec), m.relative_error, m.outlier_fraction,
                              m.compress_ms + m.decompress_ms, codec_verdict(plan, i, m, codecs).c_str());
                out += line;
            }
    return out;
}

}  // namespace

std::string format_plan(const AdaccPlan& plan, const Profile& profile, const CodecChoice& codecs,
                        const GPTConfig& config, int B, int T, std::uint64_t budget_bytes, const std::string& format) {
    const PlanRows rows(plan, config, B, T);
    return format == "json" ? plan_json(plan, rows, profile, codecs, budget_bytes)
                            : plan_table(plan, rows, profile, codecs, budget_bytes);
}

}  // namespace adacc
