#pragma once
// One checkpoint file, or its bytes, recognized by content (src/format/by_content.cpp): a torch.save
// file goes to the torch reader (src/format/torch.hpp), anything else to the safetensors file reader
// (src/format/reader.hpp), which refuses what is not one. ckpt::load and ckpt::parse (src/format/load.cpp) call
// it for a single file or bytes in memory, the sharded reader (src/format/sharded.hpp) for each shard of
// an index whose shards are not safetensors by name (a `pytorch_model.bin.index.json`). Below
// both, so that neither calls back into the other.

#include <ckpt/checkpoint.hpp>
#include <ckpt/file.hpp>
#include <ckpt/torch.hpp>

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

namespace ckpt::detail {

/// The checkpoint in the file at `path`: a torch.save file (a regular file that begins as one
/// does) read with `torch`, any other one as a safetensors file with `options`.
/// \throws as ckpt::load of a file.
[[nodiscard]] checkpoint load_by_content(const std::filesystem::path& path, const load_options& options,
                                         const torch_options& torch);

/// The checkpoint in `file_bytes`, recognized as `load_by_content` recognizes a file; `origin`
/// names it in messages.
/// \throws as ckpt::parse.
[[nodiscard]] checkpoint parse_by_content(std::span<const std::byte> file_bytes, const std::filesystem::path& origin,
                                          const load_options& options, const torch_options& torch);

/// The same, of bytes the checkpoint keeps (`size` of them at `bytes`: a download), not copied.
/// \throws as ckpt::parse.
[[nodiscard]] checkpoint parse_owned_by_content(std::shared_ptr<std::byte[]> bytes, std::size_t size,
                                                const std::filesystem::path& origin, const load_options& options,
                                                const torch_options& torch);

}  // namespace ckpt::detail
