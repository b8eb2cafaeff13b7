#include "snapshot.hpp"

#include <ckpt/detail/lazy_copy.hpp>

#include <ckpt/detail/live_source.hpp>

#include "base/digest.hpp"
#include "base/memory.hpp"
#include "base/parallel.hpp"
#include "base/tuning.hpp"
#include "format/safetensors.hpp"
#include "io/atomic_file.hpp"
#include "io/io_hooks.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ckpt {
namespace {

// Each leaf starts on a cache line of its own, so that copies never share a line.
constexpr std::size_t leaf_alignment = 64;

std::size_t aligned(std::size_t n) { return (n + leaf_alignment - 1) / leaf_alignment * leaf_alignment; }

// Copies (or reorders) the bytes of one entry to `out`.
void copy_entry(const detail::entry_source& e, std::byte* out) {
  if (e.write_rows)
    e.write_rows(0, e.row_count(), out);
  else if (e.nbytes > 0)
    std::memcpy(out, e.contiguous.data(), e.nbytes);
}

// The threads a copy of `total` bytes takes: one per snapshot_bytes_per_thread, up to four and
// the machine's hardware threads, since one core does not saturate memory bandwidth.
std::size_t copy_threads(std::size_t total) {
  return std::clamp<std::size_t>(std::min<std::size_t>(detail::usable_threads(), 4), 1,
                                 std::max<std::size_t>(total / detail::tuning::snapshot_bytes_per_thread, 1));
}

// Copies every entry `order[i]` to `targets[i]` (none where it is null): a large copy is split
// into runs of entries of about equal size, one a thread (copy_threads).
void copy_in_parallel(const std::vector<const detail::entry_source*>& order, const std::vector<std::byte*>& targets) {
  // starts[i]: the bytes before entry i.
  std::vector<std::size_t> starts;
  starts.reserve(order.size());
  std::size_t total = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    starts.push_back(total);
    if (targets[i] != nullptr) total += order[i]->nbytes;
  }
  const auto copy_run = [&](std::size_t first, std::size_t last) {
    for (std::size_t i = first; i < last; ++i)
      if (targets[i] != nullptr) copy_entry(*order[i], targets[i]);
  };
  const std::size_t threads = copy_threads(total);
  // Run k ends at the first entry that starts at or past k/threads of the bytes.
  std::vector<std::size_t> bounds{0};
  for (std::size_t k = 1; k < threads; ++k) {
    const std::size_t target = total / threads * k;
    bounds.push_back(static_cast<std::size_t>(std::lower_bound(starts.begin(), starts.end(), target) - starts.begin()));
  }
  bounds.push_back(order.size());
  detail::run_in_parallel(threads, [&](std::size_t k, std::size_t n) {
    if (n == 1) copy_run(0, order.size());  // a machine with one hardware thread
    else copy_run(bounds[k], bounds[k + 1]);
  });
}

}  // namespace

namespace {

constexpr std::size_t chunk_bytes = detail::file_digest_chunk_bytes;

}  // namespace

namespace detail {

// The chunks of the data section of a snapshot laid out as a file, hashed as the copies write
// them: each by the thread that writes its last byte, right after (while it is in the cache), so
// that the writer does not read the snapshot again for the digest. Not in an unnamed namespace:
// detail::snapshot_copies holds one.
class chunk_hashes {
 public:
  explicit chunk_hashes(std::span<const std::byte> data)
      : data_(data), count_((data.size() + chunk_bytes - 1) / chunk_bytes),
        left_(std::make_unique<std::atomic<std::uint32_t>[]>(count_)), hashes_(count_) {
    for (std::size_t k = 0; k < count_; ++k)
      left_[k].store(static_cast<std::uint32_t>(chunk(k).size()), std::memory_order_relaxed);
  }

  // Bytes [first, last) of the data section are in place: hashes the chunks they complete.
  void written(std::size_t first, std::size_t last) noexcept {
    for (std::size_t k = first / chunk_bytes; k * chunk_bytes < last; ++k) {
      const auto n = static_cast<std::uint32_t>(std::min(last, (k + 1) * chunk_bytes) - std::max(first, k * chunk_bytes));
      if (left_[k].fetch_sub(n, std::memory_order_acq_rel) == n) hashes_[k] = detail::xxh3_of(chunk(k));
    }
  }
  // Chunk k is in place, hashed as it was copied (by its only writer).
  void hashed(std::size_t k, std::uint64_t hash) noexcept {
    hashes_[k] = hash;
    left_[k].store(0, std::memory_order_relaxed);
  }
  // Whether chunk k lies in [first, last) of the data section.
  [[nodiscard]] static bool holds(std::size_t k, std::size_t first, std::size_t last) noexcept {
    return first <= k * chunk_bytes && (k + 1) * chunk_bytes <= last;
  }

  [[nodiscard]] std::span<const std::byte> data() const noexcept { return data_; }
  [[nodiscard]] const std::vector<std::uint64_t>& all() const noexcept { return hashes_; }

 private:
  [[nodiscard]] std::span<const std::byte> chunk(std::size_t k) const noexcept {
    return data_.subspan(k * chunk_bytes, std::min(chunk_bytes, data_.size() - k * chunk_bytes));
  }

  std::span<const std::byte> data_;
  std::size_t count_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> left_;  // bytes of each chunk not yet in place
  std::vector<std::uint64_t> hashes_;
};

}  // namespace detail

// The copies of one snapshot's entries (see detail/lazy_copy.hpp), and the hashes of its data
// section's chunks (if it takes them). Each entry is copied in pieces (its bytes within one chunk
// of the data section each, or tuning::snapshot_piece_bytes of it where nothing is hashed; whole
// rows for an entry that is reordered), which the threads that need the entry take in turn: the
// background's helpers, the call's, or an update's threads.
class detail::snapshot_copies {
 public:
  struct copy {
    const entry_source* source = nullptr;
    std::byte* target = nullptr;
    std::size_t at = 0;  // the entry's offset in the data section (0 when not hashed)
    std::size_t pieces = 0;
    bool lazy = false;
    std::atomic<std::size_t> next{0};  // the next piece to take
    std::atomic<std::size_t> done{0};  // pieces copied
  };

  // `storage` holds the targets; `data` is its data section, whose chunks are hashed unless empty.
  snapshot_copies(std::shared_ptr<std::byte[]> storage, std::span<const std::byte> data)
      : storage_(std::move(storage)), piece_bytes_(data.empty() ? tuning::snapshot_piece_bytes : chunk_bytes) {
    if (!data.empty()) hashes_.emplace(data);
  }
  snapshot_copies(const snapshot_copies&) = delete;
  snapshot_copies& operator=(const snapshot_copies&) = delete;

  // Adds the copy of `source` to `target`, its bytes at `at` in the data section; lazy ones are
  // made in the order added (their sources then copied by adopt_lazy_sources), the others by
  // make_now while `source` lives.
  void add(const entry_source& source, std::byte* target, std::size_t at, bool lazy) {
    copy& c = copies_.emplace_back();
    c.source = &source;
    c.target = target;
    c.at = hashes_ ? at : 0;
    c.pieces = source.nbytes == 0 ? 0 : (c.at + source.nbytes - 1) / piece_bytes_ - c.at / piece_bytes_ + 1;
    c.lazy = lazy;
    if (lazy) {
      lazy_.push_back(&c);
      lazy_bytes_ += source.nbytes;
    }
  }
  // The lazy copies' sources, copied out of the sections (which may end before they are made).
  void adopt_lazy_sources() {
    for (copy* c : lazy_) c->source = &owned_.emplace_back(*c->source);
    by_leaf_ = lazy_;
    std::ranges::sort(by_leaf_, std::less<>(), [](const copy* c) { return c->source->lazy_leaf; });
    remaining_.store(lazy_.size(), std::memory_order_relaxed);
  }
  [[nodiscard]] bool has_lazy() const noexcept { return !lazy_.empty(); }

  // Makes the copies that are not lazy, in the file's order, on this thread and as many helpers
  // as a copy of this size takes (copy_threads); throws the first copy's error.
  void make_now() {
    std::vector<copy*> now;
    std::size_t bytes = 0;
    for (copy& c : copies_)
      if (!c.lazy && c.pieces > 0) {
        now.push_back(&c);
        bytes += c.source->nbytes;
      }
    make_each(now, bytes);
    if (const std::exception_ptr e = error()) std::rethrow_exception(e);
  }

  // The lazy copy of the leaf at `leaf` if it is not made yet, or null.
  copy* pending(const void* leaf) noexcept {
    const auto it = std::ranges::lower_bound(by_leaf_, leaf, std::less<>(), [](const copy* c) { return c->source->lazy_leaf; });
    if (it == by_leaf_.end() || (*it)->source->lazy_leaf != leaf || made(**it)) return nullptr;
    return *it;
  }
  [[nodiscard]] bool complete() const noexcept { return remaining_.load(std::memory_order_acquire) == 0; }

  // Copies the pieces of `c` no thread has taken, on this thread, and waits for those others
  // copy; returns once `c` is made.
  void make(copy& c) noexcept {
    for (std::size_t k = c.next.fetch_add(1, std::memory_order_relaxed); k < c.pieces;
         k = c.next.fetch_add(1, std::memory_order_relaxed)) {
      try {
        copy_piece(c, k);
      } catch (...) {
        const std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      if (c.done.fetch_add(1, std::memory_order_acq_rel) + 1 == c.pieces) {
        c.done.notify_all();
        if (c.lazy && remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_all();
      }
    }
    for (std::size_t done = c.done.load(std::memory_order_acquire); done < c.pieces;
         done = c.done.load(std::memory_order_acquire))
      c.done.wait(done, std::memory_order_acquire);
  }

  // Makes every lazy copy (those pending, in the order added, on this thread and as many helpers
  // as a copy of this size takes: copy_threads) and waits for all. In a loop that trains on every
  // core, the helpers also take a larger share of the CPU while the gradients are computed, so
  // that the optimizer's update finds its leaves copied rather than copying them itself.
  void make_all() noexcept {
    try {
      make_each(lazy_, lazy_bytes_);
    } catch (...) {  // make() throws nothing; should the split itself fail, this thread copies the rest
      for (copy* c : lazy_) make(*c);
    }
    for (std::size_t left = remaining_.load(std::memory_order_acquire); left != 0;
         left = remaining_.load(std::memory_order_acquire))
      remaining_.wait(left, std::memory_order_acquire);
  }

  // The first copy's error, if any.
  std::exception_ptr error() {
    const std::lock_guard lock(error_mutex_);
    return error_;
  }

  // Once every copy is made: the data section and its chunks' hashes, or none if not hashed.
  [[nodiscard]] const chunk_hashes* hashes() const noexcept { return hashes_ ? &*hashes_ : nullptr; }

 private:
  static bool made(const copy& c) noexcept { return c.done.load(std::memory_order_acquire) == c.pieces; }

  // make() of each of `copies` (of `bytes` in all), taken in order by this thread and the helpers.
  void make_each(const std::vector<copy*>& copies, std::size_t bytes) {
    std::atomic<std::size_t> next{0};
    detail::run_in_parallel(copy_threads(bytes), [&](std::size_t, std::size_t) {
      for (std::size_t i = next.fetch_add(1); i < copies.size(); i = next.fetch_add(1)) make(*copies[i]);
    });
  }

  // Piece k of `c`: its bytes in the k-th piece of the data section it reaches (whole rows for a
  // reordered entry: those that start there). Hashed, each chunk the piece holds whole is hashed
  // from where its bytes are (a reordered piece: from a band in the cache it was reordered into),
  // then copied around the caches (xxh3_copy); the parts of the others are copied, and hashed by
  // the copy that completes them.
  void copy_piece(copy& c, std::size_t k) {
    const entry_source& e = *c.source;
    const std::size_t chunk0 = c.at / piece_bytes_;
    // The entry's offset of the k-th piece boundary it reaches (0 and nbytes at its ends).
    const auto boundary = [&](std::size_t j) {
      return j == 0 ? 0 : j == c.pieces ? e.nbytes : (chunk0 + j) * piece_bytes_ - c.at;
    };
    std::size_t first = boundary(k), last = boundary(k + 1);
    std::span<const std::byte> from;  // the piece's bytes in C order
    if (e.write_rows) {
      // The rows that start in [first, last).
      const std::size_t row = e.row_size(), rows = e.row_count();
      const std::size_t first_row = std::min(rows, (first + row - 1) / row);
      const std::size_t last_row = k + 1 == c.pieces ? rows : std::min(rows, (last + row - 1) / row);
      if (first_row == last_row) return;
      first = first_row * row;
      last = last_row * row;
      std::byte* const band = hashes_ ? reorder_band(last - first) : nullptr;
      if (band == nullptr) {  // reordered into place
        e.write_rows(first_row, last_row - first_row, c.target + first);
        if (hashes_) hashes_->written(c.at + first, c.at + last);
        return;
      }
      e.write_rows(first_row, last_row - first_row, band);
      from = {band, last - first};
    } else {
      from = e.contiguous.subspan(first, last - first);
      if (!hashes_) {
        std::memcpy(c.target + first, from.data(), from.size());
        return;
      }
    }
    for (std::size_t at = first; at < last;) {
      const std::size_t chunk = (c.at + at) / chunk_bytes;
      const std::size_t end = std::min(last, (chunk + 1) * chunk_bytes - c.at);
      const std::span<const std::byte> part = from.subspan(at - first, end - at);
      if (chunk_hashes::holds(chunk, c.at + at, c.at + end)) {
        hashes_->hashed(chunk, detail::xxh3_copy(c.target + at, part));
      } else {
        std::memcpy(c.target + at, part.data(), part.size());
        hashes_->written(c.at + at, c.at + end);
      }
      at = end;
    }
  }

  // This thread's band for a reordered piece of `size` bytes, kept while the thread lives (a
  // chunk and a row's worth of spare), or null for a larger piece or where it cannot be had.
  static std::byte* reorder_band(std::size_t size) noexcept {
    constexpr std::size_t capacity = 2 * chunk_bytes;
    thread_local std::unique_ptr<std::byte[]> band;
    thread_local bool failed = false;
    if (size > capacity || failed) return nullptr;
    if (!band) try {
        band = std::make_unique_for_overwrite<std::byte[]>(capacity);
      } catch (const std::bad_alloc&) {
        failed = true;
        return nullptr;
      }
    return band.get();
  }

  std::shared_ptr<std::byte[]> storage_;
  std::size_t piece_bytes_;
  std::deque<copy> copies_;       // every entry's (stable addresses)
  std::deque<entry_source> owned_;  // the lazy copies' sources
  std::vector<copy*> lazy_;       // in the order make_all copies them
  std::vector<copy*> by_leaf_;    // the lazy ones by leaf address
  std::size_t lazy_bytes_ = 0;
  std::optional<chunk_hashes> hashes_;
  std::atomic<std::size_t> remaining_{0};  // lazy copies not made
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

std::atomic<int> detail::lazy_snapshots_pending{0};

namespace {

// The snapshots with lazy copies, from take_snapshot to the end of their finish.
struct lazy_registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<detail::snapshot_copies>> snapshots;

  static lazy_registry& get() {
    static lazy_registry registry;
    return registry;
  }
  void add(std::shared_ptr<detail::snapshot_copies> copies) {
    const std::lock_guard lock(mutex);
    snapshots.push_back(std::move(copies));
    detail::lazy_snapshots_pending.fetch_add(1, std::memory_order_release);
  }
  void remove(const detail::snapshot_copies* copies) noexcept {
    const std::lock_guard lock(mutex);
    const auto it = std::find_if(snapshots.begin(), snapshots.end(), [&](const auto& s) { return s.get() == copies; });
    if (it == snapshots.end()) return;
    snapshots.erase(it);
    detail::lazy_snapshots_pending.fetch_sub(1, std::memory_order_release);
  }
};

}  // namespace

void detail::copy_before_write(const void* leaf) noexcept {
  lazy_registry& registry = lazy_registry::get();
  // One snapshot at a time, outside the lock (a leaf in two snapshots: two managers saving it).
  for (;;) {
    std::shared_ptr<snapshot_copies> owner;
    snapshot_copies::copy* c = nullptr;
    {
      const std::lock_guard lock(registry.mutex);
      for (const auto& s : registry.snapshots)
        if ((c = s->pending(leaf)) != nullptr) {
          owner = s;
          break;
        }
    }
    if (c == nullptr) return;
    owner->make(*c);
  }
}

void detail::finish_lazy_copies() noexcept {
  lazy_registry& registry = lazy_registry::get();
  for (;;) {
    std::shared_ptr<snapshot_copies> next;
    {
      const std::lock_guard lock(registry.mutex);
      for (const auto& s : registry.snapshots)
        if (!s->complete()) {
          next = s;
          break;
        }
    }
    if (!next) return;
    next->make_all();
  }
}

detail::taken_snapshot::taken_snapshot(checkpoint data, std::shared_ptr<snapshot_copies> copies) noexcept
    : data_(std::move(data)), copies_(std::move(copies)) {}

detail::taken_snapshot::taken_snapshot(taken_snapshot&& other) noexcept
    : data_(std::move(other.data_)), copies_(std::move(other.copies_)), finished_(other.finished_) {}

detail::taken_snapshot::~taken_snapshot() {
  if (!copies_) return;
  if (finished_) {
    if (const chunk_hashes* hashes = copies_->hashes()) forget_chunk_hashes(hashes->data().data());
    return;
  }
  if (!copies_->has_lazy()) return;
  copies_->make_all();
  lazy_registry::get().remove(copies_.get());
}

void detail::taken_snapshot::finish() {
  if (!copies_ || finished_) return;
  if (copies_->has_lazy()) {
    if (hooks().before_lazy_copies != nullptr) hooks().before_lazy_copies();
    copies_->make_all();
    lazy_registry::get().remove(copies_.get());
    if (const std::exception_ptr error = copies_->error()) {
      copies_.reset();
      std::rethrow_exception(error);
    }
  }
  if (const chunk_hashes* hashes = copies_->hashes()) remember_chunk_hashes(hashes->data(), hashes->all());
  finished_ = true;
}

detail::taken_snapshot detail::take_snapshot(snapshot_arena& arena, std::span<const section> sections,
                                             const metadata_map& metadata, const snapshot_layout& layout) {
  const std::vector<const entry_source*> order = ordered_entries(sections, "snapshot");
  // Laid out as the file's data section, which starts at byte `data_start` of the file (0: not).
  std::size_t data_start = 0;
  std::size_t data = 0;
  for (const auto* e : order) data += e->nbytes;
  if (layout.as_file && data >= tuning::direct_write_bytes &&
      data / std::max<std::size_t>(order.size(), 1) >= direct_block_bytes)
    data_start = make_file_header(order, metadata, layout.digest ? digest_key : std::string_view()).bytes.size();
  // Where each leaf goes in the buffer (from `lead`, below), and the bytes the buffer needs.
  std::vector<std::size_t> offsets;
  offsets.reserve(order.size());
  std::size_t total = 0;
  for (const auto* e : order) {
    offsets.push_back(total);
    total += data_start != 0 ? e->nbytes : aligned(e->nbytes);
  }
  if (data_start != 0) total += direct_block_bytes - 1;  // room for `lead`

  // A free buffer is one no tensor refers to any more: only the arena holds it. Take the smallest
  // that fits; free ones too small for this snapshot are of no further use.
  auto& buffers = arena_access::buffers(arena);
  const auto is_free = [](const auto& b) { return b.bytes.use_count() == 1; };
  std::erase_if(buffers, [&](const auto& b) { return is_free(b) && b.size < total; });
  auto chosen = buffers.end();
  for (auto it = buffers.begin(); it != buffers.end(); ++it)
    if (is_free(*it) && (chosen == buffers.end() || it->size < chosen->size)) chosen = it;
  if (chosen == buffers.end()) {
    buffers.push_back({allocate_bytes(std::max<std::size_t>(total, 1)), total});
    chosen = std::prev(buffers.end());
  }
  const std::shared_ptr<std::byte[]> storage = chosen->bytes;
  // As a file: the data start at the address that sits where byte `data_start` of the file does
  // in a block.
  const std::size_t lead =
      data_start == 0 ? 0 : (data_start - reinterpret_cast<std::uintptr_t>(storage.get())) % direct_block_bytes;

  const bool hashed = data_start != 0 && layout.digest;
  const auto copies = std::make_shared<snapshot_copies>(
      storage, hashed ? std::span<const std::byte>(storage.get() + lead, data) : std::span<const std::byte>());
  // The entries copied now, in the file's order, and those copied later (lazily).
  std::vector<std::size_t> later;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (layout.lazily && order[i]->lazy_leaf != nullptr && order[i]->nbytes > 0) later.push_back(i);
    else copies->add(*order[i], storage.get() + lead + offsets[i], offsets[i], false);
  }
  if (!later.empty()) {
    // The background copies in the order an update changes the leaves: the k-th of n lazy
    // entries of each section at k/n (a parameter, then its moments), not in the file's order
    // (the whole model, then the moments), which the update would overtake at its first leaf.
    std::unordered_map<const entry_source*, std::pair<double, std::size_t>> rank;
    for (std::size_t s = 0; s < sections.size(); ++s) {
      const std::vector<entry_source>& entries = section_access::entries(sections[s]);
      const auto lazy_in = static_cast<double>(
          std::ranges::count_if(entries, [](const entry_source& e) { return e.lazy_leaf != nullptr; }));
      std::size_t k = 0;
      for (const entry_source& e : entries)
        if (e.lazy_leaf != nullptr) rank.emplace(&e, std::pair(static_cast<double>(k++) / lazy_in, s));
    }
    std::ranges::stable_sort(later, {}, [&](std::size_t i) { return rank.at(order[i]); });
    for (const std::size_t i : later) copies->add(*order[i], storage.get() + lead + offsets[i], offsets[i], true);
    copies->adopt_lazy_sources();
  }
  copies->make_now();

  std::vector<checkpoint::entry> entries;
  entries.reserve(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const entry_source& e = *order[i];
    entries.emplace_back(e.name, tensor::view_of(e.dtype, e.shape, {storage.get() + lead + offsets[i], e.nbytes}, storage));
  }
  checkpoint taken(std::move(entries), metadata);
  // Registered last: nothing can fail after, so a registered snapshot always has its owner.
  if (copies->has_lazy()) lazy_registry::get().add(copies);
  return {std::move(taken), copies->has_lazy() || copies->hashes() != nullptr ? copies : nullptr};
}

checkpoint snapshot_arena::snapshot(std::span<const section> sections, const metadata_map& metadata) {
  detail::taken_snapshot taken = detail::take_snapshot(*this, sections, metadata, {});
  return taken.data();
}

namespace {

// The memory of copy_entries' entries. Entries of heap_limit bytes or more each have a mapping
// of their own (allocate_bytes). Smaller ones, when they add up to packed_bytes or more, are
// packed (64-byte aligned, in order) into slabs of heap_limit bytes, which allocate_bytes maps
// and keeps when they are freed: a loop that copies the same model every few steps then writes
// into memory it already has. Each on the heap, glibc would hand them back to the kernel after
// each copy and the next copy would fault every page in afresh (CHANGELOG.md, "Performance
// history", "Memory after churn"). A tensor kept from the checkpoint keeps its slab.
class entry_memory {
 public:
  explicit entry_memory(std::size_t small_bytes) : packed_(small_bytes >= detail::tuning::packed_bytes) {}

  // `size` bytes: their owner and their first byte.
  std::pair<std::shared_ptr<std::byte[]>, std::byte*> take(std::size_t size) {
    if (!packed_ || size >= detail::tuning::heap_limit) {
      std::shared_ptr<std::byte[]> own = detail::allocate_bytes(std::max<std::size_t>(size, 1));
      std::byte* const first = own.get();
      return {std::move(own), first};
    }
    if (!slab_ || used_ + aligned(size) > detail::tuning::heap_limit) {
      slab_ = detail::allocate_bytes(detail::tuning::heap_limit);
      used_ = 0;
    }
    std::byte* const first = slab_.get() + used_;
    used_ += aligned(size);
    return {slab_, first};
  }

 private:
  bool packed_;
  std::shared_ptr<std::byte[]> slab_;
  std::size_t used_ = 0;
};

}  // namespace

checkpoint detail::copy_entries(const std::vector<entry_source>& entries, std::string_view function) {
  std::vector<const entry_source*> order;
  order.reserve(entries.size());
  for (const entry_source& e : entries) order.push_back(&e);
  order_entries(order, function);
  // Bytes the source already holds as a tensor (a tensor leaf, a snapshotted one) are shared.
  const auto shared = [](const entry_source& e) { return e.nbytes > 0 && e.keep_alive.nbytes() == e.nbytes; };
  std::size_t small_bytes = 0;
  for (const entry_source* e : order)
    if (!shared(*e) && e->nbytes < tuning::heap_limit) small_bytes += aligned(e->nbytes);
  entry_memory memory(small_bytes);
  std::vector<checkpoint::entry> out;
  out.reserve(order.size());
  std::vector<std::byte*> targets(order.size(), nullptr);
  for (std::size_t i = 0; i < order.size(); ++i) {
    const entry_source& e = *order[i];
    if (shared(e)) {
      out.emplace_back(e.name, e.keep_alive);
      continue;
    }
    auto [owner, first] = memory.take(e.nbytes);
    if (e.nbytes > 0) targets[i] = first;
    out.emplace_back(e.name, tensor::view_of(e.dtype, e.shape, {first, e.nbytes}, std::move(owner)));
  }
  copy_in_parallel(order, targets);
  return checkpoint(std::move(out));
}

std::size_t snapshot_arena::capacity() const noexcept {
  std::size_t total = 0;
  for (const buffer& b : buffers_) total += b.size;
  return total;
}

void snapshot_arena::release() noexcept {
  std::erase_if(buffers_, [](const buffer& b) { return b.bytes.use_count() == 1; });
}

}  // namespace ckpt
