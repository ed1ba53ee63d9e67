#include "data/corpus_preparer.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "data/token_shard.h"
#include "src/errors.h"

namespace adacc {
namespace {

std::string quoted(const std::filesystem::path& path) { return "'" + path.string() + "'"; }

std::vector<std::filesystem::path> files_under(const std::filesystem::path& dir) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
        if (entry.is_regular_file()) files.push_back(entry.path());
    std::sort(files.begin(), files.end());
    return files;
}

std::string read_text_file(const std::filesystem::path& path) {
    std::ifstream stream(path, std::ios::binary);
    if (!stream) throw UserError("cannot read " + quoted(path) + ": check its permissions");
    std::ostringstream contents;
    contents << stream.rdbuf();
    return contents.str();
}

bool is_blank(std::string_view text) {
    return text.find_first_not_of(" \t\n\r\v\f") == std::string_view::npos;
}

// Splits at lines that are exactly "%" (a trailing '\r' allowed); empty when there are none.
std::vector<std::string_view> split_fortunes(std::string_view text) {
    std::vector<std::string_view> entries;
    bool has_separator = false;
    std::size_t entry_start = 0;
    for (std::size_t line_start = 0; line_start < text.size();) {
        const std::size_t newline = text.find('\n', line_start);
        const std::size_t line_end = newline == std::string_view::npos ? text.size() : newline;
        const std::string_view line = text.substr(line_start, line_end - line_start);
        const std::size_t next_line = newline == std::string_view::npos ? text.size() : newline + 1;
        if (line == "%" || line == "%\r") {
            has_separator = true;
            entries.push_back(text.substr(entry_start, line_start - entry_start));
            entry_start = next_line;
        }
        line_start = next_line;
    }
    if (!has_separator) return {};
    entries.push_back(text.substr(entry_start));
    return entries;
}

// Removes shards an earlier run left in the output directory, so a `data.train` glob over it
// sees only this run's shards.
void remove_old_shards(const std::filesystem::path& out_dir) {
    static const std::regex shard_name(R"((val|train)_\d{6}\.bin)");
    for (const auto& entry : std::filesystem::directory_iterator(out_dir))
        if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), shard_name))
            std::filesystem::remove(entry.path());
}

// Buffers the token stream and cuts it into the validation shard, then training shards.
class ShardSplitter {
public:
    ShardSplitter(const CorpusOptions& options, CorpusSummary& summary)
        : options_(options), summary_(summary), in_val_(options.val_tokens > 0) {
        buffer_.reserve(std::min<std::uint64_t>(capacity(), 1 << 24));
    }

    void append(std::span<const std::uint32_t> ids) {
        while (!ids.empty()) {
            const std::size_t take = std::min<std::size_t>(ids.size(), capacity() - buffer_.size());
            buffer_.insert(buffer_.end(), ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(take));
            ids = ids.subspan(take);
            if (buffer_.size() == capacity()) flush();
        }
    }

    void finish() {
        if (in_val_)
            throw UserError("the corpus holds only " + std::to_string(buffer_.size()) +
                            " tokens, not more than --val-tokens " + std::to_string(options_.val_tokens) +
                            ": lower --val-tokens (0 = no validation shard) or add text");
        if (!buffer_.empty()) flush();
        if (summary_.train_tokens == 0)
            throw UserError("no tokens are left for training after the " + std::to_string(summary_.val_tokens) +
                            " validation tokens: lower --val-tokens or add text");
    }

private:
    std::size_t capacity() const { return in_val_ ? options_.val_tokens : options_.shard_tokens; }

    void flush() {
        std::array<char, 32> name{};
        std::snprintf(name.data(), name.size(), "%s_%06llu.bin", in_val_ ? "val" : "train",
                      static_cast<unsigned long long>(in_val_ ? 0 : train_shards_++));
        const auto path = options_.out_dir / name.data();
        write_token_shard(path, buffer_);
        summary_.shards.push_back(path);
        (in_val_ ? summary_.val_tokens : summary_.train_tokens) += buffer_.size();
        buffer_.clear();
        in_val_ = false;
    }

    const CorpusOptions& options_;
    CorpusSummary& summary_;
    bool in_val_;
    std::uint64_t train_shards_ = 0;
    std::vector<std::uint16_t> buffer_;
};

void check_options(const Gpt2Tokenizer& tokenizer, const CorpusOptions& options) {
    if (options.shard_tokens == 0 || options.shard_tokens > 2'147'483'647u)
        throw UserError("--shard-tokens must be between 1 and 2147483647 (a shard's header counts in int32)");
    if (options.val_tokens > 2'147'483'647u)
        throw UserError("--val-tokens must be at most 2147483647 (the validation set is one shard)");
    if (tokenizer.vocab_size() > 65536)
        throw UserError("the vocabulary has " + std::to_string(tokenizer.vocab_size()) +
                        " tokens, but token shards store ids as uint16 (at most 65536 tokens)");
}

}  // namespace

std::vector<std::filesystem::path> collect_input_files(const std::vector<std::filesystem::path>& inputs) {
    std::vector<std::filesystem::path> files;
    std::set<std::filesystem::path> seen;
    for (const auto& input : inputs) {
        if (!std::filesystem::exists(input))
            throw UserError("input " + quoted(input) + " does not exist: pass text files or directories to --input");
        const auto candidates = std::filesystem::is_directory(input) ? files_under(input)
                                                                     : std::vector<std::filesystem::path>{input};
        for (const auto& file : candidates)
            if (seen.insert(std::filesystem::canonical(file)).second) files.push_back(file);
    }
    return files;
}

std::vector<std::string_view> split_documents(std::string_view text) {
    std::vector<std::string_view> documents = split_fortunes(text);
    if (documents.empty()) documents.push_back(text);
    std::erase_if(documents, is_blank);
    return documents;
}

CorpusSummary prepare_corpus(const Gpt2Tokenizer& tokenizer, const CorpusOptions& options,
                             const std::function<void(const CorpusProgress&)>& progress) {
    check_options(tokenizer, options);
    const auto files = collect_input_files(options.inputs);
    CorpusProgress position;
    for (const auto& file : files) position.bytes_total += std::filesystem::file_size(file);

    std::error_code error;
    std::filesystem::create_directories(options.out_dir, error);
    if (error || !std::filesystem::is_directory(options.out_dir))
        throw UserError("cannot create output directory " + quoted(options.out_dir) + ": " + error.message());
    remove_old_shards(options.out_dir);

    CorpusSummary summary;
    ShardSplitter splitter(options, summary);
    for (const auto& file : files) {
        const std::string text = read_text_file(file);
        if (text.find('\0') != std::string::npos) {
            ++summary.binary_files;
        } else {
            ++summary.files;
            summary.text_bytes += text.size();
            for (const std::string_view document : split_documents(text)) {
                const std::uint32_t document_start = tokenizer.eot_token();
                splitter.append({&document_start, 1});
                splitter.append(tokenizer.encode(document));
                ++summary.documents;
                if (progress) progress({position.bytes_done + (document.data() + document.size() - text.data()),
                                        position.bytes_total});
            }
        }
        position.bytes_done += text.size();
        if (progress) progress(position);
    }
    splitter.finish();
    return summary;
}

}  // namespace adacc
