#pragma once
// A whole file's bytes, mapped read-only where possible (else read into memory), for the
// readers that view their entries in place: the safetensors reader and the torch.save reader.

#include "folder.hpp"
#include "posix_file.hpp"

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

namespace ckpt::detail {

// A read-only mapping of a whole file, shared by the tensors that view it. Entries are copied
// out by reading the file with pread, not through the mapping (ckpt/detail/pages.hpp), which
// takes no page faults, reads ahead when cold, and reports a truncated file as an error instead
// of a SIGBUS.
//
// Descriptors: the process keeps at most a few hundred of its loaded files open (a quarter of
// its descriptor limit, from 16 to 1024), the least recently read closed first, so that a
// checkpoint of many shards, loaded on every rank of a job, does not hold a descriptor for each.
// A file whose descriptor was closed is opened again from its folder when it is next read, and
// must be the same file (device and inode); if it is gone or replaced (a manager's retention, a
// later save over it), its bytes are those of the mapping, which still holds the file that was
// loaded.
//
// Verified bytes: once the file's digest has been checked (`verified`), every read checks the
// 1 MiB chunks of the data section it covers against the hashes the check computed, and throws
// integrity_error if one differs: a file rewritten in place after `load` never hands out bytes
// that do not match the digest it passed. A chunk read in part is read whole, checked and kept
// by the reading thread for its next reads (bands of a chunk read in turn).
class mapped_file {
 public:
  // Takes the mapping [address, address + size) of the file `fd`, whose status is `info`, which
  // `where` names (to open it again) and messages show as `shown`.
  mapped_file(void* address, std::size_t size, file_descriptor fd, const struct stat& info, file_at where,
              std::filesystem::path shown);
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;
  ~mapped_file();
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(address_), size_};
  }
  // The file, for messages.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  // Reads the bytes of the file that `from` (a range of bytes()) maps into `out`.
  // Throws io_error naming the file if it cannot be read, format_error if it has been truncated
  // since it was mapped ("the file shrank while it was being read"), integrity_error if the
  // file's digest was verified and the bytes differ from what was verified.
  void read(std::span<const std::byte> from, std::byte* out) const;
  // Throws format_error naming the file if it is now shorter than when it was mapped ("the file
  // shrank since it was loaded"): reading its end through the mapping would raise SIGBUS.
  // io_error if it cannot be examined.
  void check_size() const;
  // The file's digest was verified: `chunk_hashes` are the hashes (xxh3_of, src/base/digest.hpp) of
  // each 1 MiB chunk (file_digest_chunk_bytes) of its data section, which starts at
  // `data_start`. Every read from now on is checked against them. Call before the file is shared
  // with other threads.
  void verified(std::size_t data_start, std::vector<std::uint64_t> chunk_hashes) noexcept;

 private:
  friend class descriptor_lease;
  // Reads [offset, offset + size) of the file into `out`, unchecked.
  void read_plain(std::size_t offset, std::size_t size, std::byte* out) const;

  void* address_;
  std::size_t size_;
  std::filesystem::path path_;
  file_at where_;
  dev_t device_;
  ino_t inode_;
  // Which mapped_file this is, for a reading thread's kept chunk (an address can be reused).
  std::uint64_t serial_;
  // The descriptor and its place among the open ones: guarded by the descriptor pool's lock.
  mutable int fd_;
  mutable bool gone_ = false;  // reopening found another file, or none: read the mapping
  mutable int readers_ = 0;
  mutable std::uint64_t last_read_ = 0;
  // After `verified`: where the data start, and each chunk's hash.
  std::size_t data_start_ = 0;
  std::vector<std::uint64_t> chunk_hashes_;
};

struct file_contents {
  std::span<const std::byte> bytes;
  std::shared_ptr<const void> owner;  // keeps `bytes` alive
  mapped_file* file = nullptr;        // the mapping `bytes` is, or null for a copy in memory
};

// The bytes of the regular file `file`: a private read-only mapping without read-ahead
// (readers touch their header first, then the entries they extract), or, where the file cannot
// be mapped (an empty file, some filesystems), a copy read into memory.
// Throws io_error if the file cannot be opened or read, format_error if it is not a regular file.
file_contents map_file(const file_at& file);

}  // namespace ckpt::detail
