#pragma once
/// \file
/// `ckpt::section` and the save of sections, the one way to write live structures: they are
/// written without first snapshotting them into a checkpoint, so that a trainer does not need
/// twice its memory to save:
/// `save(path, {{params, "model"}, {state.mu, "optim.mu"}, {ckpt::of_int("optim.step", step)}})`.
/// The sections are a braced list, or any contiguous range of them (a `std::vector<section>`
/// built at run time). `save(path, checkpoint)` (ckpt/file.hpp, Raven's `Kaun.Checkpoint.save`)
/// is its one-section case: it writes the checkpoint as one section, with its metadata.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/live_source.hpp>
#include <ckpt/file.hpp>
#include <ckpt/named.hpp>
#include <ckpt/params.hpp>

#include <algorithm>
#include <filesystem>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

class section;

namespace detail {
// The entries of `sections` in name order, after checking their names (none empty, none
// `__metadata__`, no two equal). `function` names the caller in the error messages.
std::vector<const entry_source*> ordered_entries(std::span<const section> sections, std::string_view function);
}  // namespace detail

/// One part of a file written by `save(path, {sections})`: the leaves of a named structure under
/// a prefix, referred to in place (not copied), or the entries of a checkpoint.
class section {
 public:
  /// The leaves of `params`, named as by `of_params(params, prefix)`. Only references are kept:
  /// `params` must outlive the section and not change until `save(path, {sections})` returns.
  /// Leaves stream through the optional hooks of their `leaf_traits` (see ckpt/leaf.hpp); a leaf
  /// type without them is snapshotted.
  /// \throws std::invalid_argument if a `leaf_traits::contiguous` gives a span of another size
  /// than the entry's.
  /// \throws std::bad_alloc
  template <class P>
    requires(!std::is_same_v<P, checkpoint> && named<P>)
  section(const P& params, std::string_view prefix = {}) {  // NOLINT: implicit on purpose
    for_each_leaf(
        [&](std::string_view name, const auto& x) {
          entries_.push_back(detail::live_source(detail::join_name(prefix, name), x, "save"));
        },
        params);
  }
  /// The entries of `t` (its metadata are ignored: pass them to `save(path, {sections})`). The
  /// section shares the entries' bytes: `t` may be a temporary.
  /// \throws std::bad_alloc
  section(const checkpoint& t) {  // NOLINT: implicit on purpose
    for (const auto& [name, x] : t) entries_.push_back(detail::live_source(name, x, "save"));
  }

 private:
  friend std::vector<const detail::entry_source*> detail::ordered_entries(std::span<const section>,
                                                                          std::string_view);
  std::vector<detail::entry_source> entries_;
};

/// Writes the sections to a safetensors file at `path`, atomically (as `save`), without copying
/// the leaves into a checkpoint first: C-order leaves are written straight from their storage and
/// column-major ones are reordered a band of rows at a time, on a helper thread that works one
/// band ahead of the writer when there are 2 MiB or more to reorder. The file is the one
/// `save(path, concat({of_params(...)...}).with_metadata(metadata))` would write.
/// The leaves must not change during the call. `options.digest` stores the digest of the file
/// (header and data), hashed as the bytes go out (see `save`).
/// The sections are a braced list or a contiguous range built at run time:
/// \code
/// std::vector<ckpt::section> sections{{params, "model"}};
/// for (const auto& [name, table] : embeddings) sections.emplace_back(table, "embed." + name);
/// ckpt::save(path, sections);
/// \endcode
/// \throws std::invalid_argument if a name is empty, `__metadata__`, or appears twice (quoted).
/// \throws io_error on an I/O error.
void save(const std::filesystem::path& path, std::span<const section> sections, const metadata_map& metadata = {},
          const save_options& options = {});
/// \copydoc save(const std::filesystem::path&, std::span<const section>, const metadata_map&, const save_options&)
inline void save(const std::filesystem::path& path, std::initializer_list<section> sections,
                 const metadata_map& metadata = {}, const save_options& options = {}) {
  save(path, std::span<const section>(sections.begin(), sections.size()), metadata, options);
}

}  // namespace ckpt
