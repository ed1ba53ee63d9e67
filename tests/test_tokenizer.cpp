// Gpt2Tokenizer against OpenAI's reference (tiktoken): the fixtures in tests/fixtures were written
// by dev/make_tokenizer_fixture.py from the same vocabulary files. The vocabulary itself is
// third-party data, so every test that encodes needs ../shared/data and skips without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "data/tokenizer.h"
#include "src/common/errors.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

std::string read_file(const std::filesystem::path& path) {
    std::ifstream stream(path, std::ios::binary);
    EXPECT_TRUE(stream) << "cannot read " << path;
    std::ostringstream contents;
    contents << stream.rdbuf();
    return contents.str();
}

// SHA-256 (FIPS 180-4), enough to compare token streams with the digests the fixture script wrote.
class Sha256 {
public:
    std::string hex_digest(std::string_view message) {
        std::string padded(message);
        padded.push_back(static_cast<char>(0x80));
        while (padded.size() % 64 != 56) padded.push_back(0);
        const std::uint64_t bits = static_cast<std::uint64_t>(message.size()) * 8;
        for (int shift = 56; shift >= 0; shift -= 8) padded.push_back(static_cast<char>(bits >> shift));
        for (std::size_t block = 0; block < padded.size(); block += 64) compress(padded.data() + block);
        std::string hex;
        for (const std::uint32_t word : state_)
            for (int shift = 28; shift >= 0; shift -= 4) hex.push_back("0123456789abcdef"[(word >> shift) & 0xF]);
        return hex;
    }

private:
    void compress(const char* block) {
        static constexpr std::array<std::uint32_t, 64> k = {
            0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
            0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
            0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
            0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
            0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
            0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
            0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
            0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
        std::array<std::uint32_t, 64> w{};
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 4; ++j) w[i] = (w[i] << 8) | static_cast<unsigned char>(block[4 * i + j]);
        for (int i = 16; i < 64; ++i) {
            const std::uint32_t s0 = std::rotr(w[i - 15], 7) ^ std::rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const std::uint32_t s1 = std::rotr(w[i - 2], 17) ^ std::rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        auto [a, b, c, d, e, f, g, h] = state_;
        for (int i = 0; i < 64; ++i) {
            const std::uint32_t sum1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
            const std::uint32_t sum0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
            const std::uint32_t t1 = h + sum1 + ((e & f) ^ (~e & g)) + k[i] + w[i];
            const std::uint32_t t2 = sum0 + ((a & b) ^ (a & c) ^ (b & c));
            h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
        }
        const std::array<std::uint32_t, 8> add = {a, b, c, d, e, f, g, h};
        for (int i = 0; i < 8; ++i) state_[i] += add[i];
    }

    std::array<std::uint32_t, 8> state_ = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                           0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
};

// The ids as little-endian uint32 bytes, the form the fixture script hashed.
std::string ids_as_le_bytes(const std::vector<std::uint32_t>& ids) {
    static_assert(std::endian::native == std::endian::little);
    return std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * sizeof(std::uint32_t));
}

class TokenizerTest : public ::testing::Test {
protected:
    void SetUp() override {
        if (test::shared_data_dir().empty()) GTEST_SKIP() << "../shared/data (the GPT-2 vocabulary) is absent";
    }
    static const Gpt2Tokenizer& tokenizer() {
        static const Gpt2Tokenizer loaded = Gpt2Tokenizer::load(test::shared_data_dir() / "gpt2_tokenizer");
        return loaded;
    }
};

TEST(Sha256, MatchesKnownDigest) {
    EXPECT_EQ(Sha256().hex_digest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_F(TokenizerTest, KnownVectorsFromTheDataReadme) {
    EXPECT_EQ(tokenizer().encode("hello world"), (std::vector<std::uint32_t>{31373, 995}));
    EXPECT_EQ(tokenizer().encode(" signs"), (std::vector<std::uint32_t>{5895}));
    EXPECT_EQ(tokenizer().encode("Question: Which?\nAnswer:"),
              (std::vector<std::uint32_t>{24361, 25, 9022, 30, 198, 33706, 25}));
    EXPECT_EQ(tokenizer().eot_token(), 50256u);
    EXPECT_EQ(tokenizer().vocab_size(), 50257u);
    EXPECT_TRUE(tokenizer().encode("").empty());
}

TEST_F(TokenizerTest, EndOfTextIsSpecialOnlyWhenAllowed) {
    EXPECT_EQ(tokenizer().encode("a<|endoftext|>b", SpecialTokens::allowed),
              (std::vector<std::uint32_t>{64, 50256, 65}));
    const auto as_text = tokenizer().encode("a<|endoftext|>b");
    EXPECT_EQ(std::count(as_text.begin(), as_text.end(), 50256u), 0);
    EXPECT_EQ(tokenizer().decode(as_text), "a<|endoftext|>b");
    EXPECT_EQ(tokenizer().decode(std::vector<std::uint32_t>{50256}), "<|endoftext|>");
}

TEST_F(TokenizerTest, MatchesTiktokenOnFixtureStrings) {
    std::istringstream lines(read_file(test::fixtures_dir() / "tokenizer_cases.jsonl"));
    int cases = 0, mismatches = 0;
    for (std::string line; std::getline(lines, line); ++cases) {
        const auto record = nlohmann::json::parse(line);
        const auto text = record["text"].get<std::string>();
        const auto expected = record["ids"].get<std::vector<std::uint32_t>>();
        const auto special = record["allow_special"].get<bool>() ? SpecialTokens::allowed : SpecialTokens::as_text;
        const auto ids = tokenizer().encode(text, special);
        if (ids != expected && ++mismatches <= 10)
            ADD_FAILURE() << "case " << cases << " mismatches: " << record.dump();
        EXPECT_EQ(tokenizer().decode(ids), text) << "case " << cases << " does not round-trip";
    }
    EXPECT_GE(cases, 1000);
    EXPECT_EQ(mismatches, 0);
}

// Every shared text file tokenized whole (about 72 MB): token count and sha256 of the ids.
TEST_F(TokenizerTest, MatchesTiktokenOnWholeSharedFiles) {
    const auto digests = nlohmann::json::parse(read_file(test::fixtures_dir() / "tokenizer_shared_files.json"));
    for (const auto& record : digests["files"]) {
        const auto path = test::shared_data_dir() / record["path"].get<std::string>();
        const std::string text = read_file(path);
        ASSERT_EQ(text.size(), record["bytes"].get<std::size_t>()) << path << " is not the file the fixture hashed";
        const auto ids = tokenizer().encode(text);
        EXPECT_EQ(ids.size(), record["tokens"].get<std::size_t>()) << path;
        EXPECT_EQ(Sha256().hex_digest(ids_as_le_bytes(ids)), record["sha256"].get<std::string>()) << path;
    }
}

TEST_F(TokenizerTest, InvalidUtf8IsEncodedAsBytesAndRoundTrips) {
    // A byte that is not UTF-8 becomes a piece of its own: its single-byte token.
    const auto ff = tokenizer().encode("\xff");
    ASSERT_EQ(ff.size(), 1u);
    EXPECT_EQ(tokenizer().decode(ff), "\xff");
    std::vector<std::uint32_t> expected = tokenizer().encode("hello");
    expected.push_back(ff[0]);
    for (const auto id : tokenizer().encode("world")) expected.push_back(id);
    EXPECT_EQ(tokenizer().encode("hello\xffworld"), expected);

    std::mt19937 rng(7);
    for (int trial = 0; trial < 300; ++trial) {
        std::string bytes(rng() % 40, '\0');
        for (char& byte : bytes) byte = static_cast<char>(rng() % 4 == 0 ? 'a' + rng() % 3 : rng() % 256);
        EXPECT_EQ(tokenizer().decode(tokenizer().encode(bytes)), bytes);
    }
}

TEST_F(TokenizerTest, HugeRunsEncodeInLinearishTime) {
    // One regex piece of a million bytes: a quadratic merge loop would take minutes.
    const auto letters = tokenizer().encode(std::string(1'000'000, 'a'));
    const auto four = tokenizer().encode("aaaa");
    ASSERT_EQ(four.size(), 1u);
    EXPECT_EQ(letters, std::vector<std::uint32_t>(250'000, four[0]));

    const std::string spaces = std::string(1'000'000, ' ') + "x";
    EXPECT_EQ(tokenizer().decode(tokenizer().encode(spaces)), spaces);
}

TEST_F(TokenizerTest, DecodeRejectsIdsOutsideTheVocabulary) {
    try {
        tokenizer().decode(std::vector<std::uint32_t>{50257});
        FAIL() << "no UserError";
    } catch (const UserError& error) {
        EXPECT_NE(std::string(error.what()).find("token id 50257 is not in the GPT-2 vocabulary"), std::string::npos);
    }
}

std::string load_error(const std::filesystem::path& dir) {
    try {
        Gpt2Tokenizer::load(dir);
    } catch (const UserError& error) {
        return error.what();
    }
    return "(no UserError)";
}

TEST(TokenizerLoad, MissingVocabularyNamesTheFileAndTheFix) {
    const auto missing = load_error("/nonexistent/gpt2");
    EXPECT_NE(missing.find("'/nonexistent/gpt2' does not exist"), std::string::npos) << missing;
    EXPECT_NE(missing.find("pass --vocab DIR holding encoder.json and vocab.bpe"), std::string::npos) << missing;

    EXPECT_EQ(load_error(""),
              "no GPT-2 vocabulary directory given: pass --vocab DIR holding encoder.json and "
              "vocab.bpe (`scripts/download_data.sh vocab DIR` fetches them)");

    const auto empty_dir = test::scratch_dir("vocab_empty");
    const auto no_encoder = load_error(empty_dir);
    EXPECT_NE(no_encoder.find("cannot read '" + (empty_dir / "encoder.json").string() + "'"), std::string::npos)
        << no_encoder;

    std::ofstream(empty_dir / "encoder.json") << "{\"a\": 0,";
    const auto bad_json = load_error(empty_dir);
    EXPECT_NE(bad_json.find("is not valid JSON"), std::string::npos) << bad_json;
}

TEST_F(TokenizerTest, MismatchedMergesAreRejected) {
    const auto dir = test::scratch_dir("vocab_mismatch");
    std::filesystem::copy_file(test::shared_data_dir() / "gpt2_tokenizer" / "encoder.json", dir / "encoder.json");
    std::ofstream(dir / "vocab.bpe") << "#version: 0.2\nh e\n";
    const auto message = load_error(dir);
    EXPECT_NE(message.find("does not belong to the encoder.json beside it"), std::string::npos) << message;
}

}  // namespace
}  // namespace adacc
