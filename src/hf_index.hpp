#pragma once
// The Hugging Face sharded-checkpoint index (`*.safetensors.index.json`), written byte for byte as
// transformers writes it and read with every check, for save_sharded and load_sharded
// (src/sharded.cpp) and ckpt::mpi (src/mpi/step_folders.cpp).

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

/// The index text: json.dumps(indent=2, sort_keys=True) of {"metadata": {"total_size": ...},
/// "weight_map": {name: shard file}}. `weight_map` must be sorted by name.
/// \throws std::invalid_argument if a name or file name is not valid UTF-8.
std::string index_text(std::uint64_t total_size, std::span<const std::pair<std::string, std::string>> weight_map);

/// The index file `index`'s weight_map: for each shard file (a plain file name in the index's
/// folder), the names of its entries.
/// \throws index_error naming `index` if it is not an index (not JSON, no weight_map, a bad name
/// or shard file name); io_error if it cannot be read.
std::map<std::string, std::vector<std::string>, std::less<>> read_weight_map(const std::filesystem::path& index);

/// The checkpoint of the index `index` whose weight_map is `by_shard` (read_weight_map's): each
/// shard, in the index's folder, loaded once by `load_shard`, and of it the entries the map
/// names; the metadata common to every shard (same key, same value), without digests.
/// \throws index_error naming `index` if a shard lacks an entry the map gives it; whatever
///   `load_shard` throws.
checkpoint assemble_shards(const std::filesystem::path& index,
                           const std::map<std::string, std::vector<std::string>, std::less<>>& by_shard,
                           const std::function<checkpoint(const std::filesystem::path& shard)>& load_shard);

}  // namespace ckpt::detail
