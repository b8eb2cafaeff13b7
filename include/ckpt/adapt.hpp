#pragma once
/// \file
/// Checkpoint-to-checkpoint adapters for weights that come from elsewhere (PyTorch, Hugging
/// Face): renaming entries, transposing `torch.nn.Linear` weights, splitting fused projections,
/// converting dtypes. Each returns a new checkpoint and leaves its input untouched; entries it
/// does not change are shared, not copied, and keep the input's metadata.
///
/// ```cpp
/// ckpt::checkpoint t = ckpt::load("pytorch_model_dir");             // sharded or not
/// t = ckpt::rename(t, [](std::string_view n) { return std::string(n.substr(n.find('.') + 1)); });
/// t = ckpt::transpose(t, "l1.w");                                    // [out, in] -> [in, out]
/// t = ckpt::split(t, "attn.qkv", {"attn.q", "attn.k", "attn.v"});   // fused along axis 0
/// t = ckpt::cast(t, ckpt::dtype::f32);                               // BF16 weights -> F32
/// t = ckpt::drop(t, ckpt::name_pattern(R"(\.attn\.bias$)"));          // GPT-2's causal masks
/// t = ckpt::rename(t, ckpt::name_pattern(R"(^transformer\.)"), "");  // by pattern
/// ```
///
/// Which results stay views of the input's bytes (mapped lazily for a loaded checkpoint):
/// `rename`, `select` and `drop` share every tensor; `split` along the outermost axis makes
/// views; `transpose`, `split` along an inner axis, `fuse` and `cast` copy the entries
/// they change.
///
/// Entry names are matched by `name_pattern`, a regular expression run by RE2: time linear in
/// the name's length and a bounded stack, whatever the name (`ckpt convert --rename` uses it).
///
/// ## Dtype conversion: `cast`
///
/// `cast` converts a tensor, or the floating entries of a checkpoint, element-wise to another
/// dtype. Two ways that agree: `extract_options::cast` (ckpt/params.hpp) converts while reading
/// into leaves of another dtype, through this one conversion (the same bits); use it to read a
/// checkpoint into a model of another precision, with nothing else kept; use `cast` to convert
/// a checkpoint you then save, inspect or read in parts, or only some of its entries (`filter`).
///
/// Every whole-byte dtype converts to every other: BOOL, U8..U64, I8..I64, F16, BF16, F32, F64,
/// C64 and the five F8 formats. The sub-byte formats F6_E2M3, F6_E3M2 and F4 are kept as raw
/// bytes only and convert to nothing but themselves.
///
/// ### The F8 formats
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
/// ### Conversion rules
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

#include <ckpt/checkpoint.hpp>
#include <ckpt/dtype.hpp>
#include <ckpt/name_pattern.hpp>
#include <ckpt/tensor.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

/// `t` with every entry renamed to `fn(name)`; the tensors and metadata are shared.
/// \throws std::invalid_argument if `fn` gives an empty name or `__metadata__` (the message
///   names the entry), or gives the same name to two entries (the message names both entries
///   and the new name); whatever `fn` throws.
[[nodiscard]] checkpoint rename(const checkpoint& t,
                                const std::function<std::string(std::string_view)>& fn);

/// `t` with every entry renamed to `pattern.replace(name, replacement)` (every match replaced;
/// `$1` for a group, see `name_pattern::replace`); entries it does not match keep their names.
/// \throws std::invalid_argument if `replacement` names a group `pattern` lacks (before any
///   entry is renamed), or as the other `rename` for the names it gives.
[[nodiscard]] checkpoint rename(const checkpoint& t, const name_pattern& pattern, std::string_view replacement);

/// `t` with the entry `name` transposed in its last two axes: a `[..., m, n]` tensor becomes
/// `[..., n, m]` (the batch of matrices in front is kept). This turns a `torch.nn.Linear` weight,
/// stored `[out, in]`, into the `[in, out]` matrix of `y = x W`, and back.
/// \throws std::invalid_argument if `t` has no entry `name`, if its rank is below 2, or if its
///   dtype is sub-byte (F6_E2M3, F6_E3M2, F4: elements are not byte-addressable); the message
///   names the entry and its shape or dtype.
[[nodiscard]] checkpoint transpose(const checkpoint& t, std::string_view name);

/// `t` with the entry `name` replaced by `into.size()` equal parts along `axis`, named
/// `into[0]`, `into[1]`, ... in order (a fused `qkv` projection into `q`, `k`, `v`). A negative
/// `axis` counts from the last (-1 is the last axis). Parts along axis 0 are zero-copy views of
/// the entry's bytes (a loaded entry stays mapped); parts along another axis are copies.
/// \throws std::invalid_argument if `t` has no entry `name`; if `into` is empty, holds an empty
///   name, `__metadata__` or a name twice, or names an entry of `t` other than `name`; if the
///   entry is a scalar or `axis` is out of range; if the extent along `axis` is not divisible
///   by `into.size()`; or if the dtype is sub-byte (F6, F4) and `axis` is not 0 or a part would
///   not be a whole number of bytes. The message names the entry, its shape, the axis and the
///   number of parts.
[[nodiscard]] checkpoint split(const checkpoint& t, std::string_view name,
                               const std::vector<std::string>& into, std::int64_t axis = 0);

/// `t` with the entries `parts` fused into one entry `into` (separate `q`, `k`, `v` projections
/// into one `qkv`): their concatenation, in the order given, along `axis` (a negative `axis`
/// counts from the last). The inverse of `split`:
/// `fuse(split(t, "qkv", {"q", "k", "v"}, a), {"q", "k", "v"}, "qkv", a)` is `t`. (Joining
/// whole checkpoints is Kaun's `concat`, ckpt/checkpoint.hpp.) The
/// parts must have one dtype, one rank, and the same extent on every axis but `axis`; `into` may
/// be the name of a part. The result is a copy (the input's tensors are not changed).
/// \throws std::invalid_argument if `parts` is empty or names an entry twice; if `t` has no
///   entry of a part's name; if `into` is empty, `__metadata__`, or an entry of `t` that is not a
///   part; if two parts differ in dtype or rank, or in the extent of an axis other than `axis`
///   (the message names both entries and their dtypes or shapes); if the parts are scalars or
///   `axis` is out of range; or if their dtype is sub-byte (F6, F4) and `axis` is not 0 or a part
///   is not a whole number of bytes.
[[nodiscard]] checkpoint fuse(const checkpoint& t, const std::vector<std::string>& parts, std::string_view into,
                              std::int64_t axis = 0);

/// `x` converted element-wise to `to`, with `x`'s shape, following the rules in this file: the
/// one conversion, which `extract_options::cast` applies too (see "Dtype conversion" above).
/// Returns `x` itself (sharing its bytes) when `to == x.dtype()`, whatever the dtype.
/// \throws std::invalid_argument if `to != x.dtype()` and either dtype is sub-byte (F6_E2M3,
///   F6_E3M2, F4: raw bytes only). The message names both dtypes and reads, e.g.,
///   `ckpt: cannot cast F32 to F4: F6_E2M3, F6_E3M2 and F4 are raw bytes only`.
/// \throws std::bad_alloc if the result's storage cannot be allocated.
[[nodiscard]] tensor cast(const tensor& x, dtype to);

/// `t` with its floating entries converted to `to`, following the rules in this file.
/// Only floating entries (F16, BF16, F32, F64, the F8, F6 and F4 formats) are converted, so
/// integer counters and masks keep their dtype; `filter`, if given, further selects them by
/// name. Without a filter, sub-byte entries (F6, F4: raw bytes only) are left as they are.
/// Entries already of dtype `to` are shared, not copied.
/// \throws std::invalid_argument if `filter` selects a sub-byte entry and `to` is another dtype,
///   or a floating entry cannot be converted to `to` (the message names the entry and both
///   dtypes); whatever `filter` throws.
[[nodiscard]] checkpoint cast(const checkpoint& t, dtype to,
                              const std::function<bool(std::string_view)>& filter = {});

}  // namespace ckpt
