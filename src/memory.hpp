#pragma once
// Uninitialized byte buffers for tensors and snapshots.

#include <cstddef>
#include <memory>

namespace ckpt::detail {

// `size` bytes, uninitialized (every caller overwrites every byte, and zeroing a GiB is not free),
// aligned to at least 16 bytes. Buffers of 2 MiB or more are anonymous mappings advised
// MADV_HUGEPAGE: where the kernel grants transparent huge pages, filling a fresh GiB takes 512
// page faults instead of 262,144.
// Throws std::bad_alloc if the memory cannot be had.
std::shared_ptr<std::byte[]> allocate_bytes(std::size_t size);

// The size of a staging band: about a core's L2 cache, so that a band read from a file is
// transposed, converted or hashed while it is still there.
inline constexpr std::size_t staging_bytes = std::size_t{1} << 20;

// A staging band of staging_bytes bytes (aligned as allocate_bytes' buffers) for the time this
// object lives: bytes of a file are read into it with pread and reordered, converted or hashed
// from it. Bands are taken from a small pool of the process's and given back to it, so that
// the helper threads of a load do not fault fresh pages in for every band. `owner()` keeps the
// band alive: a band still shared when this object goes is not given back.
// Throws std::bad_alloc if a band cannot be had.
class staging_band {
 public:
  staging_band();
  staging_band(const staging_band&) = delete;
  staging_band& operator=(const staging_band&) = delete;
  ~staging_band();
  [[nodiscard]] std::byte* data() const noexcept { return buffer_.get(); }
  [[nodiscard]] const std::shared_ptr<std::byte[]>& owner() const noexcept { return buffer_; }

 private:
  std::shared_ptr<std::byte[]> buffer_;
};

}  // namespace ckpt::detail
