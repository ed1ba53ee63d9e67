// Evaluation during training (the config's [eval] section), over the eval tasks of
// src/eval/eval_tasks.h.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "src/config/run_config.h"
#include "src/engine/device.h"
#include "src/engine/gpt_model.h"
#include "src/eval/eval_tasks.h"

namespace adacc {

// Evaluation during training (the [eval] section): every eval.every steps, the first eval.limit
// test documents of each of eval.tasks, read from eval.data with the GPT-2 vocabulary in
// eval.vocab, scored with an inference model of the run's shape (batch = training.batch_size)
// into which the training model's parameters are copied.
class TrainingEvaluator {
public:
    // True when the config asks for in-training evals (eval.every > 0 and eval.tasks non-empty).
    static bool enabled(const RunConfig& config);
    // Reads and tokenizes the documents and allocates the model on `target` (the training model's);
    // UserError naming the key and the fix when eval.data or eval.vocab is missing or wrong.
    TrainingEvaluator(const RunConfig& config, const ComputeTarget& target);
    ~TrainingEvaluator();
    bool due(int step, int last_step) const;
    // {"step", "eval_<task>_acc", "eval_<task>_acc_norm" (arc_easy), "eval_<task>_ppl" (lambada),
    //  "eval_<task>_n", "eval_seconds"}
    nlohmann::json evaluate(const GPTModel& model, int step);
    // "lambada acc 0.0312 ppl 8.1e+03 (n=100) | arc_easy acc 0.27 acc_norm 0.26 (n=100) | 4.2 s"
    static std::string describe(const nlohmann::json& record);

private:
    RunConfig config_;
    std::vector<PreparedEval> tasks_;
    std::unique_ptr<GPTModel> model_;
};

}  // namespace adacc
