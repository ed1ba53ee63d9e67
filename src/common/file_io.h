// Whole-file I/O with the guarantees checkpoints and exported models need: a write either
// lands completely or leaves the previous file untouched, and a read of a short file is
// reported instead of returning garbage. I/O failures are UserErrors naming the file and the
// system's reason (disk full, permissions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace adacc {

// Writes `final_path` atomically: bytes go to final_path + ".tmp"; commit() syncs them to disk,
// renames the file over final_path and syncs the directory, so a crash (even SIGKILL or power
// loss) at any point leaves either the old file or the complete new one, plus at worst a stale
// ".tmp". Destroying an uncommitted writer removes the temporary file.
class AtomicFileWriter {
public:
    explicit AtomicFileWriter(std::filesystem::path final_path);
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    // Appends at the current end.
    void write(const void* data, std::size_t bytes);
    // Appends zero bytes until the size is a multiple of `alignment`.
    void pad_to(std::uint64_t alignment);
    // Overwrites bytes already written (headers that are only known at the end).
    void write_at(std::uint64_t offset, const void* data, std::size_t bytes);
    std::uint64_t size() const { return size_; }
    void commit();

private:
    [[noreturn]] void fail(const char* what) const;

    std::filesystem::path final_path_;
    std::filesystem::path temp_path_;
    int fd_ = -1;
    std::uint64_t size_ = 0;
};

// A file opened for positioned reads.
class ReadOnlyFile {
public:
    explicit ReadOnlyFile(const std::filesystem::path& path);
    ~ReadOnlyFile();
    ReadOnlyFile(const ReadOnlyFile&) = delete;
    ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

    std::uint64_t size() const { return size_; }
    // Reads exactly `bytes` at `offset`; false when the file ends first.
    bool read_at(std::uint64_t offset, void* dst, std::size_t bytes) const;

private:
    std::filesystem::path path_;
    int fd_ = -1;
    std::uint64_t size_ = 0;
};

}  // namespace adacc
