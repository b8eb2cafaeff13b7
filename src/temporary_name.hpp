#pragma once
// How ckpt::save names the temporary file it renames over its target, in one place for the writer
// (src/file.cpp) and the manager that recognises leftovers of a crashed save (src/local_manager.cpp).

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace ckpt::detail {

inline constexpr std::string_view temporary_marker = ".tmp-";
inline constexpr std::size_t temporary_suffix_length = 6;  // mkstemp's XXXXXX

// The mkstemp pattern of the temporary for `path`: `.<file name>.tmp-XXXXXX` beside it.
inline std::string temporary_pattern(const std::filesystem::path& path) {
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : ".";
  return (folder / ("." + path.filename().string() + std::string(temporary_marker) +
                    std::string(temporary_suffix_length, 'X')))
      .string();
}

// The name of the file a temporary named `name` was written for, or nothing if `name` is not
// such a temporary.
inline std::optional<std::string_view> target_of_temporary(std::string_view name) {
  if (!name.starts_with('.')) return std::nullopt;
  const std::size_t marker = name.rfind(temporary_marker);
  if (marker == std::string_view::npos || marker < 1 ||
      name.size() - marker - temporary_marker.size() != temporary_suffix_length)
    return std::nullopt;
  return name.substr(1, marker - 1);
}

}  // namespace ckpt::detail
