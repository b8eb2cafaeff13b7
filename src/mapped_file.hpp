#pragma once
// A whole file's bytes, mapped read-only where possible (else read into memory), for the
// readers that view their entries in place: the safetensors reader and the torch.save reader.

#include <ckpt/tensor.hpp>

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

namespace ckpt::detail {

struct file_contents {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;  // keeps `bytes` alive
  storage where = storage::memory;
};

// The bytes of the regular file at `path`: a private read-only mapping without read-ahead
// (readers touch their header first, then the entries they extract), or, where the file cannot
// be mapped (an empty file, some filesystems), a copy read into memory.
// Throws io_error if the file cannot be opened or read, format_error if it is not a regular file.
file_contents map_file(const std::filesystem::path& path);

}  // namespace ckpt::detail
