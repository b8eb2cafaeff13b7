#pragma once
// The sharded reader of src/format/sharded.cpp, as the rest of the library calls it: ckpt::load
// (src/format/load.cpp) for an index (`*.safetensors.index.json`, or another `*.index.json` whose shards
// are recognized by content) or a folder holding one, the managers for their step folders, and
// ckpt::mpi for the shards it loads with their verified hashes (assemble_shards). Not part of
// the API: `ckpt::load` is the one way to load. It reads the index through src/format/hf_index.hpp and
// each shard through the file reader (src/format/reader.hpp) or, by content, src/format/by_content.hpp; it never
// calls ckpt::load. With it, Transformers' file names (the indexes' suffixes, the unsharded files
// a folder may hold) that ckpt::load and the tool `ckpt` also use.

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>
#include <ckpt/file.hpp>
#include <ckpt/torch.hpp>

#include "describe.hpp"
#include "io/folder.hpp"

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

/// The sharded checkpoint whose index is `path`, or, if `path` is a folder, whose index is the
/// one `*.safetensors.index.json` file in it, read by the rules `ckpt::load` documents. Every
/// shard the index names is read as `ckpt::load` reads a safetensors file, with `options`. An
/// index with a save id (save_sharded's) is read once more if a shard is of another save (the
/// checkpoint saved again meanwhile); mixed_save_error if it is again.
/// \throws index_error (a format_error) if the index is not valid, or an entry is missing from
///   the shard that `weight_map` names; ckpt::error (the base class) if `path` is a folder holding
///   no `*.safetensors.index.json` or several (naming the folder, and the first two indexes);
///   io_error if the index or a shard cannot be read; format_error or integrity_error for a shard.
[[nodiscard]] checkpoint load_sharded(const std::filesystem::path& path, const load_options& options);

/// The sharded checkpoint whose index is the file `index` of `folder`, its shards read from that
/// folder as held (a manager's step folder): the rules and errors above.
[[nodiscard]] checkpoint load_sharded(const folder_handle& folder, std::string_view index, const load_options& options);

/// The sharded checkpoint whose index is `index` (any `*.index.json`, such as transformers'
/// `pytorch_model.bin.index.json`), each shard a file of the index's folder recognized by its
/// content as `ckpt::load` recognizes a file (src/format/by_content.hpp): a torch.save file read with
/// `torch`, a safetensors file with `options`. The index's rules and errors as above.
[[nodiscard]] checkpoint load_sharded_by_content(const std::filesystem::path& index, const load_options& options,
                                                 const torch_options& torch);

/// The description (src/format/describe.hpp) of the sharded checkpoint whose index is the object
/// `index` in a bucket: the entries `options` choose, from the headers of the shards that hold
/// them (each fetched by a ranged GET), checked and assembled as a load assembles them.
/// \throws as load_sharded_by_content.
[[nodiscard]] description describe_sharded(const std::filesystem::path& index, const load_options& options,
                                           const torch_options& torch);

/// The checkpoint of the index `index` whose weight_map is `by_shard` (read_weight_map's,
/// src/format/hf_index.hpp): each shard, a file name in the index's folder, loaded once by
/// `load_shard(name)`, and of it the entries the map names; the metadata common to every shard
/// (same key, same value), without digests and save ids. The readers above pass how they load a
/// shard; ckpt::mpi passes a load that checks the hashes another rank verified. With the index's
/// `save_id` (read_weight_map's), each shard's `__metadata__` must give the same id.
/// \throws mixed_save_error if a shard gives another save id (or none) than a `save_id` given;
///   index_error naming `index` if a shard lacks an entry the map gives it; whatever
///   `load_shard` throws.
[[nodiscard]] checkpoint assemble_shards(const std::filesystem::path& index,
                                         const std::map<std::string, std::vector<std::string>, std::less<>>& by_shard,
                                         const std::function<checkpoint(const std::string& shard)>& load_shard,
                                         const std::string& save_id = {});

/// The name of shard `number` of `count` of a sharded checkpoint whose files are named after
/// `base`: `<base>-<number>-of-<count>.safetensors`, both five digits at least, as Hugging Face
/// names shards (save_sharded's, and an MPI step's, src/run/layout.hpp).
/// \throws std::bad_alloc
[[nodiscard]] std::string shard_name(std::string_view base, std::size_t number, std::size_t count);
/// The shard count K of a name `shard_name(base, k, K)` gives, or nothing for any other name (only
/// the exact spelling counts, of at most 99999 shards).
/// \throws std::bad_alloc
[[nodiscard]] std::optional<std::size_t> shard_count_of(std::string_view name, std::string_view base);

/// The suffix of a sharded safetensors checkpoint's index (`model.safetensors.index.json`): the
/// index save_sharded writes, and the one the readers look for in a folder.
inline constexpr std::string_view safetensors_index_suffix = ".safetensors.index.json";
/// The suffix of a sharded torch checkpoint's index (`pytorch_model.bin.index.json`).
inline constexpr std::string_view torch_index_suffix = ".bin.index.json";

/// Whether `ckpt::load` reads the file `name` (a path or a URL) as a sharded checkpoint's index,
/// by its name: `*.index.json` (transformers' `*.safetensors.index.json`,
/// `pytorch_model.bin.index.json`).
[[nodiscard]] inline bool names_index(std::string_view name) noexcept { return name.ends_with(".index.json"); }

/// Transformers' names of an unsharded checkpoint in a folder (SAFE_WEIGHTS_NAME, WEIGHTS_NAME),
/// which ckpt::load reads of a folder before any index.
inline constexpr std::string_view safetensors_file = "model.safetensors";
inline constexpr std::string_view torch_file = "pytorch_model.bin";

/// The start of the name of save_sharded's staging folder, `.ckpt-staging-XXXXXX` (the X's as
/// random_suffix gives them, src/io/atomic_file.hpp).
inline constexpr std::string_view staging_prefix = ".ckpt-staging-";

/// The one `*.safetensors.index.json` of `names`, the entries of the folder `folder` (on disk or
/// under a prefix of a bucket), as the readers look for it.
/// \throws ckpt::error naming the folder if it holds none, or several (several_indexes).
[[nodiscard]] std::string index_among(const std::vector<std::string>& names, const std::filesystem::path& folder);

/// The error of a folder that holds several indexes of one kind, `indexes` (sorted, two or more),
/// where one is wanted: "ckpt: the folder '<folder>' holds N sharded checkpoint indexes ('a', 'b',
/// ...); load the one you mean".
/// \throws std::bad_alloc
[[nodiscard]] error several_indexes(const std::filesystem::path& folder, std::span<const std::string> indexes);

}  // namespace ckpt::detail
