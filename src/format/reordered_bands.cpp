#include "reordered_bands.hpp"

#include "base/parallel.hpp"
#include "base/tuning.hpp"

#include <algorithm>
#include <stdexcept>
#include <system_error>

namespace ckpt::detail {
namespace {

bool reordered(const entry_source& e) { return e.write_rows && e.nbytes > 0; }

// The writer asked for more bands than its entries make: a bug of ckpt's, not of the caller's.
std::logic_error no_band_left() { return std::logic_error("ckpt: save: internal error: no band left to write"); }

}  // namespace

reordered_bands::reordered_bands(entry_list entries) : entries_(entries) {
  std::size_t total = 0, largest_row = 0;
  for (const entry_source* e : entries) {
    if (!reordered(*e)) continue;
    total += e->nbytes;
    largest_row = std::max(largest_row, e->row_size());
  }
  if (total == 0) return;
  capacity_ = std::min(total, std::max(tuning::band_bytes, largest_row));
  for (slot& s : slots_) s.bytes = std::make_unique_for_overwrite<std::byte[]>(capacity_);
  if (total < tuning::threaded_bytes || usable_threads() < 2) return;
  try {
    helper_ = std::jthread([this](const std::stop_token& stop) { run(stop); });
  } catch (const std::system_error&) {
    // No thread to be had: next() makes each band itself.
  }
}

reordered_bands::~reordered_bands() = default;

bool reordered_bands::produce(slot& s) {
  while (entry_ < entries_.size() && !reordered(*entries_[entry_])) ++entry_;
  if (entry_ == entries_.size()) return false;
  std::size_t used = 0;
  for (;;) {
    const entry_source& e = *entries_[entry_];
    const std::size_t row_bytes = e.row_size(), rows = e.row_count();
    // As many rows as fit; a band has at least one (the slots hold the largest row).
    const std::size_t count = std::max<std::size_t>(std::min(rows - row_, (capacity_ - used) / row_bytes), used == 0);
    if (count == 0) break;
    e.write_rows(row_, count, s.bytes.get() + used);
    used += count * row_bytes;
    row_ += count;
    if (row_ < rows) break;  // the band is full
    row_ = 0;
    // The band goes on into the next entry with bytes, if that one is reordered too.
    do ++entry_;
    while (entry_ < entries_.size() && entries_[entry_]->nbytes == 0);
    if (entry_ == entries_.size() || !reordered(*entries_[entry_])) break;
  }
  s.size = used;
  s.next_entry = entry_;
  return true;
}

void reordered_bands::run(const std::stop_token& stop) {
  for (std::size_t made_count = 0;; ++made_count) {
    slot& s = slots_[made_count % 2];
    {
      std::unique_lock lock(mutex_);
      if (!changed_.wait(lock, stop, [&s] { return !s.full; })) return;
    }
    bool made = false;
    try {
      made = produce(s);  // outside the lock: the writer meanwhile works on the other slot
    } catch (...) {
      const std::scoped_lock lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
      return;
    }
    const std::scoped_lock lock(mutex_);
    if (!made) done_ = true;
    else s.full = true;
    changed_.notify_all();
    if (!made) return;
  }
}

reordered_bands::band reordered_bands::next() {
  slot& s = slots_[consumed_ % 2];
  if (!helper_.joinable()) {
    if (!produce(s)) throw no_band_left();
    ++consumed_;
    return {{s.bytes.get(), s.size}, s.next_entry};
  }
  std::unique_lock lock(mutex_);
  if (consumed_ > 0) {
    // The band handed out last has been written: its slot may be filled again.
    slots_[(consumed_ - 1) % 2].full = false;
    changed_.notify_all();
  }
  changed_.wait(lock, [&] { return s.full || error_ || done_; });
  if (!s.full) {
    if (error_) std::rethrow_exception(error_);
    throw no_band_left();
  }
  ++consumed_;
  return {{s.bytes.get(), s.size}, s.next_entry};
}

}  // namespace ckpt::detail
