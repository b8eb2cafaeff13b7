#pragma once
/// \file
/// The element types of the safetensors format and the C++ scalars that carry them.

#include <Eigen/Core>

#include <bit>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string_view>
#include <type_traits>

namespace ckpt {

static_assert(std::endian::native == std::endian::little,
              "ckpt: safetensors files are little-endian and ckpt maps their bytes directly; "
              "big-endian hosts are not supported");

/// Every element type the safetensors format defines, spelled as in the file by `to_string`.
///
/// The 8-, 6- and 4-bit floating formats have no Eigen scalar: entries of these types are kept
/// as raw bytes; the F8 ones convert to and from floating leaves with `cast = true`.
enum class dtype : std::uint8_t {
  boolean,       ///< BOOL: one byte, 0 or 1
  u8,            ///< U8
  i8,            ///< I8
  u16,           ///< U16
  i16,           ///< I16
  u32,           ///< U32
  i32,           ///< I32
  u64,           ///< U64
  i64,           ///< I64
  f16,           ///< F16: IEEE 754 binary16
  bf16,          ///< BF16: bfloat16
  f32,           ///< F32
  f64,           ///< F64
  c64,           ///< C64: two F32, real then imaginary
  f8_e4m3,       ///< F8_E4M3: OCP E4M3FN (no infinities, NaN is S.1111.111)
  f8_e5m2,       ///< F8_E5M2: OCP E5M2 (IEEE-like)
  f8_e8m0,       ///< F8_E8M0: OCP scale format, exponent only (0xFF is NaN)
  f8_e4m3fnuz,   ///< F8_E4M3FNUZ: bias 8, no negative zero, NaN is 0x80
  f8_e5m2fnuz,   ///< F8_E5M2FNUZ: bias 16, no negative zero, NaN is 0x80
  f6_e2m3,       ///< F6_E2M3: 6-bit, packed; raw bytes only
  f6_e3m2,       ///< F6_E3M2: 6-bit, packed; raw bytes only
  f4,            ///< F4 (E2M1): 4-bit, packed; raw bytes only
};

namespace detail {
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

}  // namespace detail

/// The file's spelling of `t` ("F32", "BOOL", "F8_E4M3", ...).
/// \throws nothing
[[nodiscard]] std::string_view to_string(dtype t) noexcept;

/// The dtype spelled `s` in a file, or `std::nullopt` if the format does not define it.
/// \throws nothing
[[nodiscard]] std::optional<dtype> dtype_from_string(std::string_view s) noexcept;

/// Writes the file's spelling of `t`.
/// \throws whatever the stream throws
std::ostream& operator<<(std::ostream& out, dtype t);

namespace detail {
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
}  // namespace detail

/// A C++ element type with a safetensors dtype: bool, the fixed-width integers, Eigen::half,
/// Eigen::bfloat16, float, double and std::complex<float>. `char`, `long double` and
/// `std::complex<double>` are not: the format has no dtype for them.
template <class T>
concept scalar = requires { detail::dtype_of_scalar<std::remove_cv_t<T>>::value; };

/// The dtype of the scalar `T` (`dtype_of<float> == dtype::f32`).
template <scalar T>
inline constexpr dtype dtype_of = detail::dtype_of_scalar<std::remove_cv_t<T>>::value;

}  // namespace ckpt
