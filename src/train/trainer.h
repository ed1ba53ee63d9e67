// The training loop: data, the steps (src/train/training_step.h: micro-batches with gradient
// accumulation, AdamW with the lr schedule and clipping), skipped non-finite steps, periodic
// validation and gradient fidelity, checkpoints, the step line and metrics.jsonl.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "data/dataloader.h"
#include "src/adacc/adacc_regulator.h"
#include "src/config/run_config.h"
#include "src/engine/gpt_model.h"
#include "src/io/metrics_log.h"
#include "src/train/gradient_fidelity.h"
#include "src/train/training_evaluator.h"
#include "src/train/training_state.h"
#include "src/train/training_step.h"
#include "src/train/weights_file.h"

namespace adacc {

class Trainer {
public:
    // Prepares the run folder (config.toml), the model, the data and the log. With a resume
    // checkpoint, continues from its step exactly: parameters, optimizer state, data position.
    // Otherwise starts at step 0 from `init_from`'s parameters (fresh optimizer, data from the
    // start) or, without one, from an initialisation seeded by training.seed.
    // Claiming the folder (lock, refusing to mix with another run) is the caller's job:
    // src/run_folder.h.
    Trainer(const RunConfig& config, const std::optional<std::filesystem::path>& resume_checkpoint,
            const std::optional<WeightsFile>& init_from = std::nullopt);
    // Trains to training.steps and returns 0, or returns the signal (src/train/stop_signals.h) after
    // which it stopped early, having written a checkpoint of the last completed step. A
    // non-finite loss or gradient norm beyond training.skip_nonfinite skipped steps, or
    // non-finite parameters, stop training with a UserError (no checkpoint is written from them).
    int run();

    const GPTModel& model() const { return *model_; }
    int completed_steps() const { return progress_.step; }
    // Test instrumentation: called before every step with the model (e.g. to inject outliers).
    void set_step_hook(std::function<void(int step, GPTModel& model)> hook) { step_hook_ = std::move(hook); }

private:
    void skip_nonfinite_step(int step, float loss, float grad_norm);
    [[noreturn]] void stop_diverged(int step, const std::string& what) const;
    void save_checkpoint();
    void make_model(int B, int T);
    std::unique_ptr<GPTModel> allocate_model(int B, int T, const ActivationPlan& plan, const CodecParams& codec_params,
                                             MemoryMode mode) const;
    // Everything the constructor does once the run folder exists (data, model, weights).
    void start(const std::optional<std::filesystem::path>& resume_checkpoint,
               const std::optional<WeightsFile>& init_from);
    void save_run_config() const;                    // RUN_DIR/config.toml: the resolved config this run trains with
    void report_memory_use();                        // the run's last line: accounted vs what the machine charged
    void write_metrics(const nlohmann::json& line);  // a line of metrics.jsonl (rank 0 alone writes it)
    void log_replan(const ReplanEvent& event);
    float validation_loss();
    void log_step(int step, float loss, float lr, float grad_norm, double seconds);
    void log_fidelity(int step);

    RunConfig config_;
    ComputeTarget target_;  // where the model runs, resolved from the config once
    // The GPU's dense peak in the run's dtype, TFLOP/s, for the step lines' MFU: 0 on the CPU or a
    // GPU that src/engine/device.h:gpu_peak does not list (no MFU then).
    double peak_tflops_ = 0;
    std::filesystem::path run_dir_;
    std::unique_ptr<GPTModel> model_;
    std::unique_ptr<DataLoader> train_data_, val_data_;
    std::unique_ptr<MetricsLog> metrics_;
    std::unique_ptr<AdaccRegulator> regulator_;  // planned memory modes only
    std::unique_ptr<TrainingStep> step_;         // steps model_ on train_data_
    std::function<void(int, GPTModel&)> step_hook_;
    std::unique_ptr<TrainingEvaluator> evaluator_;  // [eval] tasks; null when none are configured
    std::unique_ptr<FidelityProbe> fidelity_;       // training.fidelity_every > 0 only
    TrainingProgress progress_;
    std::vector<std::int32_t> inputs_, targets_;  // validation batches
};

}  // namespace adacc
