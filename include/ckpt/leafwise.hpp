#pragma once
/// \file
/// Leaf-wise operations over named structures (aggregates, arrays, vectors, string maps,
/// `ckpt::ptree`, `ckpt::fields` types), what an optimizer of your own needs beside `ckpt::adam`:
/// a zero structure of the parameters' shape (gradients, moments) and an update of one structure,
/// or of several of the same shape, leaf by leaf, in place.
///
/// \code
/// struct linear { Eigen::MatrixXf w; Eigen::VectorXf b; };
/// ckpt::zip_leaves([](auto& w) { w.setRandom(); }, params);                        // fill one
/// linear grads = ckpt::zeros_like(params), velocity = ckpt::zeros_like(params);
/// ckpt::zip_leaves([](auto& p, const auto& g) { p -= 0.1f * g; }, params, grads);  // SGD
/// ckpt::zip_leaves([](auto& p, auto& v, const auto& g) { v = 0.9f * v + g; p -= 0.1f * v; },
///                  params, velocity, grads);                                      // with momentum
/// \endcode
///
/// To save such an optimizer's state with the parameters, give its structures sections of their
/// own: `ckpt::save(path, {{params, "model"}, {velocity, "optim.velocity"}})`.
///
/// `for_each_leaf` (named.hpp) is the primitive: the functions here are thin layers over it and
/// share its shape checks (same vector lengths, map keys, ptree kinds). Leaf extents are not
/// compared: a function given leaves of different sizes sees them as they are.

#include <ckpt/leaf.hpp>
#include <ckpt/named.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <cstring>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ckpt {

namespace detail {

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

}  // namespace detail

/// Calls `f(leaf_a, leaves...)` for every leaf of `a` with the leaves of `rest` at the same
/// path, in place: leaves are passed by reference (const where the structure is), so `f` updates
/// them, e.g. `zip_leaves([](auto& p, const auto& g) { p -= lr * g; }, p, g)`. With `a` alone,
/// `f(leaf)` for each of its leaves: `zip_leaves([](auto& w) { w.setRandom(); }, p)` fills `p`,
/// no second structure needed. To build a new structure, copy one (or start from `zeros_like`)
/// and update the copy. `for_each_leaf` (named.hpp) is the same walk with each leaf's name as
/// the first argument of the call.
/// \throws std::invalid_argument if the structures' shapes differ (the message names the path);
/// whatever `f` throws.
template <class A, class... Rest, class F>
void zip_leaves(F&& f, A& a, Rest&... rest) {
  for_each_leaf([&f](std::string_view, auto& x, auto&... xs) { f(x, xs...); }, a, rest...);
}

/// A structure like `s` with every leaf zero: Eigen leaves `setZero()`, scalars 0, a
/// `ckpt::tensor` a zero tensor of its dtype and shape, a leaf of your own type whatever its
/// `leaf_traits::read` makes of an all-zero entry. Shapes, dtypes and structure are kept.
/// \throws std::bad_alloc; whatever copying `s` throws.
template <class S>
[[nodiscard]] S zeros_like(const S& s) {
  static_assert(named<S>, "ckpt: zeros_like needs a named structure or a leaf");
  S out = detail::unfilled_structure(s);
  for_each_leaf([](std::string_view, auto& x) { detail::set_leaf_zero(x); }, out);
  return out;
}

}  // namespace ckpt
