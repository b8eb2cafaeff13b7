#pragma once
// Uninitialized byte buffers for tensors and snapshots.

#include "tuning.hpp"

#include <array>
#include <cstddef>
#include <memory>
#include <mutex>

namespace ckpt::detail {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;
// Buffers below tuning::heap_limit come from the heap. Whether glibc serves a freed block's
// memory again or hands it back to the kernel depends on the program's history, so copies that
// add up to more pack their small entries into buffers of that size (src/structures/snapshot.cpp,
// entry_memory). Buffers of that size and more, which glibc always maps on their own, are mapped
// here with huge pages asked for (512 times fewer faults than 4 KiB pages) and kept when given
// back (kept_buffers).

// Mapped buffers given back, kept for the next allocation of the same size. Filling fresh
// anonymous memory costs a page fault a page, and more where the system has taken the memory
// back meanwhile (CHANGELOG.md, "Performance history", "Memory after churn"), so a training
// loop that saves with `of_params` every few steps would pay it at every save. A kept
// buffer's pages are marked MADV_FREE: the kernel takes them back under memory pressure without
// writing them anywhere, and until then the next buffer of that size is written without faults.
// What is kept never raises the peak: the bytes taken and kept stay within the most bytes ever
// taken at once, the oldest kept buffers being unmapped first. Thread-safe; constinit-able.
class kept_buffers {
 public:
  // A mapping of `mapped` bytes (a multiple of huge_page_bytes), uninitialized: a kept one of
  // that size, or a new one advised MADV_HUGEPAGE. Throws std::bad_alloc if none can be mapped.
  std::byte* take(std::size_t mapped);
  // Gives back a mapping from take(): kept; if every slot is full, the oldest kept is unmapped.
  void give(std::byte* address, std::size_t mapped) noexcept;

 private:
  struct slot {
    std::byte* address = nullptr;
    std::size_t size = 0;
  };
  static constexpr std::size_t slots = 256;
  // Takes kept_[i] out of the kept ones (the lock held) and returns it.
  slot remove(std::size_t i) noexcept;

  std::mutex lock_;
  std::array<slot, slots> kept_{};  // oldest first
  std::size_t count_ = 0;
  std::size_t kept_bytes_ = 0;
  std::size_t live_ = 0;  // bytes taken and not given back
  std::size_t peak_ = 0;  // the most bytes ever taken at once
};

// `size` bytes, uninitialized (every caller overwrites every byte, and zeroing a GiB is not free),
// aligned to at least 16 bytes. Buffers of tuning::heap_limit bytes or more are anonymous mappings
// advised MADV_HUGEPAGE (where the kernel grants transparent huge pages, filling a fresh GiB
// takes 512 page faults instead of 262,144), and a mapping given back is kept for the next
// buffer of its size, its pages left for the kernel to take back (MADV_FREE), so that a loop
// that allocates the same sizes again does not fault them in again; what is kept never raises
// the peak of the bytes mapped at once (kept_buffers).
// Throws std::bad_alloc if the memory cannot be had.
std::shared_ptr<std::byte[]> allocate_bytes(std::size_t size);

// A staging band of tuning::staging_bytes bytes (64-byte aligned) for the time this object lives: bytes
// of a file are read into it with pread and reordered, converted or hashed from it. Bands are
// taken from a small pool of the process's and go back to it with their last owner, so that the
// helper threads of a load do not fault fresh pages in for every band. `owner()` shares the
// band: a tensor that views it keeps it out of the pool.
// Throws std::bad_alloc if a band cannot be had.
class staging_band {
 public:
  staging_band();
  staging_band(const staging_band&) = delete;
  staging_band& operator=(const staging_band&) = delete;
  ~staging_band() = default;
  [[nodiscard]] std::byte* data() const noexcept { return buffer_.get(); }
  [[nodiscard]] const std::shared_ptr<std::byte[]>& owner() const noexcept { return buffer_; }

 private:
  std::shared_ptr<std::byte[]> buffer_;
};

}  // namespace ckpt::detail
