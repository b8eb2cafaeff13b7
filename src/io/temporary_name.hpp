#pragma once
// How ckpt::save names the temporary file it renames over its target, in one place for the writer
// (src/io/atomic_file.cpp) and those that recognise leftovers of a crashed save (src/run/local_manager.cpp,
// the tool `ckpt`).

#include <climits>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ckpt::detail {

inline constexpr std::string_view temporary_marker = ".tmp-";
inline constexpr std::size_t temporary_suffix_length = 6;
// The longest file name (bytes) a folder takes: a temporary's name never passes it.
inline constexpr std::size_t longest_name = NAME_MAX;

// The temporary for the file `name` with the random `suffix` (temporary_suffix_length
// characters): `.<name>.tmp-<suffix>` beside it. A name too long for that to fit in longest_name
// bytes is cut in it (at a UTF-8 character's start), so that any name a folder takes can be
// saved.
inline std::string temporary_name(std::string_view name, std::string_view suffix) {
  const std::size_t room = longest_name - 1 - temporary_marker.size() - temporary_suffix_length;
  if (name.size() > room) {
    std::size_t cut = room;
    while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xc0) == 0x80) --cut;  // a continuation byte
    name = name.substr(0, cut);
  }
  std::string out = ".";
  out += name;
  out += temporary_marker;
  out += suffix;
  return out;
}

// The name of the file a temporary named `name` was written for (cut, for a target name too long
// to fit whole: see temporary_name), or nothing if `name` is not such a temporary (an empty
// target is no file's). The managers and the tool `ckpt` recognise leftovers by it.
inline std::optional<std::string_view> target_of_temporary(std::string_view name) {
  if (!name.starts_with('.')) return std::nullopt;
  const std::size_t marker = name.rfind(temporary_marker);
  if (marker == std::string_view::npos || marker < 2 ||
      name.size() - marker - temporary_marker.size() != temporary_suffix_length)
    return std::nullopt;
  return name.substr(1, marker - 1);
}

}  // namespace ckpt::detail
