#pragma once
// Not part of the API: the cast of a tensor, which the extraction's templates (params.hpp) call
// to read an entry into a leaf of another dtype; ckpt::cast (ckpt/adapt.hpp) is the public face,
// and gives the rules. Compiled in src/tensor/cast.cpp.

#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

namespace ckpt::detail {

// `x` converted element-wise to `to` (`x` itself when `to == x.dtype()`): ckpt::cast of a tensor.
// Throws std::invalid_argument if `to != x.dtype()` and either dtype is sub-byte, std::bad_alloc.
[[nodiscard]] tensor cast_tensor(const tensor& x, dtype to);

}  // namespace ckpt::detail
