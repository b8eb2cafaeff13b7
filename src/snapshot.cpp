#include <ckpt/snapshot.hpp>

#include "memory.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

namespace ckpt {
namespace {

// Each leaf starts on a cache line of its own, so that copies never share a line.
constexpr std::size_t leaf_alignment = 64;

std::size_t aligned(std::size_t n) { return (n + leaf_alignment - 1) / leaf_alignment * leaf_alignment; }

}  // namespace

checkpoint snapshot_arena::snapshot(std::initializer_list<section> sections, const metadata_map& metadata) {
  const std::vector<const detail::entry_source*> order = detail::ordered_entries(sections, "snapshot");
  std::size_t total = 0;
  for (const auto* e : order) total += aligned(e->nbytes);

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

  std::vector<checkpoint::entry> entries;
  entries.reserve(order.size());
  std::size_t offset = 0;
  for (const auto* e : order) {
    std::byte* out = storage.get() + offset;
    if (e->write_rows)
      e->write_rows(0, static_cast<std::size_t>(e->shape.front()), out);
    else if (e->nbytes > 0)
      std::memcpy(out, e->contiguous.data(), e->nbytes);
    entries.emplace_back(e->name, tensor::view_of(e->dtype, e->shape, {out, e->nbytes}, storage));
    offset += aligned(e->nbytes);
  }
  return checkpoint(std::move(entries), metadata);
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
