#pragma once
/// \file
/// Named structures (Raven's `Kaun` `Named`): how ckpt walks a parameter structure and names its
/// leaves. Aggregates are walked with Boost.PFR and named by their field identifiers; `std::array`
/// and `std::vector` elements by zero-based position; `std::map<std::string, T>` values by key;
/// `ckpt::ptree` by path; other types through the `ckpt::fields` customization point.
/// Names are joined with '.': `layers.0.w`.
///
/// Known limit (docs/guide.md, "Named structures"): older Boost.PFR releases cannot count the
/// fields of an aggregate holding a `std::array<X, N>` of a non-trivial `X` (say, of Eigen
/// matrices). Use a `std::vector<X>` there, or name the struct through `ckpt::fields`.

#include <ckpt/leaf.hpp>
#include <ckpt/ptree.hpp>

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ckpt {

/// The customization point for a structure that is not an aggregate (a class with private
/// members or constructors), or an aggregate whose entries should not be named after its field
/// identifiers (a renamed field must keep loading old checkpoints). Specialize it with the names
/// and a `tie` returning references to the members, in the same order:
/// \code
/// class layer {
///  public:
///   explicit layer(int n) : weight_(n, n), bias_(n) {}
///  private:
///   friend struct ckpt::fields<layer>;
///   Eigen::MatrixXf weight_;
///   Eigen::VectorXf bias_;
/// };
/// template <> struct ckpt::fields<layer> {
///   static constexpr std::array names{"w", "b"};
///   static auto tie(auto& self) { return std::tie(self.weight_, self.bias_); }  // self may be const
/// };
/// \endcode
/// Members may be leaves or any named structure.
template <class T>
struct fields;

/// The customization point for a structure that wraps another and names only some of its
/// leaves (Adam's moments, kept only for the leaves Adam trains). Specialize it with the wrapped
/// structure and the test a leaf must pass; the wrapper adds nothing to the names:
/// \code
/// template <class P> struct ckpt::leaf_subset<my_moments<P>> {
///   static auto& inner(auto& self) { return self.values; }  // self may be const
///   static bool keeps(const auto& leaf);                     // true for the leaves to name
/// };
/// \endcode
template <class T>
struct leaf_subset;

}  // namespace ckpt

// The walk of named structures (ckpt::detail::walk, which `named` and for_each_leaf below are
// built on) names `fields` and `leaf_subset`: it comes after them.
#include <ckpt/detail/walk.hpp>

namespace ckpt {

/// A type ckpt can walk and name: a leaf, a `ckpt::fields` or `ckpt::leaf_subset`
/// specialization, a `ckpt::ptree`, a
/// `std::array`, `std::vector` or `std::map<std::string, T>`, or an aggregate. (Whether every
/// member is itself named is checked when the structure is walked.)
template <class T>
concept named = detail::is_named_v<std::remove_cv_t<T>>;

/// Calls `visit(name, leaf, leaves...)` for every leaf of `s` in order, with the corresponding
/// leaves of `rest` (structures of the same shape: same vector lengths, map keys, ptree kinds).
/// `name` is the leaf's path from the root (empty for a bare leaf); leaves are passed by
/// reference, const where the structure is.
/// \throws std::invalid_argument if the structures' shapes differ (the message names the path);
/// whatever `visit` throws.
template <class S, class... Rest, class Visit>
void for_each_leaf(Visit&& visit, S& s, Rest&... rest) {
  std::string path;
  detail::walk(path, visit, s, rest...);
}

/// The names of the leaves of `s`, in walking order.
/// \throws std::bad_alloc
template <class S>
[[nodiscard]] std::vector<std::string> leaf_names(const S& s) {
  std::vector<std::string> out;
  for_each_leaf([&out](std::string_view name, const auto&) { out.emplace_back(name); }, s);
  return out;
}

}  // namespace ckpt
