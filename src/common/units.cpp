// Byte counts as people read and write them: format_bytes, and the sizes of configs and flags
// (parse_size, with its table of units).
#include "src/common/units.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <optional>

#include "src/common/errors.h"

namespace adacc {

namespace {

struct SizeUnit {
    std::string_view suffix;  // lower case
    std::uint64_t multiplier;
};
constexpr std::uint64_t kKiB = 1024;
constexpr SizeUnit kSizeUnits[] = {
    {"", 1},
    {"b", 1},
    {"k", kKiB},
    {"kib", kKiB},
    {"kb", 1000},
    {"m", kKiB* kKiB},
    {"mib", kKiB* kKiB},
    {"mb", 1000 * 1000},
    {"g", kKiB* kKiB* kKiB},
    {"gib", kKiB* kKiB* kKiB},
    {"gb", 1000ull * 1000 * 1000},
    {"t", kKiB* kKiB* kKiB* kKiB},
    {"tib", kKiB* kKiB* kKiB* kKiB},
    {"tb", 1000ull * 1000 * 1000 * 1000},
    {"p", kKiB* kKiB* kKiB* kKiB* kKiB},
    {"pib", kKiB* kKiB* kKiB* kKiB* kKiB},
    {"pb", 1000ull * 1000 * 1000 * 1000 * 1000},
    {"e", kKiB* kKiB* kKiB* kKiB* kKiB* kKiB},
    {"eib", kKiB* kKiB* kKiB* kKiB* kKiB* kKiB},
    {"eb", 1000ull * 1000 * 1000 * 1000 * 1000 * 1000},
};

constexpr const char* kTooLarge = "too large (sizes are limited to 16 EiB)";

}  // namespace

SizeParse try_parse_size(std::string_view text) {
    const auto trimmed = trim_blanks(text);
    const auto number_end = trimmed.find_first_not_of("0123456789.");
    const auto number = trimmed.substr(0, number_end);
    std::string unit(
        trim_blanks(number_end == std::string_view::npos ? std::string_view{} : trimmed.substr(number_end)));
    std::ranges::transform(unit, unit.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });

    const auto* found = std::ranges::find_if(kSizeUnits, [&](const SizeUnit& u) { return u.suffix == unit; });
    if (number.empty() || found == std::end(kSizeUnits))
        return {0, "expected a size such as \"24GiB\", \"1.5 GB\", \"512M\" or \"123456\" (bytes)"};
    // Whole numbers are exact in integers; decimals go through long double (64-bit mantissa).
    if (const auto whole = parse_whole<std::uint64_t>(number)) {
        if (*whole > std::numeric_limits<std::uint64_t>::max() / found->multiplier) return {0, kTooLarge};
        return {*whole * found->multiplier, ""};
    }
    const auto real = parse_whole<double>(number);
    if (!real) return {0, "malformed number '" + std::string(number) + "'"};
    const long double bytes = std::round(static_cast<long double>(*real) * found->multiplier);
    if (bytes >= 18446744073709551616.0L) return {0, kTooLarge};
    return {static_cast<std::uint64_t>(bytes), ""};
}

std::uint64_t parse_size(std::string_view text) {
    const auto parsed = try_parse_size(text);
    if (!parsed.error.empty()) throw UserError("bad size '" + std::string(text) + "': " + parsed.error);
    return parsed.bytes;
}

std::string format_bytes(std::uint64_t bytes) {
    static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) return std::to_string(bytes) + " B";
    double value = static_cast<double>(bytes) / 1024;
    std::size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
        value /= 1024.0;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
    return text;
}

}  // namespace adacc
