#include "src/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "kernels/activation.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"

namespace adacc {

static_assert(std::endian::native == std::endian::little, "safetensors files are little-endian");

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr std::uint64_t kLengthBytes = 8;
// The reference implementation refuses longer headers (MAX_HEADER_SIZE): a corrupt length must
// not make the reader allocate gigabytes.
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeName {
    DType dtype;
    const char* name;
};
constexpr DTypeName kDTypeNames[] = {{DType::f32, "F32"}, {DType::f16, "F16"}, {DType::bf16, "BF16"},
                                     {DType::f64, "F64"}, {DType::i8, "I8"},   {DType::u8, "U8"},
                                     {DType::i16, "I16"}, {DType::u16, "U16"}, {DType::i32, "I32"},
                                     {DType::u32, "U32"}, {DType::i64, "I64"}, {DType::u64, "U64"}};

[[noreturn]] void refuse(const fs::path& file, const std::string& problem) {
    throw UserError(quoted(file) + " is not a valid safetensors file: " + problem +
                    "; it is damaged or was not written by a safetensors writer: download or export it again");
}

float f16_to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
    if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in fp32
        const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
        return sign ? -magnitude : magnitude;
    }
    const std::uint32_t bits = exponent == 0x1F ? sign | 0x7F800000u | (mantissa << 13)  // inf, NaN
                                                : sign | ((exponent + 112) << 23) | (mantissa << 13);
    return std::bit_cast<float>(bits);
}

// The header as JSON (the caller checked it starts with '{'). nlohmann keeps the last of repeated keys; a repeated tensor name would hide
// a tensor, so every object's keys are checked to be distinct while parsing.
json parse_header(const std::string& text, const fs::path& file) {
    std::vector<std::set<std::string>> open_objects;
    std::string repeated;
    const auto note_keys = [&](int, json::parse_event_t event, json& parsed) {
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        if (event == json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
        if (event == json::parse_event_t::key && repeated.empty() && !open_objects.empty() &&
            !open_objects.back().insert(parsed.get<std::string>()).second)
            repeated = parsed.get<std::string>();
        return true;
    };
    json header;
    try {
        header = json::parse(text, note_keys);
    } catch (const json::exception& error) {
        refuse(file, std::string("its header is not valid JSON (") + error.what() + ")");
    }
    if (!repeated.empty()) refuse(file, "its header names '" + repeated + "' twice");
    return header;  // an object: the text starts with '{'
}

std::uint64_t unsigned_value(const json& value, const std::string& what, const fs::path& file) {
    if (!value.is_number_unsigned()) refuse(file, what + " is " + value.dump() + ", not a non-negative integer");
    return value.get<std::uint64_t>();
}

// a * b, refused when it does not fit 64 bits (a crafted shape).
std::uint64_t checked_product(std::uint64_t a, std::uint64_t b, const std::string& what, const fs::path& file) {
    if (b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b) refuse(file, what + " overflows 64 bits");
    return a * b;
}

// One tensor's entry; offset is still relative to the data.
SafetensorsTensor parse_entry(const std::string& name, const json& entry, const fs::path& file) {
    const std::string what = "tensor '" + name + "'";
    if (!entry.is_object()) refuse(file, what + " is " + entry.dump() + ", not an object");
    for (const auto& [key, unused] : entry.items())
        if (key != "dtype" && key != "shape" && key != "data_offsets")
            refuse(file, what + " has an unknown field '" + key + "' (fields: dtype, shape, data_offsets)");
    if (!entry.contains("dtype") || !entry.contains("shape") || !entry.contains("data_offsets"))
        refuse(file, what + " lacks one of dtype, shape, data_offsets");
    const json& dtype = entry["dtype"];
    const auto parsed = dtype.is_string() ? safetensors_dtype(dtype.get<std::string>()) : std::nullopt;
    if (!parsed) refuse(file, what + " has dtype " + dtype.dump() + ", which adacc does not read");
    SafetensorsTensor tensor;
    tensor.name = name;
    tensor.dtype = *parsed;
    const json& shape = entry["shape"];
    if (!shape.is_array()) refuse(file, what + "'s shape is " + shape.dump() + ", not an array");
    std::uint64_t numel = 1;
    for (const json& d : shape) {
        tensor.shape.push_back(unsigned_value(d, what + "'s dimension", file));
        numel = checked_product(numel, tensor.shape.back(), what + "'s size", file);
    }
    const json& offsets = entry["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2) refuse(file, what + "'s data_offsets are not [begin, end]");
    const std::uint64_t begin = unsigned_value(offsets[0], what + "'s begin", file);
    const std::uint64_t end = unsigned_value(offsets[1], what + "'s end", file);
    if (end < begin)
        refuse(file, what + " ends (" + std::to_string(end) + ") before it begins (" + std::to_string(begin) + ")");
    tensor.offset = begin;
    tensor.bytes = end - begin;
    const std::uint64_t expected = checked_product(numel, dtype_size(tensor.dtype), what + "'s byte size", file);
    if (tensor.bytes != expected)
        refuse(file, what + " is " + std::string(safetensors_dtype_name(tensor.dtype)) + " of shape " +
                         shape_text(tensor.shape) + ", " + std::to_string(expected) +
                         " bytes, but its data_offsets span " + std::to_string(tensor.bytes));
    return tensor;
}

std::map<std::string, std::string> parse_metadata(const json& metadata, const fs::path& file) {
    if (!metadata.is_object()) refuse(file, std::string(kMetadataKey) + " is not an object");
    std::map<std::string, std::string> values;
    for (const auto& [key, value] : metadata.items()) {
        if (!value.is_string())
            refuse(file, std::string(kMetadataKey) + " '" + key + "' is " + value.dump() + ", not a string");
        values[key] = value.get<std::string>();
    }
    return values;
}

// The tensors, sorted by offset, must tile the data [0, data_bytes) exactly.
void check_tiling(const std::vector<SafetensorsTensor>& tensors, std::uint64_t data_bytes, const fs::path& file) {
    std::uint64_t end = 0;
    const SafetensorsTensor* previous = nullptr;
    for (const auto& t : tensors) {
        if (t.offset < end)
            refuse(file, "tensor '" + t.name + "' (bytes " + std::to_string(t.offset) + "..) overlaps '" +
                             previous->name + "' (..bytes " + std::to_string(end) + ")");
        if (t.offset > end)
            refuse(file, std::to_string(t.offset - end) + " bytes before tensor '" + t.name + "' belong to no tensor");
        end = t.offset + t.bytes;
        previous = &t;
    }
    if (end > data_bytes)
        refuse(file, "its tensors need " + std::to_string(end) + " bytes of data, the file holds " +
                         std::to_string(data_bytes) + " after the header (truncated?)");
    if (end < data_bytes) refuse(file, "its last " + std::to_string(data_bytes - end) + " bytes belong to no tensor");
}

}  // namespace

std::optional<DType> safetensors_dtype(std::string_view name) {
    for (const auto& d : kDTypeNames)
        if (name == d.name) return d.dtype;
    return std::nullopt;
}

std::string_view safetensors_dtype_name(DType dtype) {
    for (const auto& d : kDTypeNames)
        if (dtype == d.dtype) return d.name;
    return "unknown";
}

std::uint64_t SafetensorsTensor::numel() const {
    std::uint64_t n = 1;
    for (const auto d : shape) n *= d;  // checked against overflow when the header was read
    return n;
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
    return text + "]";
}

SafetensorsFile::SafetensorsFile(const fs::path& file) : path_(file), file_(file) {
    std::uint64_t header_bytes = 0;
    if (!file_.read_at(0, &header_bytes, kLengthBytes))
        refuse(file, "it has " + std::to_string(file_.size()) + " bytes, fewer than the 8 of the header's length");
    if (header_bytes > file_.size() - kLengthBytes || header_bytes > kMaxHeaderBytes)
        refuse(file, "its header's length is " + std::to_string(header_bytes) + " bytes, but the file has " +
                         std::to_string(file_.size()) + " (and headers are at most " + std::to_string(kMaxHeaderBytes) +
                         ")");
    std::string text(header_bytes, '\0');
    if (!file_.read_at(kLengthBytes, text.data(), text.size())) refuse(file, "it ended while reading its header");
    if (text.empty() || text.front() != '{') refuse(file, "its header does not start with '{'");
    const json header = parse_header(text, file);
    for (const auto& [name, entry] : header.items()) {
        if (name == kMetadataKey)
            metadata_ = parse_metadata(entry, file);
        else
            tensors_.push_back(parse_entry(name, entry, file));
    }
    std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) {
        return a.offset != b.offset ? a.offset < b.offset : a.bytes < b.bytes;
    });
    const std::uint64_t data_start = kLengthBytes + header_bytes;
    check_tiling(tensors_, file_.size() - data_start, file);
    for (auto& t : tensors_) t.offset += data_start;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
    const auto found = std::find_if(tensors_.begin(), tensors_.end(), [&](const auto& t) { return t.name == name; });
    return found == tensors_.end() ? nullptr : &*found;
}

void SafetensorsFile::read(const SafetensorsTensor& tensor, void* dst) const {
    if (!file_.read_at(tensor.offset, dst, tensor.bytes))
        throw UserError(quoted(path_) + " ended while reading tensor '" + tensor.name +
                        "': the file was truncated after it was opened; download or export it again");
}

void SafetensorsFile::read_f32(const SafetensorsTensor& tensor, float* dst) const {
    const std::size_t n = tensor.numel();
    if (tensor.dtype == DType::f32) return read(tensor, dst);
    if (tensor.dtype != DType::f16 && tensor.dtype != DType::bf16)
        throw UserError(quoted(path_) + " stores tensor '" + tensor.name + "' as " +
                        std::string(safetensors_dtype_name(tensor.dtype)) +
                        ", but adacc reads F32, F16 and BF16 weights: convert the model to one of them (e.g. "
                        "model.to(torch.float32) and save_pretrained)");
    std::vector<std::uint16_t> halves(n);
    read(tensor, halves.data());
    if (tensor.dtype == DType::f16)
        std::transform(halves.begin(), halves.end(), dst, f16_to_float);
    else
        std::transform(halves.begin(), halves.end(), dst, [](std::uint16_t b) { return to_float(bf16{b}); });
}

SafetensorsWriter::SafetensorsWriter(const fs::path& file, std::vector<SafetensorsSpec> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : specs_(std::move(tensors)), out_(file) {
    json header = json::object();
    std::uint64_t offset = 0;
    for (const auto& spec : specs_) {
        std::uint64_t bytes = dtype_size(spec.dtype);
        for (const auto d : spec.shape) bytes *= d;
        if (spec.name == kMetadataKey || header.contains(spec.name))
            throw std::logic_error("safetensors: tensor name '" + spec.name + "' repeated or reserved");
        header[spec.name] = {{"dtype", safetensors_dtype_name(spec.dtype)},
                             {"shape", spec.shape},
                             {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    if (!metadata.empty()) header[kMetadataKey] = metadata;
    std::string text = header.dump();
    text.resize((text.size() + 7) / 8 * 8, ' ');
    const std::uint64_t header_bytes = text.size();
    out_.write(&header_bytes, kLengthBytes);
    out_.write(text.data(), text.size());
}

void SafetensorsWriter::write_next(const void* data, std::size_t bytes) {
    if (written_ >= specs_.size()) throw std::logic_error("safetensors: more tensors written than declared");
    const auto& spec = specs_[written_];
    std::uint64_t expected = dtype_size(spec.dtype);
    for (const auto d : spec.shape) expected *= d;
    if (bytes != expected)
        throw std::logic_error("safetensors: tensor '" + spec.name + "' given " + std::to_string(bytes) +
                               " bytes, declared " + std::to_string(expected));
    out_.write(data, bytes);
    ++written_;
}

void SafetensorsWriter::commit() {
    if (written_ != specs_.size()) throw std::logic_error("safetensors: fewer tensors written than declared");
    out_.commit();
}

}  // namespace adacc
