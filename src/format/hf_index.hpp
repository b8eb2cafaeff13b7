#pragma once
// The Hugging Face sharded-checkpoint index (`*.safetensors.index.json`), written byte for byte as
// transformers writes it (src/format/sharded.cpp) and read with every check (src/format/hf_index.cpp), for
// save_sharded and the sharded reader (src/format/sharded.cpp) and ckpt::mpi (src/mpi/step_folders.cpp).

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt::detail {

/// A sharded checkpoint's index file is not valid (not JSON, no `weight_map`, a shard name that
/// leaves the folder, an entry its shard does not hold...): a `format_error` whose message says
/// so, `ckpt: '<index>' is not a valid sharded checkpoint index: <broken rule>` (ckpt::load's
/// documentation, ckpt/file.hpp).
class index_error : public format_error {
 public:
  /// \param index the index file; \param rule the rule it breaks, naming the entry if any.
  index_error(const std::filesystem::path& index, const std::string& rule)
      : format_error(index, rule, "ckpt: '" + index.string() + "' is not a valid sharded checkpoint index: " + rule) {}
};

/// `s` (UTF-8) as Python's json.dumps writes it with its default ensure_ascii: printable ASCII as
/// is, \" \\ \n \r \t \b \f, every other code point as \uXXXX (a surrogate pair above U+FFFF).
/// \throws std::invalid_argument if `s` is not valid UTF-8.
std::string python_json_string(std::string_view s);

/// The key, in an index's `metadata` and in each of its shards' `__metadata__`, of the id of the
/// save that wrote them (save_sharded): a load tells a shard of another save by it.
inline constexpr std::string_view save_id_key = "ckpt.save_id";

/// The index text: json.dumps(indent=2, sort_keys=True) of {"metadata": {"total_size": ...},
/// "weight_map": {name: shard file}}, with `"ckpt.save_id": save_id` in the metadata unless
/// `save_id` is empty. `weight_map` must be sorted by name.
/// \throws std::invalid_argument if a name or file name is not valid UTF-8.
std::string index_text(std::uint64_t total_size, std::span<const std::pair<std::string, std::string>> weight_map,
                       std::string_view save_id = {});

/// Whether `name` is a plain file name, of a file in the folder it is taken in: not empty, not
/// `.` or `..`, without '/' or NUL.
bool is_plain_file_name(std::string_view name);

/// The weight_map of the index file open as `fd` (read with pread from its start, the descriptor
/// left open), `shown` naming it in messages: for each shard file (a plain file name in the
/// index's folder), the names of its entries, in the index's order. The text is parsed as it is
/// read, 1 MiB at a time, into the map directly: the parse takes memory in proportion to the
/// map, never the text or a DOM of it. Members of the index other than `metadata` (an object,
/// of which only a string save_id_key is read, into `*save_id` if given, "" if it has none) and
/// `weight_map` are skipped.
/// \throws index_error naming `shown` if it is not a regular file, is larger than
///   max_header_size, or is not an index: not JSON (nested deeper than 32), not an object,
///   `metadata` or `weight_map` given twice, `metadata` not an object, no `weight_map` or not an
///   object, a name that is not an entry name, a shard that is not a plain file name, a name
///   given twice (`the weight_map entry '<name>' appears twice, in '<shard>' and '<shard>'`);
///   io_error naming `shown` if it cannot be examined or read.
std::map<std::string, std::vector<std::string>, std::less<>> read_weight_map(int fd, const std::filesystem::path& shown,
                                                                             std::string* save_id = nullptr);

/// The same, of an index's text already in memory (an object read from a bucket).
/// \throws index_error as above.
std::map<std::string, std::vector<std::string>, std::less<>> parse_weight_map(std::string_view text,
                                                                              const std::filesystem::path& shown,
                                                                              std::string* save_id = nullptr);

/// The weight_map of the index file `index`, opened with open_to_read: read_weight_map(fd, index).
/// \throws index_error naming `index` if it is not an index (see above); io_error if it cannot
///   be opened or read.
std::map<std::string, std::vector<std::string>, std::less<>> read_weight_map(const std::filesystem::path& index,
                                                                             std::string* save_id = nullptr);

}  // namespace ckpt::detail
