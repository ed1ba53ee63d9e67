// Elementwise exp and tanh written so that GCC vectorises them inside `#pragma omp simd`
// loops (libm's expf / tanhf are scalar calls and dominated the GELU and classifier kernels).
// Host code that must agree with the CPU kernels (the eval scorer) uses the same functions.
// exp: Cephes' single-precision algorithm, x = n ln2 + r with |r| <= ln2/2, a degree-6
// polynomial for e^r, then 2^n from the exponent bits; about 2 ulp over the float range.
#pragma once

#include <cstdint>
#include <cstring>

namespace adacc {

#pragma omp declare simd notinbranch
inline float exp_approx(float x) {
    x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

// tanh(u) = 1 - 2 / (1 + e^(2u)); saturates correctly at both ends (absolute error ~1e-7).
#pragma omp declare simd notinbranch
inline float tanh_approx(float u) { return 1.0f - 2.0f / (1.0f + exp_approx(2.0f * u)); }

}  // namespace adacc
