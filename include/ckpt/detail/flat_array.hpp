#pragma once
// Not part of the API (leafwise.hpp's zeros_like and adam.hpp's update use these): the kinds of
// Eigen leaves, a leaf set to zero, and an Eigen or scalar leaf's storage as a flat Eigen array.

#include <ckpt/leaf.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>

namespace ckpt::detail {

template <class T>
inline constexpr bool is_eigen_dense_v = false;
template <class S, int R, int C, int O, int MR, int MC>
inline constexpr bool is_eigen_dense_v<Eigen::Matrix<S, R, C, O, MR, MC>> = true;
template <class S, int R, int C, int O, int MR, int MC>
inline constexpr bool is_eigen_dense_v<Eigen::Array<S, R, C, O, MR, MC>> = true;

template <class T>
inline constexpr bool is_eigen_tensor_v = false;
template <class S, int N, int O, class I>
inline constexpr bool is_eigen_tensor_v<Eigen::Tensor<S, N, O, I>> = true;
template <class S, class Sizes, int O, class I>
inline constexpr bool is_eigen_tensor_v<Eigen::TensorFixedSize<S, Sizes, O, I>> = true;

template <class L>
void set_leaf_zero(L& x) {
  if constexpr (is_eigen_dense_v<L> || is_eigen_tensor_v<L>) {
    x.setZero();
  } else if constexpr (std::is_arithmetic_v<L> || scalar<L>) {
    x = L(0);
  } else if constexpr (std::is_same_v<L, tensor>) {
    // All-zero bytes are zero in every dtype safetensors defines (+0.0, 0, false).
    x = tensor::make(x.dtype(), dims(x.shape().begin(), x.shape().end()),
                     [](std::span<std::byte> out) {
                       if (!out.empty()) std::memset(out.data(), 0, out.size());
                     });
  } else {
    // A leaf of the caller's own type: its leaf_traits know how to read an all-zero entry.
    const tensor zero = tensor::make(leaf_hooks<L>::dtype(x), leaf_hooks<L>::shape(x),
                                     [](std::span<std::byte> out) {
                                       if (!out.empty()) std::memset(out.data(), 0, out.size());
                                     });
    leaf_hooks<L>::read(x, zero);
  }
}

// True for a leaf that `flat_array` can view: an Eigen matrix, array or tensor, or an
// arithmetic scalar.
template <class L>
concept flat_leaf = is_eigen_dense_v<std::remove_cv_t<L>> ||
                    is_eigen_tensor_v<std::remove_cv_t<L>> ||
                    std::is_arithmetic_v<std::remove_cv_t<L>>;

// The storage of the Eigen leaf `x` as a flat column array
// (`Eigen::Map<Eigen::Array<Scalar, Dynamic, 1>>`, const if `x` is), in storage order; for a
// scalar `x`, a map of one element (`Eigen::Map<Eigen::Array<Scalar, 1, 1>>`).
// Element-wise expressions over leaves of the same type line up element by element whatever
// the storage order, which is what an optimizer update needs.
// \throws nothing
template <flat_leaf L>
[[nodiscard]] auto flat_array(L& x) noexcept {
  using plain = std::remove_cv_t<L>;
  if constexpr (std::is_arithmetic_v<plain>) {
    // Fixed size 1, so that Eigen does not emit packet code for a lone scalar.
    using array = Eigen::Array<plain, 1, 1>;
    using map = std::conditional_t<std::is_const_v<L>, Eigen::Map<const array>, Eigen::Map<array>>;
    return map(&x);
  } else {
    using array = Eigen::Array<typename plain::Scalar, Eigen::Dynamic, 1>;
    using map = std::conditional_t<std::is_const_v<L>, Eigen::Map<const array>, Eigen::Map<array>>;
    return map(x.data(), static_cast<Eigen::Index>(x.size()));
  }
}

}  // namespace ckpt::detail
