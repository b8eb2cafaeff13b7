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

#include <ckpt/detail/flat_array.hpp>
#include <ckpt/named.hpp>

#include <string_view>
#include <utility>

namespace ckpt {

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
