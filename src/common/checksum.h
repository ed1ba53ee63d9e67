// The checksum checkpoints store per tensor, that the ranks of a job compare their weights with
// (src/train/rank_agreement.h) and that fingerprints a plan (src/engine/activation_plan.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

namespace adacc {

// 64-bit FNV-1a over little-endian 64-bit words: fast enough to run while tensors stream to
// and from disk, and any single corrupted word always changes the result.
class Fnv64 {
public:
    // Every call but the last must pass a multiple of 8 bytes, so words never straddle calls.
    void update(const void* data, std::size_t bytes) {
        const auto* p = static_cast<const unsigned char*>(data);
        std::size_t i = 0;
        for (; i + 8 <= bytes; i += 8) {
            std::uint64_t word;
            std::memcpy(&word, p + i, 8);
            mix(word);
        }
        if (i < bytes) {
            std::uint64_t word = 0;
            std::memcpy(&word, p + i, bytes - i);
            mix(word);
        }
    }
    std::uint64_t value() const { return state_; }

private:
    void mix(std::uint64_t word) { state_ = (state_ ^ word) * 0x100000001b3ull; }
    std::uint64_t state_ = 0xcbf29ce484222325ull;
};

// A digest as messages and logs print it: "0x0123456789abcdef".
inline std::string format_digest(std::uint64_t digest) {
    char text[24];
    std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(digest));
    return text;
}

}  // namespace adacc
