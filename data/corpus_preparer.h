// Text corpus -> llm.c token shards: the work behind `adacc prepare`.
//
// Rules:
//   * Inputs are files and directories; a directory is walked recursively and its regular files
//     are taken in sorted path order. An input that is neither, such as a pipe (`cat a.txt |
//     adacc prepare --input /dev/stdin`), is read to its end like a file. A file named twice (or
//     reached through a symlink, like the fortune package's *.u8 links) is read once. Files holding
//     a NUL byte are binary (e.g. the fortune package's *.dat indexes) and are skipped; reading one
//     stops at its first NUL.
//   * Each file is one document, except a file in fortune(6) format, recognized by at least one
//     line that is exactly "%": its documents are the texts between those lines. Documents that
//     are only whitespace are dropped.
//   * Every document is preceded by <|endoftext|> (llm.c's convention) and encoded with
//     SpecialTokens::as_text, so text cannot forge a document boundary.
//   * The first val_tokens tokens of that stream go to OUT/val_000000.bin (0 = no validation
//     shard), the rest to OUT/train_000000.bin, train_000001.bin, ... of at most shard_tokens
//     each.
//   * All or nothing: the shards are written to a hidden folder in OUT (OUT/.prepare-XXXXXX) and
//     moved into OUT only once the whole corpus is tokenized. Each then replaces the shard of the
//     same name by rename (a run reading the old one keeps reading it), and the earlier run's other
//     shards (val_NNNNNN.bin, train_NNNNNN.bin) are removed; other files in OUT stay. A prepare
//     that fails leaves OUT as it was (not created, if it did not exist), without the hidden folder.
// Each file is read whole, so memory use is the largest file plus one shard of uint16 tokens.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace adacc {

struct CorpusOptions {
    std::vector<std::filesystem::path> inputs;  // files and directories
    std::filesystem::path out_dir;
    std::uint64_t val_tokens = 32768;           // llm.c's tinyshakespeare split uses the same size
    std::uint64_t shard_tokens = 100'000'000;   // llm.c's FineWeb shard size
};

struct CorpusProgress {
    std::uint64_t bytes_done = 0;
    std::uint64_t bytes_total = 0;
};

struct CorpusSummary {
    std::uint64_t files = 0;          // files read
    std::uint64_t binary_files = 0;   // files skipped as binary
    std::uint64_t documents = 0;
    std::uint64_t text_bytes = 0;     // bytes of the files read
    std::uint64_t val_tokens = 0;
    std::uint64_t train_tokens = 0;
    std::vector<std::filesystem::path> shards;  // in the order written: val first
};

// The files (and streams) the inputs name, in the order they are used, each once; UserError for
// an input that does not exist or cannot be listed.
std::vector<std::filesystem::path> collect_input_files(const std::vector<std::filesystem::path>& inputs);

// The documents of one file's text, by the rule above (views into `text`).
std::vector<std::string_view> split_documents(std::string_view text);

// Tokenizes the inputs into shards; `progress` (optional) is told the bytes read after each file.
CorpusSummary prepare_corpus(const Gpt2Tokenizer& tokenizer, const CorpusOptions& options,
                             const std::function<void(const CorpusProgress&)>& progress = {});

}  // namespace adacc
