#pragma once
// The file reader and writer of src/file.cpp, as the rest of the library calls them: the
// safetensors format (src/safetensors.hpp) below them, ckpt::save and ckpt::load above.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/entry_source.hpp>
#include <ckpt/file.hpp>

#include <filesystem>
#include <span>

namespace ckpt::detail {

// Writes a safetensors file of `entries` (already in the order they should be laid out, names
// valid and distinct) and `metadata` at `path`, atomically, as `options` say; see ckpt::save.
void write_file(const std::filesystem::path& path, std::span<const entry_source> entries,
                const metadata_map& metadata, const save_options& options);

// One safetensors file: mapped, parsed, its digest verified as `options` says (src/file.cpp).
// `ckpt::load` (src/load.cpp) calls it for a file, `load_sharded` (src/sharded.hpp) for each
// shard.
checkpoint load_file(const std::filesystem::path& path, const load_options& options);

// The bytes of one safetensors file in memory: copied, parsed, their digest verified as
// `options` says. `ckpt::parse` (src/load.cpp) calls it for bytes that are not a torch.save file.
checkpoint parse_bytes(std::span<const std::byte> file_bytes, const std::filesystem::path& origin,
                       const load_options& options);

}  // namespace ckpt::detail
