#pragma once
// Not part of the API (tensor.hpp's tensor::make calls these; compiled in src/tensor/tensor.cpp): the
// elements and the bytes of a tensor's shape, checked.

#include <ckpt/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace ckpt::detail {

// The number of elements of `shape` (1 for a scalar) (a tensor's `numel()`).
// Throws std::invalid_argument if an extent is negative or the product overflows 63 bits.
[[nodiscard]] std::int64_t numel_of(std::span<const std::int64_t> shape);

// The number of bytes `numel` elements of `type` occupy (a tensor's `nbytes()`).
// Throws std::invalid_argument if that is not a whole number of bytes or overflows.
[[nodiscard]] std::size_t nbytes_of(dtype type, std::int64_t numel);

}  // namespace ckpt::detail
