#include "data/corpus_preparer.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <regex>
#include <set>
#include <string>

#include "data/token_shard.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"

namespace adacc {
namespace {

// Appended piece by piece: GCC 12 warns (-Wrestrict, falsely) about "'" + string + "'" here.

std::vector<std::filesystem::path> files_under(const std::filesystem::path& dir) {
    std::vector<std::filesystem::path> files;
    try {
        for (const auto& entry : std::filesystem::recursive_directory_iterator(dir))
            if (entry.is_regular_file()) files.push_back(entry.path());
    } catch (const std::filesystem::filesystem_error& error) {
        throw UserError("cannot list " + quoted(error.path1()) + ": " + error.code().message() +
                        "; check its permissions");
    }
    std::sort(files.begin(), files.end());
    return files;
}

// What identifies an input, so that one named twice (or through a symlink) is read once. A
// stream's /dev/stdin -> /proc/self/fd/0 -> "pipe:[N]" has no canonical path: its own path then.
std::filesystem::path identity(const std::filesystem::path& file) {
    std::error_code error;
    const auto canonical = std::filesystem::canonical(file, error);
    return error ? std::filesystem::absolute(file).lexically_normal() : canonical;
}

// The size of a regular file; none for a stream (a pipe, /dev/stdin), whose size is known once read.
std::optional<std::uint64_t> regular_size(const std::filesystem::path& file) {
    std::error_code error;
    if (!std::filesystem::is_regular_file(file, error)) return std::nullopt;
    const std::uint64_t size = std::filesystem::file_size(file, error);
    return error ? std::nullopt : std::optional(size);
}

// Closes a file descriptor when it goes out of scope.
struct FileDescriptor {
    int fd;
    ~FileDescriptor() {
        if (fd >= 0) ::close(fd);
    }
};

// The whole text of a file or stream; none as soon as a NUL byte shows that it is binary, so a
// large binary file (or /dev/zero) is not read to its end.
std::optional<std::string> read_text(const std::filesystem::path& path, std::uint64_t size_hint) {
    const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (file.fd < 0)
        throw UserError("cannot read " + quoted(path) + ": " + std::strerror(errno) +
                        "; --input takes readable text files, folders and pipes (such as /dev/stdin)");
    std::string text;
    text.reserve(size_hint);
    std::array<char, 1 << 16> chunk;
    for (;;) {
        const ssize_t got = ::read(file.fd, chunk.data(), chunk.size());
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) throw UserError("cannot read " + quoted(path) + ": " + std::strerror(errno));
        if (got == 0) return text;
        if (std::memchr(chunk.data(), '\0', static_cast<std::size_t>(got))) return std::nullopt;
        text.append(chunk.data(), static_cast<std::size_t>(got));
    }
}

bool is_blank(std::string_view text) { return text.find_first_not_of(" \t\n\r\v\f") == std::string_view::npos; }

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

// The hidden folder inside the output directory that the shards are written to until the whole
// corpus is tokenized: inside, so that moving them in is a rename on one filesystem even when OUT
// is a mount point or its parent is not writable. Unless committed, it is removed on destruction
// with the folders made for it, which leaves the output directory as it was (or absent).
class StagingFolder {
public:
    explicit StagingFolder(const std::filesystem::path& out_dir) : out_dir_(out_dir) {
        std::error_code error;
        auto dir = std::filesystem::absolute(out_dir).lexically_normal();
        if (!dir.has_filename()) dir = dir.parent_path();  // "out/"
        for (; std::filesystem::symlink_status(dir, error).type() == std::filesystem::file_type::not_found;
             dir = dir.parent_path())
            created_.push_back(dir);
        std::filesystem::create_directories(out_dir, error);
        if (error || !std::filesystem::is_directory(out_dir)) {
            remove_created_folders();
            throw UserError("cannot create output directory " + quoted(out_dir) + ": " +
                            (error ? error.message() : "a file has that name"));
        }
        std::string name = (out_dir / ".prepare-XXXXXX").string();
        if (!::mkdtemp(name.data())) {
            const std::string reason = std::strerror(errno);
            remove_created_folders();
            throw UserError("cannot create a folder in " + quoted(out_dir) + ": " + reason + "; check its permissions");
        }
        path_ = name;
    }

    ~StagingFolder() {
        if (committed_) return;
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
        remove_created_folders();
    }

    StagingFolder(const StagingFolder&) = delete;
    StagingFolder& operator=(const StagingFolder&) = delete;

    const std::filesystem::path& path() const { return path_; }

    // Moves `shards` (files in the staging folder) into the output directory, each replacing the
    // shard of the same name, then removes the earlier run's other shards, so that a `data.train`
    // glob over the folder sees only this run's. Returns the shards' new paths.
    std::vector<std::filesystem::path> commit(const std::vector<std::filesystem::path>& shards) {
        std::vector<std::filesystem::path> moved;
        for (const auto& shard : shards) {
            moved.push_back(out_dir_ / shard.filename());
            require_regular_or_absent(moved.back());  // a link or device of a shard's name stays
            std::error_code error;
            std::filesystem::rename(shard, moved.back(), error);
            if (error)
                throw UserError("cannot move " + quoted(shard) + " to " + quoted(moved.back()) + ": " +
                                error.message());
        }
        static const std::regex shard_name(R"((val|train)_\d{6}\.bin)");
        const std::set<std::filesystem::path> kept(moved.begin(), moved.end());
        for (const auto& entry : std::filesystem::directory_iterator(out_dir_))
            if (entry.symlink_status().type() == std::filesystem::file_type::regular &&
                std::regex_match(entry.path().filename().string(), shard_name) && !kept.contains(entry.path()))
                std::filesystem::remove(entry.path());
        std::filesystem::remove(path_);
        committed_ = true;
        return moved;
    }

private:
    // Innermost first; remove() takes only empty folders, so nothing of anyone else's goes.
    void remove_created_folders() {
        std::error_code ignored;
        for (const auto& dir : created_) std::filesystem::remove(dir, ignored);
    }

    std::filesystem::path out_dir_;
    std::filesystem::path path_;
    std::vector<std::filesystem::path> created_;  // folders that did not exist, innermost first
    bool committed_ = false;
};

// Buffers the token stream and cuts it into the validation shard, then training shards, written
// to `dir`.
class ShardSplitter {
public:
    ShardSplitter(const CorpusOptions& options, const std::filesystem::path& dir, CorpusSummary& summary)
        : options_(options), dir_(dir), summary_(summary), in_val_(options.val_tokens > 0) {
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
        const auto path = dir_ / name.data();
        write_token_shard(path, buffer_);
        summary_.shards.push_back(path);
        (in_val_ ? summary_.val_tokens : summary_.train_tokens) += buffer_.size();
        buffer_.clear();
        in_val_ = false;
    }

    const CorpusOptions& options_;
    const std::filesystem::path& dir_;
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
        std::error_code error;
        const auto status = std::filesystem::status(input, error);
        if (status.type() == std::filesystem::file_type::not_found)
            throw UserError("input " + quoted(input) + " does not exist: pass text files or directories to --input");
        if (error) throw UserError("cannot read input " + quoted(input) + ": " + error.message());
        const auto candidates =
            std::filesystem::is_directory(status) ? files_under(input) : std::vector<std::filesystem::path>{input};
        for (const auto& file : candidates)
            if (seen.insert(identity(file)).second) files.push_back(file);
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
    std::vector<std::optional<std::uint64_t>> sizes;
    CorpusProgress position;
    for (const auto& file : files) position.bytes_total += sizes.emplace_back(regular_size(file)).value_or(0);

    StagingFolder staging(options.out_dir);
    CorpusSummary summary;
    ShardSplitter splitter(options, staging.path(), summary);
    for (std::size_t i = 0; i < files.size(); ++i) {
        const std::optional<std::string> text = read_text(files[i], sizes[i].value_or(0));
        const std::uint64_t bytes = text ? text->size() : sizes[i].value_or(0);
        if (!sizes[i]) position.bytes_total += bytes;
        if (!text) {
            ++summary.binary_files;
        } else {
            ++summary.files;
            summary.text_bytes += text->size();
            for (const std::string_view document : split_documents(*text)) {
                const std::uint32_t document_start = tokenizer.eot_token();
                splitter.append({&document_start, 1});
                splitter.append(tokenizer.encode(document));
                ++summary.documents;
                if (progress)
                    progress({position.bytes_done + (document.data() + document.size() - text->data()),
                              position.bytes_total});
            }
        }
        position.bytes_done += bytes;
        if (progress) progress(position);
    }
    splitter.finish();
    summary.shards = staging.commit(summary.shards);
    return summary;
}

}  // namespace adacc
