#pragma once
// Not part of the API (the templates of params.hpp, section.hpp and adam.hpp call these): the one
// read of entries into leaves that `to_params`, `read_params` and the read of sections share.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/cast.hpp>
#include <ckpt/leaf.hpp>
#include <ckpt/named.hpp>

#include <functional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ckpt {

struct extract_options;
struct read_report;
class section;

namespace detail {

inline std::string join_name(std::string_view prefix, std::string_view name) {
  if (prefix.empty()) return std::string(name);
  if (name.empty()) return std::string(prefix);
  std::string out;
  out.reserve(prefix.size() + 1 + name.size());
  out.append(prefix).append(1, '.').append(name);
  return out;
}

// Whether `R` is a range of sections (ckpt/section.hpp): `read_params` of one reads the list, not a
// structure.
template <class R>
concept section_range = std::ranges::range<R> && std::is_same_v<std::ranges::range_value_t<R>, section>;

// Kaun's rule for P.names: one name per leaf, distinct and non-empty.
void check_leaf_names(std::span<const std::string> names, std::string_view function);
// Throws the error of check_leaf_names for `name`, empty or found twice.
[[noreturn]] void leaf_name_error(std::string_view name, std::string_view function);

// One leaf of a read: its entry's name, its dtype and shape, how to read an entry into it,
// a C-order copy of its value (the template kept around an overlapping block), whether reading
// reads the entry's bytes (a `ckpt::tensor` leaf views them instead), and whether it may run on a
// helper thread (leaf_traits::reads_only_its_leaf).
struct leaf_read {
  std::string name;
  ckpt::dtype dtype;
  dims shape;
  std::function<void(const tensor& entry)> read;
  std::function<tensor()> current;
  bool reads_bytes = true;
  bool reads_alone = false;
};

// An entry a section reads itself (the step of `training_state`, stored as Kaun's `of_int`):
// `prepare` checks it and keeps its value (it may throw, naming `function`: nothing is written
// yet); a commit of the plan stores it once every leaf is read.
struct own_entry {
  std::string name;
  std::function<void(const checkpoint&, std::string_view function)> prepare;
};

// What a read gathers from its sections before anything is checked: the leaves, the entries read
// by the sections themselves, the prefixes under which entries nothing reads are refused (strict)
// or reported as ignored, and what to do once every leaf is read (move staged moments in place).
struct read_plan {
  std::vector<leaf_read> leaves;
  std::vector<own_entry> own;
  std::vector<std::string> prefixes;
  std::vector<std::function<void()>> commits;
  // Whether the leaves have values to keep (not `to_params`'s unfilled ones): the errors then
  // point to keep_missing and copy_overlap.
  bool keeps_values = true;
};

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
                          [&x] { return to_tensor(std::as_const(x)); }, !std::is_same_v<leaf_type, tensor>,
                          reads_only_its_leaf<leaf_type>});
      },
      params);
}

// The one read: checks every leaf against its entry and the entries under the plan's prefixes
// (names, presence, shapes, dtypes, as `options` allow; strict, every problem listed in one
// error), then reads each entry into its leaf and runs the commits. Nothing is written before
// every check has passed. `function` names the caller in the messages (read_params, to_params;
// a function built on a read passes its own name); `strict` is the caller's default for
// `options.strict`.
read_report read_planned(const checkpoint& t, read_plan& plan, const extract_options& options,
                         std::string_view function, bool strict);

}  // namespace detail
}  // namespace ckpt
