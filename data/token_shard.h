// Token shards in llm.c's .bin format, so data prepared by llm.c's scripts works here and ours
// works there: a header of 256 little-endian int32 ([0] magic 20240520, [1] version 1,
// [2] token count, the rest 0), then the tokens as little-endian uint16. The file size must be
// exactly header + 2 * count bytes (llm.c checks the same).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace adacc {

inline constexpr std::int32_t kTokenShardMagic = 20240520;
inline constexpr std::int32_t kTokenShardVersion = 1;  // uint16 tokens (llm.c's version 2 holds uint32: not supported)
inline constexpr std::size_t kTokenShardHeaderBytes = 256 * sizeof(std::int32_t);

// Writes to a temporary name beside `path`, then renames, so a reader never sees half a shard.
void write_token_shard(const std::filesystem::path& path, std::span<const std::uint16_t> tokens);

// Reads and checks a whole shard; UserError for a missing file, wrong magic or version, or a size
// that does not match the header.
std::vector<std::uint16_t> read_token_shard(const std::filesystem::path& path);

// UserError naming the shard, the first id >= vocab_size and its position in the shard
// (`tokens` starts at token `first_position`).
void validate_tokens(std::span<const std::uint16_t> tokens, std::uint32_t vocab_size,
                     const std::filesystem::path& shard, std::uint64_t first_position = 0);

// Expands a `data.train`-style pattern (a path, or a glob such as "data/corpus/train_*.bin") to
// the regular files it matches, sorted by name; UserError when none match.
std::vector<std::filesystem::path> expand_shard_pattern(const std::string& pattern);

// A shard opened for positioned reads: the data loader reads windows of it into its own buffers
// instead of mapping it, because a mapped file that shrinks under a run kills the run (SIGBUS)
// and one rewritten in place changes the data without a word. Opening makes the same checks as
// read_token_shard and notes the file's size and modification time; every read compares them
// again, so a shard truncated or rewritten since it was opened is a UserError naming it. (A shard
// replaced by rename, as `adacc prepare` and write_token_shard do, is a new file: this one keeps
// reading the old one.)
class TokenShardFile {
public:
    explicit TokenShardFile(const std::filesystem::path& path);
    ~TokenShardFile();
    TokenShardFile(TokenShardFile&& other) noexcept;
    TokenShardFile& operator=(TokenShardFile&&) = delete;

    std::size_t tokens() const { return tokens_; }
    const std::filesystem::path& path() const { return path_; }
    // Reads tokens [first, first + out.size()) into `out`; allocates nothing unless it throws.
    void read(std::size_t first, std::span<std::uint16_t> out) const;

private:
    [[noreturn]] void changed(const std::string& how) const;

    std::filesystem::path path_;
    int fd_ = -1;
    std::size_t tokens_ = 0;
    std::int64_t file_bytes_ = 0;
    std::int64_t modified_seconds_ = 0, modified_nanoseconds_ = 0;
};

}  // namespace adacc
