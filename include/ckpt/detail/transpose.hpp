#pragma once
// The reorder between Eigen's column-major storage and the file's C order: a matrix transpose.

#include <cstddef>

namespace ckpt::detail {

// Writes the transpose of `src`, a row-major rows x cols matrix of `element_size`-byte
// elements, to `dst` as a row-major cols x rows matrix. Cache-blocked, with SSE2 register tiles
// for 2-, 4- and 8-byte elements; a matrix of 1 MiB or more is split between this thread and a
// helper. `src` and `dst` must not overlap; they need no alignment.
void transpose(const std::byte* src, std::byte* dst, std::size_t rows, std::size_t cols,
               std::size_t element_size) noexcept;

// The same on sub-matrices: consecutive source rows are `src_stride` elements apart and
// consecutive destination rows `dst_stride` elements apart.
void transpose(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
               std::size_t rows, std::size_t cols, std::size_t element_size) noexcept;

}  // namespace ckpt::detail
