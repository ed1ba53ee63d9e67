#include "src/io/checkpoint_file.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include "src/common/checksum.h"
#include "src/common/errors.h"
#include "src/common/units.h"
#include "src/io/llmc_model_io.h"

namespace adacc {

static_assert(std::endian::native == std::endian::little, "the checkpoint format is little-endian");

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kChunkBytes = std::size_t{8} << 20;  // a multiple of 8, see Fnv64
constexpr std::uint32_t kMaxRank = 16;

struct Header {
    char magic[8];
    std::uint32_t format_version;
    std::uint32_t header_bytes;
    std::uint64_t tensor_count;
    std::uint64_t meta_bytes;
    std::uint64_t table_bytes;
    std::uint64_t data_offset;
    std::uint64_t file_bytes;
    std::uint64_t index_checksum;
};
static_assert(sizeof(Header) == 64);

std::string format_shape(std::span<const std::int64_t> shape) {
    std::string text = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? "," : "") + std::to_string(shape[i]);
    return text + "]";
}

UserError corrupt(const fs::path& file, const std::string& what) {
    return UserError("checkpoint " + quoted(file) + " is corrupt (" + what +
                     "); delete it and resume from an earlier checkpoint");
}

UserError truncated(const fs::path& file, std::uint64_t have, std::uint64_t expected) {
    return UserError("checkpoint " + quoted(file) + " is truncated (" + std::to_string(have) + " of " +
                     std::to_string(expected) +
                     " bytes): it was not completely written; delete it (a resumed run falls back to the "
                     "previous checkpoint)");
}

// ---------------------------------------------------------------------------------------------
// Tensor table encoding.

template <typename T>
void append(std::string& out, T value) {
    out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

std::string encode_table(const std::vector<StoredTensor>& tensors) {
    std::string out;
    for (const auto& t : tensors) {
        append(out, static_cast<std::uint32_t>(t.name.size()));
        out += t.name;
        append(out, static_cast<std::uint32_t>(t.dtype));
        append(out, static_cast<std::uint32_t>(t.shape.size()));
        for (const auto d : t.shape) append(out, d);
        append(out, t.offset);
        append(out, t.bytes);
        append(out, t.checksum);
    }
    return out;
}

// Reads fixed-size fields from the table, turning a read past its end into a corrupt-file error.
class TableCursor {
public:
    TableCursor(std::string_view bytes, const fs::path& file) : bytes_(bytes), file_(file) {}

    template <typename T>
    T take() {
        T value;
        std::memcpy(&value, take_bytes(sizeof value).data(), sizeof value);
        return value;
    }
    std::string_view take_bytes(std::size_t n) {
        if (n > bytes_.size() - position_) throw corrupt(file_, "the tensor table ends mid-entry");
        const auto out = bytes_.substr(position_, n);
        position_ += n;
        return out;
    }
    bool at_end() const { return position_ == bytes_.size(); }

private:
    std::string_view bytes_;
    std::size_t position_ = 0;
    const fs::path& file_;
};

std::optional<std::uint64_t> element_count(std::span<const std::int64_t> shape) {
    std::uint64_t count = 1;
    for (const auto d : shape) {
        if (d < 0) return std::nullopt;
        if (d != 0 && count > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(d))
            return std::nullopt;
        count *= static_cast<std::uint64_t>(d);
    }
    return count;
}

StoredTensor decode_entry(TableCursor& cursor, const Header& header, const fs::path& file) {
    StoredTensor t;
    const auto name_bytes = cursor.take<std::uint32_t>();
    t.name = std::string(cursor.take_bytes(name_bytes));
    const auto dtype = dtype_from_code(cursor.take<std::uint32_t>());
    if (!dtype)
        throw corrupt(file, "tensor '" + t.name + "' has an unknown dtype code; was it written by a newer adacc?");
    t.dtype = *dtype;
    const auto rank = cursor.take<std::uint32_t>();
    if (rank > kMaxRank) throw corrupt(file, "tensor '" + t.name + "' has rank " + std::to_string(rank));
    for (std::uint32_t i = 0; i < rank; ++i) t.shape.push_back(cursor.take<std::int64_t>());
    t.offset = cursor.take<std::uint64_t>();
    t.bytes = cursor.take<std::uint64_t>();
    t.checksum = cursor.take<std::uint64_t>();

    const auto count = element_count(t.shape);
    if (!count || *count > std::numeric_limits<std::uint64_t>::max() / dtype_size(t.dtype) ||
        *count * dtype_size(t.dtype) != t.bytes)
        throw corrupt(file, "tensor '" + t.name + "' has " + std::to_string(t.bytes) + " bytes for shape " +
                                format_shape(t.shape) + " of " + std::string(dtype_name(t.dtype)));
    if (t.offset % kCheckpointAlignment != 0 || t.offset < header.data_offset || t.offset > header.file_bytes ||
        t.bytes > header.file_bytes - t.offset)
        throw corrupt(file, "tensor '" + t.name + "' lies outside the file's data");
    return t;
}

std::vector<StoredTensor> decode_table(std::string_view bytes, const Header& header, const fs::path& file) {
    TableCursor cursor(bytes, file);
    std::vector<StoredTensor> tensors;
    std::unordered_set<std::string> names;
    for (std::uint64_t i = 0; i < header.tensor_count; ++i) {
        tensors.push_back(decode_entry(cursor, header, file));
        if (!names.insert(tensors.back().name).second)
            throw corrupt(file, "tensor '" + tensors.back().name + "' appears twice");
    }
    if (!cursor.at_end()) throw corrupt(file, "the tensor table is longer than its entries");
    return tensors;
}

// ---------------------------------------------------------------------------------------------
// Writing.

// Where each tensor goes, checksums still zero: the table's size does not depend on them, so
// all offsets are fixed before any data is written.
std::vector<StoredTensor> plan_layout(const std::vector<CheckpointTensor>& tensors, std::uint64_t data_offset) {
    std::vector<StoredTensor> stored;
    std::unordered_set<std::string> names;
    std::uint64_t offset = data_offset;
    for (const auto& t : tensors) {
        if (t.name.empty() || !names.insert(t.name).second)
            throw std::invalid_argument("write_checkpoint: tensor names must be unique and non-empty ('" + t.name +
                                        "')");
        const auto count = element_count(t.shape);
        if (!count) throw std::invalid_argument("write_checkpoint: tensor '" + t.name + "' has an invalid shape");
        const std::uint64_t bytes = *count * dtype_size(t.dtype);
        if (bytes > 0 && t.data == nullptr)
            throw std::invalid_argument("write_checkpoint: tensor '" + t.name + "' has no data");
        offset = align_up(offset, kCheckpointAlignment);
        stored.push_back({t.name, t.dtype, t.shape, offset, bytes, 0});
        offset += bytes;
    }
    return stored;
}

std::uint64_t write_tensor_data(AtomicFileWriter& out, const void* data, std::uint64_t bytes) {
    Fnv64 checksum;
    const auto* p = static_cast<const char*>(data);
    for (std::uint64_t done = 0; done < bytes;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, bytes - done));
        checksum.update(p + done, n);
        out.write(p + done, n);
        done += n;
    }
    return checksum.value();
}

}  // namespace

void write_checkpoint(const fs::path& file, const nlohmann::json& meta, const std::vector<CheckpointTensor>& tensors) {
    const std::string meta_text = meta.dump();
    const std::uint64_t table_offset = sizeof(Header) + meta_text.size();
    const std::uint64_t table_bytes = encode_table(plan_layout(tensors, 0)).size();
    const std::uint64_t data_offset = align_up(table_offset + table_bytes, kCheckpointAlignment);
    auto stored = plan_layout(tensors, data_offset);

    create_parent_folders(file);
    AtomicFileWriter out(file);
    const Header blank{};
    out.write(&blank, sizeof blank);
    out.write(meta_text.data(), meta_text.size());
    const std::string table_placeholder(table_bytes, '\0');  // overwritten once the checksums are known
    out.write(table_placeholder.data(), table_placeholder.size());
    out.pad_to(kCheckpointAlignment);
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        out.pad_to(kCheckpointAlignment);
        stored[i].checksum = write_tensor_data(out, tensors[i].data, stored[i].bytes);
    }
    const std::string table = encode_table(stored);
    out.write_at(table_offset, table.data(), table.size());

    Header header{};
    std::memcpy(header.magic, kCheckpointMagic, sizeof kCheckpointMagic);
    header.format_version = kCheckpointFormatVersion;
    header.header_bytes = sizeof(Header);
    header.tensor_count = tensors.size();
    header.meta_bytes = meta_text.size();
    header.table_bytes = table.size();
    header.data_offset = data_offset;
    header.file_bytes = out.size();
    const std::string index_bytes = meta_text + table;  // one buffer: Fnv64 wants 8-byte steps until the end
    Fnv64 index;
    index.update(index_bytes.data(), index_bytes.size());
    header.index_checksum = index.value();
    out.write_at(0, &header, sizeof header);
    out.commit();
}

CheckpointReader::CheckpointReader(const fs::path& file) : path_(file), file_(std::make_unique<ReadOnlyFile>(file)) {
    const std::uint64_t size = file_->size();
    Header header{};
    if (!file_->read_at(0, &header, sizeof header)) {
        if (size >= sizeof kCheckpointMagic && std::memcmp(&header, kCheckpointMagic, sizeof kCheckpointMagic) == 0)
            throw truncated(file, size, sizeof header);
        throw UserError(quoted(file) + " is not an adacc checkpoint (it is too short to hold one)");
    }
    if (std::memcmp(header.magic, kCheckpointMagic, sizeof kCheckpointMagic) != 0) {
        std::int32_t first_word;
        std::memcpy(&first_word, &header, sizeof first_word);
        throw UserError(quoted(file) + " is not an adacc checkpoint (it does not start with ADACCKPT)" +
                        (first_word == kLlmcModelMagic
                             ? std::string("; it is an llm.c model file: pass it with --llmc-model (sample, eval) "
                                           "or --init-from (train)")
                             : std::string()));
    }
    if (header.format_version > kCheckpointFormatVersion)
        throw UserError("checkpoint " + quoted(file) + " has format version " + std::to_string(header.format_version) +
                        " but this adacc reads up to version " + std::to_string(kCheckpointFormatVersion) +
                        "; use a newer adacc");
    if (header.format_version == 0 || header.header_bytes != sizeof(Header)) throw corrupt(file, "bad header");
    if (size < header.file_bytes) throw truncated(file, size, header.file_bytes);
    if (size > header.file_bytes)
        throw corrupt(file, std::to_string(size - header.file_bytes) + " unexpected bytes after its end");
    if (header.meta_bytes > size || header.table_bytes > size ||
        sizeof(Header) + header.meta_bytes + header.table_bytes > header.data_offset || header.data_offset > size)
        throw corrupt(file, "the header's section sizes do not fit the file");

    std::string index(header.meta_bytes + header.table_bytes, '\0');
    file_->read_at(sizeof(Header), index.data(), index.size());
    Fnv64 checksum;
    checksum.update(index.data(), index.size());
    if (checksum.value() != header.index_checksum)
        throw corrupt(file, "its metadata or tensor table fails its checksum");

    const std::string_view index_view(index);
    try {
        meta_ = nlohmann::json::parse(index_view.substr(0, header.meta_bytes));
    } catch (const nlohmann::json::parse_error& error) {
        throw corrupt(file, std::string("metadata is not valid JSON: ") + error.what());
    }
    tensors_ = decode_table(index_view.substr(header.meta_bytes), header, file);
}

const StoredTensor& CheckpointReader::find(std::string_view name) const {
    const auto it = std::ranges::find(tensors_, name, &StoredTensor::name);
    if (it != tensors_.end()) return *it;
    std::string names;
    for (const auto& t : tensors_) names += (names.empty() ? "" : ", ") + t.name;
    throw UserError("checkpoint " + quoted(path_) + " holds no tensor '" + std::string(name) + "' (it holds: " + names +
                    "); it was written by a different model or version; use a matching checkpoint");
}

bool CheckpointReader::has(std::string_view name) const {
    return std::ranges::find(tensors_, name, &StoredTensor::name) != tensors_.end();
}

const std::vector<std::int64_t>& CheckpointReader::shape(std::string_view name) const { return find(name).shape; }

DType CheckpointReader::dtype(std::string_view name) const { return find(name).dtype; }

void CheckpointReader::read_into(std::string_view name, void* dst, std::size_t bytes) const {
    const StoredTensor& t = find(name);
    if (bytes != t.bytes)
        throw UserError("checkpoint " + quoted(path_) + " holds tensor " + t.name + " of " + std::to_string(t.bytes) +
                        " bytes (" + std::string(dtype_name(t.dtype)) + " " + format_shape(t.shape) +
                        ") but the model expects " + std::to_string(bytes) +
                        " bytes: the checkpoint was written for a different model shape; use the config it was "
                        "trained with");
    Fnv64 checksum;
    auto* p = static_cast<char*>(dst);
    for (std::uint64_t done = 0; done < t.bytes;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, t.bytes - done));
        if (!file_->read_at(t.offset + done, p + done, n)) throw truncated(path_, file_->size(), t.offset + t.bytes);
        checksum.update(p + done, n);
        done += n;
    }
    if (checksum.value() != t.checksum) throw corrupt(path_, "tensor " + t.name + " fails its checksum");
}

void CheckpointReader::read_into(std::string_view name, DType dtype, std::span<const std::int64_t> shape,
                                 void* dst) const {
    const StoredTensor& t = find(name);
    if (t.dtype != dtype)
        throw UserError(
            "checkpoint " + quoted(path_) + " holds tensor " + t.name + " as " + std::string(dtype_name(t.dtype)) +
            " but the model expects " + std::string(dtype_name(dtype)) +
            ": the checkpoint was written by a different configuration; use the config it was trained with");
    if (!std::ranges::equal(t.shape, shape))
        throw UserError("checkpoint " + quoted(path_) + " holds tensor " + t.name + " of shape " +
                        format_shape(t.shape) + " but the model expects " + format_shape(shape) +
                        ": the checkpoint was written for a different model shape; use the config it was trained with");
    read_into(name, dst, t.bytes);
}

std::optional<std::uint32_t> stored_format_version(const fs::path& file) {
    Header header{};
    try {
        if (!ReadOnlyFile(file).read_at(0, &header, sizeof header)) return std::nullopt;
    } catch (const UserError&) {
        return std::nullopt;
    }
    if (std::memcmp(header.magic, kCheckpointMagic, sizeof kCheckpointMagic) != 0) return std::nullopt;
    return header.format_version;
}

}  // namespace adacc
