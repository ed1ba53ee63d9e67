// adacc eval --checkpoint DIR|FILE | --llmc-model FILE | --hf-model DIR --task lambada|arc_easy --data PATH --vocab DIR
//            [--split test|dev] [--limit N] [--batch B] [--output FILE] [--threads N]
// Scores a model on LAMBADA (lambada_openai) or ARC-Easy exactly as lm-evaluation-harness does
// (src/eval/eval_tasks.h): a progress bar with the running accuracy on stderr (when it is a terminal),
// a table and a one-line JSON summary on stdout, and with --output one JSON line per document.
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "src/cli/commands.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/common/progress_bar.h"
#include "src/common/units.h"
#include "src/eval/eval_tasks.h"
#include "src/eval/evaluation.h"
#include "src/train/weights_file.h"

namespace adacc {
namespace {

struct EvalArgs {
    std::string checkpoint, llmc_model, hf_model, task, data, vocab, split = "test", output, device = "cpu",
                                                                     dtype = "auto";
    std::size_t limit = 0;
    int batch = 8;
    int threads = 0;
};

void print_table(const EvalSummary& s, const std::string& split, const std::string& model_name) {
    std::printf("%s (%s split) on %s\n", harness_task_name(s.task), split.c_str(), model_name.c_str());
    std::printf("  %-10s %10s %10s\n", "metric", "value", "stderr");
    std::printf("  %-10s %10zu\n", "n", s.n);
    std::printf("  %-10s %10.4f %10.4f\n", "acc", s.acc, s.acc_stderr);
    if (s.acc_norm) std::printf("  %-10s %10.4f %10.4f\n", "acc_norm", *s.acc_norm, s.acc_norm_stderr.value_or(0.0));
    if (s.acc_bytes) std::printf("  %-10s %10.4f\n", "acc_bytes", *s.acc_bytes);
    if (s.ppl) std::printf("  %-10s %10.4g\n", "perplexity", *s.ppl);
    std::printf("  %-10s %10.2f   (%.1f examples/s, %zu requests, %.0f tokens/s)\n", "seconds", s.seconds,
                s.examples_per_s(), s.requests, s.seconds > 0 ? double(s.tokens) / s.seconds : 0.0);
}

void run_eval_command(const EvalArgs& args) {
    const auto start = std::chrono::steady_clock::now();
    if (args.threads > 0) omp_set_num_threads(args.threads);
    const auto task = parse_eval_task(args.task);
    if (!task) {
        std::string names;
        for (const std::string& name : eval_task_names()) names += (names.empty() ? "" : " or ") + name;
        throw UserError("unknown task '" + args.task + "': use " + names);
    }

    const WeightsFile weights = open_weights_option(args.checkpoint, args.llmc_model, args.hf_model);
    const GPTConfig& config = weights.shape;
    const std::filesystem::path& model_file = weights.path;
    const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(args.vocab);
    if (static_cast<std::uint32_t>(config.vocab_size) != tokenizer.vocab_size())
        throw UserError("the model's vocab_size is " + std::to_string(config.vocab_size) + " but the tokenizer in " +
                        args.vocab + " has " + std::to_string(tokenizer.vocab_size()) +
                        " tokens: eval needs a model of GPT-2 token ids");
    const TextEncoder encoder = gpt2_text_encoder(tokenizer);

    const auto data_file = resolve_eval_data(*task, args.data, args.split);
    PreparedEval prepared = prepare_eval(*task, read_eval_docs(*task, data_file, args.limit), encoder);
    if (prepared.docs.empty()) throw UserError(data_file.string() + " holds no documents");

    const int seq_len = required_seq_len(prepared.requests, config.max_seq_len);
    const int batch =
        static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(args.batch), prepared.requests.size()));
    const Device device = parse_device(args.device);
    GPTModel model = GPTModel::for_inference(config, batch, seq_len, {device, resolve_model_dtype(args.dtype, device)});
    load_weights(weights, model);

    std::unique_ptr<AtomicFileWriter> output;  // opened before the long run, so a bad path fails at once
    if (!args.output.empty()) output = std::make_unique<AtomicFileWriter>(args.output);

    ProgressBar bar(harness_task_name(*task), 30);
    const EvalRun run = run_eval(model, prepared, batch, [&](const EvalProgress& p) {
        const double fraction = p.requests_total ? double(p.requests_done) / double(p.requests_total) : 1.0;
        bar.update(fraction, [&](double seconds) {
            char text[128];
            std::snprintf(text, sizeof text, "%zu/%zu docs  acc %.4f  %.1f docs/s ", p.docs_done, p.docs_total,
                          p.docs_done ? double(p.correct) / double(p.docs_done) : 0.0,
                          seconds > 0 ? double(p.docs_done) / seconds : 0.0);
            return std::string(text);
        });
    });
    bar.finish();

    if (output) {
        for (std::size_t d = 0; d < prepared.docs.size(); ++d) {
            const std::string line = doc_json(*task, d, prepared.docs[d], run.docs[d], encoder)
                                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                                     "\n";
            output->write(line.data(), line.size());
        }
        output->commit();
    }

    print_table(run.summary, args.split, model_file.string());
    nlohmann::json summary = summary_json(run.summary);
    summary["split"] = args.split;
    summary["data"] = data_file.string();
    summary["model"] = model_file.string();
    summary["batch"] = batch;
    summary["threads"] = omp_get_max_threads();
    summary["total_seconds"] = seconds_since(start);
    std::printf("%s\n", summary.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
}

}  // namespace

void add_eval_command(Command& program) {
    auto args = std::make_shared<EvalArgs>();
    Command cmd = program.subcommand(
        "eval",
        "Score a model on LAMBADA (lambada_openai) or ARC-Easy the way lm-evaluation-harness does (zero-shot): "
        "a table and a JSON summary on stdout, per-document JSONL with --output");
    add_model_options(cmd, args->checkpoint, args->llmc_model, args->hf_model);
    add_device_option(cmd, args->device, "cpu");
    add_dtype_option(cmd, args->dtype, "auto");
    cmd.option("--task", args->task, "lambada or arc_easy").required().type_name("TASK");
    cmd.option("--data", args->data,
               "the task's jsonl, or a folder holding it (directly or in lambada_openai/, arc_easy/)")
        .required()
        .type_name("PATH");
    cmd.option("--vocab", args->vocab, "folder with GPT-2's encoder.json and vocab.bpe").required().type_name("DIR");
    cmd.option("--split", args->split, "test, or for arc_easy also dev / train").show_default();
    cmd.option("--limit", args->limit, "score only the first N documents (0 = all)").show_default();
    cmd.option("--batch", args->batch, "requests per forward pass").in_range(1, 4096).show_default();
    cmd.option("--output", args->output, "write one JSON line per document here").type_name("FILE");
    cmd.option("--threads", args->threads, "CPU threads (0 = all cores)").in_range(0, 1024);
    cmd.on_run([args] { run_eval_command(*args); });
}

}  // namespace adacc
