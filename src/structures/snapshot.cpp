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
#include <exception>
#include <functional>
#include <mutex>
#include <cstring>
#include <thread>
#include <unordered_map>
#include <vector>
#include <string>
#include <utility>

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

// The lazy entries of one snapshot (see detail/lazy_copy.hpp), sorted by their leaf's address.
class detail::lazy_copies {
 public:
  struct copy {
    entry_source source;
    std::byte* target = nullptr;
    std::atomic<int> state{0};  // 0 pending, 1 being copied, 2 copied
  };

  // `sources[i]` is copied to `targets[i]`, in this order by make_all; `storage` holds the targets.
  lazy_copies(const std::vector<const entry_source*>& sources, const std::vector<std::byte*>& targets,
              std::shared_ptr<std::byte[]> storage)
      : storage_(std::move(storage)), copies_(sources.size()), remaining_(sources.size()) {
    std::vector<std::size_t> by_leaf(sources.size());
    for (std::size_t i = 0; i < by_leaf.size(); ++i) by_leaf[i] = i;
    std::sort(by_leaf.begin(), by_leaf.end(),
              [&](std::size_t a, std::size_t b) { return std::less<>()(sources[a]->lazy_leaf, sources[b]->lazy_leaf); });
    copy_order_.resize(sources.size());
    for (std::size_t k = 0; k < by_leaf.size(); ++k) {
      copies_[k].source = *sources[by_leaf[k]];
      copies_[k].target = targets[by_leaf[k]];
      copy_order_[by_leaf[k]] = k;
      bytes_ += copies_[k].source.nbytes;
    }
  }

  // The copy of the leaf at `leaf` if it is not copied yet, or null.
  copy* pending(const void* leaf) noexcept {
    const auto it = std::lower_bound(copies_.begin(), copies_.end(), leaf, [](const copy& c, const void* l) {
      return std::less<>()(c.source.lazy_leaf, l);
    });
    if (it == copies_.end() || it->source.lazy_leaf != leaf || it->state.load(std::memory_order_acquire) == 2)
      return nullptr;
    return &*it;
  }
  [[nodiscard]] bool complete() const noexcept { return remaining_.load(std::memory_order_acquire) == 0; }

  // Copies `c` on this thread, or waits while another thread does; returns once it is copied.
  void make(copy& c) noexcept {
    int expected = 0;
    if (c.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      try {
        copy_entry(c.source, c.target);
      } catch (...) {
        const std::lock_guard lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
      c.state.store(2, std::memory_order_release);
      c.state.notify_all();
      if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining_.notify_all();
      return;
    }
    while (expected == 1) {
      c.state.wait(1, std::memory_order_acquire);
      expected = c.state.load(std::memory_order_acquire);
    }
  }

  // Makes every copy (those pending, in the order given, on this thread and as many helpers as a
  // copy of this size takes: copy_threads) and waits for all. In a loop that trains on every
  // core, the helpers also take a larger share of the CPU while the gradients are computed, so
  // that the optimizer's update finds its leaves copied rather than copying them itself.
  void make_all() noexcept {
    std::atomic<std::size_t> next{0};
    const auto take_in_order = [&](std::size_t, std::size_t) {
      for (std::size_t i = next.fetch_add(1); i < copy_order_.size(); i = next.fetch_add(1)) make(copies_[copy_order_[i]]);
    };
    try {
      detail::run_in_parallel(copy_threads(bytes_), take_in_order);
    } catch (...) {  // make() throws nothing; should a helper's start do, this thread copies the rest
      take_in_order(0, 1);
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

 private:
  std::shared_ptr<std::byte[]> storage_;
  std::vector<copy> copies_;            // by leaf address
  std::vector<std::size_t> copy_order_;  // indexes into copies_, in the order make_all copies them
  std::size_t bytes_ = 0;                 // of every copy
  std::atomic<std::size_t> remaining_;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

std::atomic<int> detail::lazy_snapshots_pending{0};

namespace {

// The snapshots with lazy copies, from take_snapshot to the end of their finish.
struct lazy_registry {
  std::mutex mutex;
  std::vector<std::shared_ptr<detail::lazy_copies>> snapshots;

  static lazy_registry& get() {
    static lazy_registry registry;
    return registry;
  }
  void add(std::shared_ptr<detail::lazy_copies> copies) {
    const std::lock_guard lock(mutex);
    snapshots.push_back(std::move(copies));
    detail::lazy_snapshots_pending.fetch_add(1, std::memory_order_release);
  }
  void remove(const detail::lazy_copies* copies) noexcept {
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
    std::shared_ptr<lazy_copies> owner;
    lazy_copies::copy* c = nullptr;
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
    std::shared_ptr<lazy_copies> next;
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

detail::taken_snapshot::taken_snapshot(checkpoint data, std::shared_ptr<lazy_copies> pending) noexcept
    : data_(std::move(data)), pending_(std::move(pending)) {}

detail::taken_snapshot::taken_snapshot(taken_snapshot&& other) noexcept
    : data_(std::move(other.data_)), pending_(std::move(other.pending_)) {}

detail::taken_snapshot::~taken_snapshot() {
  if (!pending_) return;
  pending_->make_all();
  lazy_registry::get().remove(pending_.get());
}

void detail::taken_snapshot::finish() {
  if (!pending_) return;
  const std::shared_ptr<lazy_copies> pending = std::move(pending_);
  if (hooks().before_lazy_copies != nullptr) hooks().before_lazy_copies();
  pending->make_all();
  lazy_registry::get().remove(pending.get());
  if (const std::exception_ptr error = pending->error()) std::rethrow_exception(error);
}

detail::taken_snapshot detail::take_snapshot(snapshot_arena& arena, std::span<const section> sections,
                                             const metadata_map& metadata, const snapshot_layout& layout) {
  const std::vector<const entry_source*> order = ordered_entries(sections, "snapshot");
  // Laid out as the file's data section, which starts at byte `data_start` of the file (0: not).
  std::size_t data_start = 0;
  if (layout.as_file) {
    std::size_t data = 0;
    for (const auto* e : order) data += e->nbytes;
    if (data >= tuning::direct_write_bytes && data / std::max<std::size_t>(order.size(), 1) >= direct_block_bytes)
      data_start = make_file_header(order, metadata, layout.digest ? digest_key : std::string_view()).bytes.size();
  }
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
  for (std::size_t& offset : offsets) offset += lead;

  // The entries copied now (their targets), and the indexes of those copied later (lazily).
  std::vector<std::byte*> targets;
  targets.reserve(order.size());
  std::vector<std::size_t> later;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const bool lazy = layout.lazily && order[i]->lazy_leaf != nullptr && order[i]->nbytes > 0;
    targets.push_back(lazy ? nullptr : storage.get() + offsets[i]);
    if (lazy) later.push_back(i);
  }
  std::shared_ptr<lazy_copies> pending;
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
    std::vector<const entry_source*> sources;
    std::vector<std::byte*> source_targets;
    for (const std::size_t i : later) {
      sources.push_back(order[i]);
      source_targets.push_back(storage.get() + offsets[i]);
    }
    pending = std::make_shared<lazy_copies>(sources, source_targets, storage);
  }
  copy_in_parallel(order, targets);

  std::vector<checkpoint::entry> entries;
  entries.reserve(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const entry_source& e = *order[i];
    entries.emplace_back(e.name, tensor::view_of(e.dtype, e.shape, {storage.get() + offsets[i], e.nbytes}, storage));
  }
  checkpoint data(std::move(entries), metadata);
  // Registered last: nothing can fail after, so a registered snapshot always has its owner.
  if (pending) lazy_registry::get().add(pending);
  return {std::move(data), std::move(pending)};
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
