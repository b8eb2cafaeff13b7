#pragma once
// The torch.save reader of src/format/torch.cpp, as the rest of the library calls it: src/format/by_content.cpp,
// for a file or bytes it recognizes by content (for ckpt::load and ckpt::parse, src/format/load.cpp, and
// the shards of a `*.bin.index.json`, src/format/sharded.cpp). Not part of the API: `ckpt::load` and
// `ckpt::parse` are the one way to read (ckpt/file.hpp, ckpt/torch.hpp). Its error,
// torch_format_error, is in src/format/torch_error.hpp.

#include <ckpt/checkpoint.hpp>
#include <ckpt/torch.hpp>

#include "torch_error.hpp"

#include <cstddef>
#include <filesystem>
#include <span>

namespace ckpt::detail {

/// True if `file_bytes` begin as a `torch.save` file does: a zip (since PyTorch 1.6), or the
/// pickled magic number of the format before it (which the reader recognizes and refuses). A
/// safetensors file begins with its header's length (8 bytes, little-endian): the legacy magic
/// would give a length over the format's cap, a zip's signature one of 0x04034b50 bytes exactly
/// (and, for the zips torch.save writes, one far over the cap).
/// \throws nothing
[[nodiscard]] bool looks_like_torch(std::span<const std::byte> file_bytes) noexcept;

/// The checkpoint in the `torch.save` file at `path`, mapped read-only (ckpt/torch.hpp).
/// \throws io_error if the file cannot be opened or read; torch_format_error if it is not a
///   regular file or not a `torch.save` file ckpt reads, or breaks a rule or a budget.
[[nodiscard]] checkpoint load_torch(const std::filesystem::path& path, const torch_options& options);

/// The checkpoint in the `torch.save` file whose bytes are `file_bytes` (copied first, so the
/// checkpoint owns its data); `origin` names the file in error messages.
/// \throws torch_format_error as `load_torch`.
[[nodiscard]] checkpoint parse_torch(std::span<const std::byte> file_bytes, const std::filesystem::path& origin,
                                     const torch_options& options);

}  // namespace ckpt::detail
