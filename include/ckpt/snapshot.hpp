#pragma once
/// \file
/// `ckpt::snapshot_arena`: snapshots of live parameters into memory reused from one snapshot to
/// the next, so that a background save costs the trainer a copy, not a fresh allocation.

#include <ckpt/checkpoint.hpp>
#include <ckpt/section.hpp>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <vector>

namespace ckpt {

namespace detail {
struct arena_access;  // the managers' snapshots (src/structures/snapshot.hpp)
}  // namespace detail

/// Makes immutable checkpoints out of live structures (the `section`s that `save` writes), copying
/// every leaf into buffers that it keeps and reuses: once every tensor of a snapshot has been
/// released, its buffer serves the next snapshot. A training loop that snapshots the same
/// parameters every N steps then allocates once, and each later snapshot is a plain copy into
/// memory already in place. The price is that the arena holds the
/// size of the last snapshot between snapshots; `release` gives it back.
///
/// A snapshot is a checkpoint like any other: it lives as long as any copy of it or of its tensors,
/// and while it does, its buffer is not reused (a new one is allocated instead).
///
/// Not thread-safe: use an arena from one thread at a time. The snapshots themselves are
/// ordinary checkpoints, safe to read from several threads and to drop on any thread.
class snapshot_arena {
 public:
  /// An arena that holds no memory yet.
  /// \throws nothing
  snapshot_arena() noexcept = default;

  /// A checkpoint holding a copy of every leaf of `sections`, in C order (column-major leaves are
  /// reordered as they are copied), with `metadata`. The leaves are only read, and may change as
  /// soon as this returns. The sections are a braced list or a contiguous range (as for `save`).
  /// A large snapshot is copied on helper threads, joined before this returns.
  /// \throws std::invalid_argument if a name is empty, `__metadata__`, or appears twice (quoted),
  /// before anything is copied.
  /// \throws std::bad_alloc if a new buffer cannot be allocated (where no copying thread can be
  /// started, the copy runs on this one).
  [[nodiscard]] checkpoint snapshot(std::span<const section> sections, const metadata_map& metadata = {});
  /// \copydoc snapshot(std::span<const section>, const metadata_map&)
  [[nodiscard]] checkpoint snapshot(std::initializer_list<section> sections, const metadata_map& metadata = {}) {
    return snapshot(std::span<const section>(sections.begin(), sections.size()), metadata);
  }

  /// The bytes of the buffers the arena holds, in use by snapshots or free.
  /// \throws nothing
  [[nodiscard]] std::size_t capacity() const noexcept;

  /// Frees the buffers no snapshot uses any more.
  /// \throws nothing
  void release() noexcept;

 private:
  friend struct detail::arena_access;
  struct buffer {
    std::shared_ptr<std::byte[]> bytes;
    std::size_t size = 0;
  };
  std::vector<buffer> buffers_;
};

}  // namespace ckpt
