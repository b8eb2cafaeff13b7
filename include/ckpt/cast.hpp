#pragma once
/// \file
/// Element-wise conversion between dtypes: `cast` for tensors, `convert` for raw bytes.
///
/// Every whole-byte dtype converts to every other: BOOL, U8..U64, I8..I64, F16, BF16, F32, F64,
/// C64 and the five F8 formats. The sub-byte formats F6_E2M3, F6_E3M2 and F4 are kept as raw
/// bytes only and convert to nothing but themselves.
///
/// ## The F8 formats
///
/// | dtype         | exponent, mantissa bits | bias | infinities | NaN                   | zero     | largest |
/// |---------------|-------------------------|------|------------|-----------------------|----------|---------|
/// | F8_E4M3       | 4, 3 (OCP E4M3FN)       | 7    | none       | S.1111.111 only       | +0, -0   | 448     |
/// | F8_E5M2       | 5, 2 (OCP E5M2)         | 15   | S.11111.00 | S.11111.{01,10,11}    | +0, -0   | 57344   |
/// | F8_E4M3FNUZ   | 4, 3                    | 8    | none       | 0x80 only             | +0 only  | 240     |
/// | F8_E5M2FNUZ   | 5, 2                    | 16   | none       | 0x80 only             | +0 only  | 57344   |
/// | F8_E8M0       | 8, 0, no sign (OCP E8M0)| 127  | none       | 0xFF only             | none     | 2^127   |
///
/// All but F8_E8M0 have subnormals (exponent field 0). An F8_E8M0 code `e` is the value
/// 2^(e - 127), from 2^-127 (0x00) to 2^127 (0xFE). These follow the OCP 8-bit floating point
/// (OFP8) and Microscaling (MX) specifications and ml_dtypes' `float8_e4m3fn`, `float8_e5m2`,
/// `float8_e4m3fnuz`, `float8_e5m2fnuz` and `float8_e8m0fnu`.
///
/// ## Conversion rules
///
/// - **Decoding** F16, BF16, F32 and the F8 formats to a wider floating dtype is exact
///   (the value, the sign of zero and the infinities are kept).
/// - **Rounding**: a value the floating target cannot hold exactly (from a wider floating
///   dtype, or an integer too wide for the target's significand) is rounded once, to nearest,
///   ties to even (to the encoding whose last bit is 0), including into the subnormal range.
///   There is no double rounding: F64 and 64-bit integers are rounded directly to the target.
/// - **Overflow** (a value that rounds, with the exponent range unbounded, to a magnitude above
///   the largest finite one) gives infinity with the value's sign where the format has
///   infinities (F16, BF16, F32, F8_E5M2); for the formats without (F8_E4M3, both FNUZ formats
///   and F8_E8M0) it gives NaN: the non-saturating conversion of ml_dtypes and PyTorch (so 464
///   still rounds to 448 in F8_E4M3, while anything above 464 is NaN). Infinities become NaN
///   likewise in those formats.
/// - **Zero**: -0 stays -0 where the format has it, else (FNUZ) becomes +0; a negative value
///   that rounds to zero in an FNUZ format is +0. F8_E8M0 has no zero and no sign: zero and
///   negative values become its NaN (as in ml_dtypes); positive values below 2^-127 become
///   2^-127 (0x00), its nearest value.
/// - **NaN** stays NaN. Its sign is kept where the target has signed NaNs (F16, BF16, F32,
///   F64, C64, F8_E4M3, F8_E5M2); the FNUZ NaN (0x80) and the F8_E8M0 NaN decode to +NaN. Where
///   the target has NaN payloads, the payload's leading bits are kept (shifted) and nothing
///   else: a NaN that would thereby lose every payload bit gets the quiet bit (the leading
///   mantissa bit). So converting to a wider floating dtype and back restores every bit,
///   NaNs included.
/// - **Floating to integer** truncates toward zero; NaN gives 0; a value beyond the integer
///   type's range (infinities included) saturates to its minimum or maximum (-1.5 to U8 is 0).
/// - **Integer to integer** keeps the low bits (two's-complement wrap, as NumPy's `astype`):
///   300 (I32) to U8 is 44, -1 (I8) to U16 is 65535, 2^63 (U64) to I64 is -2^63.
/// - **To BOOL**: 1 if the source is nonzero, else 0 (NaN counts as nonzero; ±0 as zero).
/// - **From BOOL**: 0 or 1 in the target dtype; any nonzero source byte counts as 1.
/// - **C64**: to any other dtype (BOOL included), the real part is converted and the imaginary
///   part discarded; from any other dtype, the value becomes the real part (rounded to F32 as
///   above) and the imaginary part is +0.
///
/// The results do not depend on the floating-point environment's flush-to-zero or
/// denormals-are-zero modes; the default rounding mode (to nearest) is assumed.

#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include <cstddef>
#include <span>

namespace ckpt {

/// True if entries of dtype `from` can be converted to `to` by `cast()`: `from == to`, or
/// neither is a sub-byte dtype (F6_E2M3, F6_E3M2, F4).
/// \throws nothing
[[nodiscard]] bool can_cast(dtype from, dtype to) noexcept;

/// `x` converted element-wise to `to`, with `x`'s shape, following the rules in this file.
/// Returns `x` itself (sharing its bytes) when `to == x.dtype()`, whatever the dtype.
/// \throws std::invalid_argument if `to != x.dtype()` and either dtype is sub-byte (F6_E2M3,
///   F6_E3M2, F4: raw bytes only). The message names both dtypes and reads, e.g.,
///   `ckpt: cannot cast F32 to F4: F6_E2M3, F6_E3M2 and F4 are raw bytes only`.
/// \throws std::bad_alloc if the result's storage cannot be allocated.
[[nodiscard]] tensor cast(const tensor& x, dtype to);

/// Converts `count` elements of dtype `from`, read from `in` (little-endian, C order, any
/// alignment), to dtype `to`, written to the start of `out`, following the rules in this
/// file. For callers that convert straight into their own storage. `in` and `out` may be
/// longer than `count` elements need (the rest is neither read nor written) and must not
/// overlap. When `from == to` the bytes are copied unchanged (whole bytes only).
/// \throws std::invalid_argument if `from != to` and either dtype is sub-byte (the message is
///   the one of `cast`), if `from == to` is sub-byte and `count` elements are not a whole
///   number of bytes, or if `in` or `out` is shorter than `count` elements need (the message
///   gives both sizes). Nothing is written then.
void convert(dtype from, std::span<const std::byte> in, dtype to, std::span<std::byte> out,
             std::size_t count);

}  // namespace ckpt
