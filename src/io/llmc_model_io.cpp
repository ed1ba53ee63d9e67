#include "src/io/llmc_model_io.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "data/token_shard.h"
#include "models/gpt_params.h"
#include "src/common/errors.h"
#include "src/common/file_io.h"
#include "src/io/checkpoint_file.h"

namespace adacc {

static_assert(std::endian::native == std::endian::little, "llm.c files are little-endian");

namespace {

namespace fs = std::filesystem;

constexpr std::size_t kHeaderInts = 256;
constexpr std::size_t kHeaderBytes = kHeaderInts * sizeof(std::int32_t);
constexpr std::size_t kChunkElements = std::size_t{1} << 20;

struct LlmcHeader {
    GPTConfig config;
    std::int32_t version = 0;
};

std::string describe_shape(const GPTConfig& c) {
    return "n_layer=" + std::to_string(c.n_layer) + ", n_embd=" + std::to_string(c.n_embd) +
           ", n_head=" + std::to_string(c.n_head) + ", vocab_size=" + std::to_string(c.vocab_size) +
           ", max_seq_len=" + std::to_string(c.max_seq_len);
}

// What a wrong first word suggests the file is instead.
std::string guess_file_kind(std::int32_t magic, const std::array<std::int32_t, kHeaderInts>& header) {
    if (magic == kTokenShardMagic) return "; it is an llm.c token shard, not a model";
    if (std::memcmp(header.data(), kCheckpointMagic, sizeof kCheckpointMagic) == 0)
        return "; it is an adacc checkpoint: pass it with --checkpoint";
    return "";
}

LlmcHeader read_header(const ReadOnlyFile& in, const fs::path& file) {
    std::array<std::int32_t, kHeaderInts> h{};
    if (!in.read_at(0, h.data(), kHeaderBytes))
        throw UserError(quoted(file) + " is not an llm.c model file: it has " + std::to_string(in.size()) +
                        " bytes, fewer than the 1024-byte header; pass a model file written by llm.c (e.g. "
                        "gpt2_124M.bin)");
    if (h[0] != kLlmcModelMagic)
        throw UserError(quoted(file) + " is not an llm.c model file: its magic number is " + std::to_string(h[0]) +
                        ", expected " + std::to_string(kLlmcModelMagic) + guess_file_kind(h[0], h));
    if (h[1] != kLlmcVersionFp32 && h[1] != kLlmcVersionBf16)
        throw UserError(quoted(file) + " is llm.c model version " + std::to_string(h[1]) +
                        "; adacc reads versions 3 (fp32) and 5 (bf16): export it again with llm.c's train_gpt2.py");
    LlmcHeader header;
    header.version = h[1];
    header.config.max_seq_len = h[2];
    header.config.vocab_size = h[3];
    header.config.n_layer = h[4];
    header.config.n_head = h[5];
    header.config.n_embd = h[6];
    header.config.dropout = 0.0f;
    if (const auto problem = header.config.validate())
        throw UserError(quoted(file) + " has an llm.c header adacc cannot use: " + *problem);
    if (h[7] != header.config.padded_vocab_size())
        throw UserError(quoted(file) + " pads its vocabulary of " + std::to_string(h[3]) + " to " +
                        std::to_string(h[7]) + " rows, but adacc pads to a multiple of 128 (" +
                        std::to_string(header.config.padded_vocab_size()) +
                        "); export it again with llm.c's default padding");
    return header;
}

void check_size(const ReadOnlyFile& in, const fs::path& file, const LlmcHeader& header, std::size_t param_count) {
    const std::uint64_t element_bytes = header.version == kLlmcVersionFp32 ? 4 : 2;
    const std::uint64_t expected = kHeaderBytes + param_count * element_bytes;
    if (in.size() < expected)
        throw UserError(quoted(file) + " is truncated: it has " + std::to_string(in.size()) + " bytes, but a version-" +
                        std::to_string(header.version) + " model with " + describe_shape(header.config) + " needs " +
                        std::to_string(expected) + "; download or export it again");
    if (in.size() > expected)
        throw UserError(quoted(file) + " has " + std::to_string(in.size() - expected) + " bytes more than a version-" +
                        std::to_string(header.version) + " model with " + describe_shape(header.config) + " (" +
                        std::to_string(expected) +
                        " bytes); it is not an llm.c model file of the shape its header claims");
}

float bf16_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

void read_bf16_params(const ReadOnlyFile& in, const fs::path& file, std::size_t count, float* params) {
    std::vector<std::uint16_t> chunk(std::min(count, kChunkElements));
    for (std::size_t done = 0; done < count;) {
        const std::size_t n = std::min(kChunkElements, count - done);
        if (!in.read_at(kHeaderBytes + done * 2, chunk.data(), n * 2))
            throw UserError(quoted(file) + " ended while reading its parameters; download or export it again");
        std::transform(chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n), params + done, bf16_to_float);
        done += n;
    }
}

}  // namespace

GPTConfig read_llmc_header(const fs::path& file) {
    const ReadOnlyFile in(file);
    const LlmcHeader header = read_header(in, file);
    check_size(in, file, header, ParameterLayout(header.config).total());
    return header.config;
}

void load_llmc_model(const fs::path& file, const GPTConfig& expected, float* params) {
    const ReadOnlyFile in(file);
    const LlmcHeader header = read_header(in, file);
    if (!same_shape(header.config, expected))
        throw UserError(quoted(file) + " holds a model with " + describe_shape(header.config) +
                        ", but the config expects " + describe_shape(expected) +
                        "; set the [model] section to the file's shape (e.g. preset = \"gpt-117m\" for "
                        "gpt2_124M.bin) or pass a file of the configured shape");
    const std::size_t count = ParameterLayout(expected).total();
    check_size(in, file, header, count);
    if (header.version == kLlmcVersionBf16) {
        read_bf16_params(in, file, count, params);
    } else if (!in.read_at(kHeaderBytes, params, count * sizeof(float))) {
        throw UserError(quoted(file) + " ended while reading its parameters; download or export it again");
    }
}

LlmcModelWritten save_llmc_model(const fs::path& file, const GPTConfig& config, const float* params,
                                 ExistingTarget existing) {
    std::array<std::int32_t, kHeaderInts> header{};
    header[0] = kLlmcModelMagic;
    header[1] = kLlmcVersionFp32;
    header[2] = config.max_seq_len;
    header[3] = config.vocab_size;
    header[4] = config.n_layer;
    header[5] = config.n_head;
    header[6] = config.n_embd;
    header[7] = config.padded_vocab_size();
    create_parent_folders(file);
    AtomicFileWriter out(file, existing);
    out.write(header.data(), kHeaderBytes);
    out.write(params, ParameterLayout(config).total() * sizeof(float));
    out.commit();
    return {out.path(), out.size()};
}

}  // namespace adacc
