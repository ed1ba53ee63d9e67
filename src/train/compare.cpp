#include "src/train/compare.h"

#include <algorithm>
#include <cstdio>
#include <memory>
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
    std::vector<double> times_ms;  // the timed steps' (after warm-up), in order
    std::vector<double> losses;    // every step's
};

// One (plan, batch) training from the config's seed and the data's start, one step at a time,
// each taken as training takes it (TrainingStep). With a regulator (planned modes), its monitor
// runs as in training. Everything it steps is its own (model, data, step buffers), so runs of
// several modes alive at once and stepped in turn compute exactly what each computes alone.
class ModeRun {
public:
    ModeRun(const RunConfig& config, const ComputeTarget& target, const ActivationPlan& plan,
            const CodecParams& codec_params, int warmup, AdaccRegulator* regulator)
        : data_(open_token_loader(config, TokenSplit::train, config.data.shuffle)),
          model_(config.model, config.training.batch_size, config.training.seq_len, plan, codec_params,
                 ModelUse::training, target),
          step_(config, model_, data_, regulator),
          warmup_(warmup) {
        init_run_weights(model_, config.training.seed, config.stress);
    }
    // Step `step` (1-based; steps are taken in order).
    void step(int step) {
        const StepResult r = step_.run(step);
        result_.losses.push_back(r.loss);
        if (step > warmup_) result_.times_ms.push_back(r.seconds * 1e3);
        // Read before the monitor, as training's step line is: a new plan starts on a fresh tape.
        result_.tape_peak = std::max(result_.tape_peak, model_.tape().peak().used);
        step_.after(step);
    }
    const RunResult& result() const { return result_; }

private:
    DataLoader data_;
    GPTModel model_;
    TrainingStep step_;
    int warmup_;
    RunResult result_;
};

// The first `steps` training steps of one (plan, batch) on their own.
RunResult train_steps(const RunConfig& config, const ComputeTarget& target, const ActivationPlan& plan,
                      const CodecParams& codec_params, int steps, int warmup, AdaccRegulator* regulator = nullptr) {
    ModeRun run(config, target, plan, codec_params, warmup, regulator);
    for (int step = 1; step <= steps; ++step) run.step(step);
    return run.result();
}

// The median and quartiles of the timed steps into `row`, with the tokens/s they give.
void record_times(CompareRow& row, const RunResult& r, double tokens_per_step) {
    row.timed_steps = static_cast<int>(r.times_ms.size());
    const StepTimeSpread spread = step_time_spread(r.times_ms);
    row.step_ms = spread.median;
    row.step_ms_p25 = spread.p25;
    row.step_ms_p75 = spread.p75;
    auto rate = [&](double ms) { return ms > 0 ? tokens_per_step / (ms / 1e3) : 0.0; };
    row.tokens_per_s = rate(row.step_ms);
    row.tokens_per_s_p25 = rate(row.step_ms_p75);
    row.tokens_per_s_p75 = rate(row.step_ms_p25);
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

StepTimeSpread step_time_spread(std::vector<double> ms) {
    if (ms.empty()) return {};
    std::sort(ms.begin(), ms.end());
    auto quantile = [&](double q) {
        const double at = q * static_cast<double>(ms.size() - 1);
        const std::size_t below = static_cast<std::size_t>(at);
        const std::size_t above = std::min(below + 1, ms.size() - 1);
        return ms[below] + (at - static_cast<double>(below)) * (ms[above] - ms[below]);
    };
    return {quantile(0.5), quantile(0.25), quantile(0.75)};
}

namespace {
// One mode of a batch, planned and sized, before any of its steps.
struct PreparedMode {
    std::size_t row = 0;  // its index in the rows
    ActivationPlan plan;
    CodecParams codec_params;
    std::unique_ptr<AdaccRegulator> regulator;  // planned modes
    std::uint64_t bound = 0;                    // the most it may hold: its total, or the budget a re-plan stays under
};

// Why the modes of one batch cannot be interleaved (nullopt: they can), from what they need
// together: every mode's bound, the backend's fixed memory (counted in each total) once.
std::optional<std::string> interleave_refusal(const std::vector<PreparedMode>& modes,
                                              const std::vector<CompareRow>& rows, const CompareOptions& options,
                                              const ComputeTarget& target) {
    if (!options.interleave) return "interleaving was turned off (--no-interleave)";
    std::uint64_t together = 0, backend = 0;
    bool planned = false;
    for (const auto& m : modes) {
        planned = planned || m.regulator;
        together += m.bound;
        backend = rows[m.row].memory ? rows[m.row].memory->backend : 0;
        together -= backend;
    }
    together += backend;
    const std::uint64_t limit = options.memory_limit ? options.memory_limit : device_memory_bytes(target.device);
    if (together <= limit) return std::nullopt;
    return "their models together need " + format_bytes(together) + " (the sum of their totals" +
           (planned ? ", a planned mode's at the budget its re-plans stay under" : "") + "), more than the " +
           format_bytes(limit) + " there is (" +
           (options.memory_limit ? std::string("the limit given") : device_memory_words(target.device, limit)) +
           "), so each ran on its own, one after another; their step times may differ by what the machine was "
           "doing between them";
}

// Every mode of one batch planned and sized, before any step is timed (the planned modes'
// profiling happens here): a row per mode appended to rows, and the modes that will run returned.
std::vector<PreparedMode> prepare_modes(const RunConfig& at_batch, const CompareOptions& options,
                                        const ComputeTarget& target, std::vector<CompareRow>& rows) {
    const GPTConfig& model = at_batch.model;
    const int B = at_batch.training.batch_size, T = at_batch.training.seq_len;
    std::vector<PreparedMode> to_run;
    for (MemoryMode mode : options.modes) {
        CompareRow row;
        row.mode = mode;
        row.batch = B;
        row.seq = T;
        PreparedMode prepared{rows.size(), ActivationPlan(BlockGraph(model, B, T), model.n_layer), {}, nullptr, 0};
        if (is_planned(mode)) {
            if (!options.budget)
                throw UserError(std::string("mode ") + memory_mode_name(mode) +
                                " plans for a memory budget: pass --memory-budget SIZE");
            try {
                prepared.regulator = std::make_unique<AdaccRegulator>(planned_run(at_batch, target), options.budget,
                                                                      regulator_options(at_batch, mode),
                                                                      first_training_batch(at_batch), nullptr);
            } catch (const UserError& e) {
                std::fprintf(stderr, "compare: %s batch %d: %s\n", memory_mode_name(mode), B, e.what());
                row.plan_error = e.what();
                rows.push_back(row);
                continue;
            }
            prepared.plan = prepared.regulator->plan().plan;
            prepared.codec_params = prepared.regulator->plan().codec_params;
        } else {
            prepared.plan = plan_for_mode(model, B, T, mode);
        }
        row.memory =
            GPTModel::plan_memory(model, B, T, prepared.plan, prepared.codec_params, ModelUse::training, target);
        row.total_bytes = row.memory->total();
        row.fits = options.budget == 0 || row.total_bytes <= options.budget;
        prepared.bound =
            prepared.regulator ? std::max<std::uint64_t>(row.total_bytes, options.budget) : row.total_bytes;
        rows.push_back(row);
        // none is the reference every other mode is measured against: run it even over budget.
        if (row.fits || mode == MemoryMode::none) to_run.push_back(std::move(prepared));
    }
    return to_run;
}

// The steps of one batch's modes: interleaved step by step (refusal: nullopt), else one mode after
// another, with the reason printed.
std::vector<RunResult> run_modes(const RunConfig& at_batch, const ComputeTarget& target,
                                 const std::vector<PreparedMode>& to_run, const std::vector<CompareRow>& rows,
                                 const CompareOptions& options, int warmup, const std::optional<std::string>& refusal) {
    const int B = at_batch.training.batch_size;
    std::vector<RunResult> results(to_run.size());
    if (to_run.size() > 1 && !refusal) {
        std::string names;
        for (const auto& m : to_run)
            names += std::string(names.empty() ? "" : ", ") + memory_mode_name(rows[m.row].mode);
        std::fprintf(stderr, "compare: batch %d: %s interleaved step by step, %d steps each ...\n", B, names.c_str(),
                     options.steps);
        std::vector<std::unique_ptr<ModeRun>> runs;
        for (const auto& m : to_run)
            runs.push_back(
                std::make_unique<ModeRun>(at_batch, target, m.plan, m.codec_params, warmup, m.regulator.get()));
        const std::size_t n = runs.size();
        for (int step = 1; step <= options.steps; ++step)
            for (std::size_t i = 0; i < n; ++i) runs[(i + static_cast<std::size_t>(step - 1)) % n]->step(step);
        for (std::size_t i = 0; i < n; ++i) results[i] = runs[i]->result();
        return results;
    }
    if (refusal) std::fprintf(stderr, "compare: batch %d: the modes are not interleaved: %s\n", B, refusal->c_str());
    for (std::size_t i = 0; i < to_run.size(); ++i) {
        std::fprintf(stderr, "compare: %s batch %d ...\n", memory_mode_name(rows[to_run[i].row].mode), B);
        results[i] = train_steps(at_batch, target, to_run[i].plan, to_run[i].codec_params, options.steps, warmup,
                                 to_run[i].regulator.get());
    }
    return results;
}

// The batch's rows that ran get their times, losses and loss against none's, and, once every model of
// the batch is gone (they are allocated one at a time), the gradients' fidelity to none's.
void record_results(const RunConfig& at_batch, const ComputeTarget& target, const std::vector<PreparedMode>& ran,
                    const std::vector<RunResult>& results, const CompareOptions& options, bool interleaved,
                    const std::optional<std::string>& refusal, std::vector<CompareRow>& rows) {
    const int B = at_batch.training.batch_size;
    std::vector<float> reference;  // none's gradients at this batch, computed once when first needed
    const double tokens = static_cast<double>(B) * at_batch.training.seq_len * at_batch.training.grad_accum;  // a step
    std::optional<double> none_loss;
    for (std::size_t i = 0; i < ran.size(); ++i) {
        CompareRow& row = rows[ran[i].row];
        const RunResult& r = results[i];
        row.ran = true;
        row.interleaved = interleaved;
        row.not_interleaved = refusal;
        row.tape_peak_bytes = r.tape_peak;
        record_times(row, r, tokens);
        row.losses = r.losses;
        row.loss = r.losses.empty() ? 0.0 : r.losses.back();
        if (row.mode == MemoryMode::none) none_loss = row.loss;
        if (options.fidelity)
            row.gradients = fidelity_to_none(at_batch, target, ran[i].plan, ran[i].codec_params, row.mode, reference);
    }
    for (auto& row : rows)
        if (row.batch == B && row.ran && none_loss) row.loss_delta_pct = 100.0 * (row.loss - *none_loss) / *none_loss;
}
}  // namespace

std::vector<CompareRow> run_comparison(const RunConfig& config, const CompareOptions& options) {
    const int warmup = std::min(options.warmup, options.steps - 1);
    const ComputeTarget target = compute_target(config);
    std::vector<CompareRow> rows;
    for (int B : options.batches) {
        RunConfig at_batch = config;
        at_batch.training.batch_size = B;
        const std::vector<PreparedMode> to_run = prepare_modes(at_batch, options, target, rows);
        std::optional<std::string> refusal;
        if (to_run.size() > 1) refusal = interleave_refusal(to_run, rows, options, target);
        const std::vector<RunResult> results = run_modes(at_batch, target, to_run, rows, options, warmup, refusal);
        record_results(at_batch, target, to_run, results, options, to_run.size() > 1 && !refusal, refusal, rows);
    }
    return rows;
}

namespace {
// Whether two rows' interquartile ranges [p25, p75] overlap: their difference is inside the spread.
bool spreads_overlap(const CompareRow& a, const CompareRow& b) {
    return a.step_ms_p25 <= b.step_ms_p75 && b.step_ms_p25 <= a.step_ms_p75;
}
std::string timing(const CompareRow& r) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "t_%s %.1f ms [%.1f-%.1f]", memory_mode_name(r.mode), r.step_ms, r.step_ms_p25,
                  r.step_ms_p75);
    return buf;
}
}  // namespace

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
        if (!r.ran || !none || !full) continue;
        const std::string batch = "batch " + std::to_string(r.batch) + ": " + memory_mode_name(r.mode);
        const std::string times = " (" + timing(*none) + ", " + timing(*full) + ", " + timing(r) +
                                  "; median [interquartile range] of the timed steps)\n";
        if (spreads_overlap(*none, *full)) {
            out += batch +
                   ": no R: full recomputation's overhead over none is inside the spread, their step-time "
                   "interquartile ranges overlap" +
                   times;
            continue;
        }
        if (full->step_ms <= none->step_ms) {
            out += batch + ": no R: full recomputation ran faster than none, so its overhead is not measured" + times;
            continue;
        }
        if (spreads_overlap(r, *full)) {
            out += batch +
                   ": no R: its difference from full recomputation is inside the spread, their step-time "
                   "interquartile ranges overlap" +
                   times;
            continue;
        }
        char line[128];
        std::snprintf(line, sizeof line, " wins back R = %.2f of full recomputation's overhead",
                      (full->step_ms - r.step_ms) / (full->step_ms - none->step_ms));
        char ratio[64];
        std::snprintf(ratio, sizeof ratio, "; %.2fx full's tokens/s\n", full->step_ms / r.step_ms);
        out += batch + line + times.substr(0, times.size() - 1) + ratio;
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

nlohmann::json arenas_json(const ModelMemory& m) {
    return {{"parameters", m.parameters},
            {"working_weights", m.working_weights},
            {"gradients", m.gradients},
            {"optimizer_state", m.optimizer_state},
            {"tape", m.tape},
            {"materialize", m.materialize},
            {"transients", m.transients},
            {"logits", m.logits},
            {"backend", m.backend}};
}
template <class T>
nlohmann::json or_null(const std::optional<T>& v) {
    return v ? nlohmann::json(*v) : nlohmann::json();
}
std::string range(const CompareRow& r) { return fixed(r.step_ms_p25, 1) + "-" + fixed(r.step_ms_p75, 1); }

// One line per batch that ran modes: whether they were interleaved, and why not.
std::string interleaving_notes(const std::vector<CompareRow>& rows) {
    std::string out;
    std::vector<int> seen;
    for (const auto& r : rows) {
        if (!r.ran || std::find(seen.begin(), seen.end(), r.batch) != seen.end()) continue;
        seen.push_back(r.batch);
        std::string names;
        for (const auto& o : rows)
            if (o.batch == r.batch && o.ran) names += std::string(names.empty() ? "" : ", ") + memory_mode_name(o.mode);
        if (r.interleaved)
            out += "batch " + std::to_string(r.batch) + ": " + names +
                   " interleaved step by step (step k of every mode, then step k+1 of every mode)\n";
        else if (r.not_interleaved)
            out += "batch " + std::to_string(r.batch) + ": " + names + " NOT interleaved: " + *r.not_interleaved + "\n";
    }
    return out;
}

std::string comparison_json(const std::vector<CompareRow>& rows, std::uint64_t budget) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows)
        out.push_back({{"mode", memory_mode_name(r.mode)},
                       {"batch", r.batch},
                       {"seq", r.seq},
                       {"fits", r.plan_error ? nlohmann::json() : nlohmann::json(r.fits)},
                       {"ran", r.ran},
                       {"plan_error", or_null(r.plan_error)},
                       {"budget_bytes", budget ? nlohmann::json(budget) : nlohmann::json()},
                       {"tape_peak_bytes", r.tape_peak_bytes},
                       {"total_bytes", r.total_bytes},
                       {"arenas", r.memory ? arenas_json(*r.memory) : nlohmann::json()},
                       {"step_ms", r.step_ms},
                       {"step_ms_p25", r.step_ms_p25},
                       {"step_ms_p75", r.step_ms_p75},
                       {"timed_steps", r.timed_steps},
                       {"tokens_per_s", r.tokens_per_s},
                       {"tokens_per_s_p25", r.tokens_per_s_p25},
                       {"tokens_per_s_p75", r.tokens_per_s_p75},
                       {"interleaved", r.interleaved},
                       {"not_interleaved", or_null(r.not_interleaved)},
                       {"loss", r.loss},
                       {"losses", r.losses},
                       {"loss_delta_pct", or_null(r.loss_delta_pct)},
                       {"gradient", r.gradients ? gradient_json(*r.gradients) : nlohmann::json()}});
    return out.dump(2) + "\n";
}

std::string comparison_csv(const std::vector<CompareRow>& rows) {
    std::string out =
        "mode,batch,seq,tape_peak_bytes,total_bytes,step_ms,tokens_per_s,loss,loss_delta_pct,fits_budget,"
        "grad_rel_l2,grad_cosine,step_ms_p25,step_ms_p75,tokens_per_s_p25,tokens_per_s_p75,timed_steps,"
        "interleaved\n";
    for (const auto& r : rows) {
        const std::string delta = r.loss_delta_pct ? fixed(*r.loss_delta_pct, 3) : "";
        const std::string grad_err = r.gradients ? scientific(r.gradients->overall.relative_l2) : "",
                          grad_cos = r.gradients ? fixed(r.gradients->overall.cosine, 6) : "";
        out += std::string(memory_mode_name(r.mode)) + "," + std::to_string(r.batch) + "," + std::to_string(r.seq) +
               "," + (r.ran ? std::to_string(r.tape_peak_bytes) : "") + "," + std::to_string(r.total_bytes) + "," +
               (r.ran ? fixed(r.step_ms, 2) + "," + fixed(r.tokens_per_s, 1) + "," + fixed(r.loss, 5) : ",,") + "," +
               delta + "," +
               (r.plan_error ? ""
                : r.fits     ? "yes"
                             : "no") +
               "," + grad_err + "," + grad_cos + "," +
               (r.ran ? fixed(r.step_ms_p25, 2) + "," + fixed(r.step_ms_p75, 2) + "," + fixed(r.tokens_per_s_p25, 1) +
                            "," + fixed(r.tokens_per_s_p75, 1) + "," + std::to_string(r.timed_steps) + "," +
                            (r.interleaved ? "yes" : "no")
                      : ",,,,,") +
               "\n";
    }
    return out;
}

std::string comparison_table(const std::vector<CompareRow>& rows) {
    std::string out;
    char line[512];
    std::snprintf(line, sizeof line, "%-13s %5s %5s %14s %14s %10s %15s %12s %9s %14s %10s %10s\n", "mode", "batch",
                  "seq", "tape_peak", "total", "step_ms", "step_ms_p25-p75", "tokens/s", "loss", "loss_delta_pct",
                  "grad_err", "grad_cos");
    out += line;
    for (const auto& r : rows) {
        const char* mode = memory_mode_name(r.mode);
        const std::string delta = r.loss_delta_pct ? fixed(*r.loss_delta_pct, 3) : "";
        const std::string grad_err = r.gradients ? scientific(r.gradients->overall.relative_l2) : "",
                          grad_cos = r.gradients ? fixed(r.gradients->overall.cosine, 6) : "";
        if (r.plan_error)
            std::snprintf(line, sizeof line, "%-13s %5d %5d %14s %14s   not planned (the reason is above)\n", mode,
                          r.batch, r.seq, "-", "-");
        else if (!r.ran)
            std::snprintf(line, sizeof line, "%-13s %5d %5d %14s %14s   does not fit the budget\n", mode, r.batch,
                          r.seq, "-", r.total_bytes ? format_bytes(r.total_bytes).c_str() : "-");
        else
            std::snprintf(line, sizeof line, "%-13s %5d %5d %14s %14s %10.1f %15s %12.1f %9.4f %14s %10s %10s%s\n",
                          mode, r.batch, r.seq, format_bytes(r.tape_peak_bytes).c_str(),
                          format_bytes(r.total_bytes).c_str(), r.step_ms, range(r).c_str(), r.tokens_per_s, r.loss,
                          delta.c_str(), grad_err.c_str(), grad_cos.c_str(),
                          r.fits ? "" : "  (over budget: reference)");
        out += line;
    }
    int timed = 0;
    for (const auto& r : rows)
        if (r.ran) timed = std::max(timed, r.timed_steps);
    if (timed > 0)
        out += "step_ms: median of the " + std::to_string(timed) +
               " timed steps (after warm-up); step_ms_p25-p75: their interquartile range (the spread); tokens/s "
               "at the median\n";
    out += interleaving_notes(rows);
    const auto has_gradients = [](const CompareRow& r) { return r.gradients.has_value(); };
    if (std::any_of(rows.begin(), rows.end(), has_gradients))
        out +=
            "grad_err, grad_cos: relative L2 error and cosine of the parameter gradients against none's, from one "
            "extra forward and backward per mode at the initial weights on the first batch, dropout off\n";
    else if (timed > 0)  // modes ran, without the gradients' extra passes
        out += "grad_err, grad_cos: not measured (--no-fidelity)\n";
    return out;
}
}  // namespace

std::string format_comparison(const std::vector<CompareRow>& rows, const std::string& format, std::uint64_t budget) {
    if (format == "json") return comparison_json(rows, budget);
    return format == "csv" ? comparison_csv(rows) : comparison_table(rows);
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
