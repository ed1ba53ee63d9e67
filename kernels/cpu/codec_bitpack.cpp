// Bit-packing for dropout masks (docs/design.md, 'Codecs'), lossless: the mask's bytes hold 0 or 1,
// so one bit per element is all it needs (8x smaller). Bit i % 8 of byte i / 8 is element i; any
// nonzero byte packs as 1 and unpacks as 1. The blob is A(ceil(n / 8)) bytes, padding zeroed, no
// header. Reached through compress / decompress with Codec::bitpack (n = rows * cols).
#include <cstring>

#include "kernels/cpu/codecs.h"

namespace adacc::cpu::codec_detail {
namespace {

// Eight mask bytes -> one byte of bits, and back (the scalar path and the tails).
std::uint8_t pack8(const unsigned char* m, std::size_t n) {  // n <= 8
    std::uint8_t b = 0;
    for (std::size_t i = 0; i < n; ++i) b = static_cast<std::uint8_t>(b | (m[i] != 0) << i);
    return b;
}
void unpack8(std::uint8_t b, unsigned char* m, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) m[i] = (b >> i) & 1;
}

}  // namespace

std::size_t compress_bitpack(const unsigned char* mask, std::size_t n, void* dst) {
    auto* bits = static_cast<std::uint8_t*>(dst);
    const std::size_t blocks = n / 64;  // 64 mask bytes -> 8 bytes of bits
#pragma omp parallel for schedule(static)
    for (std::size_t b = 0; b < blocks; ++b) {
#if ADACC_CODEC_AVX512
        // One compare per 64 bytes: bit i of the mask register is byte i != 0, in element order.
        const __m512i v = _mm512_loadu_si512(mask + 64 * b);
        const std::uint64_t word = _mm512_test_epi8_mask(v, v);
        std::memcpy(bits + 8 * b, &word, 8);  // little-endian: byte j holds elements 8j..8j+7
#else
        for (std::size_t j = 0; j < 8; ++j) bits[8 * b + j] = pack8(mask + 64 * b + 8 * j, 8);
#endif
    }
    for (std::size_t i = 64 * blocks; i < n; i += 8) bits[i / 8] = pack8(mask + i, n - i < 8 ? n - i : 8);
    zero_padding(bits, (n + 7) / 8);
    return align64((n + 7) / 8);
}

void decompress_bitpack(const void* blob, std::size_t n, unsigned char* mask) {
    const auto* bits = static_cast<const std::uint8_t*>(blob);
    const std::size_t blocks = n / 64;
#pragma omp parallel for schedule(static)
    for (std::size_t b = 0; b < blocks; ++b) {
#if ADACC_CODEC_AVX512
        std::uint64_t word;
        std::memcpy(&word, bits + 8 * b, 8);
        _mm512_storeu_si512(mask + 64 * b, _mm512_maskz_mov_epi8(word, _mm512_set1_epi8(1)));
#else
        for (std::size_t j = 0; j < 8; ++j) unpack8(bits[8 * b + j], mask + 64 * b + 8 * j, 8);
#endif
    }
    for (std::size_t i = 64 * blocks; i < n; i += 8) unpack8(bits[i / 8], mask + i, n - i < 8 ? n - i : 8);
}

}  // namespace adacc::cpu::codec_detail
