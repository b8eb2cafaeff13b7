#pragma once
/// \file
/// Leaves: the values that become checkpoint entries. Eigen matrices and arrays (any size,
/// either storage order), Eigen tensors (dynamic and fixed-size, either layout), bare scalars,
/// and `ckpt::tensor` itself. `ckpt::leaf_traits<T>` is the customization point for other
/// tensor types.


#include <ckpt/detail/eigen_leaves.hpp>
#include <ckpt/detail/engine_state.hpp>
#include <ckpt/detail/leaf_bytes.hpp>
#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <istream>
#include <span>
#include <type_traits>
#include <vector>

namespace ckpt {

/// How a leaf type becomes an entry and back: specialize it for a tensor type of your own. A
/// type that keeps its elements in one array, in C (row-major) order, needs two hooks:
/// \code
/// template <> struct ckpt::leaf_traits<my_tensor> {
///   static ckpt::dims shape(const my_tensor& x) { return {x.rows, x.cols}; }  // C-order extents
///   static auto elements(auto& x) { return std::span(x.values); }             // C-order elements
/// };
/// \endcode
/// `elements(x)` returns the leaf's elements as a `std::span` of a `ckpt::scalar` (of const
/// elements for a const leaf, of mutable ones for a mutable leaf), as many as the shape has. The
/// entry's dtype is that scalar's; saving reads the elements where they stand (the span is the
/// leaf's `contiguous` bytes), and extraction copies the entry into them.
///
/// Any other type gives its bytes itself, in four hooks:
/// \code
/// template <> struct ckpt::leaf_traits<my_tensor> {
///   static ckpt::dtype dtype(const my_tensor&);                    // the entry's dtype
///   static ckpt::dims shape(const my_tensor&);                     // C-order extents
///   static void write(const my_tensor&, std::span<std::byte> out); // C-order bytes out
///   static void read(my_tensor&, const ckpt::tensor& in);          // in has dtype() and shape()
///   // Optional, for `save(path, {sections})` (ckpt/section.hpp) to stream the leaf:
///   static std::span<const std::byte> contiguous(const my_tensor&);
///   static void write_rows(const my_tensor&, std::size_t first, std::size_t count, std::byte* out);
///   // Optional, for extraction to read this leaf on a helper thread:
///   static constexpr bool reads_only_its_leaf = true;
/// };
/// \endcode
/// A hook the traits give is the one called; one they leave out is derived where it can be:
/// - from `elements`: `dtype`, `write`, `contiguous`, and, when the span of a mutable leaf is
///   mutable, `read` and `reads_only_its_leaf = true`;
/// - `write` from `write_rows`: the bytes of `contiguous` if it gives them, else every row at once
///   (`write_rows(x, 0, d0, out)`, and `write_rows(x, 0, 1, out)` for shape []).
///
/// `read` receives an entry whose dtype and shape already match the leaf's. It is called on the
/// thread that extracts (`to_params`, `read_params`), unless the traits declare
/// `reads_only_its_leaf = true`: `read` touches nothing but the leaf it fills, so that
/// extraction may read such leaves in any order and on two threads at once (it does when every
/// leaf of the call declares it, in the order of the entries in the file; the leaf types below
/// all declare it).
///
/// The two optional hooks let the save of sections write a leaf without a copy of it:
/// - `contiguous` returns the leaf's C-order bytes where they already stand in memory (all of
///   them, as many as the dtype and shape need), or an empty span to decline (say, for a
///   column-major storage); the file is written straight from them.
/// - `write_rows` writes the outermost rows `[first, first + count)` in C order to `out` (row
///   `i` of a leaf of shape `[d0, d1, ...]` is its `d1 * ...` elements of index `i`); the writer
///   calls it a bounded band of rows at a time, so that reordering needs no copy of the whole
///   leaf. The writer calls it only when `contiguous` is absent or declined, and never for shape
///   `[]`. The calls may come from helper threads (a save reorders a band ahead of the writer;
///   `of_params` and snapshots copy large structures on several threads), all before the call
///   that made them returns: the hook must only read the leaf.
///   What it throws abandons that call.
/// A leaf whose traits have neither hook (or decline both) is snapshotted through `write` while
/// it is saved. The leaf types below implement both hooks, and their `write` is made of them.
template <class T, class Enable = void>
struct leaf_traits {};

}  // namespace ckpt

// The hooks the library calls for a leaf (ckpt::detail::leaf_hooks, which `leaf` below checks)
// name leaf_traits: they come after its primary template.
#include <ckpt/detail/leaf_hooks.hpp>

namespace ckpt {

/// A type that `leaf_traits` describes: an Eigen matrix, array or tensor, a scalar, a
/// `ckpt::tensor`, or a type of your own with a `leaf_traits` specialization (`shape` and
/// `elements`, or `dtype`, `shape`, `write` and `read`).
template <class T>
concept leaf = requires(const T& x, T& y, std::span<std::byte> out, const tensor& in) {
  { detail::leaf_hooks<T>::dtype(x) } -> std::same_as<dtype>;
  { detail::leaf_hooks<T>::shape(x) } -> std::same_as<dims>;
  detail::leaf_hooks<T>::write(x, out);
  detail::leaf_hooks<T>::read(y, in);
};

/// Eigen::Matrix of any size and storage order. A compile-time column vector is saved with
/// shape [rows], a compile-time row vector [cols], anything else [rows, cols]; the bytes are in
/// C order whatever the storage order.
template <class S, int R, int C, int O, int MR, int MC>
struct leaf_traits<Eigen::Matrix<S, R, C, O, MR, MC>>
    : detail::dense_leaf_traits<Eigen::Matrix<S, R, C, O, MR, MC>> {};

/// Eigen::Array, shaped and ordered as Eigen::Matrix.
template <class S, int R, int C, int O, int MR, int MC>
struct leaf_traits<Eigen::Array<S, R, C, O, MR, MC>>
    : detail::dense_leaf_traits<Eigen::Array<S, R, C, O, MR, MC>> {};

/// Eigen::Tensor of rank N: shape is its N dimensions, bytes in C order whatever the layout.
template <class S, int N, int O, class I>
struct leaf_traits<Eigen::Tensor<S, N, O, I>> : detail::tensor_leaf_traits<Eigen::Tensor<S, N, O, I>> {};

/// Eigen::TensorFixedSize, as Eigen::Tensor.
template <class S, class Sizes, int O, class I>
struct leaf_traits<Eigen::TensorFixedSize<S, Sizes, O, I>>
    : detail::tensor_leaf_traits<Eigen::TensorFixedSize<S, Sizes, O, I>> {};

/// A bare arithmetic scalar (or Eigen::half, Eigen::bfloat16, std::complex<float>): shape [].
template <class S>
struct leaf_traits<S, std::enable_if_t<std::is_arithmetic_v<S> || scalar<S>>> {
  static ckpt::dtype dtype(const S&) { return detail::checked_dtype_of<S>(); }
  static dims shape(const S&) { return {}; }
  static std::span<const std::byte> contiguous(const S& x) { return detail::bytes_of(&x, 1); }
  static void write(const S& x, std::span<std::byte> out) { detail::copy_out(out.data(), &x, 1); }
  static void read(S& x, const tensor& in) { detail::copy_in(&x, in, 1); }
  static constexpr bool reads_only_its_leaf = true;
};

/// The random engines of `<random>` (`std::mt19937`, `std::mt19937_64`, `std::minstd_rand`,
/// `std::ranlux24`, `std::ranlux48`, `std::knuth_b`, `std::default_random_engine` and any other
/// instance of the six engine and adaptor templates): the entry holds the engine's full state, so
/// that a restored engine draws exactly the numbers the saved one would have drawn next. The
/// entry is U64 of shape [k]: the k numbers of the engine's textual representation
/// (`operator<<`), in order. k is fixed by the engine type and the standard library (with
/// libstdc++, 625 for `std::mt19937`: its 624 state words and its position; 313 for
/// `std::mt19937_64`; 1 for `std::minstd_rand`). A distribution may cache state of its own
/// (`std::normal_distribution` keeps a second value): call its `reset()` after restoring, or save
/// the numbers it draws from instead.
template <class E>
struct leaf_traits<E, std::enable_if_t<detail::is_std_engine<E>::value>> {
  static ckpt::dtype dtype(const E&) { return dtype::u64; }
  static dims shape(const E& e) { return {static_cast<std::int64_t>(detail::engine_words(e).size())}; }
  static void write(const E& e, std::span<std::byte> out) {
    const std::vector<std::uint64_t> words = detail::engine_words(e);
    detail::copy_out(out.data(), words.data(), words.size());
  }
  /// \throws std::invalid_argument if the entry's numbers are not a state of E (a state E would
  /// not print back as the same numbers); `e` is then left as it was.
  static void read(E& e, const tensor& in) {
    std::vector<std::uint64_t> words(static_cast<std::size_t>(in.numel()));
    detail::copy_in(words.data(), in, words.size());
    E restored;
    if (!detail::scan_numbers(words, [&restored](std::istream& text) { text >> restored; }) ||
        detail::engine_words(restored) != words)
      detail::throw_not_engine_state();
    e = restored;
  }
  static constexpr bool reads_only_its_leaf = true;
};

/// A `ckpt::tensor` is a leaf of its own dtype and shape; reading one shares the entry's bytes.
template <>
struct leaf_traits<tensor> {
  static ckpt::dtype dtype(const tensor& x) { return x.dtype(); }
  static dims shape(const tensor& x) { return dims(x.shape().begin(), x.shape().end()); }
  static std::span<const std::byte> contiguous(const tensor& x) { return x.bytes(); }
  static void write(const tensor& x, std::span<std::byte> out) {
    if (!out.empty()) std::memcpy(out.data(), x.bytes().data(), out.size());
  }
  static void read(tensor& x, const tensor& in) { x = in; }
  static constexpr bool reads_only_its_leaf = true;
};

/// A leaf that is saved and restored with the model but not trained: a frozen embedding, a
/// running mean the training loop updates itself (a buffer, in PyTorch's words). It is saved as
/// `value` would be, under the same name and with the same bytes, so freezing or unfreezing a
/// leaf keeps its checkpoints loading. `ckpt::adam` leaves it alone and keeps no moments for it
/// (integer leaves and random engines are not trained either, without a wrapper).
/// \code
/// struct model { ckpt::frozen<Eigen::MatrixXf> embedding; Eigen::MatrixXf w; };
/// m.embedding.value = pretrained;
/// \endcode
template <leaf T>
struct frozen {
  /// The leaf.
  T value;
};

/// A `frozen<T>` is written and read as its `value`, through `T`'s traits and their hooks.
template <class T>
struct leaf_traits<frozen<T>> {
  using hooks = detail::leaf_hooks<T>;
  static ckpt::dtype dtype(const frozen<T>& x) { return hooks::dtype(x.value); }
  static dims shape(const frozen<T>& x) { return hooks::shape(x.value); }
  static std::span<const std::byte> contiguous(const frozen<T>& x)
    requires detail::has_contiguous<T>
  {
    return hooks::contiguous(x.value);
  }
  static void write_rows(const frozen<T>& x, std::size_t first, std::size_t count, std::byte* out)
    requires detail::has_write_rows<T>
  {
    hooks::write_rows(x.value, first, count, out);
  }
  static void write(const frozen<T>& x, std::span<std::byte> out) { hooks::write(x.value, out); }
  static void read(frozen<T>& x, const tensor& in) { hooks::read(x.value, in); }
  static constexpr bool reads_only_its_leaf = hooks::reads_only_its_leaf;
};

}  // namespace ckpt

// The helpers that copy leaves (ckpt::detail::to_tensor, unfilled_like) take a `leaf` and a
// `frozen`: they come after both.
#include <ckpt/detail/leaf_copies.hpp>
