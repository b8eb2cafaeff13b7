#pragma once
// Not part of the API (view.hpp's matrix_view and tensor_view return these and call
// throw_rank_mismatch, compiled in src/tensor/view.cpp): the types of the views, and the error of a rank.

#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

namespace ckpt::detail {

// What matrix_view and tensor_view return.
template <scalar T>
using matrix_view_type = Eigen::Map<const Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
template <scalar T, int N>
using tensor_view_type = Eigen::TensorMap<const Eigen::Tensor<const T, N, Eigen::RowMajor, Eigen::Index>>;

[[noreturn]] void throw_rank_mismatch(const tensor& x, int wanted);

}  // namespace ckpt::detail
