// The safetensors reader and writer (src/io/safetensors.h): the bytes the safetensors Python
// package writes are read as it means them; what the writer writes reads back bit for bit with the
// header padded as the package pads it; F16 and BF16 widen to exactly the value they encode; and
// each way a file can be malformed is a UserError naming the file, the tensor and the problem.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "src/common/errors.h"
#include "src/io/safetensors.h"
#include "tests/test_support.h"

namespace adacc {
namespace {

namespace fs = std::filesystem;

// A file of the given header text and data bytes, the length prefix computed.
fs::path file_with(const fs::path& dir, const std::string& name, const std::string& header, const std::string& data) {
    const fs::path file = dir / name;
    const std::uint64_t n = header.size();
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << header << data;
    return file;
}

template <typename T>
std::string bytes_of(std::initializer_list<T> values) {
    std::string bytes(values.size() * sizeof(T), '\0');
    std::memcpy(bytes.data(), std::data(values), bytes.size());
    return bytes;
}

class Safetensors : public ::testing::Test {
protected:
    void SetUp() override { dir = test::scratch_dir("safetensors"); }
    // The message of the UserError opening `file` throws ("" and a failure when none is thrown).
    static std::string refusal(const fs::path& file) {
        try {
            SafetensorsFile{file};
        } catch (const UserError& e) {
            return e.what();
        }
        ADD_FAILURE() << file << " was accepted";
        return "";
    }
    void expect_refused(const std::string& name, const std::string& header, const std::string& data,
                        const std::string& fragment) {
        const fs::path file = file_with(dir, name, header, data);
        const std::string message = refusal(file);
        EXPECT_NE(message.find("'" + file.string() + "' is not a valid safetensors file"), std::string::npos)
            << message;
        EXPECT_NE(message.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << message;
        EXPECT_NE(message.find("download or export it again"), std::string::npos) << message;
    }
    fs::path dir;
};

TEST_F(Safetensors, ReadsTheBytesThePythonPackageWrites) {
    // safetensors.numpy.save({"b": np.array([1, 2], np.float32), "a": np.zeros((2, 0), np.float16)},
    // metadata={"format": "pt"}) with safetensors 0.8.0: a 144-byte header padded with spaces.
    const std::string header =
        R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("a":{"dtype":"F16","shape":[2,0],"data_offsets":[8,8]}}    )";
    ASSERT_EQ(header.size(), 144u);
    const fs::path file = file_with(dir, "python.safetensors", header, bytes_of<float>({1.0f, 2.0f}));
    ASSERT_EQ(fs::file_size(file), 160u);
    const SafetensorsFile st(file);
    EXPECT_EQ(st.metadata(), (std::map<std::string, std::string>{{"format", "pt"}}));
    ASSERT_EQ(st.tensors().size(), 2u);
    const SafetensorsTensor* b = st.find("b");
    const SafetensorsTensor* a = st.find("a");
    ASSERT_TRUE(a && b);
    EXPECT_EQ(b->dtype, DType::f32);
    EXPECT_EQ(b->shape, (std::vector<std::uint64_t>{2}));
    EXPECT_EQ(b->offset, 152u);
    EXPECT_EQ(a->dtype, DType::f16);
    EXPECT_EQ(a->numel(), 0u);
    float values[2] = {};
    st.read_f32(*b, values);
    EXPECT_EQ(values[0], 1.0f);
    EXPECT_EQ(values[1], 2.0f);
    EXPECT_EQ(st.find("c"), nullptr);
}

TEST_F(Safetensors, WrittenFilesReadBackBitForBitWithAnAlignedHeader) {
    const std::vector<float> f32 = {1.5f, -2.25f, 3e-20f, 7.0f, 0.0f, -0.0f};
    const std::vector<std::uint16_t> bf16 = {0x3F80, 0xC040, 0x0001};
    const std::vector<std::int32_t> i32 = {-7, 1 << 30};
    const fs::path file = dir / "written.safetensors";
    {
        SafetensorsWriter out(file,
                              {{"w.weight", DType::f32, {2, 3}},
                               {"b16", DType::bf16, {3}},
                               {"ids", DType::i32, {2, 1}},
                               {"empty", DType::f16, {0, 4}}},
                              {{"format", "pt"}, {"note", "a \"quoted\" value"}});
        out.write_next(f32.data(), f32.size() * 4);
        out.write_next(bf16.data(), bf16.size() * 2);
        out.write_next(i32.data(), i32.size() * 4);
        out.write_next(nullptr, 0);
        out.commit();
    }
    const std::string bytes = test::read_bytes(file);
    std::uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data(), 8);
    EXPECT_EQ(header_bytes % 8, 0u);
    EXPECT_EQ(bytes.size(), 8 + header_bytes + 24 + 6 + 8);
    EXPECT_EQ(bytes[8], '{');

    const SafetensorsFile st(file);
    EXPECT_EQ(st.metadata().at("note"), "a \"quoted\" value");
    ASSERT_EQ(st.tensors().size(), 4u);
    EXPECT_EQ(st.tensors()[0].name, "w.weight");  // file order: as declared
    std::vector<float> got(6);
    st.read_f32(*st.find("w.weight"), got.data());
    EXPECT_EQ(std::memcmp(got.data(), f32.data(), 24), 0);
    std::vector<std::int32_t> ids(2);
    st.read(*st.find("ids"), ids.data());
    EXPECT_EQ(ids, i32);
    std::vector<float> widened(3);
    st.read_f32(*st.find("b16"), widened.data());
    EXPECT_EQ(widened[0], 1.0f);
    EXPECT_EQ(widened[1], -3.0f);
    EXPECT_EQ(widened[2], std::bit_cast<float>(0x00010000u));
    EXPECT_EQ(st.find("empty")->bytes, 0u);
    EXPECT_FALSE(fs::exists(dir / "written.safetensors.tmp"));
}

TEST_F(Safetensors, HalfPrecisionWidensToTheValueItEncodes) {
    // IEEE binary16: 1, -2, the smallest and largest subnormal, the smallest normal, the largest
    // finite, infinities, -0 and a NaN.
    const std::vector<std::uint16_t> bits = {0x3C00, 0xC000, 0x0001, 0x03FF, 0x0400,
                                             0x7BFF, 0x7C00, 0xFC00, 0x8000, 0x7E00};
    const std::vector<float> values = {1.0f,
                                       -2.0f,
                                       0x1p-24f,
                                       1023 * 0x1p-24f,
                                       0x1p-14f,
                                       65504.0f,
                                       std::numeric_limits<float>::infinity(),
                                       -std::numeric_limits<float>::infinity(),
                                       -0.0f};
    const fs::path file = dir / "f16.safetensors";
    {
        SafetensorsWriter out(file, {{"h", DType::f16, {bits.size()}}});
        out.write_next(bits.data(), bits.size() * 2);
        out.commit();
    }
    const SafetensorsFile st(file);
    std::vector<float> got(bits.size());
    st.read_f32(st.tensors()[0], got.data());
    for (std::size_t i = 0; i < values.size(); ++i)
        EXPECT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(values[i])) << "f16 " << bits[i];
    EXPECT_TRUE(std::isnan(got.back()));
}

TEST_F(Safetensors, MalformedFilesAreRefusedNamingTheProblem) {
    const std::string eight = bytes_of<float>({1.0f, 2.0f});
    std::ofstream(dir / "short.safetensors") << "abc";
    const std::string short_message = refusal(dir / "short.safetensors");
    EXPECT_NE(short_message.find("fewer than the 8 of the header's length"), std::string::npos) << short_message;
    {
        const std::uint64_t n = 1000;
        std::ofstream out(dir / "long.safetensors", std::ios::binary);
        out.write(reinterpret_cast<const char*>(&n), 8);
        out << "{}";
    }
    EXPECT_NE(refusal(dir / "long.safetensors").find("header's length is 1000 bytes, but the file has 10"),
              std::string::npos);

    const std::string b = R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
    expect_refused("not_json.st", "{\"b\": [", eight, "its header is not valid JSON");
    expect_refused("array.st", "[" + b + "]", eight, "does not start with '{'");
    expect_refused("start.st", " {" + b + "}", eight, "does not start with '{'");
    expect_refused("top.st", "{\"b\": 5}", eight, "tensor 'b' is 5, not an object");
    expect_refused("dtype.st", R"({"b":{"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]}})", eight,
                   "tensor 'b' has dtype \"F8_E4M3\", which adacc does not read");
    expect_refused("negative.st", R"({"b":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight,
                   "tensor 'b''s dimension is -2, not a non-negative integer");
    expect_refused("float.st", R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8.0]}})", eight,
                   "tensor 'b''s end is 8.0, not a non-negative integer");
    expect_refused("backwards.st", R"({"b":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight,
                   "tensor 'b' ends (0) before it begins (8)");
    expect_refused("size.st", R"({"b":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight,
                   "tensor 'b' is F32 of shape [3], 12 bytes, but its data_offsets span 8");
    expect_refused("outside.st", R"({"b":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight,
                   "its tensors need 16 bytes of data, the file holds 8 after the header");
    expect_refused(
        "overlap.st",
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
        eight + "1234", "tensor 'b' (bytes 4..) overlaps 'a' (..bytes 8)");
    expect_refused(
        "gap.st",
        R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
        eight + "1234", "4 bytes before tensor 'b' belong to no tensor");
    expect_refused("trailing.st", "{" + b + "}", eight + "xyz", "its last 3 bytes belong to no tensor");
    expect_refused("twice.st", "{" + b + "," + b + "}", eight, "its header names 'b' twice");
    expect_refused("field_twice.st", R"({"b":{"dtype":"F32","dtype":"F16","shape":[2],"data_offsets":[0,8]}})", eight,
                   "its header names 'dtype' twice");
    expect_refused("metadata.st", R"({"__metadata__":{"format":1},)" + b + "}", eight,
                   "__metadata__ 'format' is 1, not a string");
    expect_refused("field.st", R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", eight,
                   "tensor 'b' has an unknown field 'x'");
    expect_refused("missing.st", R"({"b":{"dtype":"F32","data_offsets":[0,8]}})", eight,
                   "tensor 'b' lacks one of dtype, shape, data_offsets");
    expect_refused("overflow.st", R"({"b":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
                   eight, "tensor 'b''s size overflows 64 bits");
}

TEST_F(Safetensors, AnEmptyFileIsValidAndOtherDtypesAreNotReadAsFloats) {
    EXPECT_TRUE(SafetensorsFile(file_with(dir, "empty.st", "{}", "")).tensors().empty());
    const fs::path file = file_with(dir, "ints.st", R"({"i":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})",
                                    bytes_of<std::int32_t>({1, 2}));
    const SafetensorsFile st(file);
    float values[2];
    try {
        st.read_f32(st.tensors()[0], values);
        FAIL() << "I32 read as floats";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("stores tensor 'i' as I32, but adacc reads F32, F16 and BF16"),
                  std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace adacc
