#pragma once
// Not part of the API (the templates of section.hpp and params.hpp build these, through
// live_source.hpp): what the file writer and the copy into a checkpoint need of an entry, its
// header fields and a way to its C-order bytes, whether they already stand in memory (a tensor,
// a row-major leaf) or must be reordered on the way (a column-major leaf, a band of rows at a
// time).

#include <ckpt/checkpoint.hpp>
#include <ckpt/tensor.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace ckpt::detail {

struct entry_source {
  std::string name;
  ckpt::dtype dtype = ckpt::dtype::f32;
  dims shape;
  std::size_t nbytes = 0;
  // The C-order bytes, when they stand contiguous in memory.
  std::span<const std::byte> contiguous;
  // Otherwise: writes rows [first, first + count) in C order to `out`. A row is an outermost row
  // (nbytes / shape[0]), or for the file writer `row_bytes` bytes when that is not 0.
  std::function<void(std::size_t first, std::size_t count, std::byte* out)> write_rows;
  std::size_t row_bytes = 0;
  // When not null: the leaf object the bytes come from, which a snapshot may copy after it is
  // taken, since whatever changes it calls before_write first (detail/lazy_copy.hpp).
  const void* lazy_leaf = nullptr;
  // Keeps bytes alive that the source had to snapshot (a leaf type without a row writer).
  tensor keep_alive;
  // A slice (ckpt::mpi::sliced) when `first` >= 0: the bytes are elements [first, first +
  // numel(shape)) of the global tensor `name` of shape `global_shape`, flattened in C order.
  // Only the MPI saves take slices (ordered_entries refuses them elsewhere).
  dims global_shape;
  std::int64_t first = -1;

  // The bytes of one of the rows `write_rows` writes, and how many there are (nbytes > 0).
  [[nodiscard]] std::size_t row_size() const;
  [[nodiscard]] std::size_t row_count() const;
};

// The entries of a file in the order they are laid out in it: what the file writer takes
// (pointers into the sections that own the sources, so that a save copies none of them).
using entry_list = std::span<const entry_source* const>;

// The source of the entry `name` holding the tensor `x`, which it keeps alive: its bytes where
// they stand in memory, or, for an entry of a loaded file, rows of one byte read from the file
// with pread (a band ahead of the writer; never through the mapping, where a file truncated
// meanwhile would raise SIGBUS).
entry_source tensor_source(std::string name, const tensor& x);

}  // namespace ckpt::detail
