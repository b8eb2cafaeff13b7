#pragma once
// The sharded reader of src/sharded.cpp, as the rest of the library calls it: ckpt::load
// (src/load.cpp) for a `*.safetensors.index.json` or a folder holding one, and the managers for
// their step folders. Not part of the API: `ckpt::load` is the one way to load.

#include <ckpt/checkpoint.hpp>
#include <ckpt/file.hpp>

#include "folder.hpp"

#include <filesystem>
#include <string_view>

namespace ckpt::detail {

/// The sharded checkpoint whose index is `path`, or, if `path` is a folder, whose index is the
/// one `*.safetensors.index.json` file in it, read by the rules `ckpt::load` documents. Every
/// shard the index names is read as `ckpt::load` reads a safetensors file, with `options`.
/// \throws index_error (a format_error) if the index is not valid, or an entry is missing from
///   the shard that `weight_map` names; ckpt::error (the base class) if `path` is a folder holding
///   no `*.safetensors.index.json` or several (naming the folder, and the first two indexes);
///   io_error if the index or a shard cannot be read; format_error or integrity_error for a shard.
[[nodiscard]] checkpoint load_sharded(const std::filesystem::path& path, const load_options& options);

/// The sharded checkpoint whose index is the file `index` of `folder`, its shards read from that
/// folder as held (a manager's step folder): the rules and errors above.
[[nodiscard]] checkpoint load_sharded(const folder_handle& folder, std::string_view index, const load_options& options);

}  // namespace ckpt::detail
