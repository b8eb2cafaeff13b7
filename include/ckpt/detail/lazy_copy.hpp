#pragma once
// Not part of the API (adam.hpp's update and training_state, the managers' save_async through
// src/structures/snapshot.cpp): the copy-before-write rule of a snapshot taken lazily.
//
// A background save of `training_state(params, state)` copies the leaves Adam trains, and their
// moments, after the call has returned: on the background thread, in the order of the file, and,
// for a leaf the loop is about to change first, on the loop's thread. Every code path that
// changes such a leaf in place calls `before_write(&leaf)` first: `adam::update` for each leaf it
// updates. The other leaves of the sections (and the step) are copied before `save_async`
// returns. `finish_lazy_copies` copies whatever is still pending: code that replaces the leaves'
// storage (a read into the parameters) and the end of the moments call it.

#include <atomic>

namespace ckpt::detail {

// How many snapshots have leaves still to copy. Zero (almost always) makes before_write a load.
extern std::atomic<int> lazy_snapshots_pending;

// The slow path of before_write: finds `leaf` among the pending copies of every snapshot and,
// unless it is copied already, copies it now (or waits while the background thread does).
void copy_before_write(const void* leaf) noexcept;

// Before the leaf object at `leaf` is changed in place: copies it into any snapshot that has not
// copied it yet. A copy's failure (out of memory) fails the save, not the caller.
inline void before_write(const void* leaf) noexcept {
  if (lazy_snapshots_pending.load(std::memory_order_acquire) != 0) copy_before_write(leaf);
}

// Copies every leaf still pending in any snapshot, and returns once every copy is made.
void finish_lazy_copies() noexcept;

// A member of the moments: when they end, every pending copy is made, so that a state (and the
// parameters declared before it) may end right after a save_async without waiting for it.
struct lazy_copy_guard {
  lazy_copy_guard() noexcept = default;
  lazy_copy_guard(const lazy_copy_guard&) noexcept = default;
  lazy_copy_guard(lazy_copy_guard&&) noexcept = default;
  lazy_copy_guard& operator=(const lazy_copy_guard&) noexcept = default;
  lazy_copy_guard& operator=(lazy_copy_guard&&) noexcept = default;
  ~lazy_copy_guard() {
    if (lazy_snapshots_pending.load(std::memory_order_acquire) != 0) finish_lazy_copies();
  }
};

}  // namespace ckpt::detail
