#include "src/train/training_evaluator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "data/tokenizer.h"
#include "src/common/errors.h"
#include "src/common/units.h"

namespace adacc {

bool TrainingEvaluator::enabled(const RunConfig& config) { return config.eval.every > 0 && !config.eval.tasks.empty(); }

TrainingEvaluator::TrainingEvaluator(const RunConfig& config, const ComputeTarget& target) : config_(config) {
    const EvalSection& e = config.eval;
    if (e.vocab.empty())
        throw UserError(
            "eval.tasks needs eval.vocab: set it to the folder with GPT-2's encoder.json and vocab.bpe "
            "(`scripts/download_data.sh vocab DIR` fetches them), or set eval.every = 0");
    if (e.data.empty())
        throw UserError(
            "eval.tasks needs eval.data: set it to the folder holding lambada_openai/ and arc_easy/ "
            "(`scripts/download_data.sh lambada` and `arc_easy` fill datasets/), or set eval.every = 0");
    const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(e.vocab);
    if (static_cast<std::uint32_t>(config.model.vocab_size) != tokenizer.vocab_size())
        throw UserError("eval.tasks scores GPT-2 text, but model.vocab_size is " +
                        std::to_string(config.model.vocab_size) + " and the tokenizer in eval.vocab has " +
                        std::to_string(tokenizer.vocab_size()) + " tokens: set eval.every = 0 for this model");
    const TextEncoder encoder = gpt2_text_encoder(tokenizer);
    int seq_len = 1;
    for (const std::string& name : e.tasks) {
        const EvalTask task = *parse_eval_task(name);  // the config accepts only known names
        const auto file = resolve_eval_data(task, e.data, "test");
        tasks_.push_back(prepare_eval(task, read_eval_docs(task, file, static_cast<std::size_t>(e.limit)), encoder));
        seq_len = std::max(seq_len, required_seq_len(tasks_.back().requests, config.model.max_seq_len));
    }
    model_ = std::make_unique<GPTModel>(
        config.model, config.training.batch_size, seq_len,
        ActivationPlan(BlockGraph(config.model, config.training.batch_size, seq_len), config.model.n_layer),
        CodecParams{}, ModelUse::inference, target);
}

TrainingEvaluator::~TrainingEvaluator() = default;

bool TrainingEvaluator::due(int step, int last_step) const {
    return config_.eval.every > 0 && (step % config_.eval.every == 0 || step == last_step);
}

nlohmann::json TrainingEvaluator::evaluate(const GPTModel& model, int step) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> staging;
    model_->write_arena(ModelArena::parameters, 0, model.num_params(),
                        model.host_readable(ModelArena::parameters, staging));
    nlohmann::json record = {{"step", step}};
    for (const PreparedEval& task : tasks_) {
        const EvalRun run = run_eval(*model_, task);
        const std::string prefix = std::string("eval_") + eval_task_name(task.task) + "_";
        record[prefix + "acc"] = run.summary.acc;
        if (run.summary.acc_norm) record[prefix + "acc_norm"] = *run.summary.acc_norm;
        if (run.summary.ppl) record[prefix + "ppl"] = *run.summary.ppl;
        record[prefix + "n"] = run.summary.n;
    }
    record["eval_seconds"] = seconds_since(start);
    return record;
}

std::string TrainingEvaluator::describe(const nlohmann::json& record) {
    std::string line;
    char buffer[160];
    for (const EvalTaskInfo& task : eval_tasks()) {
        const std::string prefix = std::string("eval_") + task.name + "_";
        if (!record.contains(prefix + "acc")) continue;
        std::snprintf(buffer, sizeof buffer, "%s%s acc %.4f", line.empty() ? "" : " | ", task.name,
                      record[prefix + "acc"].get<double>());
        line += buffer;
        if (record.contains(prefix + "acc_norm")) {
            std::snprintf(buffer, sizeof buffer, " acc_norm %.4f", record[prefix + "acc_norm"].get<double>());
            line += buffer;
        }
        if (record.contains(prefix + "ppl")) {
            std::snprintf(buffer, sizeof buffer, " ppl %.4g", record[prefix + "ppl"].get<double>());
            line += buffer;
        }
        line += " (n=" + std::to_string(record[prefix + "n"].get<std::size_t>()) + ")";
    }
    std::snprintf(buffer, sizeof buffer, " | %.1f s", record.value("eval_seconds", 0.0));
    return line + buffer;
}

}  // namespace adacc
