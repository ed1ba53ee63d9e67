#include "src/adacc/budget_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "src/common/units.h"
#include "src/common/errors.h"
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
void collect_inputs(const BlockGraph& block, const Profile& profile, const OpInfo& op,
                    std::vector<TensorKind>& inputs, double& ms) {
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

std::size_t compressed_bound(const GPTConfig& config, const TensorInfo& t, Codec codec, int B, int T,
                             const CodecParams& params) {
    const std::size_t rows = tensor_rows(config, t.kind, B, T);
    return codec_max_bytes(codec, rows, t.numel / rows, params);
}

// The compress options of one tensor: the candidates within the error tolerance that no other
// admitted candidate matches or beats in bytes, time and error at once (see CodecChoice).
std::vector<CompressOption> compress_options(const GPTConfig& config, const TensorInfo& info, int B, int T,
                                             const TensorProfile& measured, const CodecParams& params,
                                             const CodecChoice& choice) {
    std::vector<CompressOption> admitted;
    for (Codec codec : candidate_codecs(info.kind, choice.candidates)) {
        const CodecMeasurement* m = measured.find(codec);
        if (m == nullptr || m->relative_error > choice.max_error) continue;
        admitted.push_back({codec, tape_aligned(compressed_bound(config, info, codec, B, T, params)),
                            m->compress_ms + m->decompress_ms, m->relative_error});
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

// `problem` with codec `codec` removed from every tensor's compress options.
BlockProblem without_codec(BlockProblem problem, Codec codec) {
    for (PlanTensor& t : problem.tensors)
        std::erase_if(t.compress_options, [&](const CompressOption& o) { return o.codec == codec; });
    return problem;
}

ActivationPlan to_activation_plan(const BlockGraph& block, int n_layer, const std::vector<TensorKind>& kinds,
                                  const BlockProblem& problem, const PlanResult& result) {
    ActivationPlan plan(block, n_layer);
    for (int l = 0; l < n_layer; ++l)
        for (std::size_t i = 0; i < kinds.size(); ++i) {
            const Decision& d = result.per_layer[l][i];
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

CodecChoice codec_choice(const MemorySection& memory) {
    try {
        return {parse_codec_candidates(memory.codecs), memory.max_codec_error};
    } catch (const std::invalid_argument& e) {
        throw SettingError("memory.codecs", e.what());
    }
}

CodecParams codec_params_for(const Profile& profile, const GPTConfig& config) {
    CodecParams params = profile.codec_params;
    double most = 0;
    for (const auto& t : profile.tensors) {
        const CodecMeasurement* outlier = t.find(Codec::outlier_int4);
        if (outlier == nullptr) continue;
        const double cols = t.kind == TensorKind::fch || t.kind == TensorKind::fch_gelu ? 4.0 * config.n_embd : config.n_embd;
        most = std::max(most, std::round(outlier->outlier_fraction * cols));
    }
    params.max_outlier_channels = std::max(4, static_cast<int>(2 * most));
    return params;
}

BlockProblem build_block_problem(const GPTConfig& config, int B, int T, const Profile& profile, bool allow_compress,
                                 const CodecChoice& codecs, std::vector<TensorKind>* kinds_out, DType activation) {
    const BlockGraph block(config, B, T, activation);
    const CodecParams params = codec_params_for(profile, config);
    BlockProblem problem;
    std::vector<TensorKind> kinds;
    auto index_of = [&](TensorKind k) { return static_cast<int>(std::find(kinds.begin(), kinds.end(), k) - kinds.begin()); };
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
    for (const OpInfo& op : block.ops())
        for (TensorKind k : op.outputs) {
            const TensorInfo& info = block.tensor(k);
            if (!info.saved || info.numel == 0) continue;
            PlanTensor t;
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
                t.compress_options = compress_options(config, info, B, T, *measured, params, codecs);
            add(k, t);
        }
    if (kinds_out) *kinds_out = kinds;
    return problem;
}

AdaccPlan plan_adacc(const GPTConfig& config, int B, int T, const Profile& profile, std::uint64_t budget_bytes,
                     bool allow_compress, const PlannerOptions& options, const CodecChoice& codecs,
                     const ComputeTarget& target) {
    const DType activation = device_traits(target).activation;
    const BlockGraph block(config, B, T, activation);
    AdaccPlan out{ActivationPlan(block, config.n_layer), codec_params_for(profile, config), {}, {}, {}, {}, target};
    out.problem = build_block_problem(config, B, T, profile, allow_compress, codecs, &out.kinds, activation);
    auto memory_of = [&](const ActivationPlan& plan) {
        return GPTModel::plan_memory(config, B, T, plan, out.codec_params, ModelUse::training, target);
    };
    const MilpPlanner planner(options);

    // Memory outside the per-layer block slots: the static arenas, the tape's slots outside the
    // blocks (embedding mask, final layernorm) and the workspace. Measured from the model's own
    // accounting: a keep-all plan's tape minus its block slots.
    const ModelMemory keep_all = memory_of(out.plan);
    std::size_t block_bytes = 0;
    for (const auto& t : out.problem.tensors) block_bytes += t.bytes;
    const std::size_t tape_outside_blocks = keep_all.tape - block_bytes * config.n_layer;
    const std::size_t static_bytes = keep_all.static_bytes();

    // Solves `problem`: first assuming every plannable tensor needs a workspace buffer and the
    // codecs their scratch (the most any plan of it needs), then with the workspace the last
    // answer really needs. (Only the outlier codec has scratch, so the widest compresses with it
    // where it is an option.) False when no answer fits as allocated; `infeasible` then says why.
    std::string infeasible;
    auto solve = [&](const BlockProblem& problem) {
        const std::vector<LayerClass> classes{{problem, config.n_layer}};
        ActivationPlan widest(block, config.n_layer);
        for (std::size_t i = 0; i < out.kinds.size(); ++i) {
            const auto& compress = problem.tensors[i].compress_options;
            if (compress.empty()) {
                for (int l = 0; l < config.n_layer; ++l) widest.set(l, out.kinds[i], {Policy::recompute});
                continue;
            }
            Codec codec = compress.front().codec;
            for (const CompressOption& o : compress)
                if (o.codec == Codec::outlier_int4) codec = o.codec;
            for (int l = 0; l < config.n_layer; ++l) widest.set(l, out.kinds[i], {Policy::compress, codec});
        }
        std::size_t workspace = memory_of(widest).workspace();
        bool have_plan = false;
        for (int round = 0; round < 4; ++round) {
            PlanResult result = planner.solve(classes, static_bytes, workspace + tape_outside_blocks, budget_bytes);
            if (result.status == PlanResult::infeasible) {
                if (!have_plan) infeasible = result.message;
                break;
            }
            const ActivationPlan plan = to_activation_plan(block, config.n_layer, out.kinds, problem, result);
            const ModelMemory memory = memory_of(plan);
            if (memory.total() > budget_bytes) break;  // the answer would not fit as allocated: keep the last one
            if (have_plan && result.objective_ms >= out.result.objective_ms) break;
            out.plan = plan;
            out.result = result;
            out.memory = memory;
            out.problem = problem;
            have_plan = true;
            if (memory.workspace() >= workspace) break;  // consistent: nothing more to gain
            workspace = memory.workspace();
        }
        if (!have_plan && infeasible.empty())
            infeasible = "no plan fits memory.budget " + format_bytes(budget_bytes) + " once the workspace is counted";
        return have_plan;
    };
    // When the outlier codec's scratch is what does not fit, the plans without it still may: so a
    // budget recompute-opt meets, adacc meets too.
    if (!solve(out.problem) && !solve(without_codec(out.problem, Codec::outlier_int4)))
        throw SettingError("memory.budget", infeasible + "; raise memory.budget or lower training.batch_size");
    return out;
}

int largest_planned_batch(const GPTConfig& config, const Profile& profile, std::uint64_t budget_bytes,
                          bool allow_compress, const PlannerOptions& options, const CodecChoice& codecs,
                          const ComputeTarget& target, int max_batch) {
    auto fits = [&](int B) {
        try {
            plan_adacc(config, B, profile.seq, rescale_profile(profile, config, B), budget_bytes, allow_compress, options, codecs,
                       target);
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
    const auto& options = plan.problem.tensors[i].compress_options;
    for (std::size_t o = 0; o < options.size(); ++o) {
        if (options[o].codec != m.codec) continue;
        for (const BlockPlan& layer : plan.result.per_layer)
            if (layer[i].policy == Policy::compress && layer[i].option == static_cast<int>(o)) return "chosen";
        return "option";
    }
    const auto candidates = candidate_codecs(plan.kinds[i], codecs.candidates);
    if (std::find(candidates.begin(), candidates.end(), m.codec) == candidates.end()) return "not a candidate";
    if (m.relative_error > codecs.max_error) return "over tolerance";
    return options.empty() ? "not compressed" : "dominated";  // recompute-opt compresses nothing
}

}  // namespace

std::string format_plan(const AdaccPlan& plan, const Profile& profile, const CodecChoice& codecs,
                        const GPTConfig& config, int B, int T, std::uint64_t budget_bytes, const std::string& format) {
    const PlanResult& r = plan.result;
    const BlockGraph block(config, B, T, device_traits(plan.target).activation);
    // Layer classes of the answer: runs of layers with the same decisions.
    struct Group {
        int first, last;
        BlockPlan decisions;
    };
    std::vector<Group> groups;
    for (int l = 0; l < config.n_layer; ++l) {
        if (!groups.empty() && groups.back().decisions == r.per_layer[l]) {
            groups.back().last = l;
            continue;
        }
        groups.push_back({l, l, r.per_layer[l]});
    }
    auto layers_text = [](const Group& g) {
        return g.first == g.last ? std::to_string(g.first) : std::to_string(g.first) + "-" + std::to_string(g.last);
    };
    auto stored_bytes = [&](std::size_t i, const Decision& d) -> std::size_t {
        if (d.policy == Policy::keep) return block.tensor(plan.kinds[i]).bytes();
        if (d.policy == Policy::recompute) return 0;
        return plan.problem.tensors[i].compress_options[d.option].bytes;
    };
    auto option = [&](std::size_t i, const Decision& d) -> const CompressOption* {
        return d.policy == Policy::compress ? &plan.problem.tensors[i].compress_options[d.option] : nullptr;
    };
    auto codec_text = [&](std::size_t i, const Decision& d) -> std::string {
        const CompressOption* o = option(i, d);
        return o ? codec_name(o->codec) : "";
    };
    auto error_text = [&](std::size_t i, const Decision& d) -> std::string {
        const CompressOption* o = option(i, d);
        if (!o || codec_is_lossless(o->codec)) return o ? "0" : "";
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.4f", o->relative_error);
        return buf;
    };
    if (format == "json") {
        nlohmann::json j;
        j["status"] = plan_status_name(r.status);
        j["solve_ms"] = r.solve_ms;
        j["predicted_tape_bytes"] = plan.memory.tape;
        j["predicted_total_bytes"] = plan.memory.total();
        j["predicted_extra_ms"] = r.extra_ms;
        j["budget_bytes"] = budget_bytes;
        j["message"] = r.message;
        j["decisions"] = nlohmann::json::array();
        for (std::size_t g = 0; g < groups.size(); ++g)
            for (std::size_t i = 0; i < plan.kinds.size(); ++i) {
                const TensorKind k = plan.kinds[i];
                const Decision& d = groups[g].decisions[i];
                nlohmann::json row{{"layer_class", g},          {"layers", layers_text(groups[g])},
                                   {"tensor", tensor_kind_name(k)}, {"decision", policy_name(d.policy)},
                                   {"codec", codec_text(i, d)},  {"bytes", stored_bytes(i, d)}};
                if (const CompressOption* o = option(i, d)) row["relative_error"] = o->relative_error;
                j["decisions"].push_back(row);
            }
        j["codecs"] = nlohmann::json::array();
        for (std::size_t i = 0; i < plan.kinds.size(); ++i)
            if (const TensorProfile* t = profile.find(plan.kinds[i]))
                for (const CodecMeasurement& m : t->codecs)
                    j["codecs"].push_back({{"tensor", t->name}, {"codec", codec_name(m.codec)},
                                           {"relative_error", m.relative_error},
                                           {"outlier_fraction", m.outlier_fraction},
                                           {"ms", m.compress_ms + m.decompress_ms},
                                           {"verdict", codec_verdict(plan, i, m, codecs)}});
        return j.dump(2) + "\n";
    }
    std::string out;
    char line[256];
    std::snprintf(line, sizeof line, "status %s, solved in %.2f ms; %s\n", plan_status_name(r.status), r.solve_ms,
                  r.message.c_str());
    out += line;
    std::snprintf(line, sizeof line, "predicted: tape %s, total %s of budget %s; added time %.2f ms per step\n\n",
                  format_bytes(plan.memory.tape).c_str(), format_bytes(plan.memory.total()).c_str(),
                  format_bytes(budget_bytes).c_str(), r.extra_ms);
    out += line;
    std::snprintf(line, sizeof line, "%-8s %-10s %-10s %-11s %-13s %9s %12s\n", "class", "layers", "tensor",
                  "decision", "codec", "rel_err", "bytes");
    out += line;
    for (std::size_t g = 0; g < groups.size(); ++g)
        for (std::size_t i = 0; i < plan.kinds.size(); ++i) {
            const TensorKind k = plan.kinds[i];
            const Decision& d = groups[g].decisions[i];
            std::snprintf(line, sizeof line, "%-8zu %-10s %-10s %-11s %-13s %9s %12s\n", g,
                          layers_text(groups[g]).c_str(), tensor_kind_name(k), policy_name(d.policy),
                          codec_text(i, d).c_str(), error_text(i, d).c_str(), format_bytes(stored_bytes(i, d)).c_str());
            out += line;
        }
    std::snprintf(line, sizeof line, "\ncodecs measured (memory.codecs = %s, memory.max_codec_error = %.4g):\n",
                  codec_candidates_name(codecs.candidates), codecs.max_error);
    out += line;
    std::snprintf(line, sizeof line, "%-10s %-13s %9s %9s %10s  %s\n", "tensor", "codec", "rel_err", "outliers",
                  "ms", "planner");
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

}  // namespace adacc
