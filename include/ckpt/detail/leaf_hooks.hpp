#pragma once
// Not part of the API: the hooks the library calls for a leaf, those its leaf_traits give and those
// derived from them. leaf.hpp includes it after leaf_traits's primary template, which it names:
// not to be included on its own.

#include <ckpt/detail/leaf_bytes.hpp>
#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include <concepts>
#include <cstddef>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

namespace ckpt::detail {

// Which hooks leaf_traits<L> gives.
template <class L>
concept gives_dtype = requires(const L& x) {
  { leaf_traits<L>::dtype(x) } -> std::same_as<dtype>;
};
template <class L>
concept gives_shape = requires(const L& x) {
  { leaf_traits<L>::shape(x) } -> std::same_as<dims>;
};
template <class L>
concept gives_write = requires(const L& x, std::span<std::byte> out) { leaf_traits<L>::write(x, out); };
template <class L>
concept gives_read = requires(L& y, const tensor& in) { leaf_traits<L>::read(y, in); };
template <class L>
concept gives_contiguous = requires(const L& x) {
  { leaf_traits<L>::contiguous(x) } -> std::convertible_to<std::span<const std::byte>>;
};
template <class L>
concept gives_write_rows = requires(const L& x, std::size_t n, std::byte* out) {
  leaf_traits<L>::write_rows(x, n, n, out);
};
// `elements` of a const (X = const L) or mutable (X = L) leaf, as a span; its scalar type.
template <class X>
using elements_span = decltype(std::span(leaf_traits<std::remove_const_t<X>>::elements(std::declval<X&>())));
template <class L>
using elements_scalar = std::remove_const_t<typename elements_span<const L>::element_type>;
template <class L>
concept gives_elements = requires { typename elements_span<const L>; } && scalar<elements_scalar<L>>;
template <class L>
concept gives_mutable_elements = gives_elements<L> && requires { typename elements_span<L>; } &&
                                 std::same_as<typename elements_span<L>::element_type, elements_scalar<L>>;

// The hooks the library calls for a leaf of type L: those leaf_traits<L> gives, and the ones it
// leaves out derived from them (see leaf_traits). A hook that neither is nor can be derived is
// absent (its constraint fails), and then L is not a `leaf`.
template <class L>
struct leaf_hooks {
  using traits = leaf_traits<L>;

  static ckpt::dtype dtype(const L& x)
    requires gives_dtype<L> || gives_elements<L>
  {
    if constexpr (gives_dtype<L>) return traits::dtype(x);
    else return dtype_of<elements_scalar<L>>;
  }
  static dims shape(const L& x)
    requires gives_shape<L>
  {
    return traits::shape(x);
  }
  static void write(const L& x, std::span<std::byte> out)
    requires gives_write<L> || gives_elements<L> || gives_write_rows<L>
  {
    if constexpr (gives_write<L>) {
      traits::write(x, out);
    } else if constexpr (gives_elements<L>) {
      const std::span<const std::byte> bytes = std::as_bytes(std::span(traits::elements(x)));
      check_leaf_bytes("elements", bytes.size(), out.size());
      if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size());
    } else {
      write_through_rows<leaf_hooks>(x, out);
    }
  }
  static void read(L& y, const tensor& in)
    requires gives_read<L> || gives_mutable_elements<L>
  {
    if constexpr (gives_read<L>) {
      traits::read(y, in);
    } else {
      const auto values = std::span(traits::elements(y));
      check_leaf_bytes("elements", values.size_bytes(), in.nbytes());
      copy_in(values.data(), in, values.size());
    }
  }
  static std::span<const std::byte> contiguous(const L& x)
    requires gives_contiguous<L> || gives_elements<L>
  {
    if constexpr (gives_contiguous<L>) return traits::contiguous(x);
    else return std::as_bytes(std::span(traits::elements(x)));
  }
  static void write_rows(const L& x, std::size_t first, std::size_t count, std::byte* out)
    requires gives_write_rows<L>
  {
    traits::write_rows(x, first, count, out);
  }
  // Whether `read` touches nothing but the leaf it fills (see leaf_traits).
  static constexpr bool reads_only_its_leaf = [] {
    if constexpr (requires { traits::reads_only_its_leaf; }) return bool{traits::reads_only_its_leaf};
    else return !gives_read<L> && gives_mutable_elements<L>;
  }();
};

// Whether a leaf's read touches nothing but its leaf, and whether it has the optional hooks of
// the save of sections (given or derived).
template <class L>
inline constexpr bool reads_only_its_leaf = leaf_hooks<L>::reads_only_its_leaf;
template <class L>
concept has_contiguous = gives_contiguous<L> || gives_elements<L>;
template <class L>
concept has_write_rows = gives_write_rows<L>;

}  // namespace ckpt::detail
