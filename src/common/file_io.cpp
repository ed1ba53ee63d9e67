#include "src/common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "src/common/errors.h"

namespace adacc {

namespace {

// An AtomicFileWriter's temporary is "<final name>.XXXXXX.tmp": mkostemps fills the six X's with
// letters and digits.
constexpr std::string_view kTempSuffix = ".tmp";
constexpr std::size_t kUniqueChars = 6;

std::string system_reason() { return std::strerror(errno); }

// A rename is only durable once the directory entry itself reaches the disk.
void sync_directory(const std::filesystem::path& dir) {
    const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;  // some filesystems do not allow it; the rename has still happened
    ::fsync(fd);
    ::close(fd);
}

const char* kind_of(mode_t mode) {
    if (S_ISLNK(mode)) return "a symbolic link";
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a fifo";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

// The permissions a new file gets from open(..., 0666): mkostemps makes its file 0600.
mode_t new_file_mode() {
    static const mode_t mode = [] {
        const mode_t mask = ::umask(0);
        ::umask(mask);
        return static_cast<mode_t>(0666 & ~mask);
    }();
    return mode;
}

// The file a symlink at `path` points to (through every link on the way); `path` itself otherwise.
std::filesystem::path through_symlink(const std::filesystem::path& path) {
    std::error_code error;
    if (!std::filesystem::is_symlink(path, error)) return path;
    const std::filesystem::path target = std::filesystem::weakly_canonical(path, error);
    if (error) throw UserError("cannot follow the link " + quoted(path) + ": " + error.message());
    return target;
}

}  // namespace

std::string quoted(const std::filesystem::path& path) {
    std::string text = "'";  // appended piecewise: GCC 12 misreports "'" + string + "'" (-Wrestrict)
    text += path.string();
    return text + "'";
}

void require_regular_or_absent(const std::filesystem::path& path) {
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0) {
        if (errno == ENOENT) return;
        throw UserError("cannot write " + quoted(path) + ": " + system_reason() +
                        "; name a file in a folder that exists or can be made");
    }
    if (S_ISREG(info.st_mode)) return;
    const std::string fix = S_ISLNK(info.st_mode)
                                ? "remove the link or name another file (`adacc export --force` writes the file it "
                                  "points to instead)"
                                : "remove it or name another file";
    throw UserError(quoted(path) + " is " + kind_of(info.st_mode) + ", and adacc replaces only regular files: " + fix);
}

void create_parent_folders(const std::filesystem::path& file) {
    if (!file.has_parent_path()) return;
    std::error_code error;
    std::filesystem::create_directories(file.parent_path(), error);
    if (error)
        throw UserError("cannot create the folder " + quoted(file.parent_path()) + " for " + quoted(file.filename()) +
                        ": " + error.message() + "; create it, or choose a writable place");
}

std::optional<std::filesystem::path> atomic_write_target(const std::filesystem::path& path) {
    const std::string name = path.filename().string();
    const std::size_t tail = 1 + kUniqueChars + kTempSuffix.size();  // ".XXXXXX.tmp"
    if (name.size() <= tail || !name.ends_with(kTempSuffix) || name[name.size() - tail] != '.') return std::nullopt;
    const std::size_t unique_at = name.size() - tail + 1;
    for (std::size_t i = unique_at; i < unique_at + kUniqueChars; ++i)
        if (!std::isalnum(static_cast<unsigned char>(name[i]))) return std::nullopt;
    return path.parent_path() / name.substr(0, name.size() - tail);
}

AtomicFileWriter::AtomicFileWriter(std::filesystem::path final_path, ExistingTarget existing)
    : final_path_(existing == ExistingTarget::write_through_symlink ? through_symlink(final_path)
                                                                    : std::move(final_path)) {
    require_regular_or_absent(final_path_);
    std::string name = final_path_.string() + "." + std::string(kUniqueChars, 'X') + std::string(kTempSuffix);
    fd_ = ::mkostemps(name.data(), static_cast<int>(kTempSuffix.size()), O_CLOEXEC);
    if (fd_ < 0)
        throw UserError("cannot write " + quoted(final_path_) + ": " + system_reason() + " (creating its temporary " +
                        quoted(std::filesystem::path(name)) + "); check that the folder exists and is writable");
    temp_path_ = name;
    ::fchmod(fd_, new_file_mode());
}

AtomicFileWriter::~AtomicFileWriter() {
    if (fd_ >= 0) {
        ::close(fd_);
        ::unlink(temp_path_.c_str());
    }
}

void AtomicFileWriter::fail(const char* what) const {
    const std::string reason = system_reason();
    std::error_code error;
    const std::string untouched = std::filesystem::exists(final_path_, error)
                                      ? "; '" + final_path_.string() + "' keeps its previous contents"
                                      : "; '" + final_path_.string() + "' was not written";
    throw UserError("cannot " + std::string(what) + " '" + temp_path_.string() + "': " + reason + untouched +
                    " (check free disk space and permissions)");
}

void AtomicFileWriter::write(const void* data, std::size_t bytes) { write_at(size_, data, bytes); }

void AtomicFileWriter::pad_to(std::uint64_t alignment) {
    static const std::vector<char> zeros(4096, 0);
    while (size_ % alignment != 0)
        write(zeros.data(), std::min<std::uint64_t>(alignment - size_ % alignment, zeros.size()));
}

void AtomicFileWriter::write_at(std::uint64_t offset, const void* data, std::size_t bytes) {
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t written = ::pwrite(fd_, p, bytes, static_cast<off_t>(offset));
        if (written < 0) {
            if (errno == EINTR) continue;
            fail("write");
        }
        p += written;
        offset += static_cast<std::uint64_t>(written);
        bytes -= static_cast<std::size_t>(written);
    }
    size_ = std::max(size_, offset);
}

void AtomicFileWriter::commit() {
    if (::fsync(fd_) != 0) fail("sync");
    if (::close(fd_) != 0) {
        fd_ = -1;
        ::unlink(temp_path_.c_str());
        fail("close");
    }
    fd_ = -1;
    try {
        require_regular_or_absent(final_path_);  // again: it may have been made while we wrote
    } catch (const UserError&) {
        ::unlink(temp_path_.c_str());
        throw;
    }
    if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0) {
        const std::string reason = system_reason();
        ::unlink(temp_path_.c_str());
        throw UserError("cannot rename '" + temp_path_.string() + "' to '" + final_path_.string() + "': " + reason);
    }
    sync_directory(final_path_.parent_path());
}

ReadOnlyFile::ReadOnlyFile(const std::filesystem::path& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw UserError("cannot open '" + path.string() + "': " + system_reason());
    struct stat info {};
    if (::fstat(fd_, &info) != 0 || !S_ISREG(info.st_mode)) {
        ::close(fd_);
        throw UserError("'" + path.string() + "' is not a regular file");
    }
    size_ = static_cast<std::uint64_t>(info.st_size);
}

ReadOnlyFile::~ReadOnlyFile() { ::close(fd_); }

bool ReadOnlyFile::read_at(std::uint64_t offset, void* dst, std::size_t bytes) const {
    char* p = static_cast<char*>(dst);
    while (bytes > 0) {
        const ssize_t got = ::pread(fd_, p, bytes, static_cast<off_t>(offset));
        if (got < 0) {
            if (errno == EINTR) continue;
            throw UserError("cannot read '" + path_.string() + "': " + system_reason());
        }
        if (got == 0) return false;
        p += got;
        offset += static_cast<std::uint64_t>(got);
        bytes -= static_cast<std::size_t>(got);
    }
    return true;
}

}  // namespace adacc
