// `adacc prepare`: text files -> GPT-2 token shards in llm.c's format. The rules (documents,
// <|endoftext|> separators, the validation split) are in data/corpus_preparer.h.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>

#include "data/corpus_preparer.h"
#include "data/tokenizer.h"
#include "src/cli/commands.h"
#include "src/common/progress_bar.h"
#include "src/common/units.h"

namespace adacc {
namespace {

struct PrepareArgs {
    CorpusOptions corpus;
    std::filesystem::path vocab;
};

// "1234567" -> "1,234,567"
std::string with_commas(std::uint64_t value) {
    const std::string digits = std::to_string(value);
    std::string grouped;
    for (std::size_t i = 0; i < digits.size(); ++i) {
        if (i > 0 && (digits.size() - i) % 3 == 0) grouped.push_back(',');
        grouped.push_back(digits[i]);
    }
    return grouped;
}

// "1 file", "2 files"
std::string count_of(std::uint64_t count, const std::string& noun) {
    return with_commas(count) + " " + noun + (count == 1 ? "" : "s");
}

void print_summary(const CorpusSummary& summary, const std::filesystem::path& out_dir, double seconds) {
    std::printf("prepared %s from %s", count_of(summary.documents, "document").c_str(),
                count_of(summary.files, "file").c_str());
    if (summary.binary_files) std::printf(" (%s skipped)", count_of(summary.binary_files, "binary file").c_str());
    std::printf(" into %s\n", out_dir.string().c_str());
    if (summary.val_tokens)
        std::printf("  val:   %s tokens in %s\n", with_commas(summary.val_tokens).c_str(),
                    summary.shards.front().filename().c_str());
    const std::filesystem::path& first_train = summary.shards[summary.val_tokens ? 1 : 0];
    const std::size_t train_shards = summary.shards.size() - (summary.val_tokens ? 1 : 0);
    std::printf("  train: %s tokens in %s%s%s\n", with_commas(summary.train_tokens).c_str(),
                first_train.filename().c_str(), train_shards > 1 ? " .. " : "",
                train_shards > 1 ? summary.shards.back().filename().c_str() : "");
    std::printf("  tokenized %.1f MB of text in %.2f s (%.1f MB/s)\n", double(summary.text_bytes) / 1e6, seconds,
                seconds > 0 ? double(summary.text_bytes) / 1e6 / seconds : 0.0);
}

void run_prepare(const PrepareArgs& args) {
    const Gpt2Tokenizer tokenizer = Gpt2Tokenizer::load(args.vocab);
    const auto start = std::chrono::steady_clock::now();
    ProgressBar bar("tokenizing", 40);
    const CorpusSummary summary = prepare_corpus(tokenizer, args.corpus, [&](const CorpusProgress& progress) {
        const double fraction = progress.bytes_total ? double(progress.bytes_done) / double(progress.bytes_total) : 1.0;
        bar.update(fraction, [&](double seconds) {
            char text[64];
            std::snprintf(text, sizeof text, "%3.0f%%  %.1f MB/s", 100 * fraction,
                          seconds > 0 ? double(progress.bytes_done) / 1e6 / seconds : 0.0);
            return std::string(text);
        });
    });
    bar.finish();
    const double seconds = seconds_since(start);
    print_summary(summary, args.corpus.out_dir, seconds);
}

}  // namespace

void add_prepare_command(Command& program) {
    auto args = std::make_shared<PrepareArgs>();
    Command command = program.subcommand(
        "prepare",
        "Tokenize text into llm.c token shards (GPT-2 BPE): OUT/val_000000.bin holds the first --val-tokens "
        "tokens, OUT/train_NNNNNN.bin the rest. Each file is a document (fortune files: each %-separated "
        "entry), preceded by <|endoftext|>. Earlier shards in OUT are replaced once all the text is tokenized; "
        "a prepare that fails leaves OUT as it was.");
    command
        .option("--input", args->corpus.inputs,
                "text files, directories (walked recursively) or pipes such as /dev/stdin")
        .type_name("FILE|DIR")
        .required();
    command.option("--out", args->corpus.out_dir, "output directory for the shards").type_name("DIR").required();
    command.option("--vocab", args->vocab, "directory holding GPT-2's encoder.json and vocab.bpe").type_name("DIR");
    command.option("--val-tokens", args->corpus.val_tokens, "tokens for the validation shard (0 = none)")
        .type_name("N")
        .show_default();
    command.option("--shard-tokens", args->corpus.shard_tokens, "most tokens per training shard")
        .type_name("N")
        .show_default();
    command.on_run([args] { run_prepare(*args); });
}

}  // namespace adacc
