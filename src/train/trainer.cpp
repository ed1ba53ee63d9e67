#include "src/train/trainer.h"

#include <cstdio>

#include "src/common/checksum.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/common/process_memory.h"
#include "src/common/units.h"
#include "src/config/config.h"
#include "src/cuda/cuda_device.h"
#include "src/dist/process_group.h"
#include "src/engine/cpu_threads.h"
#include "src/engine/device.h"
#include "src/engine/memory_report.h"
#include "src/engine/weight_init.h"
#include "src/io/checkpoint_folder.h"
#include "src/train/run_folder.h"
#include "src/train/stop_signals.h"
#include "src/train/token_loader.h"

namespace adacc {

namespace {

void print_model_summary(const RunConfig& cfg, const GPTModel& model, const ComputeTarget& target) {
    const GPTConfig& m = cfg.model;
    const ModelMemory& mem = model.memory();
    std::printf("model: L=%d C=%d H=%d V=%d (padded %d) maxT=%d dropout=%.2f\n", m.n_layer, m.n_embd, m.n_head,
                m.vocab_size, m.padded_vocab_size(), m.max_seq_len, m.dropout);
    std::printf("parameters: %lld (formula Vp*C + maxT*C + L*(12C^2 + 13C) + 2C = %lld; %lld without vocab padding)\n",
                static_cast<long long>(model.num_params()), static_cast<long long>(m.parameter_count()),
                static_cast<long long>(m.unpadded_parameter_count()));
    std::printf(
        "memory (%s on %s, %s): params %s, grads %s, adamw %s, tape %s, workspace %s (logits %s)%s%s, total %s\n",
        cfg.memory.mode.c_str(), device_name(model.backend().device()), model_dtype_name(model.activation_dtype()),
        format_bytes(mem.parameters + mem.working_weights).c_str(), format_bytes(mem.gradients).c_str(),
        format_bytes(mem.optimizer_state).c_str(), format_bytes(mem.tape).c_str(),
        format_bytes(mem.workspace()).c_str(), format_bytes(mem.logits).c_str(), mem.backend ? ", backend " : "",
        mem.backend ? format_bytes(mem.backend).c_str() : "", format_bytes(mem.total()).c_str());
    // What the backend's fixed memory holds, the CUDA context's measured part included.
    if (mem.backend) std::printf("%s", describe_device_memory(target).c_str());
}

}  // namespace

Trainer::Trainer(const RunConfig& config, const std::optional<std::filesystem::path>& resume_checkpoint,
                 const std::optional<WeightsFile>& init_from)
    : config_(config), target_(compute_target(config)), run_dir_(config.logging.run_dir) {
    if (target_.device == Device::cuda) peak_tflops_ = gpu_peak(cuda_device_info().name).tflops(target_.activation);
    if (config_.training.threads > 0) configure_cpu_threads(config_.training.threads);
    set_collective_timeout(config_.training.collective_timeout_s);
    // A device that cannot run this config (no GPU) or a planned mode's bad [memory] options fail
    // before the run folder is touched.
    if (const MemoryMode mode = parse_memory_mode(config_.memory.mode); is_planned(mode))
        regulator_options(config_, mode);
    // NCCL's communicator, made here on every rank so its buffers count in every check below.
    start_collectives(backend_for(target_.device));
    // The run folder is rank 0's: the other ranks of a data-parallel job write nothing there.
    const bool root = process_group().is_root();
    if (root) create_run_folder(run_dir_);
    std::printf("%s", format_config_table(config_).c_str());
    // A fresh run that fails to start (a data file that is not there, a model too large) leaves
    // no run files behind, so the same command works again once the cause is fixed; a fresh run's
    // folder held none before (claim_run_folder_for_fresh_run), so all of them are this start's.
    // The config is saved once the start succeeded: a refused resume leaves the run's as it was.
    try {
        start(resume_checkpoint, init_from);
        if (root) save_run_config();
    } catch (...) {
        if (!resume_checkpoint && root) remove_failed_start_files(run_dir_);
        throw;
    }
}

void Trainer::save_run_config() const {
    const std::string text = to_toml(config_);
    AtomicFileWriter out(run_dir_ / "config.toml");  // a full disk is an error, not an empty file
    out.write(text.data(), text.size());
    out.commit();
}

void Trainer::start(const std::optional<std::filesystem::path>& resume_checkpoint,
                    const std::optional<WeightsFile>& init_from) {
    const int B = config_.training.batch_size, T = config_.training.seq_len;
    train_data_ = std::make_unique<DataLoader>(open_token_loader(config_, TokenSplit::train, config_.data.shuffle));
    make_model(B, T);
    step_ = std::make_unique<TrainingStep>(config_, *model_, *train_data_, regulator_.get());
    print_model_summary(config_, *model_, target_);
    if (!config_.data.val.empty())
        val_data_ = std::make_unique<DataLoader>(open_token_loader(config_, TokenSplit::val, /*shuffle=*/false));
    if (TrainingEvaluator::enabled(config_)) evaluator_ = std::make_unique<TrainingEvaluator>(config_, target_);
    if (config_.training.fidelity_every > 0) fidelity_ = std::make_unique<FidelityProbe>(config_, target_);
    inputs_.resize(static_cast<std::size_t>(B) * T);
    targets_.resize(inputs_.size());

    if (resume_checkpoint) {
        progress_ = load_training_checkpoint(*resume_checkpoint, *model_);
        train_data_->restore(progress_.train_data);
        std::printf("resumed from %s at step %d\n", resume_checkpoint->c_str(), progress_.step);
        // A finished run resumed again (a requeued job) ends at once; say so, and how to go on.
        if (progress_.step >= config_.training.steps)
            std::printf(
                "nothing to train: the run has completed %d steps and training.steps is %d; to train on, "
                "resume with --set training.steps=N (N > %d)\n",
                progress_.step, config_.training.steps, progress_.step);
    } else if (init_from) {
        load_weights(*init_from, *model_);
        apply_stress(*model_, config_.stress);
        std::printf("initialised from %s%s\n", describe_weights(*init_from).c_str(),
                    config_.stress.outlier_channels ? ", then [stress] outlier channels scaled" : "");
    } else {
        init_run_weights(*model_, config_.training.seed, config_.stress);
    }
    if (process_group().is_root())
        metrics_ = std::make_unique<MetricsLog>(run_dir_ / "metrics.jsonl", resume_checkpoint ? progress_.step : 0);
}

// Fixed modes take their plan from the mode; planned modes profile, solve for the budget and
// keep a regulator that monitors and re-plans during the run.
void Trainer::make_model(int B, int T) {
    const MemoryMode mode = parse_memory_mode(config_.memory.mode);
    const std::uint64_t budget = budget_bytes(config_.memory);
    if (!is_planned(mode)) {
        if (budget) check_budget(config_.model, B, T, mode, budget, target_);
        const ActivationPlan plan = plan_for_mode(config_.model, B, T, mode);
        check_physical_memory(config_.model, B, T, mode,
                              GPTModel::plan_memory(config_.model, B, T, plan, {}, ModelUse::training, target_).total(),
                              target_);
        model_ = allocate_model(B, T, plan, CodecParams{}, mode);
        return;
    }
    if (!budget)
        throw UserError("memory.mode " + config_.memory.mode + " plans for a memory budget: set memory.budget " +
                        "(or --memory-budget SIZE)");
    check_model_fits_machine(config_.model, T, target_);  // before even the profiler's slice is built
    RegulatorOptions options = regulator_options(config_, mode);
    options.save_profile = run_dir_ / "profile.json";
    // Profile on the first training batch, from a loader of its own so training's position is untouched.
    const PlannedRun run = planned_run(config_, target_);
    regulator_ = std::make_unique<AdaccRegulator>(run, budget, options, first_training_batch(config_), nullptr);
    std::printf("%s\n", regulator_->describe().c_str());
    const auto& planned = regulator_->plan();
    // A planned mode's budget may exceed the machine: what counts is the plan's total.
    check_plan_fits_machine(run, mode, options, budget, planned, regulator_->profile());
    model_ = allocate_model(B, T, planned.plan, planned.codec_params, MemoryMode::full);
}

// The start-up checks passed, so an arena the allocator still refuses means the memory free moved
// (or the process holds more than it counts): the error then says which batch fits what is free
// now, in `mode` (a planned run's: full recomputation, which keeps the least), the partial model
// freed by then.
std::unique_ptr<GPTModel> Trainer::allocate_model(int B, int T, const ActivationPlan& plan,
                                                  const CodecParams& codec_params, MemoryMode mode) const {
    try {
        return std::make_unique<GPTModel>(config_.model, B, T, plan, codec_params, ModelUse::training, target_);
    } catch (const OutOfMemoryError& e) {
        throw UserError(std::string(e.what()) + ". With the memory free now, " +
                        largest_batch_words(config_.model, T, mode, device_memory_bytes(target_.device), target_));
    }
}

void Trainer::write_metrics(const nlohmann::json& line) {
    if (metrics_) metrics_->write(line);
}

namespace {
nlohmann::json rank_digests(const std::vector<std::uint64_t>& fingerprints) {
    nlohmann::json digests = nlohmann::json::array();
    for (std::uint64_t f : fingerprints) digests.push_back(format_digest(f));
    return digests;
}
}  // namespace

void Trainer::log_replan(const ReplanEvent& e) {
    std::printf("step %6d | replan: %s -> %s plan in %.1f ms (profile %.1f ms), predicted total %s\n", e.step,
                e.reason.c_str(), plan_status_name(e.status), e.solve_ms, e.profile_ms,
                format_bytes(e.predicted_total_bytes).c_str());
    write_metrics({{"step", e.step},
                   {"event", "replan"},
                   {"reason", e.reason},
                   {"status", plan_status_name(e.status)},
                   {"solve_ms", e.solve_ms},
                   {"profile_ms", e.profile_ms},
                   {"predicted_total_bytes", e.predicted_total_bytes},
                   {"plan_fingerprint", format_digest(e.plan_fingerprint)},
                   {"rank_plan_fingerprints", rank_digests(e.rank_fingerprints)}});
}

// Mean loss over the first training.val_batches batches of the validation shards, the same
// batches every time, without dropout. Data-parallel ranks share them: rank r takes batches
// r, r + W, ... of them (its loader's first ones), and the sums are added up.
float Trainer::validation_loss() {
    const int B = config_.training.batch_size, T = config_.training.seq_len;
    const ProcessGroup& group = process_group();
    val_data_->restore({});
    double total = 0.0;
    const int batches = config_.training.val_batches;
    for (int i = group.rank; i < batches; i += group.world_size) {
        val_data_->next_batch(inputs_, targets_);
        total += model_->forward(inputs_.data(), targets_.data(), B, T, DropoutContext{0, 0, 0, false}, 0.0f);
    }
    all_reduce_sum(&total, 1);
    return static_cast<float>(total / batches);
}

void Trainer::log_step(int step, float loss, float lr, float grad_norm, double seconds) {
    const auto& t = config_.training;
    const int ranks = process_group().world_size;  // tokens and FLOPs of every rank
    const double tokens = static_cast<double>(t.batch_size) * t.seq_len * t.grad_accum * ranks;
    const double gflops = model_->training_flops(t.batch_size, t.seq_len) * t.grad_accum * ranks / seconds / 1e9;
    // On a GPU gpu_peak knows, MFU as llm.c counts it: 6N + 6LCT a token over each GPU's dense peak.
    const double mfu = peak_tflops_ > 0
                           ? config_.model.flops_per_token(t.seq_len) * tokens / seconds / (peak_tflops_ * 1e12 * ranks)
                           : 0.0;
    char mfu_text[32] = "";
    if (peak_tflops_ > 0) std::snprintf(mfu_text, sizeof mfu_text, " | MFU %.1f%%", 100 * mfu);
    // The tape at its peak (end of forward): bytes held kept / reserved for compressed blobs, and
    // bytes recomputed instead; on sampled steps also the blobs' exact size.
    const TapeUsage& tape = model_->tape().peak();
    const std::size_t kept = tape.by_policy[int(Policy::keep)], compressed = tape.by_policy[int(Policy::compress)],
                      recomputed = tape.by_policy[int(Policy::recompute)];
    const std::string measured = tape.measured_slots ? ", blobs measured " + format_bytes(tape.measured_bytes) +
                                                           " of " + format_bytes(tape.measured_reserved) + " reserved"
                                                     : "";
    if (step % config_.logging.print_every == 0 || step == t.steps)
        std::printf(
            "step %6d/%d | loss %.4f | lr %.2e | norm %6.3f | %8.1f ms | %8.0f tok/s | %6.1f GFLOP/s%s | "
            "tape %s (kept %s, compressed %s, recompute %s%s)\n",
            step, t.steps, loss, lr, grad_norm, seconds * 1e3, tokens / seconds, gflops, mfu_text,
            format_bytes(tape.used).c_str(), format_bytes(kept).c_str(), format_bytes(compressed).c_str(),
            format_bytes(recomputed).c_str(), measured.c_str());
    std::fflush(stdout);
    nlohmann::json record = {{"step", step},
                             {"loss", loss},
                             {"lr", lr},
                             {"grad_norm", grad_norm},
                             {"step_ms", seconds * 1e3},
                             {"tokens_per_s", tokens / seconds},
                             {"gflops", gflops},
                             {"tape_peak_bytes", tape.used},
                             {"tape_kept_bytes", kept},
                             {"tape_compressed_bytes", compressed},
                             {"tape_recompute_bytes", recomputed}};
    if (tape.measured_slots) record["tape_compressed_measured_bytes"] = tape.measured_bytes;
    if (peak_tflops_ > 0) record["mfu"] = mfu;
    if (regulator_) {
        record["monitor_ms_total"] = regulator_->monitor_ms();
        // The plan this step ran, the same on every rank (AdaccRegulator checks it at each plan).
        record["plan_fingerprint"] = format_digest(plan_fingerprint(model_->plan()));
    }
    write_metrics(record);
}

// The run's plan vs keep-all at the current weights, on the first training batch, dropout off.
void Trainer::log_fidelity(int step) {
    const GradientFidelity f = fidelity_->measure(*model_);
    std::printf("step %6d/%d | grad_err %.3e | grad_cos %.6f (vs keep-all, first batch, dropout off)\n", step,
                config_.training.steps, f.overall.relative_l2, f.overall.cosine);
    write_metrics({{"step", step}, {"grad_err", f.overall.relative_l2}, {"grad_cos", f.overall.cosine}});
}

// A step whose loss or gradient norm is not finite leaves the parameters as they were; up to
// training.skip_nonfinite such steps are skipped (logged), the next one stops the run.
void Trainer::skip_nonfinite_step(int step, float loss, float grad_norm) {
    char what[96];
    std::snprintf(what, sizeof what, "the loss is %g and the gradient norm %g", static_cast<double>(loss),
                  static_cast<double>(grad_norm));
    if (progress_.skipped_nonfinite >= config_.training.skip_nonfinite) stop_diverged(step, what);
    ++progress_.skipped_nonfinite;
    std::printf("step %6d/%d | skipped: %s (%d of training.skip_nonfinite = %d)\n", step, config_.training.steps, what,
                progress_.skipped_nonfinite, config_.training.skip_nonfinite);
    write_metrics({{"step", step},
                   {"event", "nonfinite_skipped"},
                   {"what", what},
                   {"skipped_so_far", progress_.skipped_nonfinite}});
}

void Trainer::stop_diverged(int step, const std::string& what) const {
    const auto newest = newest_complete_checkpoint(run_dir_);
    char lr[32];
    std::snprintf(lr, sizeof lr, "%g", static_cast<double>(config_.lr.max));
    throw UserError("training diverged at step " + std::to_string(step) + ": " + what +
                    ". Usual causes: a learning rate too high (lr.max = " + lr +
                    "), gradient clipping off (optimizer.grad_clip = 0), or corrupt data. " +
                    (newest ? "The newest checkpoint, " + newest->string() +
                                  ", is intact: continue from it with a "
                                  "lower rate (adacc train --resume " +
                                  run_dir_.string() + " --set lr.max=...)"
                            : std::string("No checkpoint was written from this run")) +
                    "; training.skip_nonfinite = N skips up to N such steps instead of stopping.");
}

void Trainer::save_checkpoint() {
    if (!training_state_is_finite(*model_))
        stop_diverged(progress_.step, "its update made parameters or AdamW moments non-finite (not checkpointed)");
    if (const auto file = save_training_checkpoint(run_dir_, config_, *model_, progress_))
        std::printf("checkpoint: %s\n", file->c_str());
}

int Trainer::run() {
    const auto& t = config_.training;
    for (int step = progress_.step + 1; step <= t.steps; ++step) {
        if (step_hook_) step_hook_(step, *model_);
        const StepResult result = step_->run(step);
        progress_.step = step;
        progress_.train_data = train_data_->state();
        if (result.updated)
            log_step(step, result.loss, result.lr, result.grad_norm, result.seconds);
        else
            skip_nonfinite_step(step, result.loss, result.grad_norm);
        // After the step's line (which reports the tape this step used): a new plan takes effect next step.
        if (const auto event = step_->after(step)) log_replan(*event);

        // A stop signal skips this step's validation and eval: preemption leaves little time.
        // Every rank stops at the same step, when any was signalled.
        const int stop_signal = all_reduce_max(stop_signal_received());
        if (!stop_signal && val_data_ && t.val_every > 0 && (step % t.val_every == 0 || step == t.steps)) {
            const float val = validation_loss();
            std::printf("step %6d/%d | val_loss %.4f\n", step, t.steps, val);
            write_metrics({{"step", step}, {"val_loss", val}});
        }
        // Gradient fidelity and eval tasks run on rank 0 alone (they take no collective step).
        const bool root = process_group().is_root();
        // A skipped step's gradients were not finite: it has no fidelity to record (0 would read as perfect).
        if (!stop_signal && root && fidelity_ && result.updated && (step % t.fidelity_every == 0 || step == t.steps))
            log_fidelity(step);
        if (!stop_signal && root && evaluator_ && evaluator_->due(step, t.steps)) {
            const nlohmann::json record = evaluator_->evaluate(*model_, step);
            std::printf("step %6d/%d | eval %s\n", step, t.steps, TrainingEvaluator::describe(record).c_str());
            write_metrics(record);
        }
        const int every = config_.checkpoint.every;
        if ((every > 0 && step % every == 0) || step == t.steps || stop_signal) save_checkpoint();
        if (stop_signal) return stop_signal;
    }
    if (process_group().is_root()) report_memory_use();
    return 0;
}

// The memory the run accounted (its arenas: what the budget, the physical-memory check and the
// largest-batch answers use) beside what the machine charged it: the process's peak RSS on the
// CPU, the device's memory in use on CUDA. The difference is what the accounting does not see.
void Trainer::report_memory_use() {
    const std::uint64_t accounted = model_->memory().total();
    if (model_->backend().device() == Device::cpu) {
        const std::uint64_t peak = peak_resident_bytes();
        std::printf(
            "memory: accounted %s, the process's peak RSS %s (it also holds the binary, its libraries, "
            "threads' stacks and buffers the accounting does not count)\n",
            format_bytes(accounted).c_str(), format_bytes(peak).c_str());
    } else {
        const std::uint64_t total = cuda_device_info().total_memory, free = model_->backend().free_memory();
        const std::uint64_t in_use = total > free ? total - free : 0;
        const std::size_t library = model_->backend().library_bytes();
        const std::size_t nccl = cuda_collectives_overhead(target_.world_size).bytes;
        std::printf(
            "memory: accounted %s, the device's memory in use %s (cudaMemGetInfo; of it cuDNN's workspace %s and "
            "NCCL's buffers %s, both counted; any other process's memory is not)\n",
            format_bytes(accounted).c_str(), format_bytes(in_use).c_str(), format_bytes(library).c_str(),
            format_bytes(nccl).c_str());
    }
}

}  // namespace adacc
