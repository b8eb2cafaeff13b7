#pragma once
// Not part of the API: a leaf's shape, a C-order copy of it, and an unfilled leaf like it (for
// named.hpp, params.hpp, adam.hpp). leaf.hpp includes it at its end, after `leaf` and `frozen`,
// which it needs: not to be included on its own.

#include <ckpt/detail/leaf_hooks.hpp>
#include <ckpt/detail/pages.hpp>
#include <ckpt/tensor.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <cstddef>
#include <span>
#include <type_traits>

namespace ckpt::detail {

// A leaf of `x`'s type and shape whose values are left for `read` to write: dynamic Eigen
// matrices, arrays and tensors are allocated, not copied; any other leaf is copied.
template <class L>
L unfilled_like(const L& x) {
  return x;
}
// Eigen::Matrix and Eigen::Array alike.
template <template <class, int, int, int, int, int> class Dense, class S, int R, int C, int O, int MR, int MC>
  requires std::is_base_of_v<Eigen::PlainObjectBase<Dense<S, R, C, O, MR, MC>>, Dense<S, R, C, O, MR, MC>>
Dense<S, R, C, O, MR, MC> unfilled_like(const Dense<S, R, C, O, MR, MC>& x) {
  if constexpr (R == Eigen::Dynamic || C == Eigen::Dynamic) {
    Dense<S, R, C, O, MR, MC> out(x.rows(), x.cols());
    advise_fresh(std::as_writable_bytes(std::span(out.data(), static_cast<std::size_t>(out.size()))));
    return out;
  } else {
    return x;
  }
}
template <class S, int N, int O, class I>
Eigen::Tensor<S, N, O, I> unfilled_like(const Eigen::Tensor<S, N, O, I>& x) {
  Eigen::Tensor<S, N, O, I> out(x.dimensions());
  advise_fresh(std::as_writable_bytes(std::span(out.data(), static_cast<std::size_t>(out.size()))));
  return out;
}
template <class T>
frozen<T> unfilled_like(const frozen<T>& x) {
  return {unfilled_like(x.value)};
}

// The shape of the entry `x` becomes.
template <leaf L>
[[nodiscard]] dims leaf_shape(const L& x) {
  return leaf_hooks<L>::shape(x);
}

// A tensor holding a C-order copy of `x` (a `ckpt::tensor` is returned as is).
template <leaf L>
[[nodiscard]] tensor to_tensor(const L& x) {
  if constexpr (std::is_same_v<L, tensor>) {
    return x;
  } else {
    return tensor::make(leaf_hooks<L>::dtype(x), leaf_hooks<L>::shape(x),
                        [&x](std::span<std::byte> out) { leaf_hooks<L>::write(x, out); });
  }
}

}  // namespace ckpt::detail
