#pragma once
/// \file
/// Choosing entries by name: `ckpt::name_pattern`, the one way to say which, and `select` and
/// `drop`, which keep or leave out what a pattern matches. The adapters of ckpt/adapt.hpp
/// (`rename` by pattern) and a load of part of a file (`load_options::only`, ckpt/file.hpp) take
/// one too.

#include <ckpt/checkpoint.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace ckpt {

namespace detail {
struct compiled_pattern;
}  // namespace detail

/// A regular expression over entry names, compiled once and run by RE2
/// (https://github.com/google/re2/wiki/Syntax): matching takes time linear in the name's length
/// and a bounded stack, whatever the pattern and the name, so a hostile name of 100,000
/// characters is matched as safely as a short one. The syntax is RE2's, which is ECMAScript's
/// (`std::regex`) for what names need (`^`, `$`, `.`, `*`, `+`, `?`, `{m,n}`, classes, groups,
/// `(?:...)`, `|`, `\d`, `\w`, `\.`) but has no backreferences (`\1` in a pattern) and no
/// lookaround. Names and patterns are UTF-8. Copies share the compiled expression; a pattern is
/// safe to use from several threads at once.
///
/// ```cpp
/// const ckpt::name_pattern layer(R"(^model\.layers\.(\d+)\.)");
/// layer.matches("model.layers.3.mlp.w");                    // true (a match anywhere)
/// layer.replace("model.layers.3.mlp.w", "blocks.$1.");      // "blocks.3.mlp.w"
/// ```
class name_pattern {
 public:
  /// Compiles `pattern`.
  /// \throws std::invalid_argument if `pattern` is not a valid RE2 expression (the message names
  ///   the pattern and RE2's reason).
  explicit name_pattern(std::string_view pattern);

  /// The pattern as given.
  /// \throws nothing
  [[nodiscard]] const std::string& pattern() const noexcept;

  /// True if the pattern matches somewhere in `name` (anchor it with `^` and `$` to match the
  /// whole name).
  /// \throws nothing
  [[nodiscard]] bool matches(std::string_view name) const noexcept;

  /// `name` with every non-overlapping match replaced by `replacement`, in which `$0` to `$9`
  /// (and `$&`, the same as `$0`) stand for the groups of the match and `$$` for one `$`, as
  /// in ECMAScript's `std::regex_replace` (which also knows `$nn`, `` $` `` and `$'`: here
  /// `$12` is group 1 then `2`, and the others are literal); a backslash is literal. An empty
  /// match is replaced too: `"a*"` replaced by `"-"` turns `"bc"` into `"-b-c-"`.
  /// \throws std::invalid_argument if `replacement` names a group the pattern does not have
  ///   (the message names the pattern and the replacement), whether or not `name` matches.
  [[nodiscard]] std::string replace(std::string_view name, std::string_view replacement) const;

 private:
  std::shared_ptr<const detail::compiled_pattern> compiled_;
};

/// `t` with only the entries whose names `pattern` matches (anywhere in the name: anchor it with
/// `^` and `$`); the tensors and the metadata are shared.
/// Two ways that agree: `select(load(path), pattern)` gives the entries
/// `load(path, {.only = pattern})` gives (`load_options::only`, ckpt/file.hpp). Use `select` (or
/// `drop`) on a checkpoint you hold already, or to have the whole file's digest checked; `only`
/// to read no more of the file (or of an object in S3) than the entries chosen.
/// \throws std::bad_alloc
[[nodiscard]] checkpoint select(const checkpoint& t, const name_pattern& pattern);

/// `t` without the entries whose names `pattern` matches (the complement of `select`; after a
/// load, as `select` above says of `load_options::only`).
/// \throws std::bad_alloc
[[nodiscard]] checkpoint drop(const checkpoint& t, const name_pattern& pattern);

}  // namespace ckpt
