#pragma once
// The snapshot a background save writes (both managers' save_async): the entries of a section
// list copied into a buffer of the arena, those of training_state's trained leaves and moments
// lazily (include/ckpt/detail/lazy_copy.hpp).

#include <ckpt/snapshot.hpp>

#include <memory>
#include <span>

namespace ckpt::detail {

class lazy_copies;

// A snapshot of which some entries may still be copied when it is taken: `data` holds every entry
// once `finish` has returned.
class taken_snapshot {
 public:
  taken_snapshot(checkpoint data, std::shared_ptr<lazy_copies> pending) noexcept;
  taken_snapshot(taken_snapshot&& other) noexcept;
  taken_snapshot& operator=(taken_snapshot&&) = delete;
  taken_snapshot(const taken_snapshot&) = delete;
  taken_snapshot& operator=(const taken_snapshot&) = delete;
  // Makes the copies still pending, if `finish` was not called (their errors are dropped).
  ~taken_snapshot();

  // The entries: every one holds its bytes once `finish` has returned.
  [[nodiscard]] const checkpoint& data() const noexcept { return data_; }

  // Copies on this thread the entries no one has copied yet (in the order an optimizer changes
  // them: see take_snapshot), waits for the copies under way on other threads, and throws the
  // first copy's error (std::bad_alloc, or the error of a leaf's row writer). Then the snapshot
  // is complete.
  void finish();

 private:
  checkpoint data_;
  std::shared_ptr<lazy_copies> pending_;
};

// Copies `sections` into a free buffer of `arena`. With `lazily`, the entries that mark their leaf
// (entry_source::lazy_leaf) are left to `finish` and to before_write.
// \throws as snapshot_arena::snapshot.
taken_snapshot take_snapshot(snapshot_arena& arena, std::span<const section> sections, const metadata_map& metadata,
                             bool lazily);

}  // namespace ckpt::detail
