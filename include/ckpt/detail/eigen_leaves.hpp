#pragma once
// Not part of the API: the traits that leaf.hpp's leaf_traits of Eigen matrices, arrays and
// tensors derive from.

#include <ckpt/detail/leaf_bytes.hpp>
#include <ckpt/detail/pages.hpp>
#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace ckpt::detail {

// What every Eigen leaf shares: the dtype of its Scalar, and a read that fills only the leaf.
template <class T>
struct eigen_leaf_traits {
  using scalar_type = typename T::Scalar;
  static constexpr bool reads_only_its_leaf = true;
  static ckpt::dtype dtype(const T&) { return checked_dtype_of<scalar_type>(); }
};

// Matrix and Array share everything: a plain object with contiguous storage.
template <class T>
struct dense_leaf_traits : eigen_leaf_traits<T> {
  // Whether the storage already is C order: row-major, or a single row or column.
  static bool c_ordered(const T& m) { return T::IsRowMajor || m.rows() == 1 || m.cols() == 1; }

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
struct tensor_leaf_traits : eigen_leaf_traits<T> {
  using typename eigen_leaf_traits<T>::scalar_type;
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

}  // namespace ckpt::detail
