#include "src/adacc/adacc_regulator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "src/common/checksum.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/dist/process_group.h"
#include "src/engine/memory_report.h"

namespace adacc {

Profile unit_batch_profile(const PlannedRun& run, const std::vector<int>& tokens) {
    const ProfileWeights source{nullptr, run.seed, run.stress};
    // On the CPU: cuDNN's attention is profiled as its fused twin, which saves the same tensors.
    GPTConfig model = run.model;
    model.attention = portable_attention(model.attention);
    return profile_block(model, 1, 1, run.seq_len, tokens, source, ComputeTarget{});
}

int largest_planned_batch(const PlannedRun& run, const Profile& unit, const RegulatorOptions& options,
                          std::uint64_t budget) {
    return largest_planned_batch(run.model, unit, budget, options.allow_compress, options.planner, options.codecs,
                                 run.target);
}

void check_plan_fits_machine(const PlannedRun& run, MemoryMode mode, const RegulatorOptions& options,
                             std::uint64_t budget, const AdaccPlan& plan, const Profile& profile) {
    const std::uint64_t machine = device_memory_bytes(run.target.device);
    if (plan.memory.total() <= machine) return;
    const int fits = largest_planned_batch(run, profile, options, machine);
    const int B = run.batch_size, T = run.seq_len;
    throw UserError("memory.budget " + format_bytes(budget) + " lets mode " + memory_mode_name(mode) + " plan batch " +
                    std::to_string(B) + " x seq " + std::to_string(T) + " to " + format_arenas(plan.memory) + ", but " +
                    device_memory_words(run.target.device, machine) + ": " +
                    (fits > 0 ? "within " + format_bytes(machine) + " it plans batch " + std::to_string(fits) +
                                    " (--set training.batch_size=" + std::to_string(fits) +
                                    " and a memory.budget of at most " + format_bytes(machine) + ")"
                              : "not even batch 1 fits it; choose a smaller model") +
                    "; `adacc memory --modes " + memory_mode_name(mode) +
                    " --memory-budget SIZE` shows the largest "
                    "batch for any budget");
}

namespace {
// The codec parameters a run profiles with (no setting changes them): a profile file must have
// been measured with them too.
const CodecParams kRunCodecParams{};

// The batch the profiler's slice runs at: B when the slice, keeping everything, fits both the
// budget and the target's memory, else the largest batch that does (times and sizes are scaled
// linearly to B). The budget binds the profiling too: a run never holds more than it was given.
int profiling_batch(const GPTConfig& config, int B, int T, std::uint64_t budget, const ComputeTarget& target) {
    const std::uint64_t room = std::min<std::uint64_t>(budget, device_memory_bytes(target.device));
    const int batch = largest_fitting_batch([&](int b) { return profile_slice_fits(config, b, T, room, target); }, B);
    if (batch == 0)
        throw UserError("the profiler's slice of this model (" + std::to_string(profile_slice(config).n_layer) +
                        " blocks at n_embd " + std::to_string(config.n_embd) + ", the embeddings and the classifier) " +
                        "does not fit " + format_bytes(room) + " at batch 1 x seq " + std::to_string(T) +
                        " (the budget or the device's memory, whichever is less): raise memory.budget or lower "
                        "training.seq_len");
    return batch;
}

// Raises a profile's per-tensor statistics to what the monitor sampled in the whole model (the
// profile's slice sees only its first layers; the training model's forward sees every layer, for
// the tensors the plan compresses). The two are measured on different batches, so where the slice
// is the whole model its own figures are used alone.
void raise_to_samples(Profile& profile, const std::vector<CodecSample>& samples) {
    for (const CodecSample& s : samples)
        for (auto& t : profile.tensors) {
            if (t.kind != s.kind) continue;
            for (auto& m : t.codecs) {
                if (m.codec != s.codec) continue;
                m.compressed_bytes = std::max(m.compressed_bytes, s.bytes);
                m.outlier_fraction = std::max(m.outlier_fraction, s.outlier_fraction);
                m.relative_error = std::max(m.relative_error, s.relative_error);
                // The slice's deepest layer stands for the layers beyond it.
                if (!m.layer_errors.empty()) m.layer_errors.back() = std::max(m.layer_errors.back(), s.relative_error);
            }
        }
}
}  // namespace

AdaccRegulator::AdaccRegulator(const PlannedRun& run, std::uint64_t budget_bytes, RegulatorOptions options,
                               const std::vector<int>& tokens, const float* weights)
    : run_(run),
      budget_(budget_bytes),
      options_(std::move(options)),
      plan_{ActivationPlan(BlockGraph(run.model, 1, 1), run.model.n_layer), {}, {}, {}, {}, {}, {}},
      monitor_(options_.monitor) {
    const int B = run.batch_size, T = run.seq_len;
    if (options_.profile_file)
        profile_ = Profile::load(*options_.profile_file, run.model, B, T, run.target, kRunCodecParams);
    measured_batch_ =
        profile_.tensors.empty() ? profiling_batch(run.model, B, T, budget_bytes, run.target) : profile_.measured_batch;
    tokens_.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(std::min(measured_batch_, B)) * T);
    solve(weights, {});
}

// Timings are measured once (they do not drift, and measuring them again is noisy); a re-plan
// refreshes what does drift — compressed sizes, outlier fractions and errors — from the current
// weights on the profiler's slice, raised to what the monitor last sampled in the layers the slice
// does not hold.
void AdaccRegulator::solve(const float* weights, const std::vector<CodecSample>& sampled) {
    const int B = run_.batch_size, T = run_.seq_len;
    const auto start = std::chrono::steady_clock::now();
    const bool root = process_group().is_root();
    if (profile_.tensors.empty() || weights) {
        if (root) profile_ = measure(weights, sampled);
        if (root && !options_.save_profile.empty()) profile_.save(options_.save_profile);
    }
    share_rank0_profile();
    last_profile_ms_ = ms_since(start);
    plan_ = plan_adacc(run_.model, B, T, profile_, budget_, options_.allow_compress, options_.planner, options_.codecs,
                       run_.target);
    rank_fingerprints_ = require_one_plan();
}

Profile AdaccRegulator::measure(const float* weights, const std::vector<CodecSample>& sampled) const {
    const int B = run_.batch_size, T = run_.seq_len;
    const bool have_profile = !profile_.tensors.empty();
    const ProfileWeights source{weights, run_.seed, run_.stress};
    Profile fresh = profile_block(run_.model, B, measured_batch_, T, tokens_, source, run_.target, kRunCodecParams);
    if (have_profile) keep_times(profile_, fresh);
    // The slice sees only the first layers: deeper ones are known from the monitor's samples.
    if (profile_slice(run_.model).n_layer < run_.model.n_layer) raise_to_samples(fresh, sampled);
    return fresh;
}

// One plan per job (docs/distributed.md, 'One plan per job'): rank 0's profile — its timings, and
// the statistics of its weights and batch — reaches every rank, and each solves the same MILP
// from it (lp_solve's answer is a function of its input). The other ranks measure nothing.
void AdaccRegulator::share_rank0_profile() {
    if (process_group().world_size == 1) return;
    std::string text = process_group().is_root() ? profile_.to_json().dump() : std::string();
    broadcast_text(text, 0);
    if (!process_group().is_root())
        profile_ = Profile::parse(text, "rank 0's profile", run_.model, run_.batch_size, run_.seq_len, run_.target,
                                  kRunCodecParams);
}

// Every rank's plan is rank 0's, checked by fingerprint: every rank learns all the ranks'
// fingerprints (rank by rank, for rank 0's log), and when some differ from rank 0's the first of
// those ranks ends the job naming them all.
std::vector<std::uint64_t> AdaccRegulator::require_one_plan() const {
    const ProcessGroup& group = process_group();
    const std::uint64_t mine = plan_fingerprint(plan_.plan);
    if (group.world_size == 1) return {mine};
    // Each rank's two 32-bit halves in slots of their own, summed: doubles hold them exactly.
    std::vector<double> halves(2 * static_cast<std::size_t>(group.world_size), 0.0);
    halves[2 * group.rank] = static_cast<double>(mine >> 32);
    halves[2 * group.rank + 1] = static_cast<double>(mine & 0xffffffffu);
    all_reduce_sum(halves.data(), halves.size());
    std::vector<std::uint64_t> all(group.world_size);
    std::string differing;
    int first_differing = -1;
    for (int r = 0; r < group.world_size; ++r) {
        all[r] = static_cast<std::uint64_t>(halves[2 * r]) << 32 | static_cast<std::uint64_t>(halves[2 * r + 1]);
        if (all[r] == all[0]) continue;
        if (first_differing < 0) first_differing = r;
        differing += (differing.empty() ? "" : ", ") + std::to_string(r) + " (" + format_digest(all[r]) + ")";
    }
    if (first_differing < 0) return all;
    if (group.rank == first_differing)
        throw UserError("ranks " + differing + " solved other plans than rank 0 (" + format_digest(all[0]) +
                        ") from the same profile: the ranks run different adacc builds or lp_solve libraries; "
                        "run one build on every node");
    all_reduce_max(0);  // waits for that rank to end the job with its message
    return all;
}

std::vector<CodecSample> AdaccRegulator::rank0_samples(const std::vector<CodecSample>& mine) const {
    if (process_group().world_size == 1) return mine;
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& s : mine)
        rows.push_back({static_cast<int>(s.kind), static_cast<int>(s.codec), s.outlier_fraction, s.relative_error,
                        s.bytes, s.outlier_cap_reached});
    std::string text = process_group().is_root() ? rows.dump() : std::string();
    broadcast_text(text, 0);
    std::vector<CodecSample> out;
    for (const auto& r : nlohmann::json::parse(text))
        out.push_back({static_cast<TensorKind>(r[0].get<int>()), static_cast<Codec>(r[1].get<int>()),
                       r[2].get<double>(), r[3].get<double>(), r[4].get<std::size_t>(), r[5].get<bool>()});
    return out;
}

// Per (kind, codec) the plan compresses with, the profiled statistics the plan was solved with.
std::vector<CodecSample> AdaccRegulator::baseline() const {
    std::vector<CodecSample> out;
    for (const auto& t : profile_.tensors)
        for (int l = 0; l < plan_.plan.n_layer(); ++l) {
            const TensorPolicy& p = plan_.plan.at(l, t.kind);
            if (p.policy != Policy::compress) continue;
            const bool listed = std::any_of(
                out.begin(), out.end(), [&](const CodecSample& s) { return s.kind == t.kind && s.codec == p.codec; });
            const CodecMeasurement* m = t.find(p.codec);
            if (!listed && m != nullptr)
                out.push_back({t.kind, p.codec, m->outlier_fraction, m->relative_error, m->compressed_bytes, false});
        }
    return out;
}

std::string AdaccRegulator::describe() const {
    const std::string scaled =
        "; profiled on " + std::to_string(profile_slice(run_.model).n_layer) + " of " +
        std::to_string(run_.model.n_layer) + " blocks" +
        (measured_batch_ != run_.batch_size ? " at batch " + std::to_string(measured_batch_) + ", scaled linearly"
                                            : std::string());
    char line[512];
    std::snprintf(line, sizeof line,
                  "plan (%s): %s in %.1f ms; predicted total %s of budget %s, tape %s, added %.1f ms per step%s",
                  memory_mode_name(options_.allow_compress ? MemoryMode::adacc : MemoryMode::recompute_opt),
                  plan_status_name(plan_.result.status), plan_.result.solve_ms,
                  format_bytes(plan_.memory.total()).c_str(), format_bytes(budget_).c_str(),
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
    // Rank 0's samples decide for every rank: the monitor then re-plans at the same steps everywhere.
    const std::vector<CodecSample> samples = rank0_samples(sampler_.samples());
    const auto reason = monitor_.observe(step, samples, plan_.memory.total(), budget_);
    monitor_ms_ += ms_since(start) + sampler_.take_ms();
    if (!reason) return std::nullopt;
    std::vector<float> staging;
    solve(model.forward_weights(staging), samples);
    model.set_plan(plan_.plan, plan_.codec_params);
    monitor_.set_baseline(step, baseline());
    return ReplanEvent{step,
                       *reason,
                       plan_.result.status,
                       plan_.result.solve_ms,
                       last_profile_ms_,
                       plan_.memory.total(),
                       plan_fingerprint(plan_.plan),
                       rank_fingerprints_};
}

}  // namespace adacc
