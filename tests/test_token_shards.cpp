// Token shards (llm.c .bin format), the data loader over them, and `adacc prepare`'s corpus
// preparation. Only the round trip through the GPT-2 tokenizer needs ../shared/data.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <thread>

#include "data/corpus_preparer.h"
#include "data/dataloader.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "src/common/errors.h"
#include "tests/test_support.h"

extern char** environ;

namespace adacc {
namespace {

using Tokens = std::vector<std::uint16_t>;
using Batch = std::vector<std::int32_t>;

// The message of the UserError that `action` throws ("" if it throws none).
template <typename Action>
std::string user_error(Action&& action) {
    try {
        action();
    } catch (const UserError& error) {
        return error.what();
    }
    return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

// Tokens 0, 1, 2, ...: every position is its own id, so a window is identified by its first token.
Tokens counting_tokens(std::size_t count, std::uint16_t first = 0) {
    Tokens tokens(count);
    std::iota(tokens.begin(), tokens.end(), first);
    return tokens;
}

void write_raw_file(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_raw_file(const std::filesystem::path& path) {
    std::ifstream stream(path, std::ios::binary);
    std::ostringstream contents;
    contents << stream.rdbuf();
    return contents.str();
}

std::string shard_header(std::int32_t magic, std::int32_t version, std::int32_t count) {
    std::array<std::int32_t, 256> header{};
    header[0] = magic, header[1] = version, header[2] = count;
    return std::string(reinterpret_cast<const char*>(header.data()), sizeof(header));
}

// ---- shard format ----------------------------------------------------------------------------

TEST(TokenShard, WriteReadRoundTripInLlmcLayout) {
    const auto dir = test::scratch_dir("shard_roundtrip");
    Tokens tokens = counting_tokens(1000);
    tokens.push_back(65535);
    write_token_shard(dir / "a.bin", tokens);
    EXPECT_EQ(read_token_shard(dir / "a.bin"), tokens);

    const std::string bytes = read_raw_file(dir / "a.bin");
    ASSERT_EQ(bytes.size(), 1024 + 2 * tokens.size());
    EXPECT_EQ(bytes.substr(0, 1024), shard_header(20240520, 1, 1001));
    EXPECT_EQ(static_cast<unsigned char>(bytes[1024 + 2]), 1);  // token 1, little-endian
    EXPECT_FALSE(std::filesystem::exists(dir / "a.bin.tmp"));

    write_token_shard(dir / "empty.bin", {});
    EXPECT_TRUE(read_token_shard(dir / "empty.bin").empty());
}

TEST(TokenShard, ReadErrorsNameTheProblem) {
    const auto dir = test::scratch_dir("shard_errors");
    EXPECT_CONTAINS(user_error([&] { read_token_shard(dir / "missing.bin"); }),
                    "cannot open token shard '" + (dir / "missing.bin").string() + "': No such file or directory");

    write_raw_file(dir / "magic.bin", shard_header(12345, 1, 0));
    EXPECT_CONTAINS(user_error([&] { read_token_shard(dir / "magic.bin"); }),
                    "is not an llm.c token shard: magic 12345, expected 20240520; create shards with `adacc prepare`");

    write_raw_file(dir / "version.bin", shard_header(20240520, 2, 0));
    EXPECT_CONTAINS(user_error([&] { read_token_shard(dir / "version.bin"); }),
                    "is a version 2 token shard; only version 1 (uint16 tokens, GPT-2) is supported");

    write_raw_file(dir / "truncated.bin", shard_header(20240520, 1, 100) + std::string(150, 'x'));
    EXPECT_CONTAINS(user_error([&] { read_token_shard(dir / "truncated.bin"); }),
                    "is truncated: its header promises 100 tokens (1224 bytes), the file holds 1174 bytes");

    write_raw_file(dir / "long.bin", shard_header(20240520, 1, 1) + std::string(4, 'x'));
    EXPECT_CONTAINS(user_error([&] { read_token_shard(dir / "long.bin"); }),
                    "has 2 bytes after the 1 tokens its header promises");

    write_raw_file(dir / "short.bin", "hello");
    EXPECT_CONTAINS(user_error([&] { read_token_shard(dir / "short.bin"); }),
                    "is not an llm.c token shard: 5 bytes, shorter than the 1024-byte header");
}

TEST(TokenShard, ValidateTokensNamesTheShardAndTheBadId) {
    const Tokens tokens = {1, 2, 50256, 50257, 3};
    EXPECT_EQ(user_error([&] { validate_tokens(tokens, 50258, "x.bin"); }), "");
    EXPECT_CONTAINS(user_error([&] { validate_tokens(tokens, 50257, "x.bin"); }),
                    "'x.bin' holds token id 50257 at position 3, but the vocabulary has 50257 tokens: the shard was "
                    "made with a different tokenizer or model.vocab_size is too small");
}

TEST(TokenShard, PatternExpandsToSortedFiles) {
    const auto dir = test::scratch_dir("shard_glob");
    for (const char* name : {"train_000002.bin", "train_000000.bin", "train_000001.bin", "val_000000.bin"})
        write_token_shard(dir / name, counting_tokens(3));
    std::filesystem::create_directory(dir / "train_dir.bin");

    const auto shards = expand_shard_pattern((dir / "train_*.bin").string());
    EXPECT_EQ(shards, (std::vector<std::filesystem::path>{dir / "train_000000.bin", dir / "train_000001.bin",
                                                          dir / "train_000002.bin"}));
    EXPECT_EQ(expand_shard_pattern((dir / "val_000000.bin").string()).size(), 1u);
    EXPECT_CONTAINS(user_error([&] { expand_shard_pattern((dir / "test_*.bin").string()); }),
                    "no token shard files match '" + (dir / "test_*.bin").string() + "'");
}

// ---- data loader -----------------------------------------------------------------------------

struct Loaded {
    Batch inputs, targets;
    bool operator==(const Loaded&) const = default;
};

Loaded take_batch(DataLoader& loader, const DataLoaderOptions& options) {
    Loaded batch{Batch(std::size_t(options.batch_size) * options.seq_len),
                 Batch(std::size_t(options.batch_size) * options.seq_len)};
    loader.next_batch(batch.inputs, batch.targets);
    return batch;
}

std::vector<Loaded> take_batches(DataLoader& loader, const DataLoaderOptions& options, int count) {
    std::vector<Loaded> batches;
    for (int i = 0; i < count; ++i) batches.push_back(take_batch(loader, options));
    return batches;
}

// The first input token of each row: with counting tokens, the window's global start.
std::vector<std::int32_t> row_starts(const Loaded& batch, const DataLoaderOptions& options) {
    std::vector<std::int32_t> starts;
    for (int row = 0; row < options.batch_size; ++row)
        starts.push_back(batch.inputs[std::size_t(row) * options.seq_len]);
    return starts;
}

class DataLoaderTest : public ::testing::Test {
protected:
    // Two shards of counting tokens: ids 0..100 (101 tokens: 12 windows of 8+1) and 1000..1064
    // (65 tokens: 8 windows), 20 windows in all.
    void SetUp() override {
        dir_ = test::scratch_dir("loader");
        write_token_shard(dir_ / "train_000000.bin", counting_tokens(101));
        write_token_shard(dir_ / "train_000001.bin", counting_tokens(65, 1000));
        options_.batch_size = 2;
        options_.seq_len = 8;
        options_.vocab_size = 2000;
    }
    std::vector<std::filesystem::path> shards() const { return expand_shard_pattern((dir_ / "train_*.bin").string()); }

    std::filesystem::path dir_;
    DataLoaderOptions options_;
};

Batch counting_batch(std::size_t count, std::int32_t first) {
    Batch ids(count);
    std::iota(ids.begin(), ids.end(), first);
    return ids;
}

TEST_F(DataLoaderTest, SequentialBatchesAreContiguousRowsWithShiftedTargets) {
    DataLoader loader(shards(), options_);
    EXPECT_EQ(loader.batches_per_epoch(), 10u);
    // llm.c's layout: a batch is B*T+1 contiguous tokens; row r is tokens [r*T, r*T+T).
    const Loaded first = take_batch(loader, options_);
    EXPECT_EQ(first.inputs, counting_batch(16, 0));
    EXPECT_EQ(first.targets, counting_batch(16, 1));
    // Batches 5 and 6 straddle the shard boundary: window 11 (tokens 88..96) ends the first
    // shard, whose tail (97..100) is unused; window 12 starts the second shard.
    take_batches(loader, options_, 4);
    const Loaded sixth = take_batch(loader, options_);
    EXPECT_EQ(row_starts(sixth, options_), (std::vector<std::int32_t>{80, 88}));
    EXPECT_EQ(sixth.targets.back(), 96);
    EXPECT_EQ(row_starts(take_batch(loader, options_), options_), (std::vector<std::int32_t>{1000, 1008}));
}

TEST_F(DataLoaderTest, EpochsWrapAround) {
    DataLoader loader(shards(), options_);
    const auto epoch0 = take_batches(loader, options_, 10);
    EXPECT_EQ(loader.state(), (DataLoaderState{1, 0}));
    EXPECT_EQ(take_batches(loader, options_, 10), epoch0);  // sequential: every epoch is the same

    options_.shuffle = true;
    DataLoader shuffled(shards(), options_);
    const auto shuffled0 = take_batches(shuffled, options_, 10);
    EXPECT_NE(take_batches(shuffled, options_, 10), shuffled0);  // a new order each epoch
}

TEST_F(DataLoaderTest, ShuffleIsASeededPermutationOfWindows) {
    options_.shuffle = true;
    options_.seed = 42;
    DataLoader loader(shards(), options_), same_seed(shards(), options_);
    const auto batches = take_batches(loader, options_, 10);
    EXPECT_EQ(take_batches(same_seed, options_, 10), batches);

    std::multiset<std::int32_t> starts;
    for (const Loaded& batch : batches) {
        for (const std::int32_t start : row_starts(batch, options_)) starts.insert(start);
        for (std::size_t i = 0; i < batch.inputs.size(); ++i) EXPECT_EQ(batch.targets[i], batch.inputs[i] + 1);
    }
    std::multiset<std::int32_t> all_windows;
    for (std::int32_t w = 0; w < 12; ++w) all_windows.insert(8 * w);
    for (std::int32_t w = 0; w < 8; ++w) all_windows.insert(1000 + 8 * w);
    EXPECT_EQ(starts, all_windows);  // 20 windows, 10 batches of 2: each window exactly once

    options_.seed = 43;
    DataLoader other_seed(shards(), options_);
    EXPECT_NE(take_batches(other_seed, options_, 10), batches);
}

TEST_F(DataLoaderTest, RestoredStateContinuesIdentically) {
    for (const bool shuffle : {false, true}) {
        options_.shuffle = shuffle;
        options_.seed = 7;
        DataLoader loader(shards(), options_);
        take_batches(loader, options_, 13);  // into the second epoch
        const DataLoaderState saved = loader.state();
        EXPECT_EQ(saved, (DataLoaderState{1, 3}));
        const auto continuation = take_batches(loader, options_, 15);

        DataLoader resumed(shards(), options_);
        take_batch(resumed, options_);  // its own position does not matter
        resumed.restore(saved);
        EXPECT_EQ(resumed.state(), saved);
        EXPECT_EQ(take_batches(resumed, options_, 15), continuation) << "shuffle=" << shuffle;
    }
    DataLoader loader(shards(), options_);
    EXPECT_CONTAINS(user_error([&] {
                        loader.restore({0, 10});
                    }),
                    "the saved data position (epoch 0, batch 10) is past the end of an epoch of this data");
}

TEST_F(DataLoaderTest, RanksTakeDisjointBatchesThatCoverTheEpoch) {
    for (const bool shuffle : {false, true}) {
        options_.shuffle = shuffle;
        options_.world_size = 3;  // 20 windows / (2 x 3) = 3 batches per rank; 2 windows left over
        std::vector<std::int32_t> seen;
        std::vector<std::vector<std::int32_t>> first_rows(3);
        for (int rank = 0; rank < 3; ++rank) {
            options_.rank = rank;
            DataLoader loader(shards(), options_);
            ASSERT_EQ(loader.batches_per_epoch(), 3u);
            for (const Loaded& batch : take_batches(loader, options_, 3))
                for (const std::int32_t start : row_starts(batch, options_)) seen.push_back(start);
        }
        std::sort(seen.begin(), seen.end());
        EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "ranks overlap, shuffle=" << shuffle;
        EXPECT_EQ(seen.size(), 18u);
        if (!shuffle) {  // interleaved: rank r takes global batches r, r+3, r+6 of windows 0..17
            std::vector<std::int32_t> expected;
            for (std::int32_t w = 0; w < 12; ++w) expected.push_back(8 * w);
            for (std::int32_t w = 0; w < 6; ++w) expected.push_back(1000 + 8 * w);
            EXPECT_EQ(seen, expected);
        }
    }
    options_.shuffle = false;
    options_.rank = 1;
    options_.world_size = 2;
    DataLoader rank1(shards(), options_);
    EXPECT_EQ(row_starts(take_batch(rank1, options_), options_), (std::vector<std::int32_t>{16, 24}));
}

TEST_F(DataLoaderTest, OpenRejectsBadIdsAndTooLittleData) {
    options_.vocab_size = 1050;
    EXPECT_CONTAINS(user_error([&] { DataLoader loader(shards(), options_); }),
                    "train_000001.bin' holds token id 1050 at position 50, but the vocabulary has 1050 tokens");
    options_.vocab_size = 2000;
    options_.batch_size = 21;
    EXPECT_CONTAINS(user_error([&] { DataLoader loader(shards(), options_); }),
                    "the token shards hold 20 sequences of 8+1 tokens, fewer than one batch on every rank needs");
}

struct timespec modification_time(const std::filesystem::path& file) {
    struct stat status {};
    EXPECT_EQ(::stat(file.c_str(), &status), 0) << file;
    return status.st_mtim;
}

bool same_time(const struct timespec& a, const struct timespec& b) {
    return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

// Writes `tokens` over the start of the shard's token area, in place (same file, same size), as an
// editor or a script writing into the existing file would.
void write_tokens_in_place(const std::filesystem::path& shard, const Tokens& tokens, std::size_t first = 0) {
    const int fd = ::open(shard.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0) << shard;
    const auto bytes = static_cast<ssize_t>(tokens.size() * sizeof(std::uint16_t));
    EXPECT_EQ(::pwrite(fd, tokens.data(), static_cast<std::size_t>(bytes),
                       static_cast<off_t>(1024 + first * sizeof(std::uint16_t))),
              bytes);
    ::close(fd);
}

// The same, repeated until the file's modification time shows it (the clock behind it ticks in
// milliseconds on some filesystems, and the shard was written moments ago).
void rewrite_tokens_visibly(const std::filesystem::path& shard, const Tokens& tokens) {
    const struct timespec before = modification_time(shard);
    for (int attempt = 0; attempt < 1000 && same_time(modification_time(shard), before); ++attempt) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        write_tokens_in_place(shard, tokens);
    }
    ASSERT_FALSE(same_time(modification_time(shard), before)) << "the modification time never changed";
}

TEST_F(DataLoaderTest, ShardTruncatedBetweenBatchesIsAUserErrorNamingIt) {
    DataLoader loader(shards(), options_);
    take_batch(loader, options_);
    std::filesystem::resize_file(dir_ / "train_000000.bin", 1024 + 2 * 40);  // tokens 40.. are gone
    EXPECT_CONTAINS(user_error([&] { take_batches(loader, options_, 10); }),
                    "'" + (dir_ / "train_000000.bin").string() + "' changed while this run was reading it: it is now " +
                        "1104 bytes, it was 1226 when opened");
}

TEST_F(DataLoaderTest, ShardRewrittenInPlaceIsAUserErrorNamingIt) {
    DataLoader loader(shards(), options_);
    take_batch(loader, options_);
    rewrite_tokens_visibly(dir_ / "train_000000.bin", counting_tokens(101, 500));  // same size, other ids
    EXPECT_CONTAINS(user_error([&] { take_batch(loader, options_); }),
                    "'" + (dir_ / "train_000000.bin").string() + "' changed while this run was reading it: it " +
                        "was modified after it was opened");
}

// The loader keeps its shards open; running out of file descriptors says how to fix it.
TEST_F(DataLoaderTest, TooManyShardsForTheOpenFileLimitNamesTheLimit) {
    std::vector<std::filesystem::path> many;
    for (int i = 0; i < 8; ++i) {
        many.push_back(dir_ / ("many_" + std::to_string(i) + ".bin"));
        write_token_shard(many.back(), counting_tokens(20));
    }
    const auto open_files = std::distance(std::filesystem::directory_iterator("/proc/self/fd"), {});
    rlimit saved{};
    ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &saved), 0);
    rlimit low = saved;
    low.rlim_cur = static_cast<rlim_t>(open_files + 3);
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
    const std::string error = user_error([&] { DataLoader loader(many, options_); });
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &saved), 0);
    EXPECT_CONTAINS(error, "Too many open files; raise the limit (`ulimit -n`) or use fewer, larger shards");
}

// A change the file's size and time do not show (here the time is set back) still cannot feed
// the model an id beyond its vocabulary: every window read is checked.
TEST_F(DataLoaderTest, IdsAreCheckedInEveryBatchNotOnlyAtOpen) {
    DataLoader loader(shards(), options_);
    take_batch(loader, options_);
    const auto shard = dir_ / "train_000000.bin";
    const struct timespec opened = modification_time(shard);
    write_tokens_in_place(shard, {60000}, 20);  // in window 2, the second batch's first row
    const std::array<struct timespec, 2> times = {opened, opened};
    ASSERT_EQ(::utimensat(AT_FDCWD, shard.c_str(), times.data(), 0), 0);
    EXPECT_CONTAINS(user_error([&] { take_batch(loader, options_); }),
                    "'" + shard.string() + "' holds token id 60000 at position 20, but the vocabulary has 2000 tokens");
}

// ---- corpus preparation ----------------------------------------------------------------------

TEST(CorpusPreparer, FortuneFilesSplitAtPercentLines) {
    const std::string fortunes = "first\nfortune\n%\nsecond\n%\r\n  \n%\n%\nthird 100%\n%\n";
    EXPECT_EQ(split_documents(fortunes),
              (std::vector<std::string_view>{"first\nfortune\n", "second\n", "third 100%\n"}));
    EXPECT_EQ(split_documents("plain text\nwith 50% of a line\n"),
              (std::vector<std::string_view>{"plain text\nwith 50% of a line\n"}));
    EXPECT_TRUE(split_documents(" \n\t\n").empty());
}

TEST(CorpusPreparer, InputsAreWalkedSortedAndReadOnce) {
    const auto dir = test::scratch_dir("corpus_inputs");
    std::filesystem::create_directories(dir / "corpus" / "sub");
    for (const char* name : {"corpus/b.txt", "corpus/a.txt", "corpus/sub/c.txt", "single.txt"})
        write_raw_file(dir / name, "text\n");
    std::filesystem::create_symlink(dir / "corpus" / "a.txt", dir / "corpus" / "z.link");
    const auto files = collect_input_files({dir / "single.txt", dir / "corpus", dir / "corpus" / "b.txt"});
    EXPECT_EQ(files, (std::vector<std::filesystem::path>{dir / "single.txt", dir / "corpus" / "a.txt",
                                                         dir / "corpus" / "b.txt", dir / "corpus" / "sub" / "c.txt"}));
    EXPECT_CONTAINS(user_error([&] { collect_input_files({dir / "nope"}); }),
                    "input '" + (dir / "nope").string() + "' does not exist");
}

class CorpusRoundTrip : public ::testing::Test {
protected:
    void SetUp() override {
        if (test::shared_data_dir().empty()) GTEST_SKIP() << "../shared/data (the GPT-2 vocabulary) is absent";
        tokenizer_ = std::make_unique<Gpt2Tokenizer>(Gpt2Tokenizer::load(test::shared_data_dir() / "gpt2_tokenizer"));
    }
    std::unique_ptr<Gpt2Tokenizer> tokenizer_;
};

// `adacc prepare`'s work, then reading the shards back, gives exactly <|endoftext|> + the
// tokenizer's ids of each document, in file order, split into val then train shards.
TEST_F(CorpusRoundTrip, ShardsHoldEachDocumentPrecededByEndOfText) {
    const auto dir = test::scratch_dir("corpus_roundtrip");
    std::filesystem::create_directories(dir / "in" / "more");
    const std::string plain = "The quick brown fox jumps over the lazy dog.\nIt's 2024; naïve café — 🙂\n";
    const std::string fortunes = "A fortune.\n%\nAnother one, with <|endoftext|> in it.\n%\n";
    const std::string nested = "Nested file text,\n\twith tabs   and  spaces.\n";
    write_raw_file(dir / "in" / "a_plain.txt", plain);
    write_raw_file(dir / "in" / "b_fortunes", fortunes);
    write_raw_file(dir / "in" / "b_fortunes.dat", std::string("\0\0\1binary", 9));
    write_raw_file(dir / "in" / "more" / "c.txt", nested);
    std::filesystem::create_directories(dir / "out");
    write_token_shard(dir / "out" / "train_000009.bin", counting_tokens(5));  // from an "earlier run"

    std::vector<std::uint32_t> expected;
    for (const std::string_view document :
         {std::string_view(plain), std::string_view("A fortune.\n"),
          std::string_view("Another one, with <|endoftext|> in it.\n"), std::string_view(nested)}) {
        expected.push_back(tokenizer_->eot_token());
        for (const std::uint32_t id : tokenizer_->encode(document)) expected.push_back(id);
    }

    CorpusOptions options;
    options.inputs = {dir / "in"};
    options.out_dir = dir / "out";
    options.val_tokens = 10;
    options.shard_tokens = 16;
    std::vector<CorpusProgress> reports;
    const CorpusSummary summary =
        prepare_corpus(*tokenizer_, options, [&](const CorpusProgress& progress) { reports.push_back(progress); });

    EXPECT_EQ(summary.files, 3u);
    EXPECT_EQ(summary.binary_files, 1u);
    EXPECT_EQ(summary.documents, 4u);
    EXPECT_EQ(summary.val_tokens, 10u);
    EXPECT_EQ(summary.val_tokens + summary.train_tokens, expected.size());
    ASSERT_FALSE(reports.empty());
    EXPECT_EQ(reports.back().bytes_done, reports.back().bytes_total);

    const std::size_t train_shards = (expected.size() - 10 + 15) / 16;
    ASSERT_EQ(summary.shards.size(), 1 + train_shards);
    EXPECT_EQ(summary.shards[0], dir / "out" / "val_000000.bin");
    EXPECT_EQ(expand_shard_pattern((dir / "out" / "train_*.bin").string()).size(), train_shards);  // old one gone
    std::vector<std::uint32_t> stored;
    for (const auto& shard : summary.shards)
        for (const std::uint16_t id : read_token_shard(shard)) stored.push_back(id);
    EXPECT_EQ(stored, expected);
    EXPECT_EQ(std::count(stored.begin(), stored.end(), tokenizer_->eot_token()), 4);
}

TEST_F(CorpusRoundTrip, TooSmallACorpusForTheValidationSplitIsAUserError) {
    const auto dir = test::scratch_dir("corpus_small");
    write_raw_file(dir / "tiny.txt", "tiny");
    CorpusOptions options;
    options.inputs = {dir / "tiny.txt"};
    options.out_dir = dir / "out";
    EXPECT_CONTAINS(user_error([&] { prepare_corpus(*tokenizer_, options); }),
                    "the corpus holds only 2 tokens, not more than --val-tokens 32768: lower --val-tokens");
}

// Everything under `dir`: relative path -> "<folder>", or the file's size and a hash of its bytes.
std::map<std::string, std::string> tree(const std::filesystem::path& dir) {
    std::map<std::string, std::string> entries;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
        const std::string bytes = entry.is_regular_file() ? read_raw_file(entry.path()) : "";
        entries[std::filesystem::relative(entry.path(), dir).string()] =
            entry.is_regular_file()
                ? std::to_string(bytes.size()) + " bytes, hash " + std::to_string(std::hash<std::string>{}(bytes))
                : "<folder>";
    }
    return entries;
}

// A prepare that fails (here: no text to tokenize) keeps the shards of the last good one, so a
// run reading them is not left without data; nothing of the failed attempt stays behind.
TEST_F(CorpusRoundTrip, FailedPrepareLeavesTheOutputFolderAsItWas) {
    const auto dir = test::scratch_dir("corpus_atomic");
    std::filesystem::create_directories(dir / "in" / "binary");
    write_raw_file(dir / "in" / "empty.txt", "");
    write_raw_file(dir / "in" / "binary" / "a.dat", std::string("\0\1\2", 3));
    write_raw_file(dir / "in" / "good.txt", std::string(300, 'x') + " and some words\n");
    CorpusOptions options;
    options.out_dir = dir / "out";
    options.val_tokens = 10;
    options.inputs = {dir / "in" / "good.txt"};
    prepare_corpus(*tokenizer_, options);
    write_raw_file(dir / "out" / "notes.txt", "kept");
    const auto before = tree(dir);

    for (const auto& input : {dir / "in" / "empty.txt", dir / "in" / "binary"}) {
        options.inputs = {input};
        EXPECT_CONTAINS(user_error([&] { prepare_corpus(*tokenizer_, options); }), "the corpus holds only 0 tokens");
        EXPECT_EQ(tree(dir), before) << input;
    }
    options.out_dir = dir / "new" / "out";  // a failure does not create the folder either
    EXPECT_CONTAINS(user_error([&] { prepare_corpus(*tokenizer_, options); }), "the corpus holds only 0 tokens");
    EXPECT_EQ(tree(dir), before);
}

// A successful prepare replaces the shards and nothing else.
TEST_F(CorpusRoundTrip, PrepareReplacesOnlyShards) {
    const auto dir = test::scratch_dir("corpus_replace");
    write_raw_file(dir / "small.txt", std::string(100, 'x') + " small\n");
    write_raw_file(dir / "large.txt", std::string(100, 'y') + " a larger corpus of words, three train shards\n");
    CorpusOptions options;
    options.out_dir = dir / "out";
    options.val_tokens = 0;
    options.shard_tokens = 8;
    options.inputs = {dir / "large.txt"};
    prepare_corpus(*tokenizer_, options);
    ASSERT_GE(expand_shard_pattern((dir / "out" / "train_*.bin").string()).size(), 3u);
    write_raw_file(dir / "out" / "notes.txt", "kept");
    write_raw_file(dir / "out" / "train_000000.bin.bak", "kept");

    options.inputs = {dir / "small.txt"};
    options.shard_tokens = 1000;
    const CorpusSummary summary = prepare_corpus(*tokenizer_, options);
    EXPECT_EQ(summary.shards, (std::vector<std::filesystem::path>{dir / "out" / "train_000000.bin"}));
    const auto files = tree(dir / "out");
    EXPECT_EQ(files.size(), 3u);
    EXPECT_EQ(read_raw_file(dir / "out" / "notes.txt"), "kept");
    EXPECT_EQ(read_raw_file(dir / "out" / "train_000000.bin.bak"), "kept");
    EXPECT_TRUE(files.contains("train_000000.bin"));
    EXPECT_EQ(read_token_shard(dir / "out" / "train_000000.bin").size(), summary.train_tokens);
    EXPECT_EQ(tree(dir).size(), 3u + 3u);  // small.txt, large.txt, out/ and its 3 files: no staging folder left
}

// ---- the commands, run as a user would ---------------------------------------------------------

class CommandLine : public CorpusRoundTrip {
protected:
    void SetUp() override {
        CorpusRoundTrip::SetUp();
        if (IsSkipped()) return;
        if (!std::filesystem::exists(test::adacc_binary())) GTEST_SKIP() << "the adacc executable is not built";
    }
    // Runs `adacc ARGS`, returning the exit status; stdout and stderr go to files in dir_.
    int run(const std::string& arguments, const std::string& stdin_text = "") {
        write_raw_file(dir_ / "stdin", stdin_text);
        const std::string command = test::adacc_binary() + " " + arguments + " < " + (dir_ / "stdin").string() + " > " +
                                    (dir_ / "stdout").string() + " 2> " + (dir_ / "stderr").string();
        const int status = std::system(command.c_str());
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    }
    std::string out() const { return read_raw_file(dir_ / "stdout"); }
    std::string err() const { return read_raw_file(dir_ / "stderr"); }
    std::string vocab() const { return "--vocab " + (test::shared_data_dir() / "gpt2_tokenizer").string(); }

    std::filesystem::path dir_ = test::scratch_dir("cli");
};

TEST_F(CommandLine, TokenizeEncodesCountsAndDecodes) {
    ASSERT_EQ(run("tokenize " + vocab(), "hello world"), 0) << err();
    EXPECT_EQ(out(), "31373 995\n");
    ASSERT_EQ(run("tokenize --count " + vocab(), "Question: Which?\nAnswer:"), 0) << err();
    EXPECT_EQ(out(), "7\n");
    ASSERT_EQ(run("tokenize --decode " + vocab(), "24361 25 9022 30\n198 33706 25\n"), 0) << err();
    EXPECT_EQ(out(), "Question: Which?\nAnswer:");

    EXPECT_EQ(run("tokenize --decode " + vocab(), "31373 99999"), 2);
    EXPECT_CONTAINS(err(), "error: token id 99999 is not in the GPT-2 vocabulary");
    EXPECT_EQ(run("tokenize --decode " + vocab(), "31373 hello"), 2);
    EXPECT_CONTAINS(err(), "error: --decode reads token ids separated by whitespace; 'hello' is not one");
    EXPECT_EQ(run("tokenize", "x"), 2);
    EXPECT_CONTAINS(err(), "error: no GPT-2 vocabulary directory given: pass --vocab DIR");
}

TEST_F(CommandLine, PrepareWritesShardsAndASummary) {
    write_raw_file(dir_ / "corpus.txt", std::string(2000, 'x') + "\n" + "Some words for the corpus.\n");
    ASSERT_EQ(run("prepare --input " + (dir_ / "corpus.txt").string() + " --out " + (dir_ / "shards").string() +
                  " --val-tokens 100 " + vocab()),
              0)
        << err();
    EXPECT_CONTAINS(out(), "prepared 1 document from 1 file into " + (dir_ / "shards").string());
    EXPECT_CONTAINS(out(), "val:   100 tokens in val_000000.bin");
    EXPECT_EQ(read_token_shard(dir_ / "shards" / "val_000000.bin").size(), 100u);
    EXPECT_TRUE(std::filesystem::exists(dir_ / "shards" / "train_000000.bin"));

    EXPECT_EQ(
        run("prepare --input " + (dir_ / "missing").string() + " --out " + (dir_ / "shards").string() + " " + vocab()),
        2);
    EXPECT_CONTAINS(err(), "error: input '" + (dir_ / "missing").string() + "' does not exist");
}

// `cat corpus | adacc prepare --input /dev/stdin`: the stream is read like a file (one document,
// or fortune entries), giving the same shards.
TEST_F(CommandLine, PrepareReadsAPipe) {
    const std::string corpus = "A first fortune, long enough for a few tokens.\n%\nAnd a second one.\n%\n";
    write_raw_file(dir_ / "corpus.txt", corpus);
    ASSERT_EQ(run("prepare --input " + (dir_ / "corpus.txt").string() + " --out " + (dir_ / "from_file").string() +
                  " --val-tokens 4 " + vocab()),
              0)
        << err();
    const std::string command = "cat " + (dir_ / "corpus.txt").string() + " | " + test::adacc_binary() +
                                " prepare --input /dev/stdin --out " + (dir_ / "from_pipe").string() +
                                " --val-tokens 4 " + vocab() + " > " + (dir_ / "stdout").string() + " 2> " +
                                (dir_ / "stderr").string();
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err();
    EXPECT_CONTAINS(out(), "prepared 2 documents from 1 file");
    for (const char* shard : {"val_000000.bin", "train_000000.bin"})
        EXPECT_EQ(read_raw_file(dir_ / "from_pipe" / shard), read_raw_file(dir_ / "from_file" / shard)) << shard;
}

// An input that is neither a folder nor readable as a stream (a socket cannot be opened).
TEST_F(CommandLine, PrepareNamesAnInputItCannotRead) {
    const auto socket_path = dir_ / "corpus.sock";
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    ASSERT_LT(socket_path.string().size(), sizeof(address.sun_path));
    std::strcpy(address.sun_path, socket_path.c_str());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_EQ(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
    EXPECT_EQ(run("prepare --input " + socket_path.string() + " --out " + (dir_ / "shards").string() + " " + vocab()),
              2);
    EXPECT_CONTAINS(err(), "error: cannot read '" + socket_path.string() + "': No such device or address");
    EXPECT_FALSE(std::filesystem::exists(dir_ / "shards"));
    ::close(fd);
}

// ---- a shard changed under a running `adacc train` ---------------------------------------------

// Starts `adacc ARGS` with stdout discarded and stderr to `stderr_file`.
pid_t spawn_adacc(const std::vector<std::string>& arguments, const std::filesystem::path& stderr_file) {
    std::vector<std::string> args = {test::adacc_binary()};
    args.insert(args.end(), arguments.begin(), arguments.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    return pid;
}

// The exit status, -signal for a signal, or 0x7fff when `pid` is still running after `seconds`
// (it is then killed).
int wait_for(pid_t pid, std::chrono::seconds seconds) {
    const auto deadline = std::chrono::steady_clock::now() + seconds;
    int status = 0;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > deadline) {
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &status, 0);
            return 0x7fff;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

class ShardUnderARun : public ::testing::Test {
protected:
    void SetUp() override {
        if (!std::filesystem::exists(test::adacc_binary())) GTEST_SKIP() << "the adacc executable is not built";
        // 100 pages: a run that reads it sequentially crosses many.
        test::write_random_shard(shard_, 200'000, 97, 2);
        std::ofstream(dir_ / "run.toml")
            << "[model]\nn_layer = 1\nn_embd = 16\nn_head = 2\nvocab_size = 97\nmax_seq_len = 16\n"
            << "[training]\nbatch_size = 2\nseq_len = 16\nsteps = 1000000\nthreads = 1\n[data]\ntrain = \""
            << shard_.string() << "\"\n[logging]\nrun_dir = \"" << (dir_ / "run").string() << "\"\n";
    }
    // Starts the run and returns once it has logged a step (false if it never does).
    bool start_run() {
        pid_ = spawn_adacc({"train", "--config", (dir_ / "run.toml").string()}, dir_ / "stderr");
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (std::chrono::steady_clock::now() < deadline) {
            if (read_raw_file(dir_ / "run" / "metrics.jsonl").find("\"loss\"") != std::string::npos) return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return false;
    }
    // The run must stop at once with a user error naming the shard.
    void expect_stopped_with_error() {
        EXPECT_EQ(wait_for(pid_, std::chrono::seconds(30)), 2) << "(-N: signal N; 32767: still running)\n"
                                                               << stderr_text();
        EXPECT_CONTAINS(stderr_text(), "error: '" + shard_.string() + "' changed while this run was reading it");
    }
    std::string stderr_text() const { return read_raw_file(dir_ / "stderr"); }
    // A run left going by a failed assertion is stopped.
    void TearDown() override {
        if (pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }

    std::filesystem::path dir_ = test::scratch_dir("shard_under_run");
    std::filesystem::path shard_ = dir_ / "train.bin";
    pid_t pid_ = 0;
};

// A memory mapping would turn the read of a page past the new end into SIGBUS.
TEST_F(ShardUnderARun, TruncatedShardStopsTheRunWithAUserError) {
    ASSERT_TRUE(start_run()) << stderr_text();
    std::filesystem::resize_file(shard_, 1024 + 2 * 100);
    expect_stopped_with_error();
}

// ... and would feed the run the new tokens without a word.
TEST_F(ShardUnderARun, ShardOverwrittenInPlaceStopsTheRunWithAUserError) {
    ASSERT_TRUE(start_run()) << stderr_text();
    rewrite_tokens_visibly(shard_, Tokens(200'000, 7));
    expect_stopped_with_error();
}

}  // namespace
}  // namespace adacc
