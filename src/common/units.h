// Units every part of adacc shares: byte counts as people read and write them, elapsed wall
// time, rounding sizes up to an alignment, and the number parsing configs and flags use.
#pragma once

#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace adacc {

// `text` without leading and trailing blanks (spaces, tabs).
inline std::string_view trim_blanks(std::string_view text) {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string_view::npos) return {};
    const auto last = text.find_last_not_of(" \t");
    return text.substr(first, last - first + 1);
}

// `text` as a whole Number, nothing before or after it (std::from_chars: no locale, no sign
// for unsigned types).
template <typename Number>
std::optional<Number> parse_whole(std::string_view text) {
    Number value{};
    const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    if (result.ec != std::errc() || result.ptr != text.data() + text.size()) return std::nullopt;
    return value;
}

// Bytes in the largest binary unit that keeps the number >= 1, two decimals: "1.50 GiB", "512 B".
std::string format_bytes(std::uint64_t bytes);

// Sizes as configs and flags write them: plain bytes ("123456") or a number (decimals allowed)
// followed by a unit, space optional, case-insensitive: B; K, KiB, M, MiB, G, GiB, T, TiB, P, PiB,
// E, EiB (powers of 1024); KB, MB, GB, TB, PB, EB (powers of 1000). "24GiB", "1.5 GiB", "512M".
// At most 2^64 - 1 bytes.
struct SizeParse {
    std::uint64_t bytes = 0;
    std::string error;  // empty on success: says what is wrong with the text
};
SizeParse try_parse_size(std::string_view text);
// The same; throws UserError ("bad size '...': why") when the text is not a size.
std::uint64_t parse_size(std::string_view text);

// Wall time since `start` on the steady clock, in milliseconds and in seconds.
inline double ms_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}
inline double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// `bytes` rounded up to a multiple of `alignment` (> 0).
constexpr std::size_t align_up(std::size_t bytes, std::size_t alignment) {
    return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace adacc
