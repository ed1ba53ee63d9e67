// Checkpoint files (round trip, alignment, damage detection, run-folder helpers, crash safety)
// and llm.c model import/export.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <array>
#include <bit>
#include <chrono>
#include <csignal>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "models/gpt_params.h"
#include "src/common/errors.h"
#include "src/config/config.h"
#include "src/io/checkpoint_folder.h"
#include "src/io/llmc_model_io.h"
#include "src/train/training_state.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

namespace fs = std::filesystem;

template <typename T>
std::vector<T> random_values(std::size_t count, std::uint32_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<T> values(count);
    for (auto& v : values) {
        const std::uint64_t bits = rng();
        std::memcpy(&v, &bits, sizeof v);  // arbitrary bit patterns, NaNs included: must survive exactly
    }
    return values;
}

template <typename T>
std::vector<T> read_tensor(const CheckpointReader& reader, const std::string& name, std::size_t count) {
    std::vector<T> out(count);
    reader.read_into(name, out.data(), count * sizeof(T));
    return out;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

nlohmann::json small_meta(std::int64_t step) { return {{"step", step}}; }

void write_small_checkpoint(const fs::path& file, std::int64_t step) {
    const std::vector<float> w = random_values<float>(100, static_cast<std::uint32_t>(step));
    write_checkpoint(file, small_meta(step), {{"w", DType::f32, {10, 10}, w.data()}});
}

void flip_byte(const fs::path& file, std::uint64_t offset) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
}

// ---------------------------------------------------------------------------------------------

TEST(Checkpoint, RoundTripsTensorsOfSeveralDtypesBitExactAndMetadata) {
    const auto file = test::scratch_dir("ckpt") / "a.bin";
    const auto f32 = random_values<float>(3 * 5 * 7, 1);
    const auto u8 = random_values<std::uint8_t>(13, 2);
    const auto i32 = random_values<std::int32_t>(2 * 9, 3);
    const auto bf16 = random_values<std::uint16_t>(33, 4);
    const auto i64 = random_values<std::int64_t>(1, 5);
    const auto u64 = random_values<std::uint64_t>(4, 6);
    RunConfig config = config_from_toml_string("[model]\npreset = \"gpt-micro\"\n[training]\nseq_len = 8\n", "t");
    const nlohmann::json meta = {
        {"step", 1234},
        {"rng", {0xfedcba9876543210ull, 0x0123456789abcdefull, 18446744073709551615ull}},
        {"data", {{"shard", 2}, {"position", 12345678901ll}}},
        {kCheckpointConfigKey, to_toml(config)},
        {"note", "unicode \xce\xbb and \"quotes\""},
    };
    write_checkpoint(file, meta,
                     {
                         {"f32", DType::f32, {3, 5, 7}, f32.data()},
                         {"u8", DType::u8, {13}, u8.data()},
                         {"i32", DType::i32, {2, 9}, i32.data()},
                         {"bf16", DType::bf16, {3, 11}, bf16.data()},
                         {"scalar_i64", DType::i64, {}, i64.data()},
                         {"u64", DType::u64, {4}, u64.data()},
                         {"empty", DType::f32, {0, 4}, nullptr},
                     });
    EXPECT_FALSE(fs::exists(file.string() + ".tmp"));

    const CheckpointReader reader(file);
    EXPECT_EQ(reader.meta(), meta);
    EXPECT_EQ(reader.meta()["rng"][2].get<std::uint64_t>(), 18446744073709551615ull);
    ASSERT_EQ(reader.tensors().size(), 7u);
    EXPECT_TRUE(same_bits(read_tensor<float>(reader, "f32", f32.size()), f32));
    EXPECT_TRUE(same_bits(read_tensor<std::uint8_t>(reader, "u8", u8.size()), u8));
    EXPECT_TRUE(same_bits(read_tensor<std::int32_t>(reader, "i32", i32.size()), i32));
    EXPECT_TRUE(same_bits(read_tensor<std::uint16_t>(reader, "bf16", bf16.size()), bf16));
    EXPECT_TRUE(same_bits(read_tensor<std::int64_t>(reader, "scalar_i64", 1), i64));
    EXPECT_TRUE(same_bits(read_tensor<std::uint64_t>(reader, "u64", u64.size()), u64));
    EXPECT_TRUE(read_tensor<float>(reader, "empty", 0).empty());

    EXPECT_TRUE(reader.has("bf16"));
    EXPECT_FALSE(reader.has("nope"));
    EXPECT_EQ(reader.dtype("bf16"), DType::bf16);
    EXPECT_EQ(reader.shape("f32"), (std::vector<std::int64_t>{3, 5, 7}));
    EXPECT_TRUE(reader.shape("scalar_i64").empty());

    const std::array<std::int64_t, 3> shape{3, 5, 7};
    std::vector<float> checked(f32.size());
    reader.read_into("f32", DType::f32, shape, checked.data());
    EXPECT_TRUE(same_bits(checked, f32));

    const RunConfig stored = checkpoint_config(reader);
    EXPECT_EQ(to_toml(stored), to_toml(config));
}

TEST(Checkpoint, EveryTensorStartsOn64Bytes) {
    const auto file = test::scratch_dir("ckpt") / "aligned.bin";
    // Odd lengths (1, 8, 15, ... bytes) so that no tensor ends on a boundary by luck.
    const std::vector<std::string> names = {"t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"};
    std::vector<std::vector<std::uint8_t>> data;
    std::vector<CheckpointTensor> tensors;
    for (std::size_t i = 0; i < names.size(); ++i) data.push_back(random_values<std::uint8_t>(1 + i * 7, i));
    for (std::size_t i = 0; i < names.size(); ++i)
        tensors.push_back({names[i], DType::u8, {static_cast<std::int64_t>(data[i].size())}, data[i].data()});
    write_checkpoint(file, {{"odd length metadata", std::string(37, 'x')}}, tensors);

    const CheckpointReader reader(file);
    for (const auto& t : reader.tensors()) EXPECT_EQ(t.offset % 64, 0u) << t.name;
    for (std::size_t i = 0; i < names.size(); ++i)
        EXPECT_TRUE(same_bits(read_tensor<std::uint8_t>(reader, names[i], data[i].size()), data[i]));

    std::ifstream in(file, std::ios::binary);
    char magic[8];
    in.read(magic, 8);
    EXPECT_EQ(std::string(magic, 8), "ADACCKPT");
}

TEST(Checkpoint, TruncatedFileIsAClearError) {
    const auto file = test::scratch_dir("ckpt") / "cut.bin";
    write_small_checkpoint(file, 1);
    const auto full = fs::file_size(file);
    fs::resize_file(file, full - 100);
    auto message = test::user_error_of([&] { CheckpointReader reader(file); });
    EXPECT_NE(message.find("is truncated (" + std::to_string(full - 100) + " of " + std::to_string(full) + " bytes)"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("not completely written"), std::string::npos) << message;

    fs::resize_file(file, 20);
    message = test::user_error_of([&] { CheckpointReader reader(file); });
    EXPECT_NE(message.find("is truncated (20 of 64 bytes)"), std::string::npos) << message;
}

TEST(Checkpoint, CorruptionIsDetected) {
    const auto dir = test::scratch_dir("ckpt");
    const auto file = dir / "c.bin";
    write_small_checkpoint(file, 1);
    const CheckpointReader clean(file);
    const auto data_offset = clean.tensors()[0].offset;

    flip_byte(file, data_offset + 17);
    const CheckpointReader damaged(file);  // opening checks the index only
    std::vector<float> w(100);
    auto message = test::user_error_of([&] { damaged.read_into("w", w.data(), w.size() * sizeof(float)); });
    EXPECT_NE(message.find("is corrupt (tensor w fails its checksum)"), std::string::npos) << message;

    write_small_checkpoint(file, 1);
    flip_byte(file, 64 + 3);  // inside the metadata
    message = test::user_error_of([&] { CheckpointReader reader(file); });
    EXPECT_NE(message.find("is corrupt (its metadata or tensor table fails its checksum)"), std::string::npos)
        << message;

    std::ofstream(dir / "text.bin") << "this is not a checkpoint at all, just some text that is long enough";
    message = test::user_error_of([&] { CheckpointReader reader(dir / "text.bin"); });
    EXPECT_NE(message.find("is not an adacc checkpoint"), std::string::npos) << message;
}

TEST(Checkpoint, WrongShapeDtypeSizeAndNameSayWhichModelItBelongsTo) {
    const auto file = test::scratch_dir("ckpt") / "model.bin";
    const std::vector<float> qkvw(2 * 192 * 64, 0.5f);
    write_checkpoint(file, small_meta(7), {{"qkvw", DType::f32, {2, 192, 64}, qkvw.data()}});
    const CheckpointReader reader(file);

    std::vector<float> dst(4 * 384 * 128);
    const std::array<std::int64_t, 3> expected{4, 384, 128};
    auto message = test::user_error_of([&] { reader.read_into("qkvw", DType::f32, expected, dst.data()); });
    EXPECT_EQ(message, "checkpoint '" + file.string() +
                           "' holds tensor qkvw of shape [2,192,64] but the model expects [4,384,128]: the checkpoint "
                           "was written for a different model shape; use the config it was trained with");

    const std::array<std::int64_t, 3> same{2, 192, 64};
    message = test::user_error_of([&] { reader.read_into("qkvw", DType::bf16, same, dst.data()); });
    EXPECT_NE(message.find("holds tensor qkvw as f32 but the model expects bf16"), std::string::npos) << message;

    message = test::user_error_of([&] { reader.read_into("qkvw", dst.data(), 12); });
    EXPECT_NE(message.find("holds tensor qkvw of 98304 bytes (f32 [2,192,64]) but the model expects 12 bytes"),
              std::string::npos)
        << message;

    message = test::user_error_of([&] { reader.read_into("fcw", dst.data(), 12); });
    EXPECT_NE(message.find("holds no tensor 'fcw' (it holds: qkvw)"), std::string::npos) << message;
}

TEST(Checkpoint, MissingConfigInMetadataIsExplained) {
    const auto file = test::scratch_dir("ckpt") / "noconfig.bin";
    write_small_checkpoint(file, 3);
    const auto message = test::user_error_of([&] { checkpoint_config(CheckpointReader(file)); });
    EXPECT_NE(message.find("holds no config"), std::string::npos) << message;
}

TEST(Checkpoint, InvalidTensorListsAreProgrammingErrors) {
    const auto file = test::scratch_dir("ckpt") / "bad.bin";
    const float x = 1;
    EXPECT_THROW(write_checkpoint(file, {}, {{"a", DType::f32, {1}, &x}, {"a", DType::f32, {1}, &x}}),
                 std::invalid_argument);
    EXPECT_THROW(write_checkpoint(file, {}, {{"a", DType::f32, {-1}, &x}}), std::invalid_argument);
    EXPECT_FALSE(fs::exists(file));
}

// ---------------------------------------------------------------------------------------------
// Run folders.

TEST(RunDir, CheckpointNamesEncodeTheStep) {
    const fs::path run = "runs/x";
    EXPECT_EQ(checkpoint_path(run, 5000), fs::path("runs/x/checkpoints/ckpt_00005000.bin"));
    EXPECT_EQ(checkpoint_path(run, 123456789), fs::path("runs/x/checkpoints/ckpt_123456789.bin"));
    EXPECT_EQ(checkpoint_step("runs/x/checkpoints/ckpt_00005000.bin"), 5000);
    EXPECT_EQ(checkpoint_step("ckpt_123456789.bin"), 123456789);
    EXPECT_FALSE(checkpoint_step("ckpt_00005000.bin.tmp"));
    EXPECT_FALSE(checkpoint_step("ckpt_.bin"));
    EXPECT_FALSE(checkpoint_step("ckpt_12a.bin"));
    EXPECT_FALSE(checkpoint_step("model.bin"));
}

TEST(RunDir, NewestCompleteCheckpointSkipsTmpAndTruncatedNewerFiles) {
    const auto run = test::scratch_dir("run");
    EXPECT_FALSE(newest_complete_checkpoint(run));
    write_small_checkpoint(checkpoint_path(run, 100), 100);
    write_small_checkpoint(checkpoint_path(run, 200), 200);
    EXPECT_EQ(newest_complete_checkpoint(run), checkpoint_path(run, 200));

    write_small_checkpoint(checkpoint_path(run, 300), 300);
    fs::resize_file(checkpoint_path(run, 300), fs::file_size(checkpoint_path(run, 300)) / 2);
    write_small_checkpoint(checkpoint_path(run, 400), 400);
    fs::rename(checkpoint_path(run, 400), checkpoint_path(run, 400).string() + ".x1Y2z3.tmp");  // an unfinished write

    std::vector<std::string> rejected;
    EXPECT_EQ(newest_complete_checkpoint(run, &rejected), checkpoint_path(run, 200));
    ASSERT_EQ(rejected.size(), 1u);
    EXPECT_NE(rejected[0].find("ckpt_00000300.bin' is truncated"), std::string::npos) << rejected[0];
    EXPECT_EQ(CheckpointReader(*newest_complete_checkpoint(run)).meta()["step"], 200);
}

TEST(RunDir, StepsAreOrderedNumericallyNotByName) {
    const auto run = test::scratch_dir("run");
    write_small_checkpoint(checkpoint_path(run, 99999999), 1);
    write_small_checkpoint(checkpoint_path(run, 100000000), 2);
    EXPECT_EQ(newest_complete_checkpoint(run), checkpoint_path(run, 100000000));
}

TEST(RunDir, PruneKeepsTheNewestKAndTheOneJustWritten) {
    const auto run = test::scratch_dir("run");
    for (int step = 1; step <= 6; ++step) write_small_checkpoint(checkpoint_path(run, step * 10), step);
    // An interrupted write's temporary (AtomicFileWriter's name) goes; files adacc did not make stay,
    // a user's own "<checkpoint>.tmp" among them.
    std::ofstream(checkpoint_path(run, 70).string() + ".a1B2c3.tmp") << "stale";
    std::ofstream(checkpoint_path(run, 70).string() + ".tmp") << "not ours";
    std::ofstream(checkpoint_dir(run) / "notes.txt") << "not ours";

    prune_checkpoints(run, 3, checkpoint_path(run, 60));
    for (int step = 1; step <= 6; ++step) EXPECT_EQ(fs::exists(checkpoint_path(run, step * 10)), step >= 4) << step;
    EXPECT_FALSE(fs::exists(checkpoint_path(run, 70).string() + ".a1B2c3.tmp"));
    EXPECT_TRUE(fs::exists(checkpoint_path(run, 70).string() + ".tmp"));
    EXPECT_TRUE(fs::exists(checkpoint_dir(run) / "notes.txt"));

    // Resumed from an older step: the file just written survives even though it is not newest.
    write_small_checkpoint(checkpoint_path(run, 15), 15);
    prune_checkpoints(run, 1, checkpoint_path(run, 15));
    EXPECT_TRUE(fs::exists(checkpoint_path(run, 60)));
    EXPECT_TRUE(fs::exists(checkpoint_path(run, 15)));
    EXPECT_FALSE(fs::exists(checkpoint_path(run, 40)));
    EXPECT_FALSE(fs::exists(checkpoint_path(run, 50)));
}

TEST(RunDir, OpenCheckpointAcceptsAFileARunFolderOrItsCheckpointsFolder) {
    const auto run = test::scratch_dir("run");
    write_small_checkpoint(checkpoint_path(run, 5), 5);
    write_small_checkpoint(checkpoint_path(run, 8), 8);
    EXPECT_EQ(open_checkpoint(checkpoint_path(run, 5))->path(), checkpoint_path(run, 5));
    EXPECT_EQ(open_checkpoint(run)->path(), checkpoint_path(run, 8));
    EXPECT_EQ(open_checkpoint(checkpoint_dir(run))->path(), checkpoint_path(run, 8));
    EXPECT_NE(test::user_error_of([&] { open_checkpoint(run / "missing"); }).find("does not exist"), std::string::npos);
    const auto empty = test::scratch_dir("run");
    EXPECT_NE(test::user_error_of([&] { open_checkpoint(empty); }).find("no complete checkpoint"), std::string::npos);
}

TEST(RunDir, AnAbandonedWriteLeavesThePreviousFileIntact) {
    const auto file = test::scratch_dir("ckpt") / "keep.bin";
    write_small_checkpoint(file, 1);
    {
        AtomicFileWriter writer(file);
        writer.write("garbage", 7);
    }  // destroyed without commit(), as when an exception unwinds a save
    EXPECT_FALSE(fs::exists(file.string() + ".tmp"));
    EXPECT_EQ(CheckpointReader(file).meta()["step"], 1);
}

// A process killed at a random moment while saving over and over leaves a file that opens and
// whose data verifies: the previous complete checkpoint or the new one, never a mix.
TEST(RunDir, SigkillDuringWritesNeverLeavesAPartialCheckpoint) {
    const auto file = test::scratch_dir("ckpt") / "killed.bin";
    const std::vector<float> big(4 << 20, 1.0f);  // 16 MiB per save
    write_checkpoint(file, small_meta(0), {{"w", DType::f32, {4 << 20}, big.data()}});
    for (const int delay_ms : {5, 30, 80}) {
        const pid_t child = fork();
        ASSERT_GE(child, 0);
        if (child == 0) {
            for (std::int64_t step = 1;; ++step)
                write_checkpoint(file, small_meta(step), {{"w", DType::f32, {4 << 20}, big.data()}});
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        kill(child, SIGKILL);
        waitpid(child, nullptr, 0);
        const CheckpointReader reader(file);
        std::vector<float> w(big.size());
        EXPECT_NO_THROW(reader.read_into("w", w.data(), w.size() * sizeof(float)));
        EXPECT_TRUE(same_bits(w, big));
    }
}

// ---------------------------------------------------------------------------------------------
// llm.c model files.

GPTConfig micro() { return gpt_preset("gpt-micro").value(); }  // V=97 -> Vp=128, L=2, C=16

std::array<std::int32_t, 256> llmc_header(const GPTConfig& c, std::int32_t version) {
    std::array<std::int32_t, 256> h{};
    h[0] = kLlmcModelMagic;
    h[1] = version;
    h[2] = c.max_seq_len;
    h[3] = c.vocab_size;
    h[4] = c.n_layer;
    h[5] = c.n_head;
    h[6] = c.n_embd;
    h[7] = c.padded_vocab_size();
    return h;
}

template <typename T>
void write_raw(const fs::path& file, const std::array<std::int32_t, 256>& header, const std::vector<T>& body) {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), sizeof header);
    out.write(reinterpret_cast<const char*>(body.data()), static_cast<std::streamsize>(body.size() * sizeof(T)));
}

TEST(LlmcModel, Version3RoundTripsBitExact) {
    const auto file = test::scratch_dir("llmc") / "model.bin";
    const GPTConfig config = micro();
    const std::size_t count = ParameterLayout(config).total();
    const auto params = random_values<float>(count, 11);
    save_llmc_model(file, config, params.data());

    EXPECT_EQ(fs::file_size(file), 1024 + count * 4);
    std::array<std::int32_t, 256> header{};
    std::ifstream(file, std::ios::binary).read(reinterpret_cast<char*>(header.data()), sizeof header);
    EXPECT_EQ(header, llmc_header(config, 3));

    const GPTConfig read = read_llmc_header(file);
    EXPECT_EQ(read.n_layer, config.n_layer);
    EXPECT_EQ(read.n_embd, config.n_embd);
    EXPECT_EQ(read.n_head, config.n_head);
    EXPECT_EQ(read.vocab_size, config.vocab_size);
    EXPECT_EQ(read.max_seq_len, config.max_seq_len);
    std::vector<float> loaded(count);
    load_llmc_model(file, config, loaded.data());
    EXPECT_TRUE(same_bits(loaded, params));
}

TEST(LlmcModel, Version5Bf16IsWidenedToFp32Exactly) {
    const auto file = test::scratch_dir("llmc") / "bf16.bin";
    const GPTConfig config = micro();
    const std::size_t count = ParameterLayout(config).total();
    // Known values first (1, -2.5, 0.15625, the smallest normal, +inf), then arbitrary patterns.
    std::vector<std::uint16_t> bf16 = {0x3F80, 0xC020, 0x3E20, 0x0080, 0x7F80};
    const std::vector<float> known = {1.0f, -2.5f, 0.15625f, std::numeric_limits<float>::min(),
                                      std::numeric_limits<float>::infinity()};
    const auto rest = random_values<std::uint16_t>(count - bf16.size(), 12);
    bf16.insert(bf16.end(), rest.begin(), rest.end());
    write_raw(file, llmc_header(config, 5), bf16);

    std::vector<float> loaded(count);
    load_llmc_model(file, config, loaded.data());
    for (std::size_t i = 0; i < known.size(); ++i) EXPECT_EQ(loaded[i], known[i]) << i;
    for (std::size_t i = 0; i < count; ++i)
        ASSERT_EQ(std::bit_cast<std::uint32_t>(loaded[i]), std::uint32_t{bf16[i]} << 16) << i;
}

TEST(LlmcModel, HeaderProblemsNameTheFileAndTheFix) {
    const auto dir = test::scratch_dir("llmc");
    const GPTConfig config = micro();
    const std::size_t count = ParameterLayout(config).total();
    const std::vector<float> params(count, 0.25f);
    std::vector<float> dst(count);
    auto load = [&](const fs::path& file, const GPTConfig& expected) {
        return test::user_error_of([&] { load_llmc_model(file, expected, dst.data()); });
    };

    auto header = llmc_header(config, 3);
    header[0] = 20240520;
    write_raw(dir / "shard.bin", header, params);
    auto message = load(dir / "shard.bin", config);
    EXPECT_NE(message.find("is not an llm.c model file: its magic number is 20240520, expected 20240326; it is an "
                           "llm.c token shard"),
              std::string::npos)
        << message;

    header = llmc_header(config, 4);
    write_raw(dir / "v4.bin", header, params);
    message = load(dir / "v4.bin", config);
    EXPECT_NE(message.find("is llm.c model version 4; adacc reads versions 3 (fp32) and 5 (bf16)"), std::string::npos)
        << message;

    write_raw(dir / "short.bin", llmc_header(config, 3), std::vector<float>(count - 1, 0.0f));
    message = load(dir / "short.bin", config);
    EXPECT_NE(message.find("is truncated: it has " + std::to_string(1024 + (count - 1) * 4) + " bytes"),
              std::string::npos)
        << message;

    write_raw(dir / "long.bin", llmc_header(config, 5), std::vector<std::uint16_t>(count + 3, 0));
    message = load(dir / "long.bin", config);
    EXPECT_NE(message.find("has 6 bytes more than a version-5 model"), std::string::npos) << message;

    write_raw(dir / "ok.bin", llmc_header(config, 3), params);
    GPTConfig other = config;
    other.n_layer = 3;
    message = load(dir / "ok.bin", other);
    EXPECT_NE(message.find("holds a model with n_layer=2, n_embd=16, n_head=2, vocab_size=97, max_seq_len=16, but the "
                           "config expects n_layer=3"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("set the [model] section to the file's shape"), std::string::npos) << message;

    header = llmc_header(config, 3);
    header[7] = 100;
    write_raw(dir / "pad.bin", header, params);
    message = test::user_error_of([&] { read_llmc_header(dir / "pad.bin"); });
    EXPECT_NE(message.find("pads its vocabulary of 97 to 100 rows, but adacc pads to a multiple of 128 (128)"),
              std::string::npos)
        << message;

    std::ofstream(dir / "tiny.bin") << "abc";
    message = test::user_error_of([&] { read_llmc_header(dir / "tiny.bin"); });
    EXPECT_NE(message.find("fewer than the 1024-byte header"), std::string::npos) << message;

    message = test::user_error_of([&] { read_llmc_header(dir / "absent.bin"); });
    EXPECT_NE(message.find("cannot open '" + (dir / "absent.bin").string() + "'"), std::string::npos) << message;
}

TEST(LlmcModel, ACheckpointPassedAsAModelIsRecognised) {
    const auto file = test::scratch_dir("llmc") / "ckpt.bin";
    std::vector<float> w(300, 1.0f);
    write_checkpoint(file, small_meta(1), {{"w", DType::f32, {300}, w.data()}});
    const auto message = test::user_error_of([&] { read_llmc_header(file); });
    EXPECT_NE(message.find("it is an adacc checkpoint"), std::string::npos) << message;
}

}  // namespace
}  // namespace adacc
