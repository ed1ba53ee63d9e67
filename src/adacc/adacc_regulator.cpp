#include "src/adacc/adacc_regulator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "src/common/units.h"
#include "src/common/errors.h"
#include "src/engine/memory_report.h"
#include "src/engine/weight_init.h"

namespace adacc {

RegulatorOptions regulator_options(const RunConfig& config, MemoryMode mode) {
    // The profiler, the monitor and re-planning run on the CPU backend only, so far.
    if (parse_device(config.training.device) != Device::cpu)
        throw SettingError("training.device", std::string("memory.mode ") + memory_mode_name(mode) +
                                                  " plans on the CPU backend only so far (profiling and re-planning "
                                                  "on the GPU are not built yet); on cuda use memory.mode none, "
                                                  "full, selective or quant, or use training.device = \"cpu\"");
    RegulatorOptions options;
    options.allow_compress = mode == MemoryMode::adacc;
    options.planner.granularity = parse_plan_granularity(config.memory.granularity);
    options.monitor.max_interval = config.memory.monitor_max_interval;
    options.monitor.min_steps_between_replans = config.memory.min_replan_steps;
    options.codecs = codec_choice(config.memory);
    options.monitor.max_codec_error = options.codecs.max_error;
    if (!config.memory.profile.empty()) options.profile_file = config.memory.profile;
    return options;
}

AdaccRegulator::AdaccRegulator(const RunConfig& config, std::uint64_t budget_bytes, RegulatorOptions options,
                               const std::vector<int>& tokens, const float* weights)
    : config_(config), budget_(budget_bytes), options_(std::move(options)),
      plan_{ActivationPlan(BlockGraph(config.model, 1, 1), config.model.n_layer), {}, {}, {}, {}},
      monitor_(options_.monitor) {
    const int B = config.training.batch_size, T = config.training.seq_len;
    // Profile at the batch itself when keeping everything fits the budget, else at the largest
    // batch that does (at least 1), scaling times and sizes linearly to B.
    measured_batch_ = B;
    if (memory_for_mode(config.model, B, T, MemoryMode::none).total() > budget_bytes)
        measured_batch_ = std::max(1, largest_batch(config.model, T, MemoryMode::none, budget_bytes, B));
    tokens_.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(measured_batch_) * T);
    if (options_.profile_file) {
        profile_ = Profile::load(*options_.profile_file);
        if (profile_.batch != B || profile_.seq != T)
            throw UserError("profile " + options_.profile_file->string() + " was measured for batch " +
                            std::to_string(profile_.batch) + " x seq " + std::to_string(profile_.seq) + ", not " +
                            std::to_string(B) + " x " + std::to_string(T) + ": omit --profile to profile again");
    }
    // The [stress] hook changes the initial weights: profile those, not a plain initialisation.
    std::vector<float> initial;
    if (!weights && config.stress.outlier_channels > 0) {
        initial = initial_parameters(config);
        weights = initial.data();
    }
    solve(tokens_, weights);
}

// Timings are measured once (they do not drift, and measuring them again is noisy); a re-plan
// refreshes what does drift — compressed sizes, outlier fractions and errors — from the current
// weights.
void AdaccRegulator::solve(const std::vector<int>& tokens, const float* weights) {
    const int B = config_.training.batch_size, T = config_.training.seq_len;
    const auto start = std::chrono::steady_clock::now();
    const bool have_profile = !profile_.tensors.empty();
    if (!have_profile || weights) {
        Profile fresh = profile_block(config_.model, B, measured_batch_, T, tokens, weights, config_.training.seed, {});
        if (have_profile) {
            fresh.op_ms = profile_.op_ms;
            for (auto& t : fresh.tensors)
                if (const TensorProfile* old = profile_.find(t.kind))
                    for (auto& m : t.codecs)
                        if (const CodecMeasurement* measured = old->find(m.codec)) {
                            m.compress_ms = measured->compress_ms;
                            m.decompress_ms = measured->decompress_ms;
                        }
        }
        profile_ = std::move(fresh);
        if (!options_.save_profile.empty()) profile_.save(options_.save_profile);
    }
    last_profile_ms_ = ms_since(start);
    plan_ = plan_adacc(config_.model, B, T, profile_, budget_, options_.allow_compress, options_.planner,
                       options_.codecs);
}

// Per (kind, codec) the plan compresses with, the profiled statistics the plan was solved with.
std::vector<CodecSample> AdaccRegulator::baseline() const {
    std::vector<CodecSample> out;
    for (const auto& t : profile_.tensors)
        for (int l = 0; l < plan_.plan.n_layer(); ++l) {
            const TensorPolicy& p = plan_.plan.at(l, t.kind);
            if (p.policy != Policy::compress) continue;
            const bool listed = std::any_of(out.begin(), out.end(), [&](const CodecSample& s) {
                return s.kind == t.kind && s.codec == p.codec;
            });
            const CodecMeasurement* m = t.find(p.codec);
            if (!listed && m != nullptr)
                out.push_back({t.kind, p.codec, m->outlier_fraction, m->relative_error, m->compressed_bytes, false});
        }
    return out;
}

std::string AdaccRegulator::describe() const {
    const std::string scaled = measured_batch_ != config_.training.batch_size
                                   ? " (profiled at batch " + std::to_string(measured_batch_) + ", scaled linearly)"
                                   : "";
    char line[512];
    std::snprintf(line, sizeof line,
                  "plan (%s): %s in %.1f ms; predicted total %s of budget %s, tape %s, added %.1f ms per step%s",
                  memory_mode_name(options_.allow_compress ? MemoryMode::adacc : MemoryMode::recompute_opt),
                  plan_status_name(plan_.result.status),
                  plan_.result.solve_ms, format_bytes(plan_.memory.total()).c_str(), format_bytes(budget_).c_str(),
                  format_bytes(plan_.memory.tape).c_str(), plan_.result.extra_ms, scaled.c_str());
    return line;
}

void AdaccRegulator::before_step(int step, GPTModel& model) {
    if (step == 1 || monitor_.should_sample(step)) {
        if (step == 1) monitor_.set_baseline(0, baseline());
        sampling_ = true;
        sampler_.set_codec_params(plan_.codec_params);
        model.set_observer(&sampler_);
    }
}

std::optional<ReplanEvent> AdaccRegulator::after_step(int step, GPTModel& model) {
    if (!sampling_) return std::nullopt;
    sampling_ = false;
    model.set_observer(nullptr);
    const auto start = std::chrono::steady_clock::now();
    const auto reason = monitor_.observe(step, sampler_.samples(), plan_.memory.total(), budget_);
    monitor_ms_ += ms_since(start) + sampler_.take_ms();
    if (!reason) return std::nullopt;
    std::vector<float> staging;
    solve(tokens_, model.host_readable(ModelArena::parameters, staging));
    model.set_plan(plan_.plan, plan_.codec_params);
    monitor_.set_baseline(step, baseline());
    return ReplanEvent{step, *reason, plan_.result.status, plan_.result.solve_ms, last_profile_ms_, plan_.memory.total()};
}

}  // namespace adacc
