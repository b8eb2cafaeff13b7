#pragma once
/// \file
/// Typed structures into checkpoints and back: `of_params`, `to_params`, `read_params`.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/live_source.hpp>
#include <ckpt/detail/read_plan.hpp>
#include <ckpt/named.hpp>

#include <algorithm>
#include <functional>
#include <span>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt {

/// Options of every read of entries into leaves: `to_params`, `read_params` of a structure and of
/// a list of sections (ckpt/section.hpp). Strictness and each way of relaxing it are separate,
/// named choices; a read of sections is strict unless told otherwise, and what a relaxed read did
/// is in the `read_report` it returns. When the model changes between runs (a field added,
/// removed, renamed, widened or retyped), see the guide's chapter "When the model changes".
struct extract_options {
  /// Entries are named `prefix + "." + leaf name` (`prefix` alone for a bare root leaf). Only for
  /// a single structure: sections carry their own prefixes (`read_params(t, s, {.prefix = "m"})`
  /// is `read_params(t, {{s, "m"}})`).
  std::string_view prefix = {};
  /// Convert entries whose dtype differs from the leaf's instead of raising, through the one
  /// conversion of `ckpt::cast` (ckpt/adapt.hpp: its rules, the same bits); reported in
  /// `read_report::cast`. Two ways that agree: `cast` here converts while reading into leaves of
  /// another dtype (no converted checkpoint is kept); `ckpt::cast(t, dtype)` first, to convert a
  /// checkpoint you also save or inspect, or only some entries of it (its filter).
  bool cast = false;
  /// Strict, as PyTorch's `load_state_dict(strict=True)`: entries under the prefixes read (named
  /// `prefix` or `prefix + "."`..., every entry when a prefix is empty) that no leaf reads are an
  /// error, and the error lists every missing entry, every unread entry and every shape that
  /// differs at once, sorted, with their counts. Not strict, the entries no leaf reads are
  /// ignored (Raven's `Kaun.Checkpoint` rule; listed in `read_report::ignored`) and the first
  /// problem is reported. Unset, the function's default: not strict for `to_params` (as Kaun),
  /// strict for `read_params`, of a structure and of sections alike (as PyTorch); so
  /// `{.cast = true}` keeps each default.
  std::optional<bool> strict = {};
  /// A leaf that has no entry keeps the value it has (the template's: the value its constructor
  /// or initializer gave it; for Adam's moments of `training_state`, zero) instead of raising;
  /// listed in `read_report::kept`. Only for `read_params`, which has the values to keep.
  bool keep_missing = false;
  /// An entry whose shape differs from its leaf's, with the same number of dimensions, is copied
  /// into the block the two shapes share (indices below the smaller extent of each dimension:
  /// rows or columns added or removed at the end, a wider layer, a larger vocabulary); the
  /// leaf's other elements keep the value they have. Listed in `read_report::reshaped`. Without
  /// it a shape that differs is an error. Only for `read_params`. Not for the sub-byte dtypes
  /// (F4, F6).
  bool copy_overlap = false;
};

/// What a read of entries into leaves did (`read_params`): how many entries were read as
/// saved, and each entry the options let through otherwise. Printable (`to_string`); a strict
/// read without `cast` returns a report whose lists are empty.
struct read_report {
  /// An entry copied partly (`extract_options::copy_overlap`).
  struct reshape {
    /// The entry's name.
    std::string name;
    /// Its shape in the checkpoint.
    dims saved;
    /// Its leaf's shape, which it now has.
    dims now;
  };
  /// An entry converted to its leaf's dtype (`extract_options::cast`).
  struct conversion {
    /// The entry's name.
    std::string name;
    /// Its dtype in the checkpoint.
    dtype saved;
    /// Its leaf's dtype, which it now has.
    dtype now;
  };
  /// Entries read into their leaves whole (cast or not).
  std::size_t restored = 0;
  /// Leaves with no entry, which kept their values (`keep_missing`), by entry name, sorted.
  std::vector<std::string> kept;
  /// Entries under the read prefixes that no leaf reads (not strict), sorted.
  std::vector<std::string> ignored;
  /// Entries copied partly (`copy_overlap`), sorted by name.
  std::vector<reshape> reshaped;
  /// Entries cast to their leaf's dtype (`cast`), sorted by name.
  std::vector<conversion> cast;

  /// Whether every leaf got its entry as saved: nothing kept, ignored, reshaped or cast.
  /// \throws nothing
  [[nodiscard]] bool exact() const noexcept { return kept.empty() && ignored.empty() && reshaped.empty() && cast.empty(); }
  /// The report as lines of text, e.g.
  /// `restored 6 entries as saved` / `kept 3 leaves with no entry: 'model.scale', ...` /
  /// `copied 2 entries partly: 'model.l1.b' [16] -> [32], ...`.
  /// \throws std::bad_alloc
  [[nodiscard]] std::string to_string() const;
};
}  // namespace ckpt

// The read of one structure (ckpt::detail::extract, which to_params and read_params below call)
// takes the options and returns the report above: it comes after them.
#include <ckpt/detail/extract.hpp>

namespace ckpt {

/// A checkpoint with one entry per leaf of `params`, named by the leaf's path (see named.hpp)
/// and prefixed by `prefix` (`prefix + "." + name`, or `prefix` alone for a bare root leaf).
/// Each entry is a C-order snapshot of its leaf, in memory of the checkpoint's own: later changes
/// to `params` do not affect it. A large copy may run on helper threads, all joined before this
/// returns. Memory a dropped checkpoint held may be kept for the next one (reclaimable by the
/// kernel, never raising the process's peak), so a loop that calls `of_params` every few steps
/// does not fault its memory in at every call: the guide's performance notes say how. A bare
/// leaf gives one entry: `of_params(w, "l1.w")` holds `w` under the name `l1.w`.
/// \throws std::invalid_argument if the names are not distinct and non-empty (the message
/// quotes the offending name), or name `__metadata__`, before anything is copied; if a
/// `leaf_traits::contiguous` gives a span of another size than the entry's.
/// \throws std::bad_alloc (where no copying thread can be started, the copy runs on this one).
template <class P>
[[nodiscard]] checkpoint of_params(const P& params, std::string_view prefix = {}) {
  static_assert(named<P>, "ckpt: of_params needs a named structure or a leaf");
  std::vector<detail::entry_source> entries;
  for_each_leaf(
      [&](std::string_view name, const auto& x) {
        entries.push_back(detail::live_source(detail::join_name(prefix, name), x, "of_params"));
      },
      params);
  return detail::copy_entries(entries, "of_params");
}

/// `like` with every leaf replaced by the entry of `t` of the same name (prefixed as in
/// `of_params`). `like` supplies structure, names, dtypes and shapes; its values are discarded.
/// Entries `like` does not name are ignored, unless `opts.strict`. Entries are copied once into
/// the leaves, reordered for column-major leaves; `ckpt::tensor` leaves share the entry's bytes.
/// `like`'s values are not copied: dynamic Eigen leaves are allocated at their shapes and filled
/// (structures of your own
/// through `ckpt::fields`, and leaves of your own, are copied first). To
/// fill existing parameters without allocating, use `read_params`.
/// \throws std::invalid_argument if an entry named by `like` is missing, has another shape, or
/// another dtype while `opts.cast` is false (each message names the entry and both shapes or
/// dtypes), if a dtype cannot be cast (sub-byte formats), if `like`'s names are invalid, with
/// `opts.strict` if entries under the prefix are left unread, or if `opts.keep_missing` or
/// `opts.copy_overlap` is set (they keep template values, which `to_params` does not copy: use
/// `read_params`, which also reports what it did). When no entry of `t` is under a non-empty
/// prefix, the message lists the prefixes `t` has.
/// \throws ckpt::format_error naming the file if a loaded file has been truncated since `load`
/// (checked before any leaf is written); ckpt::io_error if it cannot be read, or format_error if
/// it is truncated while it is being read.
template <class P>
[[nodiscard]] P to_params(const checkpoint& t, const P& like, extract_options opts = {}) {
  static_assert(named<P>, "ckpt: to_params needs a named structure or a leaf");
  if (opts.keep_missing || opts.copy_overlap)
    throw std::invalid_argument("ckpt: to_params: keep_missing and copy_overlap keep the template's values, which "
                                "to_params does not copy: read into a copy with read_params, which reports what "
                                "it kept");
  P out = detail::unfilled_structure(like);
  (void)detail::extract(t, out, opts, "to_params", false);
  return out;
}

/// Replaces every leaf of `params`, in place, by the entry of `t` of the same name: `to_params`
/// without the copy of the template, so that loading a model needs no second copy of it. All
/// entries are checked before any leaf is written: on an error `params` is unchanged. With
/// `opts.keep_missing` or `opts.copy_overlap`, the leaves keep (some of) their values; the report
/// says which.
///
/// Strict unless `opts.strict` is false, as the read of sections: every entry under the prefix
/// must be read by a leaf (`{.strict = false}` ignores the others and lists them in the report;
/// `to_params` is the lenient one, as Kaun's).
///
/// **Two spellings, one read.** `read_params(t, params, {.prefix = "model"})` (the prefix as
/// `to_params` takes it) and `read_params(t, {{params, "model"}})` (the list of sections,
/// ckpt/section.hpp, which several structures share) do the same read: the same leaves, the same
/// default strictness, the same report and the same error messages, which name `read_params`.
/// Use this one for one structure read as `to_params` reads it; the list for what was saved as
/// a list (a training state, a model and its EMA).
/// \returns what was read, kept, ignored, copied partly and cast.
/// \throws std::invalid_argument as `to_params` (the messages say `read_params`; strict, they
/// list every problem), except that `keep_missing` and `copy_overlap` are allowed.
/// \throws ckpt::io_error, ckpt::format_error as `to_params`; after a failure while reading,
/// some leaves may hold their new values.
template <class P>
  requires(!detail::section_range<P>)
read_report read_params(const checkpoint& t, P& params, extract_options opts = {}) {
  static_assert(named<P>, "ckpt: read_params needs a named structure or a leaf");
  return detail::extract(t, params, opts, "read_params", true);
}

}  // namespace ckpt
