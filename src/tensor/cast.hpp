#pragma once
// Not part of the API: element-wise conversion of raw bytes between dtypes, by the rules of
// `ckpt::cast` (ckpt/adapt.hpp), for the library's casts (src/tensor/cast.cpp, the extraction's checks in
// src/structures/params.cpp, the adapters in src/tensor/adapt.cpp) and the tests. The cast of a tensor is
// detail::cast_tensor (ckpt/detail/cast.hpp).

#include <ckpt/dtype.hpp>

#include <cstddef>
#include <span>

namespace ckpt::detail {

// True if entries of dtype `from` can be converted to `to` by `cast`: `from == to`, or neither is
// a sub-byte dtype (F6_E2M3, F6_E3M2, F4); false for a value that is no dtype.
[[nodiscard]] bool can_cast(dtype from, dtype to) noexcept;

// Converts `count` elements of dtype `from`, read from `in` (little-endian, C order, any
// alignment), to dtype `to`, written to the start of `out`, by the rules of `ckpt::cast`. `in`
// and `out` may be longer than `count` elements need (the rest is neither read nor written) and
// must not overlap. When `from == to` the bytes are copied unchanged (whole bytes only).
// Throws std::invalid_argument if `from != to` and either dtype is sub-byte (the message is the
// one of `cast`), if `from == to` is sub-byte and `count` elements are not a whole number of
// bytes, or if `in` or `out` is shorter than `count` elements need (the message gives both
// sizes). Nothing is written then.
void convert(dtype from, std::span<const std::byte> in, dtype to, std::span<std::byte> out, std::size_t count);

}  // namespace ckpt::detail
