// Fuzz: mutated safetensors files and Hugging Face GPT-2 folders. In process, 2000 mutations of a
// file of F32, F16, BF16 and I32 tensors through SafetensorsFile, and 600 of a tiny GPT-2 folder
// (its model.safetensors or its config.json) through load_hf_gpt2; then 30 mutated folders through
// the real `adacc train --init-from`. Mutations: random bit flips anywhere or in the header,
// truncations, appended bytes, overwritten ranges, and crafted headers with a valid length (a
// number or a dtype replaced). Every read must end in a UserError or succeed on a file that is
// valid: its tensors tile the data exactly and each read gives the bytes the file holds there; a
// mutation of the data alone must succeed with the original table; and a folder that loads must
// give the original parameters wherever its data is the original's. The CLI runs must exit 0 or 2.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <random>

#include "data/token_shard.h"
#include "models/gpt_params.h"
#include "src/common/errors.h"
#include "src/engine/gpt_model.h"
#include "src/io/hf_gpt2.h"
#include "src/io/safetensors.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

namespace fs = std::filesystem;

void write_bytes(const fs::path& file, const std::string& bytes) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

std::uint64_t header_length(const std::string& bytes) {
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    return n;
}

// Where the data of a well-formed file starts.
std::size_t data_start(const std::string& original) { return 8 + header_length(original); }

enum class Kind { flips, header_flip, truncate, append, overwrite, number, dtype, data_only, count };

// `original` mutated by kind: the header-level kinds rewrite the length prefix to stay valid.
std::string mutate(const std::string& original, Kind kind, std::mt19937& gen) {
    std::string bytes = original;
    const std::size_t start = data_start(original);
    const auto flip = [&](std::size_t lo, std::size_t hi) {
        const std::size_t at = lo + gen() % (hi - lo);
        bytes[at] = static_cast<char>(bytes[at] ^ (1 << (gen() % 8)));
    };
    std::string header = original.substr(8, start - 8);
    const auto with_header = [&](const std::string& text) {
        const std::uint64_t n = text.size();
        return std::string(reinterpret_cast<const char*>(&n), 8) + text + original.substr(start);
    };
    switch (kind) {
        case Kind::flips:
            for (int k = 1 + gen() % 8; k > 0; --k) flip(0, bytes.size());
            break;
        case Kind::header_flip: flip(0, start); break;
        case Kind::truncate: bytes.resize(gen() % bytes.size()); break;
        case Kind::append: bytes.append(1 + gen() % 200, static_cast<char>(gen())); break;
        case Kind::overwrite: {
            const std::size_t at = gen() % bytes.size(), n = std::min<std::size_t>(1 + gen() % 64, bytes.size() - at);
            for (std::size_t k = 0; k < n; ++k) bytes[at + k] = static_cast<char>(gen());
            break;
        }
        case Kind::number: {  // a run of digits replaced
            std::size_t at = gen() % header.size();
            while (at < header.size() && !std::isdigit(static_cast<unsigned char>(header[at]))) ++at;
            if (at == header.size()) return with_header(header);
            std::size_t end = at;
            while (end < header.size() && std::isdigit(static_cast<unsigned char>(header[end]))) ++end;
            static const char* const numbers[] = {
                "0",   "1",     "7",   "-1", "1.5", "4096", "18446744073709551615", "18446744073709551616",
                "1e3", "\"8\"", "null"};
            header.replace(at, end - at, numbers[gen() % std::size(numbers)]);
            return with_header(header);
        }
        case Kind::dtype: {
            static const char* const dtypes[] = {"\"F32\"", "\"F16\"",  "\"BF16\"", "\"I8\"",
                                                 "\"F64\"", "\"BOOL\"", "\"f32\"",  "7"};
            const std::size_t at = header.find("\"dtype\":", gen() % header.size());
            const std::size_t found = at == std::string::npos ? header.find("\"dtype\":") : at;
            const std::size_t value = found + 8, end = header.find_first_of(",}", value);
            header.replace(value, end - value, dtypes[gen() % std::size(dtypes)]);
            return with_header(header);
        }
        case Kind::data_only:
            if (bytes.size() > start) flip(start, bytes.size());
            break;
        case Kind::count: break;
    }
    return bytes;
}

struct ReadOutcome {
    bool accepted = false;
    std::vector<SafetensorsTensor> table;
};

// Opens and reads every tensor; on success checks that the file is one the format allows and that
// each read gave the bytes the file holds at that tensor's place.
ReadOutcome read_and_check(const fs::path& file, const std::string& bytes, const std::string& what) {
    ReadOutcome outcome;
    try {
        const SafetensorsFile st(file);
        std::uint64_t end = 8 + header_length(bytes);
        for (const auto& t : st.tensors()) {
            EXPECT_EQ(t.offset, end) << what << ": tensor '" << t.name << "' does not follow the previous one";
            EXPECT_EQ(t.bytes, t.numel() * dtype_size(t.dtype)) << what << ": " << t.name;
            std::string got(t.bytes, '\0');
            st.read(t, got.data());
            EXPECT_EQ(got, bytes.substr(t.offset, t.bytes)) << what << ": tensor '" << t.name << "' read other bytes";
            if (t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16) {
                std::vector<float> values(t.numel());
                st.read_f32(t, values.data());
            }
            end = t.offset + t.bytes;
        }
        EXPECT_EQ(end, bytes.size()) << what << ": bytes after the last tensor were accepted";
        outcome.accepted = true;
        outcome.table = st.tensors();
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << what << ": " << e.what();
    }
    return outcome;
}

bool same_table(const std::vector<SafetensorsTensor>& a, const std::vector<SafetensorsTensor>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
            a[i].offset != b[i].offset)
            return false;
    return true;
}

class SafetensorsFuzz : public ::testing::Test {
protected:
    void SetUp() override { dir = test::scratch_dir("safetensors_fuzz"); }
    fs::path dir;
};

TEST_F(SafetensorsFuzz, MutatedFilesAreRefusedOrReadAsTheyAre) {
    const fs::path source = dir / "source.safetensors";
    {
        std::mt19937 gen(1);
        std::vector<std::uint32_t> words(64 + 24 + 12 + 4);
        for (auto& w : words) w = gen();
        SafetensorsWriter out(source,
                              {{"a.weight", DType::f32, {8, 8}},
                               {"h", DType::f16, {4, 12}},
                               {"b", DType::bf16, {24}},
                               {"ids", DType::i32, {4}},
                               {"none", DType::f32, {0}}},
                              {{"format", "pt"}});
        const char* p = reinterpret_cast<const char*>(words.data());
        out.write_next(p, 256);
        out.write_next(p + 256, 96);
        out.write_next(p + 352, 48);
        out.write_next(p + 400, 16);
        out.write_next(nullptr, 0);
        out.commit();
    }
    const std::string original = test::read_bytes(source);
    const std::vector<SafetensorsTensor> original_table = SafetensorsFile(source).tensors();
    std::mt19937 gen(2026);
    int accepted = 0;
    const int count = test::kSanitized ? 600 : 2000;
    for (int i = 0; i < count; ++i) {
        const Kind kind = static_cast<Kind>(i % static_cast<int>(Kind::count));
        const std::string bytes = mutate(original, kind, gen);
        const fs::path file = dir / "mutated.safetensors";
        write_bytes(file, bytes);
        const std::string what = "mutation " + std::to_string(i) + " (kind " + std::to_string(i % 8) + ")";
        const ReadOutcome outcome = read_and_check(file, bytes, what);
        if (kind == Kind::data_only) {
            EXPECT_TRUE(outcome.accepted) << what << ": a file whose data alone changed is still valid";
            EXPECT_TRUE(same_table(outcome.table, original_table)) << what;
        }
        accepted += outcome.accepted;
    }
    std::printf("%d of %d mutated files accepted (valid files: their data or padding changed)\n", accepted, count);
    EXPECT_LT(accepted, count / 2);
}

// A tiny GPT-2 folder (gpt-micro's shape, random weights) exported by save_hf_gpt2.
class HfFolderFuzz : public SafetensorsFuzz {
protected:
    void SetUp() override {
        SafetensorsFuzz::SetUp();
        shape = gpt_preset("gpt-micro").value();
        GPTModel model = GPTModel::for_inference(shape, 1, 1);
        model.init_weights(11);
        params.assign(model.params(), model.params() + model.num_params());
        save_hf_gpt2(dir / "original", shape, params.data(), "");
    }
    GPTConfig shape;
    std::vector<float> params;
};

TEST_F(HfFolderFuzz, MutatedFoldersAreRefusedOrLoadTheirOwnWeights) {
    const std::string weights = test::read_bytes(dir / "original" / "model.safetensors");
    const std::string config = test::read_bytes(dir / "original" / "config.json");
    const std::size_t start = data_start(weights);
    std::mt19937 gen(77);
    int accepted = 0, refused = 0;
    const int count = test::kSanitized ? 200 : 600;
    for (int i = 0; i < count; ++i) {
        const fs::path folder = dir / "mutated";
        fs::remove_all(folder);
        fs::copy(dir / "original", folder);
        const bool mutate_config = i % 4 == 3;
        std::string bytes;
        if (mutate_config) {
            bytes = config;
            for (int k = 1 + gen() % 3; k > 0; --k) bytes[gen() % bytes.size()] ^= static_cast<char>(1 << (gen() % 8));
            write_bytes(folder / "config.json", bytes);
        } else {
            bytes = mutate(weights, static_cast<Kind>(gen() % static_cast<int>(Kind::count)), gen);
            write_bytes(folder / "model.safetensors", bytes);
        }
        const std::string what = "folder mutation " + std::to_string(i);
        std::vector<float> loaded(params.size(), -1.0f);
        try {
            load_hf_gpt2(folder, shape, loaded.data());
        } catch (const UserError&) {
            ++refused;
            continue;
        }
        ++accepted;
        // Loaded: the weights it gave are the original ones unless its data changed.
        const bool same_data = mutate_config || (bytes.size() == weights.size() && data_start(bytes) == start &&
                                                 bytes.compare(start, std::string::npos, weights, start) == 0);
        if (same_data) {
            EXPECT_EQ(std::memcmp(loaded.data(), params.data(), params.size() * sizeof(float)), 0) << what;
        }
        if (mutate_config) {
            EXPECT_TRUE(same_shape(read_hf_gpt2(folder), shape)) << what;
        }
    }
    std::printf("folders: %d refused, %d accepted\n", refused, accepted);
    EXPECT_GT(refused, count / 3);
}

TEST_F(HfFolderFuzz, TrainInitFromAMutatedFolderExitsZeroOrTwo) {
    std::mt19937 gen(5);
    std::vector<std::uint16_t> tokens(2000);
    for (auto& t : tokens) t = static_cast<std::uint16_t>(gen() % shape.vocab_size);
    write_token_shard(dir / "train.bin", tokens);
    std::ofstream(dir / "run.toml") << "[model]\npreset = \"gpt-micro\"\n[training]\nbatch_size = 1\nseq_len = 8\n"
                                    << "steps = 1\nthreads = 1\n[checkpoint]\nevery = 0\n[data]\ntrain = \""
                                    << (dir / "train.bin").string() << "\"\n";
    const std::string weights = test::read_bytes(dir / "original" / "model.safetensors");
    int refused = 0;
    for (int i = 0; i < 30; ++i) {
        const fs::path folder = dir / ("cli_" + std::to_string(i));
        fs::copy(dir / "original", folder);
        write_bytes(folder / "model.safetensors",
                    mutate(weights, static_cast<Kind>(i % static_cast<int>(Kind::count)), gen));
        const test::ProcessResult r =
            test::run_adacc("train --config " + (dir / "run.toml").string() + " --init-from " + folder.string() +
                            " --set logging.run_dir=" + (dir / ("run_" + std::to_string(i))).string());
        ASSERT_TRUE(r.status == 0 || r.status == 2) << "mutation " << i << ": status " << r.status << "\n" << r.output;
        if (r.status == 2) {
            EXPECT_NE(r.output.find("error: "), std::string::npos) << r.output;
            ++refused;
        }
    }
    EXPECT_GT(refused, 10);
}

}  // namespace
}  // namespace adacc
