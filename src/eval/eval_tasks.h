// The two evaluation tasks, LAMBADA (lm-evaluation-harness `lambada_openai`) and ARC-Easy
// (`arc_easy`), zero-shot, as the harness builds and scores them (docs/evaluation.md, 'What
// exactly is computed'):
//
//   lambada   {"text": ...} per line. context = text before the last ASCII space, continuation =
//             " " + the last space-separated piece, kept as is (it may hold punctuation or
//             newlines). acc = every continuation token is the greedy arg-max; ppl =
//             exp(-mean over passages of the continuation's summed log-likelihood), a per-word
//             perplexity.
//   arc_easy  AI2's jsonl {"id", "question": {"stem", "choices": [{"text", "label"}]}, "answerKey"}.
//             context = "Question: " + stem + "\nAnswer:", one continuation " " + text per choice
//             (3-5 choices, labels A-E or 1-5). acc: arg-max of the summed log-likelihoods
//             (first maximum on ties); acc_norm: arg-max of ll / len(choice text) in characters
//             (Unicode code points, Python's len); acc_bytes: the same per UTF-8 byte.
// Standard errors are the sample standard deviation over documents / sqrt(n), as the harness's.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/eval/evaluation.h"
#include "src/engine/gpt_model.h"
#include "src/config/run_config.h"

namespace adacc {

enum class EvalTask { lambada, arc_easy };

// "lambada" (also "lambada_openai") or "arc_easy"; empty otherwise.
std::optional<EvalTask> parse_eval_task(std::string_view name);
const char* eval_task_name(EvalTask task);     // "lambada", "arc_easy"
const char* harness_task_name(EvalTask task);  // "lambada_openai", "arc_easy"

// One document as the harness sees it: a context and one continuation per choice.
struct EvalDoc {
    std::string id;                          // ARC: its id; LAMBADA: the line's 0-based index
    std::string context;
    std::vector<std::string> continuations;  // exactly as scored, leading space included
    std::vector<std::string> choices;        // ARC: the choice texts (acc_norm's lengths); LAMBADA: the last piece
    std::vector<std::string> labels;         // ARC: the choice labels; LAMBADA: empty
    int gold = 0;                            // index of the right continuation
};

// The LAMBADA split of one passage.
EvalDoc lambada_doc(std::string_view text, std::string id);

// Reads a task's jsonl (the first `limit` documents; 0 = all). Blank lines are skipped; anything
// else that is not a valid document is a UserError naming the file and line.
std::vector<EvalDoc> read_lambada(const std::filesystem::path& file, std::size_t limit = 0);
std::vector<EvalDoc> read_arc_easy(const std::filesystem::path& file, std::size_t limit = 0);
std::vector<EvalDoc> read_eval_docs(EvalTask task, const std::filesystem::path& file, std::size_t limit = 0);

// What --data names: a jsonl file as is; a folder holding the task's file (lambada_test.jsonl,
// ARC-Easy-{Test,Dev,Train}.jsonl by `split`: test, dev (= validation) or train), directly or in
// its lambada_openai/ or arc_easy/ subfolder (the layout of ../shared/data and
// scripts/download_data.sh's datasets/). UserError with the fix when there is none.
std::filesystem::path resolve_eval_data(EvalTask task, const std::filesystem::path& data, std::string_view split);

// Documents tokenized into requests: document d's continuations are requests
// [first_request[d], first_request[d + 1]).
struct PreparedEval {
    EvalTask task = EvalTask::lambada;
    std::vector<EvalDoc> docs;
    std::vector<LoglikelihoodRequest> requests;
    std::vector<std::size_t> first_request;  // docs.size() + 1 entries
};
PreparedEval prepare_eval(EvalTask task, std::vector<EvalDoc> docs, const TextEncoder& encoder);

struct DocResult {
    std::vector<double> loglikelihoods;  // one per continuation
    std::vector<bool> is_greedy;
    std::vector<int> greedy_tokens;      // LAMBADA: the arg-max tokens at the target's positions
    int prediction = 0;                  // arg-max of ll (LAMBADA: 0)
    int prediction_norm = 0;             // arg-max of ll / characters
    int prediction_bytes = 0;            // arg-max of ll / UTF-8 bytes
    bool correct = false;                // LAMBADA: is_greedy
    bool correct_norm = false;
    bool correct_bytes = false;
};
DocResult score_doc(EvalTask task, const EvalDoc& doc, std::span<const LoglikelihoodResult> results);

// Unicode code points in UTF-8 text (Python's len()).
std::size_t utf8_length(std::string_view text);

struct EvalSummary {
    EvalTask task = EvalTask::lambada;
    std::size_t n = 0;
    std::size_t requests = 0;
    std::size_t tokens = 0;                // model input tokens, padding not counted
    double acc = 0, acc_stderr = 0;
    std::optional<double> acc_norm, acc_norm_stderr, acc_bytes;  // arc_easy
    std::optional<double> ppl;                                    // lambada
    double seconds = 0;                    // scoring wall time
    double examples_per_s() const { return seconds > 0 ? static_cast<double>(n) / seconds : 0.0; }
};
EvalSummary summarize(EvalTask task, std::span<const DocResult> results);

struct EvalProgress {
    std::size_t docs_done = 0, docs_total = 0, correct = 0;
    std::size_t requests_done = 0, requests_total = 0;
    double seconds = 0;
};
using EvalProgressFn = std::function<void(const EvalProgress&)>;

struct EvalRun {
    EvalSummary summary;
    std::vector<DocResult> docs;
};
// Scores every request of `prepared` with `model` (an inference model allocated for at least
// required_seq_len(prepared.requests, model.config().max_seq_len)), `batch` requests per
// forward (0 = the model's max batch).
EvalRun run_eval(GPTModel& model, const PreparedEval& prepared, int batch = 0, const EvalProgressFn& progress = {});

// {"task", "n", "acc", "acc_stderr", "acc_norm", "acc_norm_stderr", "acc_bytes", "ppl", "seconds",
//  "examples_per_s", "requests", "tokens"}; metrics a task does not have are null.
nlohmann::json summary_json(const EvalSummary& summary);
// One --output line: {"doc", "id", "loglikelihoods", "is_greedy", "gold", "prediction", "correct", ...}.
nlohmann::json doc_json(EvalTask task, std::size_t index, const EvalDoc& doc, const DocResult& result,
                        const TextEncoder& encoder);

// Evaluation during training (the [eval] section): every eval.every steps, the first eval.limit
// test documents of each of eval.tasks, read from eval.data with the GPT-2 vocabulary in
// eval.vocab, scored with an inference model of the run's shape (batch = training.batch_size)
// into which the training model's parameters are copied.
class TrainingEvaluator {
public:
    // True when the config asks for in-training evals (eval.every > 0 and eval.tasks non-empty).
    static bool enabled(const RunConfig& config);
    // Reads and tokenizes the documents and allocates the model; UserError naming the key and the
    // fix when eval.data or eval.vocab is missing or wrong.
    explicit TrainingEvaluator(const RunConfig& config);
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
