// The safetensors format, Hugging Face's container of named tensors (model.safetensors):
//   8 bytes   N, the header's length, a little-endian uint64
//   N bytes   the header: a JSON object mapping each tensor's name to
//             {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
//             (offsets into the data that follows the header; end - begin = elements x dtype size),
//             and optionally "__metadata__": an object of string values
//   the data  every tensor's bytes, row-major, little-endian
// A file is read as the reference implementation (the safetensors crate) reads it: the tensors
// tile the data exactly, in some order, with no gap, no overlap and nothing after the last, so a
// file that parses holds no hidden or shared bytes. Anything else is a UserError naming the file,
// the tensor and what is wrong. Tensors are read with positioned reads, never mapped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "src/common/dtype.h"
#include "src/common/file_io.h"

namespace adacc {

// The dtype a safetensors name stands for ("F32" -> f32, "BF16" -> bf16, ...); empty for names
// adacc has no DType for (BOOL, F8_E4M3, ...).
std::optional<DType> safetensors_dtype(std::string_view name);
std::string_view safetensors_dtype_name(DType dtype);

struct SafetensorsTensor {
    std::string name;
    DType dtype = DType::f32;
    std::vector<std::uint64_t> shape;
    std::uint64_t offset = 0;  // of its first byte, from the start of the file
    std::uint64_t bytes = 0;
    std::uint64_t numel() const;
};

// "[768, 2304]".
std::string shape_text(const std::vector<std::uint64_t>& shape);

class SafetensorsFile {
public:
    // Opens and validates the header (the data is read on demand).
    explicit SafetensorsFile(const std::filesystem::path& file);

    const std::filesystem::path& path() const { return path_; }
    const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in file order
    const SafetensorsTensor* find(std::string_view name) const;                 // null when absent
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

    // The tensor's bytes as stored (tensor.bytes of them).
    void read(const SafetensorsTensor& tensor, void* dst) const;
    // Its values as fp32 (tensor.numel() of them): F32 as stored, F16 and BF16 widened exactly.
    // UserError for any other dtype.
    void read_f32(const SafetensorsTensor& tensor, float* dst) const;

private:
    std::filesystem::path path_;
    ReadOnlyFile file_;
    std::vector<SafetensorsTensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

struct SafetensorsSpec {
    std::string name;
    DType dtype = DType::f32;
    std::vector<std::uint64_t> shape;
};

// Writes a safetensors file atomically (AtomicFileWriter). Every tensor is declared up front,
// since the header that precedes the data holds every offset; their bytes then follow one
// tensor at a time, so a caller converting tensors needs memory for one of them only. The header
// is padded with spaces to a multiple of 8 bytes, as the safetensors package pads it, so the
// data starts aligned.
class SafetensorsWriter {
public:
    SafetensorsWriter(const std::filesystem::path& file, std::vector<SafetensorsSpec> tensors,
                      const std::map<std::string, std::string>& metadata = {});
    // The next declared tensor's bytes, all of them in one call.
    void write_next(const void* data, std::size_t bytes);
    void commit();

private:
    std::vector<SafetensorsSpec> specs_;
    std::size_t written_ = 0;
    AtomicFileWriter out_;
};

}  // namespace adacc
