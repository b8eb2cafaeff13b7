#pragma once
// The format's rule for entry names, with its one set of messages: a name is not empty, is not
// `__metadata__` (the key of a file's metadata) and names one entry only. Every place that names
// entries (a checkpoint, the leaves of structures, a section list, an index's weight_map) asks here.

#include <string_view>

namespace ckpt::detail {

// The header key the format keeps for the file's metadata.
inline constexpr std::string_view metadata_key = "__metadata__";

// Whether `name` may name an entry: not empty, and not metadata_key.
[[nodiscard]] constexpr bool is_entry_name(std::string_view name) noexcept {
  return !name.empty() && name != metadata_key;
}

// Throws std::invalid_argument for `name`, which is empty, metadata_key, or else given to two
// entries. `function`: the public function whose leaves are named so (its messages speak of
// leaves), or empty for the entries of a checkpoint.
[[noreturn]] void entry_name_error(std::string_view name, std::string_view function = {});

// Throws entry_name_error unless is_entry_name(name).
inline void check_entry_name(std::string_view name, std::string_view function = {}) {
  if (!is_entry_name(name)) entry_name_error(name, function);
}

}  // namespace ckpt::detail
