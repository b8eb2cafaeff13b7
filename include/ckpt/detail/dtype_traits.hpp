#pragma once
// Not part of the API: the properties of the dtypes, and the table of the C++ scalars that carry
// them (behind dtype.hpp's `scalar` and `dtype_of`). dtype.hpp includes it after `enum class
// dtype`, which it needs: not to be included on its own.

#include <Eigen/Core>

#include <complex>
#include <cstddef>
#include <cstdint>

namespace ckpt::detail {

// The number of dtypes in `ckpt::dtype` (the library's tables and tests run over all of them).
inline constexpr std::size_t dtype_count = 22;

// Properties of the dtypes, for the library, its tools and tests.

// Bits per element of `t` (1 byte = 8 bits; F6 is 6, F4 is 4).
[[nodiscard]] constexpr std::size_t bit_width(dtype t) noexcept {
  switch (t) {
    case dtype::boolean: case dtype::u8: case dtype::i8:
    case dtype::f8_e4m3: case dtype::f8_e5m2: case dtype::f8_e8m0:
    case dtype::f8_e4m3fnuz: case dtype::f8_e5m2fnuz: return 8;
    case dtype::u16: case dtype::i16: case dtype::f16: case dtype::bf16: return 16;
    case dtype::u32: case dtype::i32: case dtype::f32: return 32;
    case dtype::u64: case dtype::i64: case dtype::f64: case dtype::c64: return 64;
    case dtype::f6_e2m3: case dtype::f6_e3m2: return 6;
    case dtype::f4: return 4;
  }
  return 0;
}

// True for the dtypes whose elements are whole bytes and have a C++ scalar in ckpt.
[[nodiscard]] constexpr bool has_scalar(dtype t) noexcept { return t <= dtype::c64; }

// True for F16, BF16, F32, F64 and the F8/F6/F4 formats.
[[nodiscard]] constexpr bool is_floating(dtype t) noexcept {
  return (t >= dtype::f16 && t <= dtype::f64) || t >= dtype::f8_e4m3;
}

// True for the sub-byte formats (F6, F4), which are readable as raw bytes only.
[[nodiscard]] constexpr bool is_sub_byte(dtype t) noexcept { return bit_width(t) % 8 != 0; }


template <class T> struct dtype_of_scalar {};
template <> struct dtype_of_scalar<bool> { static constexpr dtype value = dtype::boolean; };
template <> struct dtype_of_scalar<std::uint8_t> { static constexpr dtype value = dtype::u8; };
template <> struct dtype_of_scalar<std::int8_t> { static constexpr dtype value = dtype::i8; };
template <> struct dtype_of_scalar<std::uint16_t> { static constexpr dtype value = dtype::u16; };
template <> struct dtype_of_scalar<std::int16_t> { static constexpr dtype value = dtype::i16; };
template <> struct dtype_of_scalar<std::uint32_t> { static constexpr dtype value = dtype::u32; };
template <> struct dtype_of_scalar<std::int32_t> { static constexpr dtype value = dtype::i32; };
template <> struct dtype_of_scalar<unsigned long> { static constexpr dtype value = sizeof(unsigned long) == 8 ? dtype::u64 : dtype::u32; };
template <> struct dtype_of_scalar<long> { static constexpr dtype value = sizeof(long) == 8 ? dtype::i64 : dtype::i32; };
template <> struct dtype_of_scalar<unsigned long long> { static constexpr dtype value = dtype::u64; };
template <> struct dtype_of_scalar<long long> { static constexpr dtype value = dtype::i64; };
template <> struct dtype_of_scalar<Eigen::half> { static constexpr dtype value = dtype::f16; };
template <> struct dtype_of_scalar<Eigen::bfloat16> { static constexpr dtype value = dtype::bf16; };
template <> struct dtype_of_scalar<float> { static constexpr dtype value = dtype::f32; };
template <> struct dtype_of_scalar<double> { static constexpr dtype value = dtype::f64; };
template <> struct dtype_of_scalar<std::complex<float>> { static constexpr dtype value = dtype::c64; };

}  // namespace ckpt::detail
