// The checkpoint file format: a self-describing container of named tensors plus JSON metadata,
// written atomically. Which checkpoints a run folder keeps is src/io/checkpoint_folder.h's.
//
// File format (version 1, all integers little-endian):
//
//   offset 0   header, 64 bytes:
//                char[8] magic "ADACCKPT"
//                u32 format_version (1)      u32 header_bytes (64)
//                u64 tensor_count            u64 meta_bytes
//                u64 table_bytes             u64 data_offset (64-aligned start of tensor data)
//                u64 file_bytes (total size; a shorter file is truncated)
//                u64 index_checksum (of the metadata and tensor table bytes)
//   offset 64  metadata: meta_bytes of UTF-8 JSON
//   then       tensor table, tensor_count entries, each:
//                u32 name_bytes, name (UTF-8, no terminator)
//                u32 dtype (src/common/dtype.h code)   u32 rank   i64 dims[rank]
//                u64 offset (from file start, multiple of 64)   u64 bytes   u64 checksum
//   then       zero padding to data_offset, and each tensor's bytes at its offset, each
//              starting on a 64-byte boundary (so a file can be mapped and used in place).
//
// Checksums are 64-bit FNV-1a over the bytes taken as little-endian 64-bit words (a final
// partial word zero-padded). Every tensor's checksum is verified when it is read; the header
// and table are verified when a file is opened, which is cheap, so that is what
// newest_complete_checkpoint() checks.
//
// Metadata is the caller's JSON (what a training checkpoint stores: src/train/training_state.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "src/common/dtype.h"
#include "src/common/file_io.h"

namespace adacc {

constexpr std::uint32_t kCheckpointFormatVersion = 1;
// The first 8 bytes of every checkpoint file.
constexpr char kCheckpointMagic[8] = {'A', 'D', 'A', 'C', 'C', 'K', 'P', 'T'};
constexpr std::size_t kCheckpointAlignment = 64;

// A tensor to write: `data` holds product(shape) elements of `dtype`, contiguous.
struct CheckpointTensor {
    std::string name;
    DType dtype = DType::f32;
    std::vector<std::int64_t> shape;
    const void* data = nullptr;
};

// A tensor as the file's table describes it.
struct StoredTensor {
    std::string name;
    DType dtype = DType::f32;
    std::vector<std::int64_t> shape;
    std::uint64_t offset = 0;  // from the start of the file
    std::uint64_t bytes = 0;
    std::uint64_t checksum = 0;
};

// Writes `file` atomically (AtomicFileWriter: a temporary of its own name, synced, renamed,
// directory synced), so a crash mid-write leaves the previous file intact. Tensor names must be unique and non-empty.
void write_checkpoint(const std::filesystem::path& file, const nlohmann::json& meta,
                      const std::vector<CheckpointTensor>& tensors);

// Opens a checkpoint and validates its header, metadata and table (not the tensor data, which
// is verified as it is read). A truncated, corrupt or foreign file is a UserError saying so.
class CheckpointReader {
public:
    explicit CheckpointReader(const std::filesystem::path& file);

    const std::filesystem::path& path() const { return path_; }
    const nlohmann::json& meta() const { return meta_; }
    const std::vector<StoredTensor>& tensors() const { return tensors_; }

    bool has(std::string_view name) const;
    // UserError when the checkpoint holds no tensor of that name.
    const std::vector<std::int64_t>& shape(std::string_view name) const;
    DType dtype(std::string_view name) const;

    // Copies the tensor into `dst`, which must be exactly the tensor's size, and verifies its
    // checksum.
    void read_into(std::string_view name, void* dst, std::size_t bytes) const;
    // The same after checking that the stored dtype and shape are what the caller expects, with
    // an error that says the checkpoint belongs to a different model when they are not.
    void read_into(std::string_view name, DType dtype, std::span<const std::int64_t> shape, void* dst) const;

private:
    const StoredTensor& find(std::string_view name) const;

    std::filesystem::path path_;
    std::unique_ptr<ReadOnlyFile> file_;
    nlohmann::json meta_;
    std::vector<StoredTensor> tensors_;
};

// The format version `file` declares when it starts with kCheckpointMagic; empty for a foreign
// file or one that cannot be read.
std::optional<std::uint32_t> stored_format_version(const std::filesystem::path& file);

}  // namespace adacc
