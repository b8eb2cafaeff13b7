#pragma once
/// \file
/// Typed structures into checkpoints and back: `of_params`, `to_params`, `read_params`.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/cast.hpp>
#include <ckpt/detail/live_source.hpp>
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

/// Options of `to_params`, `read_params` and `restore_training_state` (strict by default there).
struct extract_options {
  /// Entries are named `prefix + "." + leaf name` (`prefix` alone for a bare root leaf).
  std::string_view prefix = {};
  /// Convert entries whose dtype differs from the leaf's instead of raising (by the rules of
  /// `ckpt::cast`, ckpt/adapt.hpp).
  bool cast = false;
  /// Strict, as PyTorch's `load_state_dict(strict=True)`: entries under `prefix` (named `prefix`
  /// or `prefix + "."`..., every entry when `prefix` is empty) that no leaf consumes are an error,
  /// and the error lists every missing and every unconsumed entry at once, sorted, with their
  /// counts. Not strict, entries the template does not name are ignored (Raven's
  /// `Kaun.Checkpoint` rule) and the first missing entry is reported. `unconsumed_entries` lists
  /// them without failing. Unset, the function's default: not strict for `to_params` and
  /// `read_params` (as Kaun), strict for `restore_training_state`; so `{.cast = true}` keeps
  /// each default.
  std::optional<bool> strict = {};
  /// The function the error messages name (`"ckpt: <function>: ..."`); empty for the extracting
  /// function's own name. A function built on `to_params` or `read_params` reports its errors
  /// under its own name this way.
  std::string_view function = {};
};

namespace detail {

inline std::string join_name(std::string_view prefix, std::string_view name) {
  if (prefix.empty()) return std::string(name);
  if (name.empty()) return std::string(prefix);
  std::string out;
  out.reserve(prefix.size() + 1 + name.size());
  out.append(prefix).append(1, '.').append(name);
  return out;
}

// Kaun's rule for P.names: one name per leaf, distinct and non-empty.
void check_leaf_names(std::span<const std::string> names, std::string_view function);
// Throws the error of check_leaf_names for `name`, empty or found twice.
[[noreturn]] void leaf_name_error(std::string_view name, std::string_view function);

// One leaf of an extraction: its entry's name, its dtype and shape, how to read an entry into it,
// whether that reads the entry's bytes (a `ckpt::tensor` leaf views them instead), and whether
// it may run on a helper thread (leaf_traits::reads_only_its_leaf).
struct leaf_read {
  std::string name;
  ckpt::dtype dtype;
  dims shape;
  std::function<void(const tensor& entry)> read;
  bool reads_bytes = true;
  bool reads_alone = false;
};

// What an extraction covers besides its leaves: the prefixes under which a strict extraction
// refuses the entries no leaf consumes (`opts.prefix` alone for `to_params`; the four sections of
// `restore_training_state`), the entries the caller checks and reads itself (`optim.step`), which
// must be present and count as consumed, and a hint appended to a strict error that lists
// unconsumed entries (how to relax the check where it is on by default).
struct extraction_scope {
  std::span<const std::string_view> prefixes;
  std::span<const std::string_view> read_by_caller = {};
  std::string_view relax_hint = {};
};

// Everything that can go wrong with an extraction, checked before any leaf is written: the names,
// then each leaf's entry (present, same shape, same dtype or castable as `opts.cast` allows) and
// each entry of `scope.read_by_caller` (present), and in strict mode the entries under
// `scope.prefixes` that nothing consumes; in strict mode every missing and unconsumed entry is
// listed in one error. Returns the entry of each leaf, in order.
std::vector<const tensor*> check_extraction(const checkpoint& t, std::span<const leaf_read> leaves,
                                            const extract_options& opts, std::string_view function,
                                            const extraction_scope& scope);

// Reads each entry into its leaf. Small entries of a loaded file (under 16 KiB) reach their
// leaves staged: runs of them read with one pread into a staging band, which the leaves copy
// from; larger ones are read by the leaves themselves, from the file (ckpt/detail/pages.hpp).
// When every leaf reads alone, two runs of leaves of about equal bytes are read on two threads;
// otherwise the leaves are read in order on this thread.
void read_entries(std::span<const leaf_read> leaves, std::span<const tensor* const> entries);

// The entries of `t` under any of `prefixes` that are not in `names`, sorted.
std::vector<std::string> unconsumed(const checkpoint& t, std::vector<std::string> names,
                                    std::span<const std::string_view> prefixes);

// Reads `entry` into the leaf `x`, cast to the leaf's dtype if it has another.
template <leaf L>
void read_leaf(L& x, const tensor& entry) {
  const dtype type = leaf_hooks<L>::dtype(x);
  if (entry.dtype() != type) leaf_hooks<L>::read(x, cast_tensor(entry, type));
  else leaf_hooks<L>::read(x, entry);
}

// Appends to `leaves` every leaf of `params`, named under `prefix`, and how to fill it.
template <class P>
void add_leaf_reads(std::vector<leaf_read>& leaves, P& params, std::string_view prefix) {
  for_each_leaf(
      [&](std::string_view leaf_name, auto& x) {
        using leaf_type = std::remove_cvref_t<decltype(x)>;
        leaves.push_back({join_name(prefix, leaf_name), leaf_hooks<leaf_type>::dtype(x),
                          leaf_hooks<leaf_type>::shape(x), [&x](const tensor& entry) { read_leaf(x, entry); },
                          !std::is_same_v<leaf_type, tensor>, reads_only_its_leaf<leaf_type>});
      },
      params);
}

// The one walk of an extraction: names every leaf of `params` and notes how to fill it, checks
// every entry, and only then copies each entry into its leaf, so that a failed extraction leaves
// `params` as it was.
template <class P>
void extract(const checkpoint& t, P& params, const extract_options& opts, std::string_view function) {
  std::vector<leaf_read> leaves;
  // Room for as many leaves as `t` has entries, which a template usually reads most of: 100,000
  // leaves are not moved as the list grows.
  leaves.reserve(t.size());
  add_leaf_reads(leaves, params, opts.prefix);
  const std::vector<const tensor*> entries = check_extraction(
      t, leaves, opts, opts.function.empty() ? function : opts.function, {.prefixes = {&opts.prefix, 1}});
  read_entries(leaves, entries);
}

}  // namespace detail

/// A checkpoint with one entry per leaf of `params`, named by the leaf's path (see named.hpp)
/// and prefixed by `prefix` (`prefix + "." + name`, or `prefix` alone for a bare root leaf).
/// Each entry is a C-order snapshot of its leaf, in memory of the checkpoint's own: later changes
/// to `params` do not affect it. A copy of 128 MiB or more is made on up to four threads (runs of
/// whole leaves), since one core does not use all of the memory bandwidth. Entries of 32 MiB and
/// more each get memory mapped on its own; smaller ones, when they add up to 1 MiB or more, are
/// packed into mappings of 32 MiB shared by the entries they hold (a tensor kept from the
/// checkpoint keeps its mapping); both are advised huge pages. When the checkpoint goes, that
/// memory is kept (its pages left for the kernel to reclaim under pressure, `MADV_FREE`) for the
/// next mapping of the same size, so a loop that saves `of_params` every few steps does not fault
/// the same memory in at every save; what is kept never raises the process's peak of such memory
/// (it stays counted in the resident size until the kernel reclaims it). A bare leaf gives one entry:
/// `of_params(w, "l1.w")` holds `w` under the name `l1.w`.
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

/// The entries of `t` under `prefix` (named `prefix` or starting with `prefix + "."`; all of
/// them when `prefix` is empty) that `to_params(t, like, {.prefix = prefix})` would not read,
/// sorted: what a strict extraction refuses, for a caller that would rather warn.
/// \throws std::invalid_argument if `like`'s leaf names are not distinct and non-empty.
template <class P>
[[nodiscard]] std::vector<std::string> unconsumed_entries(const checkpoint& t, const P& like,
                                                          std::string_view prefix = {}) {
  static_assert(named<P>, "ckpt: unconsumed_entries needs a named structure or a leaf");
  std::vector<std::string> names;
  for_each_leaf([&](std::string_view name, const auto&) { names.push_back(detail::join_name(prefix, name)); }, like);
  detail::check_leaf_names(names, "unconsumed_entries");
  return detail::unconsumed(t, std::move(names), {&prefix, 1});
}

/// `like` with every leaf replaced by the entry of `t` of the same name (prefixed as in
/// `of_params`). `like` supplies structure, names, dtypes and shapes; its values are discarded.
/// Entries `like` does not name are ignored, unless `opts.strict`. Entries are copied once into
/// the leaves, reordered for column-major leaves; `ckpt::tensor` leaves share the entry's bytes.
/// `like`'s values are not copied: dynamic Eigen leaves are allocated at their shapes and filled
/// (those of 32 MiB and more advised huge pages before they are filled; structures of your own
/// through `ckpt::fields`, and leaves of your own, are copied first). To
/// fill existing parameters without allocating, use `read_params`.
/// \throws std::invalid_argument if an entry named by `like` is missing, has another shape, or
/// another dtype while `opts.cast` is false (each message names the entry and both shapes or
/// dtypes), if a dtype cannot be cast (sub-byte formats), if `like`'s names are invalid, or, with
/// `opts.strict`, if entries under the prefix are left unconsumed. When no entry of `t` is under
/// a non-empty prefix, the message lists the prefixes `t` has.
/// \throws ckpt::format_error naming the file if a loaded file has been truncated since `load`
/// (checked before any leaf is written); ckpt::io_error if it cannot be read, or format_error if
/// it is truncated while it is being read.
template <class P>
[[nodiscard]] P to_params(const checkpoint& t, const P& like, extract_options opts = {}) {
  static_assert(named<P>, "ckpt: to_params needs a named structure or a leaf");
  P out = detail::unfilled_structure(like);
  detail::extract(t, out, opts, "to_params");
  return out;
}

/// Replaces every leaf of `params`, in place, by the entry of `t` of the same name: `to_params`
/// without the copy of the template, so that loading a model needs no second copy of it. All
/// entries are checked before any leaf is written: on an error `params` is unchanged.
/// \throws std::invalid_argument as `to_params` (the messages say `read_params`).
/// \throws ckpt::io_error, ckpt::format_error as `to_params`; after a failure while reading,
/// some leaves may hold their new values.
template <class P>
void read_params(const checkpoint& t, P& params, extract_options opts = {}) {
  static_assert(named<P>, "ckpt: read_params needs a named structure or a leaf");
  detail::extract(t, params, opts, "read_params");
}

}  // namespace ckpt
