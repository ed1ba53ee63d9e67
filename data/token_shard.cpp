#include "data/token_shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <utility>

#include "src/common/errors.h"
#include "src/common/file_io.h"

namespace adacc {
namespace {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; so is every supported host");

constexpr std::string_view kMakeShards = "create shards with `adacc prepare`";

// Reads up to `bytes` at `offset`, fewer only where the file ends; returns how many.
std::size_t read_at(int fd, const std::filesystem::path& path, std::uint64_t offset, void* out, std::size_t bytes) {
    auto* p = static_cast<char*>(out);
    std::size_t done = 0;
    while (done < bytes) {
        const ssize_t got = ::pread(fd, p + done, bytes - done, static_cast<off_t>(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) throw UserError("cannot read token shard " + quoted(path) + ": " + std::strerror(errno));
        if (got == 0) break;
        done += static_cast<std::size_t>(got);
    }
    return done;
}

// Checks the header against the file size; returns the token count.
std::size_t checked_token_count(const std::filesystem::path& path, int fd, std::size_t file_bytes) {
    if (file_bytes < kTokenShardHeaderBytes)
        throw UserError(quoted(path) + " is not an llm.c token shard: " + std::to_string(file_bytes) +
                        " bytes, shorter than the " + std::to_string(kTokenShardHeaderBytes) + "-byte header; " +
                        std::string(kMakeShards));
    std::array<std::int32_t, 3> header{};
    if (read_at(fd, path, 0, header.data(), sizeof(header)) != sizeof(header))
        throw UserError(quoted(path) + " shrank while it was being opened; " + std::string(kMakeShards));
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
        throw UserError(quoted(path) + " is truncated: its header promises " + std::to_string(count) + " tokens (" +
                        std::to_string(expected_bytes) + " bytes), the file holds " + std::to_string(file_bytes) +
                        " bytes; recreate it with `adacc prepare`");
    if (file_bytes > expected_bytes)
        throw UserError(quoted(path) + " has " + std::to_string(file_bytes - expected_bytes) + " bytes after the " +
                        std::to_string(count) + " tokens its header promises; " + std::string(kMakeShards));
    return static_cast<std::size_t>(count);
}

}  // namespace

void write_token_shard(const std::filesystem::path& path, std::span<const std::uint16_t> tokens) {
    if (tokens.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
        throw UserError("cannot write " + std::to_string(tokens.size()) + " tokens to " + quoted(path) +
                        ": a shard holds at most 2147483647 (its header counts in int32); use smaller shards");
    std::array<std::int32_t, kTokenShardHeaderBytes / sizeof(std::int32_t)> header{};
    header[0] = kTokenShardMagic;
    header[1] = kTokenShardVersion;
    header[2] = static_cast<std::int32_t>(tokens.size());

    AtomicFileWriter out(path);
    out.write(header.data(), sizeof(header));
    out.write(tokens.data(), tokens.size_bytes());
    out.commit();
}

std::vector<std::uint16_t> read_token_shard(const std::filesystem::path& path) {
    const TokenShardFile shard(path);
    std::vector<std::uint16_t> tokens(shard.tokens());
    shard.read(0, tokens);
    return tokens;
}

void validate_tokens(std::span<const std::uint16_t> tokens, std::uint32_t vocab_size,
                     const std::filesystem::path& shard, std::uint64_t first_position) {
    const auto bad = std::find_if(tokens.begin(), tokens.end(), [&](std::uint16_t id) { return id >= vocab_size; });
    if (bad == tokens.end()) return;
    throw UserError(quoted(shard) + " holds token id " + std::to_string(*bad) + " at position " +
                    std::to_string(first_position + static_cast<std::uint64_t>(bad - tokens.begin())) +
                    ", but the vocabulary has " + std::to_string(vocab_size) +
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

TokenShardFile::TokenShardFile(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    // The loader keeps every shard open: thousands of them can reach the limit on open files.
    if (fd_ < 0 && errno == EMFILE)
        throw UserError("cannot open token shard " + quoted(path) + ": " + std::strerror(errno) +
                        "; raise the limit (`ulimit -n`) or use fewer, larger shards");
    if (fd_ < 0)
        throw UserError("cannot open token shard " + quoted(path) + ": " + std::strerror(errno) + "; " +
                        std::string(kMakeShards));
    try {
        struct stat status {};
        if (::fstat(fd_, &status) != 0 || !S_ISREG(status.st_mode))
            throw UserError(quoted(path) + " is not a regular file; " + std::string(kMakeShards));
        file_bytes_ = status.st_size;
        modified_seconds_ = status.st_mtim.tv_sec;
        modified_nanoseconds_ = status.st_mtim.tv_nsec;
        tokens_ = checked_token_count(path, fd_, static_cast<std::size_t>(status.st_size));
    } catch (...) {
        ::close(fd_);
        throw;
    }
}

TokenShardFile::~TokenShardFile() {
    if (fd_ >= 0) ::close(fd_);
}

TokenShardFile::TokenShardFile(TokenShardFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      tokens_(other.tokens_),
      file_bytes_(other.file_bytes_),
      modified_seconds_(other.modified_seconds_),
      modified_nanoseconds_(other.modified_nanoseconds_) {}

void TokenShardFile::read(std::size_t first, std::span<std::uint16_t> out) const {
    if (first > tokens_ || out.size() > tokens_ - first)
        throw std::out_of_range("TokenShardFile::read past the end of " + quoted(path_));
    const std::size_t got =
        read_at(fd_, path_, kTokenShardHeaderBytes + first * sizeof(std::uint16_t), out.data(), out.size_bytes());
    // Checked after the read, so a change before or during it is seen.
    struct stat status {};
    if (::fstat(fd_, &status) != 0)
        throw UserError("cannot check token shard " + quoted(path_) + ": " + std::strerror(errno));
    if (status.st_size != file_bytes_)
        changed("it is now " + std::to_string(status.st_size) + " bytes, it was " + std::to_string(file_bytes_) +
                " when opened");
    if (status.st_mtim.tv_sec != modified_seconds_ || status.st_mtim.tv_nsec != modified_nanoseconds_)
        changed("it was modified after it was opened");
    if (got != out.size_bytes()) changed("it ended early");
}

void TokenShardFile::changed(const std::string& how) const {
    throw UserError(quoted(path_) + " changed while this run was reading it: " + how +
                    "; a shard must not change while a run reads it: restore it, or write new shards with " +
                    "`adacc prepare` (which replaces files without disturbing runs that read them), and start or " +
                    "resume the run again");
}

}  // namespace adacc
