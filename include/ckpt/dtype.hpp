#pragma once
/// \file
/// The element types of the safetensors format and the C++ scalars that carry them.

#include <bit>
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

}  // namespace ckpt

// The dtypes' properties and the scalars' table (ckpt::detail::dtype_of_scalar, which `scalar`
// below checks) name the enumerators above: they come after them.
#include <ckpt/detail/dtype_traits.hpp>

namespace ckpt {

/// The file's spelling of `t` ("F32", "BOOL", "F8_E4M3", ...).
/// \throws nothing
[[nodiscard]] std::string_view to_string(dtype t) noexcept;

/// The dtype spelled `s` in a file, or `std::nullopt` if the format does not define it.
/// \throws nothing
[[nodiscard]] std::optional<dtype> dtype_from_string(std::string_view s) noexcept;

/// Writes the file's spelling of `t`.
/// \throws whatever the stream throws
std::ostream& operator<<(std::ostream& out, dtype t);

/// A C++ element type with a safetensors dtype: bool, the fixed-width integers, Eigen::half,
/// Eigen::bfloat16, float, double and std::complex<float>. `char`, `long double` and
/// `std::complex<double>` are not: the format has no dtype for them.
template <class T>
concept scalar = requires { detail::dtype_of_scalar<std::remove_cv_t<T>>::value; };

/// The dtype of the scalar `T` (`dtype_of<float> == dtype::f32`).
template <scalar T>
inline constexpr dtype dtype_of = detail::dtype_of_scalar<std::remove_cv_t<T>>::value;

}  // namespace ckpt
