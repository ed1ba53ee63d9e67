#include "src/adacc/budget_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "src/common/units.h"
#include "src/common/errors.h"

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

std::size_t compressed_bound(const GPTConfig& config, const TensorInfo& t, int B, int T,
                             const CodecParams& params) {
    const std::size_t rows = tensor_rows(config, t.kind, B, T);
    return codec_max_bytes(adacc_codec(t.kind), rows, t.numel / rows, params);
}

ActivationPlan to_activation_plan(const BlockGraph& block, int n_layer, const std::vector<TensorKind>& kinds,
                                  const PlanResult& result) {
    ActivationPlan plan(block, n_layer);
    for (int l = 0; l < n_layer; ++l)
        for (std::size_t i = 0; i < kinds.size(); ++i) {
            const TensorKind k = kinds[i];
            switch (result.per_layer[l][i]) {
                case Policy::keep: break;
                case Policy::recompute: plan.set(l, k, {Policy::recompute}); break;
                case Policy::compress:
                    plan.set(l, k, {Policy::compress, adacc_codec(k)});
                    break;
            }
        }
    return plan;
}

}  // namespace

CodecParams codec_params_for(const Profile& profile, const GPTConfig& config) {
    CodecParams params = profile.codec_params;
    double most = 0;
    for (const auto& t : profile.tensors) {
        if (t.codec != Codec::outlier_int4) continue;
        const double cols = t.kind == TensorKind::fch || t.kind == TensorKind::fch_gelu ? 4.0 * config.n_embd : config.n_embd;
        most = std::max(most, std::round(t.outlier_fraction * cols));
    }
    params.max_outlier_channels = std::max(4, static_cast<int>(2 * most));
    return params;
}

BlockProblem build_block_problem(const GPTConfig& config, int B, int T, const Profile& profile, bool allow_compress,
                                 std::vector<TensorKind>* kinds_out) {
    const BlockGraph block(config, B, T);
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
            t.compressible = allow_compress && !info.tiny && measured != nullptr;
            if (t.compressible) {
                t.compressed_bytes = tape_aligned(compressed_bound(config, info, B, T, params));
                t.compress_ms = measured->compress_ms + measured->decompress_ms;
            }
            add(k, t);
        }
    if (kinds_out) *kinds_out = kinds;
    return problem;
}

AdaccPlan plan_adacc(const GPTConfig& config, int B, int T, const Profile& profile, std::uint64_t budget_bytes,
                     bool allow_compress, const PlannerOptions& options) {
    const BlockGraph block(config, B, T);
    AdaccPlan out{ActivationPlan(block, config.n_layer), codec_params_for(profile, config), {}, {}, {}};
    const BlockProblem problem = build_block_problem(config, B, T, profile, allow_compress, &out.kinds);
    const std::vector<LayerClass> classes{{problem, config.n_layer}};
    const MilpPlanner planner(options);

    // Memory outside the per-layer block slots: the static arenas, the tape's slots outside the
    // blocks (embedding mask, final layernorm) and the workspace. Measured from the model's own
    // accounting: a keep-all plan's tape minus its block slots.
    const ModelMemory keep_all = GPTModel::plan_memory(config, B, T, out.plan, out.codec_params);
    std::size_t block_bytes = 0;
    for (const auto& t : problem.tensors) block_bytes += t.bytes;
    const std::size_t tape_outside_blocks = keep_all.tape - block_bytes * config.n_layer;
    const std::size_t static_bytes = keep_all.static_bytes();
    // First solve assuming every plannable tensor needs a workspace buffer and the codecs their
    // scratch (the most any plan needs), then with the workspace the last answer really needs.
    ActivationPlan widest(block, config.n_layer);
    for (int l = 0; l < config.n_layer; ++l)
        for (TensorKind k : out.kinds)
            widest.set(l, k, {Policy::compress, adacc_codec(k)});
    std::size_t workspace = GPTModel::plan_memory(config, B, T, widest, out.codec_params).workspace();
    bool have_plan = false;
    for (int round = 0; round < 4; ++round) {
        PlanResult result = planner.solve(classes, static_bytes, workspace + tape_outside_blocks, budget_bytes);
        if (result.status == PlanResult::infeasible) {
            if (have_plan) break;
            throw SettingError("memory.budget",
                               result.message + "; raise memory.budget or lower training.batch_size");
        }
        const ActivationPlan plan = to_activation_plan(block, config.n_layer, out.kinds, result);
        const ModelMemory memory = GPTModel::plan_memory(config, B, T, plan, out.codec_params);
        if (memory.total() > budget_bytes) break;  // the answer would not fit as allocated: keep the last one
        if (have_plan && result.objective_ms >= out.result.objective_ms) break;
        out.plan = plan;
        out.result = result;
        out.memory = memory;
        have_plan = true;
        if (memory.workspace() >= workspace) break;  // consistent: nothing more to gain
        workspace = memory.workspace();
    }
    if (!have_plan)
        throw UserError("no plan fits memory.budget " + format_bytes(budget_bytes) + " once the workspace is counted; " +
                        "raise the budget or lower training.batch_size");
    return out;
}

std::string format_plan(const AdaccPlan& plan, const GPTConfig& config, int B, int T, std::uint64_t budget_bytes,
                        const std::string& format) {
    const PlanResult& r = plan.result;
    const BlockGraph block(config, B, T);
    // Layer classes of the answer: runs of layers with the same decisions.
    struct Group {
        int first, last;
        std::vector<Policy> decisions;
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
    auto stored_bytes = [&](TensorKind k, Policy d) -> std::size_t {
        const TensorInfo& info = block.tensor(k);
        if (d == Policy::keep) return info.bytes();
        if (d == Policy::recompute) return 0;
        return compressed_bound(config, info, B, T, plan.codec_params);
    };
    auto codec_text = [&](TensorKind k, Policy d) -> std::string {
        if (d != Policy::compress) return "";
        return codec_name(adacc_codec(k));
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
                const Policy d = groups[g].decisions[i];
                j["decisions"].push_back({{"layer_class", g}, {"layers", layers_text(groups[g])},
                                          {"tensor", tensor_kind_name(k)}, {"decision", policy_name(d)},
                                          {"codec", codec_text(k, d)}, {"bytes", stored_bytes(k, d)}});
            }
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
    std::snprintf(line, sizeof line, "%-8s %-10s %-10s %-11s %-13s %12s\n", "class", "layers", "tensor", "decision",
                  "codec", "bytes");
    out += line;
    for (std::size_t g = 0; g < groups.size(); ++g)
        for (std::size_t i = 0; i < plan.kinds.size(); ++i) {
            const TensorKind k = plan.kinds[i];
            const Policy d = groups[g].decisions[i];
            std::snprintf(line, sizeof line, "%-8zu %-10s %-10s %-11s %-13s %12s\n", g, layers_text(groups[g]).c_str(),
                          tensor_kind_name(k), policy_name(d), codec_text(k, d).c_str(),
                          format_bytes(stored_bytes(k, d)).c_str());
            out += line;
        }
    return out;
}

}  // namespace adacc
