#pragma once
/// \file
/// `ckpt::section` and the save of sections, the one way to write live structures: they are
/// written without first snapshotting them into a checkpoint, so that a trainer does not need
/// twice its memory to save:
/// `save(path, {{params, "model"}, {state.mu, "optim.mu"}, {ckpt::of_int("optim.step", step)}})`.
/// `save(path, checkpoint)` (ckpt/file.hpp, Raven's `Kaun.Checkpoint.save`) is its one-section case.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/entry_source.hpp>
#include <ckpt/file.hpp>
#include <ckpt/named.hpp>
#include <ckpt/params.hpp>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

namespace detail {

// An entry that refers to a live leaf: row-major leaves are written straight from their storage,
// column-major ones reordered a run of rows at a time; other leaf types are snapshotted.
template <leaf L>
entry_source live_source(std::string name, const L& x) {
  entry_source out;
  out.name = std::move(name);
  out.dtype = leaf_traits<L>::dtype(x);
  out.shape = leaf_traits<L>::shape(x);
  out.nbytes = nbytes_of(out.dtype, numel_of(out.shape));
  const auto as_bytes = [](const auto* data, std::size_t n) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), n);
  };
  if constexpr (std::is_same_v<L, tensor>) {
    out.contiguous = x.bytes();
  } else if constexpr (std::is_arithmetic_v<L> || scalar<L>) {
    out.contiguous = as_bytes(&x, out.nbytes);
  } else if constexpr (std::is_base_of_v<Eigen::PlainObjectBase<L>, L>) {
    if (dense_leaf_traits<L>::c_ordered(x)) {
      out.contiguous = as_bytes(x.data(), out.nbytes);
    } else {
      // Column-major r x c: rows [first, first + count) of the C-order matrix are a band of the
      // row-major c x r storage, transposed.
      out.write_rows = [&x](std::size_t first, std::size_t count, std::byte* dst) {
        using S = typename L::Scalar;
        const auto r = static_cast<std::size_t>(x.rows()), c = static_cast<std::size_t>(x.cols());
        transpose(reinterpret_cast<const std::byte*>(x.data() + first), r, dst, c, c, count, sizeof(S));
      };
    }
  } else if constexpr (requires { tensor_leaf_traits<L>::rank; }) {
    using traits = tensor_leaf_traits<L>;
    using S = typename L::Scalar;
    if constexpr (traits::is_row_major || traits::rank <= 1) {
      out.contiguous = as_bytes(x.data(), out.nbytes);
    } else if constexpr (traits::rank == 2) {
      out.write_rows = [&x](std::size_t first, std::size_t count, std::byte* dst) {
        const auto r = static_cast<std::size_t>(x.dimension(0)), c = static_cast<std::size_t>(x.dimension(1));
        transpose(reinterpret_cast<const std::byte*>(x.data() + first), r, dst, c, c, count, sizeof(S));
      };
    } else {
      out.write_rows = [&x](std::size_t first, std::size_t count, std::byte* dst) {
        constexpr int rank = traits::rank;
        using source_type = Eigen::Tensor<const S, rank, Eigen::ColMajor, Eigen::Index>;
        using target_type = Eigen::Tensor<S, rank, Eigen::RowMajor, Eigen::Index>;
        auto extents = traits::extents(x);
        std::array<Eigen::Index, rank> offsets{};
        offsets[0] = static_cast<Eigen::Index>(first);
        Eigen::TensorMap<source_type> source(x.data(), extents);
        extents[0] = static_cast<Eigen::Index>(count);
        Eigen::TensorMap<target_type>(reinterpret_cast<S*>(dst), extents) =
            source.slice(offsets, extents).swap_layout().shuffle(traits::reversed());
      };
    }
  } else {
    out.keep_alive = to_tensor(x);
    out.contiguous = out.keep_alive.bytes();
  }
  return out;
}

}  // namespace detail

class section;

namespace detail {
// The entries of `sections` in name order, after checking their names (none empty, none
// `__metadata__`, no two equal). `function` names the caller in the error messages.
std::vector<const entry_source*> ordered_entries(std::initializer_list<section> sections, std::string_view function);
}  // namespace detail

/// One part of a file written by `save(path, {sections})`: the leaves of a named structure under
/// a prefix, referred to in place (not copied), or the entries of a checkpoint.
class section {
 public:
  /// The leaves of `params`, named as by `of_params(params, prefix)`. Only references are kept:
  /// `params` must outlive the section and not change until `save(path, {sections})` returns.
  /// \throws std::bad_alloc
  template <class P>
    requires(!std::is_same_v<P, checkpoint> && named<P>)
  section(const P& params, std::string_view prefix = {}) {  // NOLINT: implicit on purpose
    for_each_leaf(
        [&](std::string_view name, const auto& x) {
          entries_.push_back(detail::live_source(detail::join_name(prefix, name), x));
        },
        params);
  }
  /// The entries of `t` (its metadata are ignored: pass them to `save(path, {sections})`).
  /// \throws std::bad_alloc
  section(const checkpoint& t) {  // NOLINT: implicit on purpose
    for (const auto& [name, x] : t) entries_.push_back(detail::live_source(name, x));
  }

 private:
  friend std::vector<const detail::entry_source*> detail::ordered_entries(std::initializer_list<section>,
                                                                          std::string_view);
  friend void save(const std::filesystem::path&, std::initializer_list<section>, const metadata_map&,
                   const save_options&);
  std::vector<detail::entry_source> entries_;
};

/// Writes the sections to a safetensors file at `path`, atomically (as `save`), without copying
/// the leaves into a checkpoint first: C-order leaves are written straight from their storage and
/// column-major ones are reordered through a bounded buffer. The file is the one
/// `save(path, concat({of_params(...)...}).with_metadata(metadata))` would write.
/// The leaves must not change during the call. `options.digest` stores the digest of the data
/// section, hashed as the bytes go out (see `save`).
/// \throws std::invalid_argument if a name is empty, `__metadata__`, or appears twice (quoted).
/// \throws io_error on an I/O error.
void save(const std::filesystem::path& path, std::initializer_list<section> sections,
          const metadata_map& metadata = {}, const save_options& options = {});

}  // namespace ckpt
