#pragma once
/// \file
/// `ckpt::section`: the list of named structures a file holds, each under its prefix. One list is
/// what you save and what you read back:
/// \code
/// ckpt::save(path, {{params, "model"}, {ema, "ema"}});
/// ckpt::read_params(ckpt::load(path), {{params, "model"}, {ema, "ema"}});
/// \endcode
/// The save writes live structures without first snapshotting them into a checkpoint, so that a
/// trainer does not need twice its memory to save; the read checks every entry of every section
/// before it writes any leaf. A training state is one such list, made by the optimizer
/// (`ckpt::training_state(params, state)`, ckpt/adam.hpp). The sections are a braced list, or
/// any contiguous range of them (a `std::vector<section>` built at run time).
/// `save(path, checkpoint)` (ckpt/file.hpp, Raven's `Kaun.Checkpoint.save`) is the save's
/// one-section case: `save(path, t)` is `save(path, {t})`, the same file byte for byte, with
/// the checkpoint's metadata.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/live_source.hpp>
#include <ckpt/file.hpp>
#include <ckpt/named.hpp>
#include <ckpt/params.hpp>

#include <algorithm>
#include <functional>
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
struct section_access;  // ckpt/detail/section_access.hpp, included at the end
}  // namespace detail

/// One part of a file: the leaves of a named structure under a prefix, referred to in place (not
/// copied), or the entries of a checkpoint. A section of a structure that can be written
/// (`{params, "model"}` with `params` not const) is read back into by `read_params`; a section
/// of a const structure or of a checkpoint is only saved.
class section {
 public:
  /// The leaves of `params`, named as by `of_params(params, prefix)`, to save and to read back
  /// into. Only references are kept: `params` must outlive the section and not change until
  /// `save(path, {sections})` returns.
  /// Leaves stream through the optional hooks of their `leaf_traits` (see ckpt/leaf.hpp); a leaf
  /// type without them is snapshotted.
  /// \throws std::invalid_argument if a `leaf_traits::contiguous` gives a span of another size
  /// than the entry's.
  /// \throws std::bad_alloc
  template <class P>
    requires(!std::is_same_v<std::remove_const_t<P>, checkpoint> && named<P>)
  section(P& params, std::string_view prefix = {}) : prefix_(prefix) {  // NOLINT: implicit on purpose
    for_each_leaf(
        [&](std::string_view name, const auto& x) {
          entries_.push_back(detail::live_source(detail::join_name(prefix, name), x, "save"));
        },
        std::as_const(params));
    if constexpr (!std::is_const_v<P>)
      read_ = [&params, prefix = prefix_](detail::read_plan& plan) {
        detail::add_leaf_reads(plan.leaves, params, prefix);
        plan.prefixes.push_back(prefix);
      };
  }
  /// The leaves of a temporary structure, to save only (`{Eigen::Vector2f(1, 2), "x"}`): it lives
  /// until the end of the full expression that saves it.
  /// \throws as the constructor above.
  template <class P>
    requires(!std::is_same_v<P, checkpoint> && named<P>)
  section(const P&& params, std::string_view prefix = {})  // NOLINT: implicit on purpose
      : section(static_cast<const P&>(params), prefix) {}
  /// The entries of `t` and its metadata, to save only: a save of sections writes the metadata
  /// of its checkpoints (see `save` below). The section shares the entries' bytes: `t` may be a
  /// temporary.
  /// \throws std::bad_alloc
  section(const checkpoint& t) : metadata_(t.metadata()) {  // NOLINT: implicit on purpose
    entries_.reserve(t.size());
    for (const auto& [name, x] : t) entries_.push_back(detail::live_source(name, x, "save"));
  }

 private:
  friend struct detail::section_access;
  section() = default;
  std::vector<detail::entry_source> entries_;
  std::string prefix_;
  // A checkpoint's metadata, which a save writes; empty for a structure's section.
  metadata_map metadata_;
  // Adds the section's leaves to a read; empty for a section that is only saved.
  std::function<void(detail::read_plan&)> read_;
};

/// Writes the sections to a safetensors file at `path`, atomically (as `save`), without copying
/// the leaves into a checkpoint first: C-order leaves are written straight from their storage and
/// column-major ones are reordered a band of rows at a time, on a helper thread that works one
/// band ahead of the writer. The file is the one
/// `save(path, concat({of_params(...)...}).with_metadata(metadata))` would write.
/// The leaves must not change during the call. `options.digest` (on by default) stores the
/// digest of the file (header and data), hashed as the bytes go out (see `save`).
///
/// **Metadata.** The file's `__metadata__` are those of the sections made from checkpoints,
/// merged, then `metadata` over them (on a key both give, `metadata`'s value is written), with
/// the exceptions `save` of a checkpoint names (ckpt's digest keys, `format`). So
/// `save(path, t)` and `save(path, {t})` write the same file, and `save(path, {t}, {{"k", "v"}})`
/// adds or replaces one key of `t`'s. The managers' saves follow the same rule, their own `step`
/// and `wall_time` entries last.
///
/// The sections are a braced list or a contiguous range built at run time; the options may come
/// without metadata, as for a checkpoint:
/// \code
/// std::vector<ckpt::section> sections{{params, "model"}};
/// for (const auto& [name, table] : embeddings) sections.emplace_back(table, "embed." + name);
/// ckpt::save(path, sections);
/// ckpt::save(path, {{params, "model"}}, {.digest = false});  // the options alone
/// \endcode
/// A `path` of the form `s3://bucket/key` is saved as that object, as `save` of a checkpoint
/// (ckpt/file.hpp) says.
/// \throws std::invalid_argument if a name is empty, `__metadata__`, or appears twice (quoted);
/// if two checkpoint sections give one metadata key different values (the message names the key
/// and both values; checked before anything is written, as the names are); as `save` of a
/// checkpoint for the header and the metadata.
/// \throws io_error on an I/O error; remote_error (and std::invalid_argument) for an `s3://`
/// path, as `save` of a checkpoint.
void save(const std::filesystem::path& path, std::span<const section> sections, const metadata_map& metadata = {},
          const save_options& options = {});
/// \copydoc save(const std::filesystem::path&, std::span<const section>, const metadata_map&, const save_options&)
inline void save(const std::filesystem::path& path, std::span<const section> sections, const save_options& options) {
  save(path, sections, metadata_map{}, options);
}
/// \copydoc save(const std::filesystem::path&, std::span<const section>, const metadata_map&, const save_options&)
inline void save(const std::filesystem::path& path, std::initializer_list<section> sections,
                 const metadata_map& metadata = {}, const save_options& options = {}) {
  save(path, std::span<const section>(sections.begin(), sections.size()), metadata, options);
}
/// \copydoc save(const std::filesystem::path&, std::span<const section>, const metadata_map&, const save_options&)
inline void save(const std::filesystem::path& path, std::initializer_list<section> sections,
                 const save_options& options) {
  save(path, std::span<const section>(sections.begin(), sections.size()), metadata_map{}, options);
}

/// Reads back the sections a file was saved as: every leaf of every section from the entry of
/// `t` of the same name, all of them checked before any is written, so that on an error every
/// structure is as it was. The mirror of `save(path, {sections})`: pass the same list.
/// \code
/// ckpt::read_params(ckpt::load(path), {{params, "model"}, {ema, "ema"}});
/// auto latest = manager.load_latest();
/// ckpt::read_params(*latest, ckpt::training_state(params, state));  // ckpt/adam.hpp
/// \endcode
/// Strict unless `options.strict` is false: every entry under a section's prefix must be read by
/// a leaf, and one error lists every missing entry, every entry nothing reads and every shape
/// that differs (`options` names the choice that would let each through). When the model has
/// changed since the save, `options.keep_missing`, `strict = false`, `copy_overlap` and `cast`
/// let each kind of difference through, and the report returned says what each did (see the
/// guide's chapter "When the model changes").
///
/// **Two spellings, one read.** `read_params(t, {{params, "model"}})` and
/// `read_params(t, params, {.prefix = "model"})` (ckpt/params.hpp, the prefix as `to_params`
/// takes it) do the same read: the same leaves, the same default strictness, the same report and
/// the same error messages, which name `read_params`. Use the list for what was saved as a list
/// (a training state, a model and its EMA); the prefix for one structure read as `to_params`
/// reads it.
/// \returns what was read, kept, ignored, copied partly and cast.
/// \throws std::invalid_argument if a section was made from a const structure or a checkpoint (it
/// cannot be read into), if `options.prefix` is not empty (sections carry their prefixes), if the
/// leaf names are not distinct, or as `read_params` of a structure (the messages list every
/// problem when strict).
/// \throws ckpt::io_error, ckpt::format_error as `to_params`.
read_report read_params(const checkpoint& t, std::span<const section> sections, const extract_options& options = {});
/// \copydoc read_params(const checkpoint&, std::span<const section>, const extract_options&)
inline read_report read_params(const checkpoint& t, std::initializer_list<section> sections,
                               const extract_options& options = {}) {
  return read_params(t, std::span<const section>(sections.begin(), sections.size()), options);
}

}  // namespace ckpt

// The way into a section's members (ckpt::detail::section_access, declared above and made a
// friend of it) needs the whole class: it comes after it.
#include <ckpt/detail/section_access.hpp>
