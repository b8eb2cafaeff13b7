#pragma once
/// \file
/// Leaves: the values that become checkpoint entries. Eigen matrices and arrays (any size,
/// either storage order), Eigen tensors (dynamic and fixed-size, either layout), bare scalars,
/// and `ckpt::tensor` itself. `ckpt::leaf_traits<T>` is the customization point for other
/// tensor types.

#include <ckpt/detail/pages.hpp>
#include <ckpt/detail/transpose.hpp>
#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <istream>
#include <ostream>
#include <random>
#include <span>
#include <type_traits>
#include <utility>
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

namespace detail {

template <class>
inline constexpr bool always_false = false;

// Emits the diagnostic for an arithmetic type the format has no dtype for; the instantiation
// context names the type.
template <class T>
struct unsupported_scalar {
  static_assert(always_false<T>,
                "ckpt: unsupported scalar type (see the instantiation below): safetensors has no "
                "dtype for it. Use bool, a fixed-width integer, Eigen::half, Eigen::bfloat16, "
                "float, double or std::complex<float>.");
  static constexpr dtype value = dtype::f32;
};

template <class S>
constexpr dtype checked_dtype_of() {
  if constexpr (scalar<S>) return dtype_of<S>;
  else return unsupported_scalar<S>::value;
}

// A foreign file may hold bool bytes other than 0 and 1, and such a byte in a bool object is
// undefined behaviour: rewrite the bytes as 0 or 1 through their representation.
template <class S>
void normalize_bools(S* out, std::size_t count) {
  if constexpr (std::is_same_v<S, bool>) {
    auto* bytes = reinterpret_cast<unsigned char*>(out);
    for (std::size_t i = 0; i < count; ++i) bytes[i] = bytes[i] != 0 ? 1 : 0;
  }
}

// An entry's C-order bytes into a leaf's storage: one copy (a loaded file's entry is read from
// the file with pread, a large one on two threads: tensor_access::read_bytes).
template <class S>
void copy_in(S* out, const tensor& in, std::size_t count) {
  if (count == 0) return;
  tensor_access::read_bytes(in, {reinterpret_cast<std::byte*>(out), count * sizeof(S)});
  normalize_bools(out, count);
}

template <class S>
void copy_out(std::byte* out, const S* in, std::size_t count) {
  if (count != 0) std::memcpy(out, static_cast<const void*>(in), count * sizeof(S));
}

// Column-major storage of a rows x cols matrix is the row-major storage of its transpose: written
// around the caches (a leaf is not read again right away); a loaded file's entry is read in bands
// with pread and each band transposed while it is in the cache (tensor_access::read_transposed).
template <class S>
void transpose_in(S* out, const tensor& in, std::size_t rows, std::size_t cols) {
  tensor_access::read_transposed(in, reinterpret_cast<std::byte*>(out), rows, cols, sizeof(S));
  normalize_bools(out, rows * cols);
}

template <class S>
void transpose_out(std::byte* out, const S* in, std::size_t rows, std::size_t cols) {
  transpose(reinterpret_cast<const std::byte*>(in), out, cols, rows, sizeof(S));
}

template <class Derived>
dims dense_shape(const Eigen::DenseBase<Derived>& m) {
  if constexpr (Derived::ColsAtCompileTime == 1) return {static_cast<std::int64_t>(m.rows())};
  else if constexpr (Derived::RowsAtCompileTime == 1) return {static_cast<std::int64_t>(m.cols())};
  else return {static_cast<std::int64_t>(m.rows()), static_cast<std::int64_t>(m.cols())};
}

// The number of outermost rows of a leaf of shape `shape` (a leaf of shape [] is one row).
inline std::size_t outer_rows(const dims& shape) {
  return shape.empty() ? 1 : static_cast<std::size_t>(shape.front());
}

// Throws std::invalid_argument unless a leaf's hook `hook` gave (or took) `given` bytes for an
// entry of `needed` bytes (src/leaf.cpp).
void check_leaf_bytes(const char* hook, std::size_t given, std::size_t needed);

// `write` of a leaf through its hooks `contiguous` (if `Traits` has it) and `write_rows`: its
// contiguous bytes copied, or all its rows written, so that a layout is encoded once.
template <class Traits, class T>
void write_through_rows(const T& x, std::span<std::byte> out) {
  if (out.empty()) return;
  if constexpr (requires { Traits::contiguous(x); }) {
    if (const std::span<const std::byte> bytes = Traits::contiguous(x); !bytes.empty()) {
      check_leaf_bytes("contiguous", bytes.size(), out.size());
      std::memcpy(out.data(), bytes.data(), out.size());
      return;
    }
  }
  Traits::write_rows(x, 0, outer_rows(Traits::shape(x)), out.data());
}

// C-order rows [first, first + count) of a column-major rows x cols matrix: columns of its
// storage, the row-major cols x rows transpose. All rows at once go through the whole-matrix
// transpose (split between two threads when large).
template <class S>
void column_major_rows(const S* data, std::size_t rows, std::size_t cols, std::size_t first, std::size_t count,
                       std::byte* out) {
  if (first == 0 && count == rows) transpose_out(out, data, rows, cols);
  else transpose(reinterpret_cast<const std::byte*>(data + first), rows, out, cols, cols, count, sizeof(S));
}

template <class S>
std::span<const std::byte> bytes_of(const S* data, std::size_t count) {
  return {reinterpret_cast<const std::byte*>(data), count * sizeof(S)};
}

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

}  // namespace detail

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

namespace detail {

// Matrix and Array share everything: a plain object with contiguous storage.
template <class T>
struct dense_leaf_traits {
  using scalar_type = typename T::Scalar;
  static constexpr bool reads_only_its_leaf = true;
  // Whether the storage already is C order: row-major, or a single row or column.
  static bool c_ordered(const T& m) { return T::IsRowMajor || m.rows() == 1 || m.cols() == 1; }

  static ckpt::dtype dtype(const T&) { return checked_dtype_of<scalar_type>(); }
  static dims shape(const T& m) { return dense_shape(m); }
  static std::span<const std::byte> contiguous(const T& m) {
    if (!c_ordered(m)) return {};
    return bytes_of(m.data(), static_cast<std::size_t>(m.size()));
  }
  static void write_rows(const T& m, std::size_t first, std::size_t count, std::byte* out) {
    const auto rows = static_cast<std::size_t>(m.rows()), cols = static_cast<std::size_t>(m.cols());
    if (c_ordered(m)) {
      // A row of shape [n] is one element; of shape [rows, cols], `cols` elements.
      const std::size_t row = dense_shape(m).size() == 1 ? 1 : cols;
      copy_out(out, m.data() + first * row, count * row);
    } else {
      column_major_rows(m.data(), rows, cols, first, count, out);
    }
  }
  static void write(const T& m, std::span<std::byte> out) { write_through_rows<dense_leaf_traits>(m, out); }
  static void read(T& m, const tensor& in) {
    const auto rows = static_cast<std::size_t>(m.rows()), cols = static_cast<std::size_t>(m.cols());
    if (c_ordered(m)) copy_in(m.data(), in, rows * cols);
    else transpose_in(m.data(), in, rows, cols);
  }
};

// Dynamic and fixed-size tensors alike, through a TensorMap of their storage.
template <class T>
struct tensor_leaf_traits {
  using scalar_type = typename T::Scalar;
  static constexpr bool reads_only_its_leaf = true;
  static constexpr int rank = T::NumIndices;
  static constexpr bool is_row_major = (static_cast<int>(T::Layout) == Eigen::RowMajor);

  static std::array<Eigen::Index, rank> extents(const T& t) {
    std::array<Eigen::Index, rank> out{};
    for (int i = 0; i < rank; ++i) out[i] = static_cast<Eigen::Index>(t.dimension(i));
    return out;
  }
  static constexpr std::array<int, rank> reversed() {
    std::array<int, rank> out{};
    for (int i = 0; i < rank; ++i) out[i] = rank - 1 - i;
    return out;
  }

  static ckpt::dtype dtype(const T&) { return checked_dtype_of<scalar_type>(); }
  static dims shape(const T& t) {
    dims out(rank);
    for (int i = 0; i < rank; ++i) out[i] = static_cast<std::int64_t>(t.dimension(i));
    return out;
  }
  static std::span<const std::byte> contiguous(const T& t) {
    if constexpr (is_row_major || rank <= 1) return bytes_of(t.data(), static_cast<std::size_t>(t.size()));
    else return {};
  }
  static void write_rows(const T& t, std::size_t first, std::size_t count, std::byte* out) {
    if constexpr (is_row_major || rank <= 1) {
      std::size_t row = 1;
      for (int i = 1; i < rank; ++i) row *= static_cast<std::size_t>(t.dimension(i));
      copy_out(out, t.data() + first * row, count * row);
    } else if constexpr (rank == 2) {
      column_major_rows(t.data(), static_cast<std::size_t>(t.dimension(0)), static_cast<std::size_t>(t.dimension(1)),
                        first, count, out);
    } else {
      // Higher ranks reverse all axes of a slice of outermost rows: Eigen's shuffle does it.
      using source_type = Eigen::Tensor<const scalar_type, rank, Eigen::ColMajor, Eigen::Index>;
      using target_type = Eigen::Tensor<scalar_type, rank, Eigen::RowMajor, Eigen::Index>;
      auto sizes = extents(t);
      std::array<Eigen::Index, rank> offsets{};
      offsets[0] = static_cast<Eigen::Index>(first);
      Eigen::TensorMap<source_type> source(t.data(), sizes);
      sizes[0] = static_cast<Eigen::Index>(count);
      Eigen::TensorMap<target_type>(reinterpret_cast<scalar_type*>(out), sizes) =
          source.slice(offsets, sizes).swap_layout().shuffle(reversed());
    }
  }
  static void write(const T& t, std::span<std::byte> out) { write_through_rows<tensor_leaf_traits>(t, out); }
  static void read(T& t, const tensor& in) {
    const auto count = static_cast<std::size_t>(t.size());
    if constexpr (is_row_major || rank <= 1) {
      copy_in(t.data(), in, count);
    } else if constexpr (rank == 2) {
      transpose_in(t.data(), in, static_cast<std::size_t>(t.dimension(0)), static_cast<std::size_t>(t.dimension(1)));
    } else {
      // Higher ranks reverse all axes: Eigen's shuffle does it, reading bools as bytes, one band
      // of outermost rows at a time (a loaded file's bands read with pread).
      using element = std::conditional_t<std::is_same_v<scalar_type, bool>, std::uint8_t, scalar_type>;
      using row_major = Eigen::Tensor<const element, rank, Eigen::RowMajor, Eigen::Index>;
      using col_major = Eigen::Tensor<scalar_type, rank, Eigen::ColMajor, Eigen::Index>;
      if (count == 0) return;
      const std::size_t row_bytes = count / static_cast<std::size_t>(t.dimension(0)) * sizeof(element);
      Eigen::TensorMap<col_major> target(t.data(), extents(t));
      tensor_access::for_each_band(in, row_bytes, [&](std::size_t first, std::span<const std::byte> rows) {
        auto sizes = extents(t);
        sizes[0] = static_cast<Eigen::Index>(rows.size() / row_bytes);
        std::array<Eigen::Index, rank> offsets{};
        offsets[0] = static_cast<Eigen::Index>(first);
        Eigen::TensorMap<const row_major> source(reinterpret_cast<const element*>(rows.data()), sizes);
        target.slice(offsets, sizes) = source.swap_layout().shuffle(reversed()).template cast<scalar_type>();
      });
    }
  }
};

}  // namespace detail

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

namespace detail {
// Whether E is one of the engine templates of <random> (adaptors of such engines included).
template <class E>
struct is_std_engine : std::false_type {};
template <class U, U a, U c, U m>
struct is_std_engine<std::linear_congruential_engine<U, a, c, m>> : std::true_type {};
template <class U, std::size_t w, std::size_t n, std::size_t m, std::size_t r, U a, std::size_t u, U d,
          std::size_t s, U b, std::size_t t, U c, std::size_t l, U f>
struct is_std_engine<std::mersenne_twister_engine<U, w, n, m, r, a, u, d, s, b, t, c, l, f>> : std::true_type {};
template <class U, std::size_t w, std::size_t s, std::size_t r>
struct is_std_engine<std::subtract_with_carry_engine<U, w, s, r>> : std::true_type {};
template <class E, std::size_t p, std::size_t r>
struct is_std_engine<std::discard_block_engine<E, p, r>> : is_std_engine<E> {};
template <class E, std::size_t w, class U>
struct is_std_engine<std::independent_bits_engine<E, w, U>> : is_std_engine<E> {};
template <class E, std::size_t k>
struct is_std_engine<std::shuffle_order_engine<E, k>> : is_std_engine<E> {};

// The numbers `print` writes to a stream in the classic locale, in order (src/leaf.cpp).
std::vector<std::uint64_t> printed_numbers(const std::function<void(std::ostream&)>& print);
// Runs `scan` on a stream holding `numbers`, in the classic locale; false if the stream failed
// (src/leaf.cpp).
bool scan_numbers(std::span<const std::uint64_t> numbers, const std::function<void(std::istream&)>& scan);
// Throws std::invalid_argument: the entry does not hold a state of the random engine.
[[noreturn]] void throw_not_engine_state();

// The numbers of an engine's textual representation (operator<<), in order.
template <class E>
std::vector<std::uint64_t> engine_words(const E& e) {
  return printed_numbers([&e](std::ostream& out) { out << e; });
}
}  // namespace detail

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

namespace detail {

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

}  // namespace detail

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

namespace detail {

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

}  // namespace detail

}  // namespace ckpt
