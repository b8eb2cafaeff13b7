#pragma once
/// \file
/// Zero-copy, read-only Eigen views of entries, for callers who only read: no bytes are copied,
/// and the view is valid as long as the tensor (or a checkpoint holding it) lives.

#include <ckpt/detail/view_types.hpp>
#include <ckpt/tensor.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <array>
#include <stdexcept>
#include <string>

namespace ckpt {

/// `x` as a row-major matrix: rank 2 as is, rank 1 as a column (n x 1), rank 0 as 1 x 1. The
/// view is an `Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>`
/// of the tensor's bytes (read-only; `auto` holds it, `Eigen::MatrixXf m = ...` copies it).
/// \throws std::invalid_argument if `T` is not `x`'s dtype or `x` has rank 3 or more.
template <scalar T>
[[nodiscard]] detail::matrix_view_type<T> matrix_view(const tensor& x) {
  const auto elements = x.as<T>();
  const auto shape = x.shape();
  if (shape.size() > 2) detail::throw_rank_mismatch(x, 2);
  const Eigen::Index rows = shape.empty() ? 1 : static_cast<Eigen::Index>(shape[0]);
  const Eigen::Index cols = shape.size() == 2 ? static_cast<Eigen::Index>(shape[1]) : 1;
  return detail::matrix_view_type<T>(elements.data(), rows, cols);
}

/// `x` as a row-major Eigen tensor of rank `N`: an
/// `Eigen::TensorMap<const Eigen::Tensor<const T, N, Eigen::RowMajor, Eigen::Index>>` of the
/// tensor's bytes (read-only; `auto` holds it).
/// \throws std::invalid_argument if `T` is not `x`'s dtype or `N` is not `x`'s rank.
template <scalar T, int N>
[[nodiscard]] detail::tensor_view_type<T, N> tensor_view(const tensor& x) {
  const auto elements = x.as<T>();
  if (x.rank() != static_cast<std::size_t>(N)) detail::throw_rank_mismatch(x, N);
  std::array<Eigen::Index, N> extents{};
  for (int i = 0; i < N; ++i) extents[i] = static_cast<Eigen::Index>(x.shape()[i]);
  return detail::tensor_view_type<T, N>(elements.data(), extents);
}

}  // namespace ckpt
