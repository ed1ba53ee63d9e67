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

// UserError naming the shard, the first id >= vocab_size and its position.
void validate_tokens(std::span<const std::uint16_t> tokens, std::uint32_t vocab_size,
                     const std::filesystem::path& shard);

// Expands a `data.train`-style pattern (a path, or a glob such as "data/corpus/train_*.bin") to
// the regular files it matches, sorted by name; UserError when none match.
std::vector<std::filesystem::path> expand_shard_pattern(const std::string& pattern);

// A shard mapped read-only into memory: the data loader reads windows of it without copying
// whole shards into RAM. Same checks as read_token_shard.
class MappedTokenShard {
public:
    explicit MappedTokenShard(const std::filesystem::path& path);
    ~MappedTokenShard();
    MappedTokenShard(MappedTokenShard&& other) noexcept;
    MappedTokenShard& operator=(MappedTokenShard&&) = delete;

    std::span<const std::uint16_t> tokens() const { return tokens_; }
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
    void* mapping_ = nullptr;
    std::size_t mapping_bytes_ = 0;
    std::span<const std::uint16_t> tokens_;
};

}  // namespace adacc
