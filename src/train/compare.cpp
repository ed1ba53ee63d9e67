#include "src/train/compare.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "src/adacc/adacc_regulator.h"
#include "src/adacc/profiler.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/engine/gpt_model.h"
#include "src/engine/memory_report.h"
#include "src/engine/weight_init.h"
#include "src/train/token_loader.h"
#include "src/train/training_step.h"

namespace adacc {

namespace {

struct RunResult {
    std::size_t tape_peak = 0;
    double median_step_ms = 0;
    float last_loss = 0;
};

// The first `steps` training steps of one (plan, batch), from the config's seed and the data's
// start, each taken as training takes it (TrainingStep). With a regulator (planned modes), its
// monitor runs as in training.
RunResult train_steps(const RunConfig& config, const ComputeTarget& target, const ActivationPlan& plan,
                      const CodecParams& codec_params, int steps, int warmup, AdaccRegulator* regulator = nullptr) {
    GPTModel model(config.model, config.training.batch_size, config.training.seq_len, plan, codec_params,
                   ModelUse::training, target);
    init_run_weights(model, config.training.seed, config.stress);
    DataLoader data = open_token_loader(config, TokenSplit::train, config.data.shuffle);
    TrainingStep training_step(config, model, data, regulator);
    RunResult result;
    std::vector<double> times;
    for (int step = 1; step <= steps; ++step) {
        const StepResult r = training_step.run(step);
        result.last_loss = r.loss;
        if (step > warmup) times.push_back(r.seconds * 1e3);
        // Read before the monitor, as training's step line is: a new plan starts on a fresh tape.
        result.tape_peak = std::max(result.tape_peak, model.tape().peak().used);
        training_step.after(step);
    }
    std::sort(times.begin(), times.end());
    result.median_step_ms = times.empty() ? 0.0 : times[times.size() / 2];
    return result;
}

// The gradients of `plan` at the initial weights against none's (`reference`, computed here
// when still empty).
GradientFidelity fidelity_to_none(const RunConfig& at_batch, const ComputeTarget& target, const ActivationPlan& plan,
                                  const CodecParams& codec_params, MemoryMode mode, std::vector<float>& reference) {
    const int B = at_batch.training.batch_size, T = at_batch.training.seq_len;
    if (reference.empty())
        reference = gradients_at_init(at_batch, target, plan_for_mode(at_batch.model, B, T, MemoryMode::none), {});
    const std::vector<float> grads =
        mode == MemoryMode::none ? reference : gradients_at_init(at_batch, target, plan, codec_params);
    return compare_gradients(grads, reference, ParameterLayout(at_batch.model));
}

}  // namespace

std::vector<CompareRow> run_comparison(const RunConfig& config, const CompareOptions& options) {
    const int T = config.training.seq_len;
    const int warmup = std::min(options.warmup, options.steps - 1);
    const ComputeTarget target = compute_target(config);
    std::vector<CompareRow> rows;
    for (int B : options.batches) {
        RunConfig at_batch = config;
        at_batch.training.batch_size = B;
        std::optional<double> none_loss;
        std::vector<float> reference;  // none's gradients at this batch, computed once when first needed
        for (MemoryMode mode : options.modes) {
            CompareRow row;
            row.mode = mode;
            row.batch = B;
            row.seq = T;
            std::optional<AdaccRegulator> regulator;
            ActivationPlan plan(BlockGraph(config.model, B, T), config.model.n_layer);
            CodecParams codec_params;
            if (is_planned(mode)) {
                if (!options.budget)
                    throw UserError(std::string("mode ") + memory_mode_name(mode) +
                                    " plans for a memory budget: pass --memory-budget SIZE");
                try {
                    regulator.emplace(planned_run(at_batch, target), options.budget, regulator_options(at_batch, mode),
                                      first_training_batch(at_batch), nullptr);
                } catch (const UserError& e) {
                    std::fprintf(stderr, "compare: %s batch %d: %s\n", memory_mode_name(mode), B, e.what());
                    row.plan_error = e.what();
                    rows.push_back(row);
                    continue;
                }
                plan = regulator->plan().plan;
                codec_params = regulator->plan().codec_params;
            } else {
                plan = plan_for_mode(config.model, B, T, mode);
            }
            row.total_bytes =
                GPTModel::plan_memory(config.model, B, T, plan, codec_params, ModelUse::training, target).total();
            row.fits = options.budget == 0 || row.total_bytes <= options.budget;
            // none is the reference every other mode is measured against: run it even over budget.
            if (row.fits || mode == MemoryMode::none) {
                std::fprintf(stderr, "compare: %s batch %d ...\n", memory_mode_name(mode), B);
                const RunResult r = train_steps(at_batch, target, plan, codec_params, options.steps, warmup,
                                                regulator ? &*regulator : nullptr);
                row.ran = true;
                row.tape_peak_bytes = r.tape_peak;
                row.step_ms = r.median_step_ms;
                const double tokens = static_cast<double>(B) * T * config.training.grad_accum;  // per step
                row.tokens_per_s = r.median_step_ms > 0 ? tokens / (r.median_step_ms / 1e3) : 0;
                row.loss = r.last_loss;
                if (mode == MemoryMode::none) none_loss = row.loss;
                if (options.fidelity)
                    row.gradients = fidelity_to_none(at_batch, target, plan, codec_params, mode, reference);
            }
            rows.push_back(row);
        }
        for (auto& row : rows)
            if (row.batch == B && row.ran && none_loss)
                row.loss_delta_pct = 100.0 * (row.loss - *none_loss) / *none_loss;
    }
    return rows;
}

std::string format_recovery(const std::vector<CompareRow>& rows) {
    std::string out;
    auto find = [&](int B, MemoryMode mode) -> const CompareRow* {
        for (const auto& r : rows)
            if (r.batch == B && r.mode == mode && r.ran) return &r;
        return nullptr;
    };
    for (const auto& r : rows) {
        if (!is_planned(r.mode)) continue;
        const CompareRow *none = find(r.batch, MemoryMode::none), *full = find(r.batch, MemoryMode::full);
        if (!r.ran || !none || !full || full->step_ms <= none->step_ms) continue;
        char line[256];
        std::snprintf(line, sizeof line,
                      "batch %d: %s wins back R = %.2f of full recomputation's overhead "
                      "(t_none %.1f ms, t_full %.1f ms, t_%s %.1f ms); %.2fx full's tokens/s\n",
                      r.batch, memory_mode_name(r.mode), (full->step_ms - r.step_ms) / (full->step_ms - none->step_ms),
                      none->step_ms, full->step_ms, memory_mode_name(r.mode), r.step_ms, full->step_ms / r.step_ms);
        out += line;
    }
    return out;
}

std::vector<MaxBatchRow> find_max_batches(const RunConfig& config, const std::vector<MemoryMode>& modes,
                                          std::uint64_t budget) {
    const int T = config.training.seq_len;
    const ComputeTarget target = compute_target(config);
    std::vector<MaxBatchRow> rows;
    int none_batch = 0;
    std::optional<Profile> unit;  // profiled once, for every planned mode
    for (MemoryMode mode : modes) {
        MaxBatchRow row;
        row.mode = mode;
        const PlannedRun run = planned_run(config, target);
        if (is_planned(mode) && !unit) unit = unit_batch_profile(run, first_training_batch(config));
        row.max_batch = is_planned(mode) ? largest_planned_batch(run, *unit, regulator_options(config, mode), budget)
                                         : largest_batch(config.model, T, mode, budget, 1 << 16, target);
        if (row.max_batch > 0) {
            RunConfig at_batch = config;
            at_batch.training.batch_size = row.max_batch;
            // One micro-batch allocates and exercises every arena; grad_accum would only repeat it.
            at_batch.training.grad_accum = 1;
            std::fprintf(stderr, "max-batch: verifying %s at batch %d ...\n", memory_mode_name(mode), row.max_batch);
            if (is_planned(mode)) {
                AdaccRegulator regulator(planned_run(at_batch, target), budget, regulator_options(at_batch, mode),
                                         first_training_batch(at_batch), nullptr);
                row.total_bytes = regulator.plan().memory.total();
                train_steps(at_batch, target, regulator.plan().plan, regulator.plan().codec_params, 1, 0);
            } else {
                const ActivationPlan plan = plan_for_mode(config.model, row.max_batch, T, mode);
                row.total_bytes =
                    GPTModel::plan_memory(config.model, row.max_batch, T, plan, {}, ModelUse::training, target).total();
                train_steps(at_batch, target, plan, {}, 1, 0);  // allocates every arena and runs a step
            }
            row.verified = row.total_bytes <= budget;
        }
        if (mode == MemoryMode::none) none_batch = row.max_batch;
        rows.push_back(row);
    }
    for (auto& row : rows) row.ratio_vs_none = none_batch > 0 ? double(row.max_batch) / none_batch : 0.0;
    return rows;
}

namespace {
std::string fixed(double v, int decimals) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
}
std::string scientific(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.3e", v);
    return buf;
}

nlohmann::json fidelity_json(const Fidelity& f) { return {{"relative_l2", f.relative_l2}, {"cosine", f.cosine}}; }

nlohmann::json gradient_json(const GradientFidelity& g) {
    nlohmann::json tensors = nlohmann::json::object();
    for (const auto& [name, f] : g.tensors) tensors[name] = fidelity_json(f);
    nlohmann::json out = fidelity_json(g.overall);
    out["tensors"] = tensors;
    return out;
}
}  // namespace

std::string format_comparison(const std::vector<CompareRow>& rows, const std::string& format) {
    if (format == "json") {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& r : rows)
            out.push_back({{"mode", memory_mode_name(r.mode)},
                           {"batch", r.batch},
                           {"seq", r.seq},
                           {"fits", r.plan_error ? nlohmann::json() : nlohmann::json(r.fits)},
                           {"ran", r.ran},
                           {"plan_error", r.plan_error ? nlohmann::json(*r.plan_error) : nlohmann::json()},
                           {"tape_peak_bytes", r.tape_peak_bytes},
                           {"total_bytes", r.total_bytes},
                           {"step_ms", r.step_ms},
                           {"tokens_per_s", r.tokens_per_s},
                           {"loss", r.loss},
                           {"loss_delta_pct", r.loss_delta_pct ? nlohmann::json(*r.loss_delta_pct) : nlohmann::json()},
                           {"gradient", r.gradients ? gradient_json(*r.gradients) : nlohmann::json()}});
        return out.dump(2) + "\n";
    }
    const bool csv = format == "csv";
    std::string out;
    char line[512];
    if (csv)
        out +=
            "mode,batch,seq,tape_peak_bytes,total_bytes,step_ms,tokens_per_s,loss,loss_delta_pct,fits_budget,"
            "grad_rel_l2,grad_cosine\n";
    else {
        std::snprintf(line, sizeof line, "%-13s %5s %5s %14s %14s %10s %12s %9s %14s %10s %10s\n", "mode", "batch",
                      "seq", "tape_peak", "total", "step_ms", "tokens/s", "loss", "loss_delta_pct", "grad_err",
                      "grad_cos");
        out += line;
    }
    for (const auto& r : rows) {
        const char* mode = memory_mode_name(r.mode);
        const std::string delta = r.loss_delta_pct ? fixed(*r.loss_delta_pct, 3) : "";
        const std::string grad_err = r.gradients ? scientific(r.gradients->overall.relative_l2) : "",
                          grad_cos = r.gradients ? fixed(r.gradients->overall.cosine, 6) : "";
        if (csv) {
            out += std::string(mode) + "," + std::to_string(r.batch) + "," + std::to_string(r.seq) + "," +
                   (r.ran ? std::to_string(r.tape_peak_bytes) : "") + "," + std::to_string(r.total_bytes) + "," +
                   (r.ran ? fixed(r.step_ms, 2) + "," + fixed(r.tokens_per_s, 1) + "," + fixed(r.loss, 5) : ",,") +
                   "," + delta + "," +
                   (r.plan_error ? ""
                    : r.fits     ? "yes"
                                 : "no") +
                   "," + grad_err + "," + grad_cos + "\n";
            continue;
        }
        if (r.plan_error)
            std::snprintf(line, sizeof line, "%-13s %5d %5d %14s %14s   not planned (the reason is above)\n", mode,
                          r.batch, r.seq, "-", "-");
        else if (!r.ran)
            std::snprintf(line, sizeof line, "%-13s %5d %5d %14s %14s   does not fit the budget\n", mode, r.batch,
                          r.seq, "-", r.total_bytes ? format_bytes(r.total_bytes).c_str() : "-");
        else
            std::snprintf(line, sizeof line, "%-13s %5d %5d %14s %14s %10.1f %12.1f %9.4f %14s %10s %10s%s\n", mode,
                          r.batch, r.seq, format_bytes(r.tape_peak_bytes).c_str(), format_bytes(r.total_bytes).c_str(),
                          r.step_ms, r.tokens_per_s, r.loss, delta.c_str(), grad_err.c_str(), grad_cos.c_str(),
                          r.fits ? "" : "  (over budget: reference)");
        out += line;
    }
    if (!csv)
        out +=
            "grad_err, grad_cos: relative L2 error and cosine of the parameter gradients against none's, from one "
            "extra forward and backward per mode at the initial weights on the first batch, dropout off\n";
    return out;
}

std::string format_max_batches(const std::vector<MaxBatchRow>& rows, const std::string& format) {
    if (format == "json") {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& r : rows)
            out.push_back({{"mode", memory_mode_name(r.mode)},
                           {"max_batch", r.max_batch},
                           {"total_bytes", r.total_bytes},
                           {"verified", r.verified},
                           {"ratio_vs_none", r.ratio_vs_none}});
        return out.dump(2) + "\n";
    }
    std::string out = format == "csv" ? "mode,max_batch,total_bytes,verified,ratio_vs_none\n" : "";
    char line[256];
    if (format != "csv") {
        std::snprintf(line, sizeof line, "%-13s %10s %14s %9s %14s\n", "mode", "max_batch", "total", "verified",
                      "x_none_batch");
        out += line;
    }
    for (const auto& r : rows) {
        if (format == "csv")
            std::snprintf(line, sizeof line, "%s,%d,%zu,%s,%.3f\n", memory_mode_name(r.mode), r.max_batch,
                          r.total_bytes, r.verified ? "yes" : "no", r.ratio_vs_none);
        else
            std::snprintf(line, sizeof line, "%-13s %10d %14s %9s %14.2f\n", memory_mode_name(r.mode), r.max_batch,
                          format_bytes(r.total_bytes).c_str(), r.verified ? "yes" : "no", r.ratio_vs_none);
        out += line;
    }
    return out;
}

}  // namespace adacc
