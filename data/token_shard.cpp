#include "data/token_shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <utility>

#include "src/errors.h"

namespace adacc {
namespace {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; so is every supported host");

constexpr std::string_view kMakeShards = "create shards with `adacc prepare`";

std::string quoted(const std::filesystem::path& path) { return "'" + path.string() + "'"; }

// Checks the header against the file size; returns the token count.
std::size_t checked_token_count(const std::filesystem::path& path, const std::byte* file, std::size_t file_bytes) {
    if (file_bytes < kTokenShardHeaderBytes)
        throw UserError(quoted(path) + " is not an llm.c token shard: " + std::to_string(file_bytes) +
                        " bytes, shorter than the " + std::to_string(kTokenShardHeaderBytes) + "-byte header; " +
                        std::string(kMakeShards));
    std::array<std::int32_t, 3> header{};
    std::memcpy(header.data(), file, sizeof(header));
    const auto [magic, version, count] = header;
    if (magic != kTokenShardMagic)
        throw UserError(quoted(path) + " is not an llm.c token shard: magic " + std::to_string(magic) + ", expected " +
                        std::to_string(kTokenShardMagic) + "; " + std::string(kMakeShards));
    if (version != kTokenShardVersion)
        throw UserError(quoted(path) + " is a version " + std::to_string(version) +
                        " token shard; only version 1 (uint16 tokens, GPT-2) is supported; " +
                        std::string(kMakeShards));
    if (count < 0)
        throw UserError(quoted(path) + " has a negative token count " + std::to_string(count) + " in its header; " +
                        std::string(kMakeShards));
    const std::size_t expected_bytes = kTokenShardHeaderBytes + static_cast<std::size_t>(count) * sizeof(std::uint16_t);
    if (file_bytes < expected_bytes)
        throw UserError(quoted(path) + " is truncated: its header promises " + std::to_string(count) +
                        " tokens (" + std::to_string(expected_bytes) + " bytes), the file holds " +
                        std::to_string(file_bytes) + " bytes; recreate it with `adacc prepare`");
    if (file_bytes > expected_bytes)
        throw UserError(quoted(path) + " has " + std::to_string(file_bytes - expected_bytes) +
                        " bytes after the " + std::to_string(count) + " tokens its header promises; " +
                        std::string(kMakeShards));
    return static_cast<std::size_t>(count);
}

// Closes a file descriptor when it goes out of scope.
struct FileDescriptor {
    int fd;
    ~FileDescriptor() { ::close(fd); }
};

}  // namespace

void write_token_shard(const std::filesystem::path& path, std::span<const std::uint16_t> tokens) {
    if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        throw UserError("cannot write " + std::to_string(tokens.size()) + " tokens to " + quoted(path) +
                        ": a shard holds at most 2147483647 (its header counts in int32); use smaller shards");
    std::array<std::int32_t, kTokenShardHeaderBytes / sizeof(std::int32_t)> header{};
    header[0] = kTokenShardMagic;
    header[1] = kTokenShardVersion;
    header[2] = static_cast<std::int32_t>(tokens.size());

    std::filesystem::path temporary = path;
    temporary += ".tmp";
    {
        std::ofstream stream(temporary, std::ios::binary | std::ios::trunc);
        if (!stream)
            throw UserError("cannot create " + quoted(temporary) + ": check that the directory exists and is writable");
        stream.write(reinterpret_cast<const char*>(header.data()), sizeof(header));
        stream.write(reinterpret_cast<const char*>(tokens.data()),
                     static_cast<std::streamsize>(tokens.size_bytes()));
        stream.close();
        if (!stream) {
            std::filesystem::remove(temporary);
            throw UserError("writing " + quoted(temporary) + " failed (is the disk full?)");
        }
    }
    std::filesystem::rename(temporary, path);
}

std::vector<std::uint16_t> read_token_shard(const std::filesystem::path& path) {
    const MappedTokenShard shard(path);
    return {shard.tokens().begin(), shard.tokens().end()};
}

void validate_tokens(std::span<const std::uint16_t> tokens, std::uint32_t vocab_size,
                     const std::filesystem::path& shard) {
    const auto bad = std::find_if(tokens.begin(), tokens.end(), [&](std::uint16_t id) { return id >= vocab_size; });
    if (bad == tokens.end()) return;
    throw UserError(quoted(shard) + " holds token id " + std::to_string(*bad) + " at position " +
                    std::to_string(bad - tokens.begin()) + ", but the vocabulary has " + std::to_string(vocab_size) +
                    " tokens: the shard was made with a different tokenizer or model.vocab_size is too small");
}

std::vector<std::filesystem::path> expand_shard_pattern(const std::string& pattern) {
    glob_t matches{};
    const int status = ::glob(pattern.c_str(), 0, nullptr, &matches);
    std::vector<std::filesystem::path> shards;
    if (status == 0)
        for (std::size_t i = 0; i < matches.gl_pathc; ++i)
            if (std::filesystem::is_regular_file(matches.gl_pathv[i])) shards.emplace_back(matches.gl_pathv[i]);
    ::globfree(&matches);
    if (shards.empty())
        throw UserError("no token shard files match '" + pattern + "': check the path or pattern (e.g. " +
                        "'data/corpus/train_*.bin'), or " + std::string(kMakeShards));
    std::sort(shards.begin(), shards.end());  // glob's order follows the locale; this one does not
    return shards;
}

MappedTokenShard::MappedTokenShard(const std::filesystem::path& path) : path_(path) {
    const FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (file.fd < 0)
        throw UserError("cannot open token shard " + quoted(path) + ": " + std::strerror(errno) + "; " +
                        std::string(kMakeShards));
    struct stat status {};
    if (::fstat(file.fd, &status) != 0 || !S_ISREG(status.st_mode))
        throw UserError(quoted(path) + " is not a regular file; " + std::string(kMakeShards));
    const auto file_bytes = static_cast<std::size_t>(status.st_size);
    if (file_bytes > 0) {
        mapping_ = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, file.fd, 0);
        if (mapping_ == MAP_FAILED) {
            mapping_ = nullptr;
            throw UserError("cannot map token shard " + quoted(path) + " into memory: " + std::strerror(errno));
        }
        mapping_bytes_ = file_bytes;
    }
    try {
        const auto* bytes = static_cast<const std::byte*>(mapping_);
        const std::size_t count = checked_token_count(path, bytes, file_bytes);
        tokens_ = {reinterpret_cast<const std::uint16_t*>(bytes + kTokenShardHeaderBytes), count};
    } catch (...) {
        if (mapping_) ::munmap(mapping_, mapping_bytes_);
        throw;
    }
}

MappedTokenShard::~MappedTokenShard() {
    if (mapping_) ::munmap(mapping_, mapping_bytes_);
}

MappedTokenShard::MappedTokenShard(MappedTokenShard&& other) noexcept
    : path_(std::move(other.path_)),
      mapping_(std::exchange(other.mapping_, nullptr)),
      mapping_bytes_(std::exchange(other.mapping_bytes_, 0)),
      tokens_(std::exchange(other.tokens_, {})) {}

}  // namespace adacc
