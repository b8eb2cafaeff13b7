#pragma once
// Not part of the API (mpi.hpp's read_flat and read_rows call them; compiled in
// src/mpi/sliced.cpp): the part of an entry such a read fills a leaf from.

#include <ckpt/checkpoint.hpp>
#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include <cstdint>
#include <string_view>

namespace ckpt::mpi::detail {

// The part of entry `name` of `t` holding elements [first, first + numel(shape)), as a tensor of
// `shape` that views the same bytes (in a loaded file, reading it reads only them).
// \throws std::invalid_argument if `t` has no entry `name`, if its dtype is not `type`, or if the
// range is outside it; `function` names the caller.
[[nodiscard]] tensor part_of(const checkpoint& t, std::string_view name, std::int64_t first, ckpt::dtype type,
                             const dims& shape, std::string_view function);

// The first element of rows [first_row, ...) of entry `name` of `t`, after checking that
// `local_shape` is a block of its rows that fits.
// \throws std::invalid_argument if `t` has no entry `name`, or `local_shape` is not such a block.
[[nodiscard]] std::int64_t first_of_rows(const checkpoint& t, std::string_view name, std::int64_t first_row,
                                         const dims& local_shape);

}  // namespace ckpt::mpi::detail
