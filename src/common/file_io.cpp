#include "src/common/file_io.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "src/common/errors.h"

namespace adacc {

namespace {

std::string system_reason() { return std::strerror(errno); }

// A rename is only durable once the directory entry itself reaches the disk.
void sync_directory(const std::filesystem::path& dir) {
    const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;  // some filesystems do not allow it; the rename has still happened
    ::fsync(fd);
    ::close(fd);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::filesystem::path final_path)
    : final_path_(std::move(final_path)), temp_path_(final_path_.string() + ".tmp") {
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0)
        throw UserError("cannot create '" + temp_path_.string() + "': " + system_reason() +
                        "; check that the folder exists and is writable");
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

void AtomicFileWriter::write(const void* data, std::size_t bytes) {
    write_at(size_, data, bytes);
}

void AtomicFileWriter::pad_to(std::uint64_t alignment) {
    static const std::vector<char> zeros(4096, 0);
    while (size_ % alignment != 0) write(zeros.data(), std::min<std::uint64_t>(alignment - size_ % alignment, zeros.size()));
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
