// Activation tensors as kernels receive them: a pointer and its element type. The model's
// activations are fp32 (the CPU's, and CUDA's exactness mode) or bf16 (CUDA's mixed precision);
// dropout masks and the bitpack codec's input are bytes. A kernel of kernels/ops.inc takes an
// Act (written) or ConstAct (read) wherever the element type follows the model's dtype, and
// reads it through as<T>(), which refuses any other type, so a kernel never reads bf16 bits as
// floats. Both are built implicitly from a typed pointer (float*, bf16*, unsigned char*), so an
// fp32 caller passes its float* as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "src/common/dtype.h"

namespace adacc {

// A bfloat16 as stored in memory: the high 16 bits of an IEEE-754 float (the layout of CUDA's
// __nv_bfloat16, which device code reads in its place).
struct bf16 {
    std::uint16_t bits = 0;
};

// Round to nearest, ties to even (what CUDA's __float2bfloat16_rn does); NaN stays a quiet NaN.
inline bf16 to_bf16(float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16{static_cast<std::uint16_t>(u >> 16)};
}

inline float to_float(bf16 x) {
    const std::uint32_t u = static_cast<std::uint32_t>(x.bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <>
constexpr DType dtype_of<unsigned char>() { return DType::u8; }

namespace detail {
[[noreturn]] inline void wrong_element_type(DType held, DType wanted) {
    throw std::logic_error("a kernel read " + std::string(dtype_name(held)) + " activations as " +
                           std::string(dtype_name(wanted)) + " (this backend's kernels do not run that dtype)");
}
}  // namespace detail

class Act {
public:
    Act() = default;
    Act(std::nullptr_t) {}
    Act(float* p) : data_(p), dtype_(DType::f32) {}
    Act(bf16* p) : data_(p), dtype_(DType::bf16) {}
    Act(unsigned char* p) : data_(p), dtype_(DType::u8) {}
    Act(void* p, DType dtype) : data_(p), dtype_(dtype) {}

    void* data() const { return data_; }
    DType dtype() const { return dtype_; }
    explicit operator bool() const { return data_ != nullptr; }
    // The pointer as T*; a logic_error when the tensor holds another element type.
    template <typename T>
    T* as() const {
        if (data_ && dtype_ != dtype_of<T>()) detail::wrong_element_type(dtype_, dtype_of<T>());
        return static_cast<T*>(data_);
    }

private:
    void* data_ = nullptr;
    DType dtype_ = DType::f32;
};

class ConstAct {
public:
    ConstAct() = default;
    ConstAct(std::nullptr_t) {}
    ConstAct(const float* p) : data_(p), dtype_(DType::f32) {}
    ConstAct(const bf16* p) : data_(p), dtype_(DType::bf16) {}
    ConstAct(const unsigned char* p) : data_(p), dtype_(DType::u8) {}
    ConstAct(const void* p, DType dtype) : data_(p), dtype_(dtype) {}
    ConstAct(Act a) : data_(a.data()), dtype_(a.dtype()) {}

    const void* data() const { return data_; }
    DType dtype() const { return dtype_; }
    explicit operator bool() const { return data_ != nullptr; }
    template <typename T>
    const T* as() const {
        if (data_ && dtype_ != dtype_of<T>()) detail::wrong_element_type(dtype_, dtype_of<T>());
        return static_cast<const T*>(data_);
    }

private:
    const void* data_ = nullptr;
    DType dtype_ = DType::f32;
};

}  // namespace adacc
