// Bit-packing of dropout masks on CUDA (twin: kernels/cpu/codec_bitpack.cpp), lossless: bit i % 8
// of byte i / 8 is (mask[i] != 0). The blob is A(ceil(n / 8)) bytes, padding zero, no header.
// One thread per byte of bits: it reads its 8 mask bytes (one 8-byte load when the mask is
// 8-byte aligned) and writes one byte, so the warp's stores are contiguous.
#include <cstdint>

#include "kernels/cuda/codecs.cuh"

namespace adacc::cuda::codec_detail {
namespace {

constexpr int kThreads = 256;

// Byte b of the blob, b < A(ceil(n / 8)): elements 8b .. 8b + 7 below n, 0 past them (padding).
__global__ void bitpack_kernel(const unsigned char* mask, std::size_t n, std::size_t blob_bytes, std::uint8_t* bits) {
    const std::size_t b = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (b >= blob_bytes) return;
    const std::size_t first = 8 * b;
    std::uint8_t byte = 0;
    if (first + 8 <= n && reinterpret_cast<std::uintptr_t>(mask) % 8 == 0) {
        const std::uint64_t word = *reinterpret_cast<const std::uint64_t*>(mask + first);
        for (int e = 0; e < 8; ++e) byte = static_cast<std::uint8_t>(byte | (((word >> (8 * e)) & 0xff) != 0) << e);
    } else {
        for (int e = 0; first + e < n && e < 8; ++e) byte = static_cast<std::uint8_t>(byte | (mask[first + e] != 0) << e);
    }
    bits[b] = byte;
}

// Mask bytes 8b .. 8b + 7 (those below n) from byte b of the bits, each 0 or 1.
__global__ void bitunpack_kernel(const std::uint8_t* bits, std::size_t n, unsigned char* mask) {
    const std::size_t b = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::size_t first = 8 * b;
    if (first >= n) return;
    const std::uint32_t byte = bits[b];
    if (first + 8 <= n && reinterpret_cast<std::uintptr_t>(mask) % 8 == 0) {
        std::uint64_t word = 0;
        for (int e = 0; e < 8; ++e) word |= static_cast<std::uint64_t>((byte >> e) & 1) << (8 * e);
        *reinterpret_cast<std::uint64_t*>(mask + first) = word;
    } else {
        for (int e = 0; first + e < n && e < 8; ++e) mask[first + e] = static_cast<unsigned char>((byte >> e) & 1);
    }
}

}  // namespace

void compress_bitpack(const KernelContext& ctx, const unsigned char* mask, std::size_t n, void* dst) {
    const std::size_t blob_bytes = align64(div_up(n, 8));
    if (blob_bytes == 0) return;
    ADACC_LAUNCH(bitpack_kernel, ceil_div(blob_bytes, kThreads), kThreads, 0, ctx.stream)(
        mask, n, blob_bytes, static_cast<std::uint8_t*>(dst));
    check_launch("codec_compress (bitpack)");
}

void decompress_bitpack(const KernelContext& ctx, const void* blob, std::size_t n, unsigned char* mask) {
    if (n == 0) return;
    ADACC_LAUNCH(bitunpack_kernel, ceil_div(div_up(n, 8), kThreads), kThreads, 0, ctx.stream)(
        static_cast<const std::uint8_t*>(blob), n, mask);
    check_launch("codec_decompress (bitpack)");
}

}  // namespace adacc::cuda::codec_detail
