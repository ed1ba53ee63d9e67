// Element types of tensors stored on disk (checkpoints) and in memory. The numeric values are
// part of the checkpoint file format: never renumber an existing entry, only append.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace adacc {

enum class DType : std::uint32_t {
    f32 = 0,
    f16 = 1,
    bf16 = 2,
    f64 = 3,
    i8 = 4,
    u8 = 5,
    i16 = 6,
    u16 = 7,
    i32 = 8,
    u32 = 9,
    i64 = 10,
    u64 = 11,
};

constexpr std::size_t dtype_size(DType t) {
    switch (t) {
        case DType::i8:
        case DType::u8: return 1;
        case DType::f16:
        case DType::bf16:
        case DType::i16:
        case DType::u16: return 2;
        case DType::f32:
        case DType::i32:
        case DType::u32: return 4;
        case DType::f64:
        case DType::i64:
        case DType::u64: return 8;
    }
    return 0;
}

constexpr std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::f32: return "f32";
        case DType::f16: return "f16";
        case DType::bf16: return "bf16";
        case DType::f64: return "f64";
        case DType::i8: return "i8";
        case DType::u8: return "u8";
        case DType::i16: return "i16";
        case DType::u16: return "u16";
        case DType::i32: return "i32";
        case DType::u32: return "u32";
        case DType::i64: return "i64";
        case DType::u64: return "u64";
    }
    return "unknown";
}

// The DType a raw on-disk code stands for; empty for codes this build does not know (a file
// written by a newer version, or corruption).
constexpr std::optional<DType> dtype_from_code(std::uint32_t code) {
    if (code > static_cast<std::uint32_t>(DType::u64)) return std::nullopt;
    return static_cast<DType>(code);
}

}  // namespace adacc
