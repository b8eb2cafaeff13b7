#pragma once
// Not part of the API (the leaf traits of leaf.hpp and detail/eigen_leaves.hpp call these): a
// leaf's scalar type checked, and the copies between a leaf's storage and an entry's C-order bytes.

#include <ckpt/detail/pages.hpp>
#include <ckpt/detail/transpose.hpp>
#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include <Eigen/Core>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace ckpt::detail {

template <class>
inline constexpr bool always_false = false;

// Emits the diagnostic for an arithmetic type the format has no dtype for; the instantiation
// context names the type.
template <class T>
struct unsupported_scalar {
  static_assert(always_false<T>,
                "ckpt: unsupported scalar type (see the instantiation below): safetensors has no "
                "dtype for it. Use bool, a fixed-width integer, Eigen::half, Eigen::bfloat16, "
                "float, double or std::complex<float>.");
  static constexpr dtype value = dtype::f32;
};

template <class S>
constexpr dtype checked_dtype_of() {
  if constexpr (scalar<S>) return dtype_of<S>;
  else return unsupported_scalar<S>::value;
}

// A foreign file may hold bool bytes other than 0 and 1, and such a byte in a bool object is
// undefined behaviour: rewrite the bytes as 0 or 1 through their representation.
template <class S>
void normalize_bools(S* out, std::size_t count) {
  if constexpr (std::is_same_v<S, bool>) {
    auto* bytes = reinterpret_cast<unsigned char*>(out);
    for (std::size_t i = 0; i < count; ++i) bytes[i] = bytes[i] != 0 ? 1 : 0;
  }
}

// An entry's C-order bytes into a leaf's storage: one copy (a loaded file's entry is read from
// the file with pread, a large one on two threads: tensor_access::read_bytes).
template <class S>
void copy_in(S* out, const tensor& in, std::size_t count) {
  if (count == 0) return;
  tensor_access::read_bytes(in, {reinterpret_cast<std::byte*>(out), count * sizeof(S)});
  normalize_bools(out, count);
}

template <class S>
void copy_out(std::byte* out, const S* in, std::size_t count) {
  if (count != 0) std::memcpy(out, static_cast<const void*>(in), count * sizeof(S));
}

// Column-major storage of a rows x cols matrix is the row-major storage of its transpose: written
// around the caches (a leaf is not read again right away); a loaded file's entry is read in bands
// with pread and each band transposed while it is in the cache (tensor_access::read_transposed).
template <class S>
void transpose_in(S* out, const tensor& in, std::size_t rows, std::size_t cols) {
  tensor_access::read_transposed(in, reinterpret_cast<std::byte*>(out), rows, cols, sizeof(S));
  normalize_bools(out, rows * cols);
}

template <class S>
void transpose_out(std::byte* out, const S* in, std::size_t rows, std::size_t cols) {
  transpose(reinterpret_cast<const std::byte*>(in), out, cols, rows, sizeof(S));
}

template <class Derived>
dims dense_shape(const Eigen::DenseBase<Derived>& m) {
  if constexpr (Derived::ColsAtCompileTime == 1) return {static_cast<std::int64_t>(m.rows())};
  else if constexpr (Derived::RowsAtCompileTime == 1) return {static_cast<std::int64_t>(m.cols())};
  else return {static_cast<std::int64_t>(m.rows()), static_cast<std::int64_t>(m.cols())};
}

// The number of outermost rows of a leaf of shape `shape` (a leaf of shape [] is one row).
inline std::size_t outer_rows(const dims& shape) {
  return shape.empty() ? 1 : static_cast<std::size_t>(shape.front());
}

// Throws std::invalid_argument unless a leaf's hook `hook` gave (or took) `given` bytes for an
// entry of `needed` bytes (src/structures/leaf.cpp).
void check_leaf_bytes(const char* hook, std::size_t given, std::size_t needed);

// `write` of a leaf through its hooks `contiguous` (if `Traits` has it) and `write_rows`: its
// contiguous bytes copied, or all its rows written, so that a layout is encoded once.
template <class Traits, class T>
void write_through_rows(const T& x, std::span<std::byte> out) {
  if (out.empty()) return;
  if constexpr (requires { Traits::contiguous(x); }) {
    if (const std::span<const std::byte> bytes = Traits::contiguous(x); !bytes.empty()) {
      check_leaf_bytes("contiguous", bytes.size(), out.size());
      std::memcpy(out.data(), bytes.data(), out.size());
      return;
    }
  }
  Traits::write_rows(x, 0, outer_rows(Traits::shape(x)), out.data());
}

// C-order rows [first, first + count) of a column-major rows x cols matrix: columns of its
// storage, the row-major cols x rows transpose. All rows at once go through the whole-matrix
// transpose (split between two threads when large).
template <class S>
void column_major_rows(const S* data, std::size_t rows, std::size_t cols, std::size_t first, std::size_t count,
                       std::byte* out) {
  if (first == 0 && count == rows) transpose_out(out, data, rows, cols);
  else transpose(reinterpret_cast<const std::byte*>(data + first), rows, out, cols, cols, count, sizeof(S));
}

template <class S>
std::span<const std::byte> bytes_of(const S* data, std::size_t count) {
  return {reinterpret_cast<const std::byte*>(data), count * sizeof(S)};
}

}  // namespace ckpt::detail
