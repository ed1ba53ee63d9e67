// GPT-2's GELU, tanh approximation, and its derivative: the one formula every GELU here evaluates
// (kernels/cpu/gelu.cpp, the CPU twin of the fused matmuls, kernels/cuda/gelu.cu and the emulated
// cuBLASLt's GELU epilogues), in fp32 on an fp32 input:
//   gelu(x)  = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// with tanh(u) = 1 - 2 / (1 + e^(2u)) for the exp the caller passes (the CPU's vectorised
// exp_approx, or a library expf), which saturates to +-1 at both ends without a NaN.
#pragma once

#include "kernels/host_device.h"

namespace adacc {

constexpr float kGeluSqrt2OverPi = 0.7978845608028654f;

// A matmul with GELU in its epilogue (matmul_gelu_forward, matmul_dgelu_backward) needs its GELU
// input's columns (its row stride) to be a multiple of this: cuBLASLt's rule for the epilogue's
// auxiliary matrix's leading dimension.
constexpr int kGeluEpilogueColumns = 8;

template <typename Exp>
ADACC_HOST_DEVICE inline float gelu_tanh_of(float u, Exp exp) {
    return 1.0f - 2.0f / (1.0f + exp(2.0f * u));
}

template <typename Exp>
ADACC_HOST_DEVICE inline float gelu_value(float x, Exp exp) {
    return 0.5f * x * (1.0f + gelu_tanh_of(kGeluSqrt2OverPi * (x + 0.044715f * x * x * x), exp));
}

template <typename Exp>
ADACC_HOST_DEVICE inline float gelu_derivative(float x, Exp exp) {
    const float th = gelu_tanh_of(kGeluSqrt2OverPi * (x + 0.044715f * x * x * x), exp);
    const float sech2 = 1.0f - th * th;
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
}

}  // namespace adacc
