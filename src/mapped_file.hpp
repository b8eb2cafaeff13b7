#pragma once
// A whole file's bytes, mapped read-only where possible (else read into memory), for the
// readers that view their entries in place: the safetensors reader and the torch.save reader.

#include "posix_file.hpp"

#include <cstddef>
#include <filesystem>
#include <memory>
#include <span>

namespace ckpt::detail {

// A read-only mapping of a whole file, shared by the tensors that view it, with the descriptor
// it was mapped from: entries are copied out by reading the descriptor, not the mapping
// (ckpt/detail/pages.hpp), which takes no page faults, reads ahead when cold, and reports a
// truncated file as an error instead of a SIGBUS.
class mapped_file {
 public:
  mapped_file(void* address, std::size_t size, file_descriptor fd, std::filesystem::path path) noexcept
      : address_(address), size_(size), fd_(std::move(fd)), path_(std::move(path)) {}
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file();
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(address_), size_};
  }
  // Reads the bytes of the file that `from` (a range of bytes()) maps into `out`.
  // Throws io_error naming the file if it cannot be read, format_error if it has been truncated
  // since it was mapped ("the file shrank while it was being read").
  void read(std::span<const std::byte> from, std::byte* out) const;
  // Throws format_error naming the file if it is now shorter than when it was mapped ("the file
  // shrank since it was loaded"): reading its end through the mapping would raise SIGBUS.
  // io_error if it cannot be examined.
  void check_size() const;

 private:
  void* address_;
  std::size_t size_;
  file_descriptor fd_;
  std::filesystem::path path_;
};

struct file_contents {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;  // keeps `bytes` alive
  const mapped_file* file = nullptr;  // the mapping `bytes` is, or null for a copy in memory
};

// The bytes of the regular file at `path`: a private read-only mapping without read-ahead
// (readers touch their header first, then the entries they extract), or, where the file cannot
// be mapped (an empty file, some filesystems), a copy read into memory.
// Throws io_error if the file cannot be opened or read, format_error if it is not a regular file.
file_contents map_file(const std::filesystem::path& path);

}  // namespace ckpt::detail
