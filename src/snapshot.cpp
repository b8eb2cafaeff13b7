#include <ckpt/snapshot.hpp>

#include <ckpt/detail/live_source.hpp>

#include "memory.hpp"
#include "parallel.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
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

// Copies every entry `order[i]` to `targets[i]` (none where it is null). One core does not
// saturate memory bandwidth: a large copy is split into runs of entries of about equal size,
// copied on up to four threads.
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
  constexpr std::size_t bytes_per_thread = std::size_t{64} << 20;
  const std::size_t threads =
      std::clamp<std::size_t>(std::min<std::size_t>(detail::hardware_threads(), 4), 1,
                              std::max<std::size_t>(total / bytes_per_thread, 1));
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

checkpoint snapshot_arena::snapshot(std::span<const section> sections, const metadata_map& metadata) {
  const std::vector<const detail::entry_source*> order = detail::ordered_entries(sections, "snapshot");
  // Where each leaf goes in the buffer, and the bytes the buffer needs.
  std::vector<std::size_t> offsets;
  offsets.reserve(order.size());
  std::size_t total = 0;
  for (const auto* e : order) {
    offsets.push_back(total);
    total += aligned(e->nbytes);
  }

  // A free buffer is one no tensor refers to any more: only the arena holds it. Take the smallest
  // that fits; free ones too small for this snapshot are of no further use.
  const auto is_free = [](const buffer& b) { return b.bytes.use_count() == 1; };
  std::erase_if(buffers_, [&](const buffer& b) { return is_free(b) && b.size < total; });
  auto chosen = buffers_.end();
  for (auto it = buffers_.begin(); it != buffers_.end(); ++it)
    if (is_free(*it) && (chosen == buffers_.end() || it->size < chosen->size)) chosen = it;
  if (chosen == buffers_.end()) {
    buffers_.push_back({detail::allocate_bytes(std::max<std::size_t>(total, 1)), total});
    chosen = std::prev(buffers_.end());
  }
  const std::shared_ptr<std::byte[]> storage = chosen->bytes;

  std::vector<std::byte*> targets;
  targets.reserve(order.size());
  for (const std::size_t offset : offsets) targets.push_back(storage.get() + offset);
  copy_in_parallel(order, targets);

  std::vector<checkpoint::entry> entries;
  entries.reserve(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) {
    const detail::entry_source& e = *order[i];
    entries.emplace_back(e.name, tensor::view_of(e.dtype, e.shape, {storage.get() + offsets[i], e.nbytes}, storage));
  }
  return checkpoint(std::move(entries), metadata);
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
  explicit entry_memory(std::size_t small_bytes) : packed_(small_bytes >= packed_bytes) {}

  // `size` bytes: their owner and their first byte.
  std::pair<std::shared_ptr<std::byte[]>, std::byte*> take(std::size_t size) {
    if (!packed_ || size >= detail::heap_limit) {
      std::shared_ptr<std::byte[]> own = detail::allocate_bytes(std::max<std::size_t>(size, 1));
      std::byte* const first = own.get();
      return {std::move(own), first};
    }
    if (!slab_ || used_ + aligned(size) > detail::heap_limit) {
      slab_ = detail::allocate_bytes(detail::heap_limit);
      used_ = 0;
    }
    std::byte* const first = slab_.get() + used_;
    used_ += aligned(size);
    return {slab_, first};
  }

 private:
  // Less than this in small entries stays on the heap: a slab would map 32 MiB for them.
  static constexpr std::size_t packed_bytes = std::size_t{1} << 20;
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
    if (!shared(*e) && e->nbytes < heap_limit) small_bytes += aligned(e->nbytes);
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
