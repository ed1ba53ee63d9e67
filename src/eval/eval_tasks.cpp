#include "src/eval/eval_tasks.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "data/tokenizer.h"
#include "src/common/errors.h"
#include "src/common/units.h"

namespace adacc {

std::size_t utf8_length(std::string_view text) {
    std::size_t n = 0;
    for (const char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
}

// ---- readers --------------------------------------------------------------------------------

EvalDoc lambada_doc(std::string_view text, std::string id) {
    // Python: text.split(' ')[:-1] joined by ' ' and ' ' + text.split(' ')[-1].
    const std::size_t space = text.rfind(' ');
    const std::string_view context = space == std::string_view::npos ? std::string_view() : text.substr(0, space);
    const std::string_view last = space == std::string_view::npos ? text : text.substr(space + 1);
    EvalDoc doc;
    doc.id = std::move(id);
    doc.context = std::string(context);
    std::string continuation(" ");  // appended, not " " + last: GCC 12's -Wrestrict misfires on that
    continuation += last;
    doc.continuations = {std::move(continuation)};
    doc.choices = {std::string(last)};
    doc.gold = 0;
    return doc;
}

namespace {

std::string where(const std::filesystem::path& file, std::size_t line) {
    return file.string() + ":" + std::to_string(line);
}

// Calls `parse(json, line_number)` for each non-blank line until `limit` documents are read.
template <typename Parse>
void for_each_record(const std::filesystem::path& file, std::size_t limit, const char* what, Parse&& parse) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw SettingError("eval.data", "cannot open " + file.string() + " (" + what + " jsonl): check eval.data");
    std::string line;
    std::size_t number = 0, read = 0;
    while ((limit == 0 || read < limit) && std::getline(in, line)) {
        ++number;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (record.is_discarded() || !record.is_object())
            throw UserError(where(file, number) + ": not a JSON object; is this a " + what + " jsonl file?");
        parse(record, number);
        ++read;
    }
}

const nlohmann::json& field(const nlohmann::json& object, const char* name, nlohmann::json::value_t type,
                            const std::filesystem::path& file, std::size_t line, const char* what) {
    const auto it = object.find(name);
    if (it == object.end() || it->type() != type)
        throw UserError(where(file, line) + ": no " + (type == nlohmann::json::value_t::string ? "string" : "") +
                        " field \"" + name + "\"; is this a " + what + " jsonl file?");
    return *it;
}

}  // namespace

std::vector<EvalDoc> read_lambada(const std::filesystem::path& file, std::size_t limit) {
    std::vector<EvalDoc> docs;
    for_each_record(file, limit, "LAMBADA (lambada_openai)", [&](const nlohmann::json& record, std::size_t line) {
        const auto& text =
            field(record, "text", nlohmann::json::value_t::string, file, line, "LAMBADA").get_ref<const std::string&>();
        // A blank passage has no last word to predict: its "target" would be whitespace.
        if (text.find_first_not_of(" \t\n\r\v\f") == std::string::npos)
            throw UserError(where(file, line) + ": \"text\" is empty or only whitespace, so it has no last word " +
                            "to predict; fix or remove the line");
        docs.push_back(lambada_doc(text, std::to_string(docs.size())));
    });
    return docs;
}

std::vector<EvalDoc> read_arc_easy(const std::filesystem::path& file, std::size_t limit) {
    using value_t = nlohmann::json::value_t;
    std::vector<EvalDoc> docs;
    const char* what = "ARC (AI2 ARC-Easy)";
    for_each_record(file, limit, what, [&](const nlohmann::json& record, std::size_t line) {
        EvalDoc doc;
        doc.id = field(record, "id", value_t::string, file, line, what).get<std::string>();
        const auto& question = field(record, "question", value_t::object, file, line, what);
        const auto& stem = field(question, "stem", value_t::string, file, line, what).get_ref<const std::string&>();
        const auto& choices = field(question, "choices", value_t::array, file, line, what);
        const auto& answer =
            field(record, "answerKey", value_t::string, file, line, what).get_ref<const std::string&>();
        doc.context = "Question: " + stem + "\nAnswer:";
        for (const auto& choice : choices) {
            if (!choice.is_object()) throw UserError(where(file, line) + ": a choice is not an object");
            doc.choices.push_back(field(choice, "text", value_t::string, file, line, what).get<std::string>());
            doc.labels.push_back(field(choice, "label", value_t::string, file, line, what).get<std::string>());
            doc.continuations.push_back(" " + doc.choices.back());
        }
        // answerKey names a choice by its label, and results report labels: two alike are ambiguous.
        for (auto label = doc.labels.begin(); label != doc.labels.end(); ++label)
            if (std::find(doc.labels.begin(), label, *label) != label)
                throw UserError(where(file, line) + ": question " + doc.id + " has two choices labelled \"" + *label +
                                "\"; give each choice its own label (A-E or 1-5) and answerKey the right one's");
        if (doc.choices.size() < 2)
            throw UserError(where(file, line) + ": question " + doc.id + " has " + std::to_string(doc.choices.size()) +
                            " choices; a multiple-choice question needs at least 2");
        const auto gold = std::find(doc.labels.begin(), doc.labels.end(), answer);
        if (gold == doc.labels.end())
            throw UserError(where(file, line) + ": question " + doc.id + " has answerKey \"" + answer +
                            "\", which is none of its choice labels");
        doc.gold = static_cast<int>(gold - doc.labels.begin());
        docs.push_back(std::move(doc));
    });
    return docs;
}

const std::vector<EvalTaskInfo>& eval_tasks() {
    static const std::vector<EvalTaskInfo> tasks = {
        {EvalTask::lambada,
         "lambada",
         "lambada_openai",
         {"lambada_openai"},
         "lambada",
         EvalScoring::greedy_continuation,
         read_lambada,
         {{"test", "lambada_test.jsonl"}}},
        {EvalTask::arc_easy,
         "arc_easy",
         "arc_easy",
         {"arc_easy", "ARC-Easy"},
         "arc_easy",
         EvalScoring::multiple_choice,
         read_arc_easy,
         {{"test", "ARC-Easy-Test.jsonl"},
          {"dev", "ARC-Easy-Dev.jsonl"},
          {"validation", "ARC-Easy-Dev.jsonl"},
          {"train", "ARC-Easy-Train.jsonl"}}},
    };
    return tasks;
}

const EvalTaskInfo& eval_task_info(EvalTask task) {
    for (const EvalTaskInfo& info : eval_tasks())
        if (info.task == task) return info;
    throw std::logic_error("eval_task_info: a task missing from eval_tasks()");
}

std::optional<EvalTask> parse_eval_task(std::string_view name) {
    for (const EvalTaskInfo& info : eval_tasks())
        if (name == info.name || name == info.harness_name) return info.task;
    return std::nullopt;
}

std::vector<std::string> eval_task_names() {
    std::vector<std::string> names;
    for (const EvalTaskInfo& info : eval_tasks()) names.emplace_back(info.name);
    return names;
}

const char* eval_task_name(EvalTask task) { return eval_task_info(task).name; }
const char* harness_task_name(EvalTask task) { return eval_task_info(task).harness_name; }

std::vector<EvalDoc> read_eval_docs(EvalTask task, const std::filesystem::path& file, std::size_t limit) {
    return eval_task_info(task).read(file, limit);
}

namespace {
// The file of `split` ("test", "dev", ...); UserError naming the splits the task has otherwise.
std::string split_file(const EvalTaskInfo& info, std::string_view split) {
    for (const EvalSplit& s : info.splits)
        if (split == s.name) return s.file;
    const std::string asked(split), task(info.harness_name), test_split(info.splits.front().name);
    if (info.splits.size() == 1)
        throw UserError(task + " has only a " + test_split + " split (asked for '" + asked + "'): use --split " +
                        test_split);
    std::vector<std::string> names;
    for (const EvalSplit& s : info.splits) names.emplace_back(s.name);
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
    throw UserError("unknown " + task + " split '" + asked + "': use " + list);
}
}  // namespace

std::filesystem::path resolve_eval_data(EvalTask task, const std::filesystem::path& data, std::string_view split) {
    namespace fs = std::filesystem;
    const EvalTaskInfo& info = eval_task_info(task);
    const std::string name = split_file(info, split), subfolder = info.data_folders.front(), fetch = info.fetch_name;
    if (data.empty())
        throw SettingError("eval.data", "no data path given for " + std::string(harness_task_name(task)) +
                                            ": eval.data must name " + name +
                                            " or its folder (`scripts/download_data.sh " + fetch + " DIR` fetches it)");
    std::error_code ec;
    if (fs::is_regular_file(data, ec)) return data;
    if (!fs::is_directory(data, ec))
        throw SettingError("eval.data", data.string() + " does not exist: eval.data must name " + name +
                                            " or its folder (`scripts/download_data.sh " + fetch + " DIR` fetches it)");
    if (fs::is_regular_file(data / name, ec)) return data / name;
    for (const char* folder : info.data_folders)
        if (fs::is_regular_file(data / folder / name, ec)) return data / folder / name;
    throw SettingError(
        "eval.data", "no " + name + " in " + data.string() + " or its " + subfolder +
                         "/ folder: point eval.data at the file, or fetch it with `scripts/download_data.sh " + fetch +
                         " DIR`");
}

// ---- requests and scoring -------------------------------------------------------------------

PreparedEval prepare_eval(EvalTask task, std::vector<EvalDoc> docs, const TextEncoder& encoder) {
    PreparedEval prepared;
    prepared.task = task;
    prepared.docs = std::move(docs);
    prepared.first_request.reserve(prepared.docs.size() + 1);
    for (const EvalDoc& doc : prepared.docs) {
        prepared.first_request.push_back(prepared.requests.size());
        for (const std::string& continuation : doc.continuations) {
            try {
                prepared.requests.push_back(encode_request(encoder, doc.context, continuation));
            } catch (const UserError& e) {
                throw UserError(std::string(harness_task_name(task)) + " document " + doc.id + ": " + e.what());
            }
        }
    }
    prepared.first_request.push_back(prepared.requests.size());
    return prepared;
}

namespace {
// The first maximum, as numpy.argmax.
int first_argmax(const std::vector<double>& values) {
    int best = 0;
    for (int i = 1; i < static_cast<int>(values.size()); ++i)
        if (values[static_cast<std::size_t>(i)] > values[static_cast<std::size_t>(best)]) best = i;
    return best;
}
}  // namespace

DocResult score_doc(EvalTask task, const EvalDoc& doc, std::span<const LoglikelihoodResult> results) {
    DocResult out;
    for (const auto& r : results) {
        out.loglikelihoods.push_back(r.loglikelihood);
        out.is_greedy.push_back(r.is_greedy);
    }
    if (eval_task_info(task).scoring == EvalScoring::greedy_continuation) {
        out.greedy_tokens = results[0].greedy_tokens;
        out.correct = out.correct_norm = out.correct_bytes = results[0].is_greedy;
        return out;
    }
    std::vector<double> per_char, per_byte;
    for (std::size_t i = 0; i < results.size(); ++i) {
        // numpy's float division: ll / 0 is -inf for a negative ll.
        per_char.push_back(out.loglikelihoods[i] / static_cast<double>(utf8_length(doc.choices[i])));
        per_byte.push_back(out.loglikelihoods[i] / static_cast<double>(doc.choices[i].size()));
    }
    out.prediction = first_argmax(out.loglikelihoods);
    out.prediction_norm = first_argmax(per_char);
    out.prediction_bytes = first_argmax(per_byte);
    out.correct = out.prediction == doc.gold;
    out.correct_norm = out.prediction_norm == doc.gold;
    out.correct_bytes = out.prediction_bytes == doc.gold;
    return out;
}

namespace {
// Mean and the harness's stderr (sample standard deviation / sqrt(n)).
std::pair<double, double> mean_and_stderr(const std::vector<double>& x) {
    if (x.empty()) return {0.0, 0.0};
    double mean = 0.0;
    for (const double v : x) mean += v;
    mean /= static_cast<double>(x.size());
    if (x.size() < 2) return {mean, 0.0};
    double ss = 0.0;
    for (const double v : x) ss += (v - mean) * (v - mean);
    return {mean, std::sqrt(ss / static_cast<double>(x.size() - 1)) / std::sqrt(static_cast<double>(x.size()))};
}
}  // namespace

EvalSummary summarize(EvalTask task, std::span<const DocResult> results) {
    EvalSummary s;
    s.task = task;
    s.n = results.size();
    std::vector<double> acc, acc_norm, acc_bytes;
    double ll_sum = 0.0;
    for (const DocResult& r : results) {
        acc.push_back(r.correct);
        acc_norm.push_back(r.correct_norm);
        acc_bytes.push_back(r.correct_bytes);
        s.requests += r.loglikelihoods.size();
        ll_sum += r.loglikelihoods.empty() ? 0.0 : r.loglikelihoods[0];
    }
    std::tie(s.acc, s.acc_stderr) = mean_and_stderr(acc);
    if (eval_task_info(task).scoring == EvalScoring::multiple_choice) {
        const auto [norm, norm_stderr] = mean_and_stderr(acc_norm);
        s.acc_norm = norm;
        s.acc_norm_stderr = norm_stderr;
        s.acc_bytes = mean_and_stderr(acc_bytes).first;
    } else if (s.n > 0) {
        s.ppl = std::exp(-ll_sum / static_cast<double>(s.n));
    }
    return s;
}

EvalRun run_eval(GPTModel& model, const PreparedEval& prepared, int batch, const EvalProgressFn& progress) {
    const std::size_t n_docs = prepared.docs.size();
    std::vector<std::size_t> owner(prepared.requests.size()), remaining(n_docs);
    for (std::size_t d = 0; d < n_docs; ++d) {
        remaining[d] = prepared.first_request[d + 1] - prepared.first_request[d];
        for (std::size_t r = prepared.first_request[d]; r < prepared.first_request[d + 1]; ++r) owner[r] = d;
    }
    EvalRun run;
    run.docs.resize(n_docs);
    EvalProgress state;
    state.docs_total = n_docs;
    state.requests_total = prepared.requests.size();
    const auto start = std::chrono::steady_clock::now();
    auto finish_doc = [&](std::size_t d, const std::vector<LoglikelihoodResult>& results) {
        const std::size_t first = prepared.first_request[d], count = prepared.first_request[d + 1] - first;
        run.docs[d] = score_doc(prepared.task, prepared.docs[d], std::span(results).subspan(first, count));
        ++state.docs_done;
        state.correct += run.docs[d].correct;
    };
    const auto results =
        score_requests(model, prepared.requests, batch,
                       [&](std::span<const std::size_t> finished, const std::vector<LoglikelihoodResult>& results) {
                           for (const std::size_t r : finished)
                               if (--remaining[owner[r]] == 0) finish_doc(owner[r], results);
                           state.requests_done += finished.size();
                           state.seconds = seconds_since(start);
                           if (progress) progress(state);
                       });
    run.summary = summarize(prepared.task, run.docs);
    run.summary.seconds = seconds_since(start);
    const int window = model.config().max_seq_len;
    for (const auto& request : prepared.requests)
        run.summary.tokens += static_cast<std::size_t>(scoring_window(request, window).input_length);
    return run;
}

// ---- output ---------------------------------------------------------------------------------

namespace {
nlohmann::json optional_json(const std::optional<double>& value) {
    return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}
}  // namespace

nlohmann::json summary_json(const EvalSummary& s) {
    return {{"task", harness_task_name(s.task)},
            {"n", s.n},
            {"acc", s.acc},
            {"acc_stderr", s.acc_stderr},
            {"acc_norm", optional_json(s.acc_norm)},
            {"acc_norm_stderr", optional_json(s.acc_norm_stderr)},
            {"acc_bytes", optional_json(s.acc_bytes)},
            {"ppl", optional_json(s.ppl)},
            {"seconds", s.seconds},
            {"examples_per_s", s.examples_per_s()},
            {"requests", s.requests},
            {"tokens", s.tokens}};
}

nlohmann::json doc_json(EvalTask task, std::size_t index, const EvalDoc& doc, const DocResult& result,
                        const TextEncoder& encoder) {
    nlohmann::json out = {{"doc", index}, {"id", doc.id}, {"loglikelihoods", result.loglikelihoods}};
    if (eval_task_info(task).scoring == EvalScoring::greedy_continuation) {
        out["target"] = doc.continuations[0];
        out["is_greedy"] = result.is_greedy[0];
        // The model's arg-max at the target's positions (teacher-forced), decoded; JSON needs
        // valid UTF-8, so bytes that do not form it are replaced.
        out["prediction"] = encoder.decode ? encoder.decode(result.greedy_tokens) : std::string();
        out["correct"] = result.correct;
        return out;
    }
    std::vector<double> per_char;
    for (std::size_t i = 0; i < result.loglikelihoods.size(); ++i)
        per_char.push_back(result.loglikelihoods[i] / static_cast<double>(utf8_length(doc.choices[i])));
    out["loglikelihoods_per_char"] = per_char;
    out["labels"] = doc.labels;
    out["gold"] = doc.labels[static_cast<std::size_t>(doc.gold)];
    out["prediction"] = doc.labels[static_cast<std::size_t>(result.prediction)];
    out["prediction_norm"] = doc.labels[static_cast<std::size_t>(result.prediction_norm)];
    out["correct"] = result.correct;
    out["correct_norm"] = result.correct_norm;
    return out;
}

}  // namespace adacc
