#pragma once
/// \file
/// Saving checkpoints as safetensors files and loading them back.

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace ckpt {

/// Writes `t` to a safetensors file at `path`, replacing any existing file atomically: the data
/// goes to a temporary file in the same folder, which is flushed, fsynced and renamed over
/// `path`, and the folder is fsynced. Entries are written in name order, the header padded with
/// spaces so the data starts 8-byte aligned. If anything fails, `path` keeps its old contents
/// and no temporary file is left behind.
/// \throws io_error on an I/O error (the message names the file and the system error).
/// \throws std::invalid_argument if the header would exceed the format's 100,000,000 bytes.
void save(const std::filesystem::path& path, const checkpoint& t);

/// The checkpoint stored in the safetensors file at `path`, whether written by `save` or by
/// another implementation. The file is mapped read-only and only its header is parsed: entries
/// are views onto the mapping, which lives as long as any tensor of it (so do not truncate the
/// file while you use them). Where mapping is impossible the file is read instead.
///
/// The reader is strict: it rejects a file shorter than 8 bytes, a header length over
/// 100,000,000 or past the end of the file, a header that is not a UTF-8 JSON object, missing or
/// malformed `dtype`/`shape`/`data_offsets`, a byte count that does not match the shape, offsets
/// that are reversed, out of the buffer, overlapping or leave holes, trailing bytes, duplicate
/// names and a `__metadata__` that is not a string-to-string object. Entries of a dtype the
/// format does not define are skipped with a warning on stderr.
/// \throws io_error if the file cannot be opened or read.
/// \throws format_error if it is not a valid safetensors file (the message names the file and the
/// broken rule).
[[nodiscard]] checkpoint load(const std::filesystem::path& path);

/// Parses the bytes of a whole safetensors file held in memory, with the same rules as `load`.
/// The tensors own a copy of the data. `origin` names the bytes in error messages.
/// \throws format_error if they are not a valid safetensors file.
[[nodiscard]] checkpoint parse(std::span<const std::byte> file_bytes,
                               const std::filesystem::path& origin = "<memory>");

}  // namespace ckpt
