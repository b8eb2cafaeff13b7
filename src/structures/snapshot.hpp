#pragma once
// The snapshot a background save writes (both managers' save_async): the entries of a section
// list copied into a buffer of the arena, those of training_state's trained leaves and moments
// lazily (include/ckpt/detail/lazy_copy.hpp); laid out as a file, its data section hashed as it
// is copied, for the writer not to read it again (digest.hpp, remember_chunk_hashes).

#include <ckpt/snapshot.hpp>

#include <memory>
#include <span>

namespace ckpt::detail {

class snapshot_copies;

// A snapshot of which some entries may still be copied when it is taken: `data` holds every entry
// once `finish` has returned.
class taken_snapshot {
 public:
  taken_snapshot(checkpoint data, std::shared_ptr<snapshot_copies> copies) noexcept;
  taken_snapshot(taken_snapshot&& other) noexcept;
  taken_snapshot& operator=(taken_snapshot&&) = delete;
  taken_snapshot(const taken_snapshot&) = delete;
  taken_snapshot& operator=(const taken_snapshot&) = delete;
  // Makes the copies still pending, if `finish` was not called (their errors are dropped), and
  // forgets the hashes `finish` remembered.
  ~taken_snapshot();

  // The entries: every one holds its bytes once `finish` has returned.
  [[nodiscard]] const checkpoint& data() const noexcept { return data_; }

  // Copies on this thread the entries no one has copied yet (in the order an optimizer changes
  // them: see take_snapshot), waits for the copies under way on other threads, and throws the
  // first copy's error (std::bad_alloc, or the error of a leaf's row writer). Then the snapshot
  // is complete, and the hashes of its data section's chunks, if it took them, are remembered
  // (remember_chunk_hashes) until it ends.
  void finish();

 private:
  checkpoint data_;
  std::shared_ptr<snapshot_copies> copies_;
  bool finished_ = false;
};

// How take_snapshot lays out its copy.
struct snapshot_layout {
  // The entries that mark their leaf (entry_source::lazy_leaf) are left to `finish` and to
  // before_write.
  bool lazily = false;
  // The entries one after the other, as in the data section of the file that ckpt::save (with a
  // digest or not) writes of them, each at the same place in a memory block as in a file block:
  // direct I/O then writes them from the snapshot, without a copy into its staging buffer (see
  // data_writer in src/format/writer.cpp). Taken where the copy it saves outweighs building the header
  // once more: data of direct_write_bytes or more, a block or more an entry. Otherwise (and
  // without `as_file`) each entry starts a cache line of its own.
  bool as_file = false;
  // With `as_file` (where it is taken): the data section's chunks are hashed as they are copied,
  // each right after its last byte is (a chunk within a contiguous entry: before, from the
  // source, then copied around the caches), for the digest the file records.
  bool digest = false;
};

// Copies `sections` into a free buffer of `arena`, laid out as `layout` says.
// \throws as snapshot_arena::snapshot.
taken_snapshot take_snapshot(snapshot_arena& arena, std::span<const section> sections, const metadata_map& metadata,
                             const snapshot_layout& layout);

// The way into an arena's buffers.
struct arena_access {
  static auto& buffers(snapshot_arena& arena) noexcept { return arena.buffers_; }
};

}  // namespace ckpt::detail
