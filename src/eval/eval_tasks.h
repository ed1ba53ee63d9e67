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

#include "src/engine/gpt_model.h"
#include "src/eval/evaluation.h"

namespace adacc {

enum class EvalTask { lambada, arc_easy };

// One document as the harness sees it: a context and one continuation per choice.
struct EvalDoc {
    std::string id;  // ARC: its id; LAMBADA: the line's 0-based index
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

// How a task scores a document: `greedy_continuation` (LAMBADA: acc = every continuation token is
// the arg-max; ppl over the documents) or `multiple_choice` (ARC: the arg-max of the summed
// log-likelihoods; acc_norm and acc_bytes per character and byte).
enum class EvalScoring { greedy_continuation, multiple_choice };

// One split of a task's data: its name (as --split takes it) and its file.
struct EvalSplit {
    const char* name;
    const char* file;
};

// Everything that tells the tasks apart; the code below reads only this table.
struct EvalTaskInfo {
    EvalTask task;
    const char* name;                       // what eval.tasks and --task take: "lambada"
    const char* harness_name;               // lm-evaluation-harness's name (also accepted): "lambada_openai"
    std::vector<const char*> data_folders;  // subfolders of a data folder that may hold its files
    const char* fetch_name;                 // what `scripts/download_data.sh NAME DIR` calls it
    EvalScoring scoring;
    std::vector<EvalDoc> (*read)(const std::filesystem::path& file, std::size_t limit);
    std::vector<EvalSplit> splits;  // the first is the test split
};
const std::vector<EvalTaskInfo>& eval_tasks();
const EvalTaskInfo& eval_task_info(EvalTask task);
// A task's name or harness name; empty otherwise.
std::optional<EvalTask> parse_eval_task(std::string_view name);
std::vector<std::string> eval_task_names();    // "lambada", "arc_easy"
const char* eval_task_name(EvalTask task);     // "lambada", "arc_easy"
const char* harness_task_name(EvalTask task);  // "lambada_openai", "arc_easy"

// What --data names: a jsonl file as is; a folder holding the task's file (lambada_test.jsonl,
// ARC-Easy-{Test,Dev,Train}.jsonl by `split`: test, dev (= validation) or train), directly or in
// its lambada_openai/ or arc_easy/ subfolder (the layout scripts/download_data.sh writes under
// datasets/). UserError with the fix when there is none.
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
    std::vector<int> greedy_tokens;  // LAMBADA: the arg-max tokens at the target's positions
    int prediction = 0;              // arg-max of ll (LAMBADA: 0)
    int prediction_norm = 0;         // arg-max of ll / characters
    int prediction_bytes = 0;        // arg-max of ll / UTF-8 bytes
    bool correct = false;            // LAMBADA: is_greedy
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
    std::size_t tokens = 0;  // model input tokens, padding not counted
    double acc = 0, acc_stderr = 0;
    std::optional<double> acc_norm, acc_norm_stderr, acc_bytes;  // arc_easy
    std::optional<double> ppl;                                   // lambada
    double seconds = 0;                                          // scoring wall time
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

}  // namespace adacc
