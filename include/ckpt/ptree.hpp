#pragma once
/// \file
/// `ckpt::ptree`: a parameter tree whose structure is known only at run time (Raven's
/// `Kaun.Checkpoint.Ptree`): a dict of named subtrees, a list of subtrees, or a tensor.

#include <ckpt/leaf.hpp>
#include <ckpt/tensor.hpp>

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace ckpt {

/// A dynamic parameter tree. Leaves are named by their path from the root: dict keys and
/// zero-based list positions joined with "." (`layers.0.w`). A bare root tensor has the empty
/// path, so the prefix of `of_params` / `to_params` alone names it.
///
/// \code
/// auto tree = ckpt::ptree::dict({
///     {"layers", ckpt::ptree::list({ckpt::ptree::tensor(w0), ckpt::ptree::tensor(w1)})},
///     {"head", ckpt::ptree::tensor(head)}});
/// \endcode
class ptree {
 public:
  /// A dict's entries, in insertion order.
  using dict_type = std::vector<std::pair<std::string, ptree>>;
  /// A list's elements.
  using list_type = std::vector<ptree>;

  /// An empty dict.
  /// \throws nothing
  ptree() noexcept : node_(dict_type{}) {}

  /// A dict node; keys keep the order given.
  /// \throws std::invalid_argument if a key appears twice (the message quotes it).
  [[nodiscard]] static ptree dict(dict_type entries);
  /// \copydoc dict(dict_type)
  [[nodiscard]] static ptree dict(std::initializer_list<std::pair<std::string, ptree>> entries) {
    return dict(dict_type(entries));
  }
  /// A list node.
  /// \throws std::bad_alloc
  [[nodiscard]] static ptree list(list_type elements) { return ptree(node(std::move(elements))); }
  /// \copydoc list(list_type)
  [[nodiscard]] static ptree list(std::initializer_list<ptree> elements) {
    return list(list_type(elements));
  }
  /// A tensor leaf holding `x` (any leaf: an Eigen object, a scalar or a `ckpt::tensor`),
  /// copied in C order.
  /// \throws std::bad_alloc
  template <leaf L>
  [[nodiscard]] static ptree tensor(const L& x) {
    return ptree(node(detail::to_tensor(x)));
  }

  /// True for a dict node.
  /// \throws nothing
  [[nodiscard]] bool is_dict() const noexcept { return node_.index() == 0; }
  /// True for a list node.
  /// \throws nothing
  [[nodiscard]] bool is_list() const noexcept { return node_.index() == 1; }
  /// True for a tensor leaf.
  /// \throws nothing
  [[nodiscard]] bool is_tensor() const noexcept { return node_.index() == 2; }

  /// The entries of a dict node.
  /// \throws std::invalid_argument if this is not a dict.
  [[nodiscard]] const dict_type& as_dict() const;
  /// \copydoc as_dict() const
  [[nodiscard]] dict_type& as_dict();
  /// The elements of a list node.
  /// \throws std::invalid_argument if this is not a list.
  [[nodiscard]] const list_type& as_list() const;
  /// \copydoc as_list() const
  [[nodiscard]] list_type& as_list();
  /// The tensor of a leaf.
  /// \throws std::invalid_argument if this is not a tensor.
  [[nodiscard]] const ckpt::tensor& as_tensor() const;
  /// \copydoc as_tensor() const
  [[nodiscard]] ckpt::tensor& as_tensor();

  /// The subtree at `key` of a dict, or null if there is none.
  /// \throws std::invalid_argument if this is not a dict.
  [[nodiscard]] const ptree* find(std::string_view key) const;
  /// The subtree at `key` of a dict.
  /// \throws std::invalid_argument if this is not a dict or `key` is absent (quoted).
  [[nodiscard]] const ptree& at(std::string_view key) const;
  /// The element at `index` of a list.
  /// \throws std::invalid_argument if this is not a list; std::out_of_range past its end.
  [[nodiscard]] const ptree& at(std::size_t index) const;

  /// True if both trees have the same structure, keys and tensors.
  /// \throws nothing
  friend bool operator==(const ptree& a, const ptree& b) noexcept = default;

 private:
  using node = std::variant<dict_type, list_type, ckpt::tensor>;
  explicit ptree(node n) noexcept : node_(std::move(n)) {}
  // The node of `self` as a T, or std::invalid_argument naming both kinds.
  template <class T, class Self>
  static auto& get(Self& self);
  node node_;
};

}  // namespace ckpt
