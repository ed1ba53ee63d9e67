// Whole-file I/O with the guarantees checkpoints and exported models need: a write either
// lands completely or leaves the previous file untouched, and a read of a short file is
// reported instead of returning garbage. I/O failures are UserErrors naming the file and the
// system's reason (disk full, permissions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace adacc {

// A path as messages name it: 'path'.
std::string quoted(const std::filesystem::path& path);

// What a write may do when its target's name is taken. Only a regular file is ever replaced:
// a device, fifo or folder of that name is refused, and so is a symbolic link (replacing it
// would break the link; writing through it can overwrite a file anywhere), unless the user
// asked to write the file the link points to (`adacc export --force`).
enum class ExistingTarget { replace_regular_file, write_through_symlink };

// Refuses (UserError naming the path and the fix) when `path` exists and is not a regular file.
void require_regular_or_absent(const std::filesystem::path& path);

// Creates the folders `file` goes into; a UserError naming the folder when that fails.
void create_parent_folders(const std::filesystem::path& file);

// Writes `final_path` atomically: bytes go to a temporary file of a name no one else has
// ("<final name>.XXXXXX.tmp" in the same folder, made by mkostemps), so concurrent writers and a
// user's own "<name>.tmp" never meet; commit() syncs it to disk, renames it over final_path and
// syncs the folder, so a crash (even SIGKILL or power loss) at any point leaves either the old
// file or the complete new one, plus at worst a stale temporary. Destroying an uncommitted
// writer removes its temporary file.
class AtomicFileWriter {
public:
    explicit AtomicFileWriter(std::filesystem::path final_path,
                              ExistingTarget existing = ExistingTarget::replace_regular_file);
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
    // The file written: final_path, or the file a symlink there points to (write_through_symlink).
    const std::filesystem::path& path() const { return final_path_; }
    void commit();

private:
    [[noreturn]] void fail(const char* what) const;

    std::filesystem::path final_path_;
    std::filesystem::path temp_path_;
    int fd_ = -1;
    std::uint64_t size_ = 0;
};

// The file that `path` was to become when `path` is the temporary of an AtomicFileWriter
// ("ckpt_00000010.bin.Ab3xYz.tmp" -> "ckpt_00000010.bin"); nullopt for any other name, so a
// cleanup that deletes what this returns for never deletes a file adacc did not make.
std::optional<std::filesystem::path> atomic_write_target(const std::filesystem::path& path);

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
