#pragma once
// The reorder between Eigen's column-major storage and the file's C order: a matrix transpose.

#include <cstddef>

namespace ckpt::detail {

// Where a transpose's result goes: into the caches, for a destination read again soon (a band
// about to be hashed and written), or to memory, for one that is not (a leaf being loaded),
// which the tiled kernels write with non-temporal stores, saving the read of each destination
// line before it is written.
enum class destination { cached, memory };

// Writes the transpose of `src`, a row-major rows x cols matrix of `element_size`-byte
// elements, to `dst` as a row-major cols x rows matrix. Cache-blocked, with SSE2 register tiles
// for 2-, 4- and 8-byte elements; a matrix of 1 MiB or more is split between this thread and a
// helper. `src` and `dst` must not overlap; they need no alignment.
void transpose(const std::byte* src, std::byte* dst, std::size_t rows, std::size_t cols,
               std::size_t element_size, destination to = destination::cached) noexcept;

// The same on sub-matrices: consecutive source rows are `src_stride` elements apart and
// consecutive destination rows `dst_stride` elements apart.
void transpose(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
               std::size_t rows, std::size_t cols, std::size_t element_size,
               destination to = destination::cached) noexcept;

}  // namespace ckpt::detail
