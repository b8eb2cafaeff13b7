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

}  // namespace ckpt::detail
