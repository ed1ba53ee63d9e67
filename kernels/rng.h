// Counter-based RNG: a random value is a pure function of (key, counter), so any dropout
// mask can be regenerated bit for bit from its key without storing it, on any backend, in
// any order, with any number of threads. The mixer is splitmix64's finaliser applied twice
// (a stateless hash with full avalanche); keys combine (seed, step, micro-batch, layer, tensor).
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/host_device.h"

// mix64 and rng_uniform are also device code (kernels/cuda/dropout.cu draws its masks with them),
// so both backends share this one definition (ADACC_HOST_DEVICE). Keys are made on the host
// (rng_key).

namespace adacc {

ADACC_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Key of one random stream: every field changes the stream.
inline std::uint64_t rng_key(std::uint64_t seed, std::uint64_t step, std::uint64_t micro, std::uint64_t layer,
                             std::uint64_t tensor) {
    std::uint64_t k = mix64(seed);
    k = mix64(k ^ step);
    k = mix64(k ^ (micro << 32 | (layer & 0xFFFFFFFFull)));
    return mix64(k ^ tensor);
}

// Uniform in [0, 1) with 24 bits, from element `counter` of stream `key`.
ADACC_HOST_DEVICE inline float rng_uniform(std::uint64_t key, std::uint64_t counter) {
    return static_cast<float>(mix64(key ^ mix64(counter)) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal via Box-Muller from two uniforms of the stream (used for weight init).
inline double rng_normal(std::uint64_t key, std::uint64_t counter) {
    const double u1 = (static_cast<double>(mix64(key ^ mix64(2 * counter)) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(mix64(key ^ mix64(2 * counter + 1)) >> 11) * 0x1.0p-53;       // [0, 1)
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

}  // namespace adacc
