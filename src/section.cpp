#include <ckpt/section.hpp>

#include "entry_name.hpp"
#include "file.hpp"
#include "safetensors.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace ckpt {

namespace detail {

namespace {

// Sorts `entries` by name (byte-wise). Names share long prefixes (`model.layers.12345`), and a
// comparison of two entries' names reads two objects and two strings scattered in memory, which
// made the sort a large part of a save of many leaves. Each entry gets a key instead, held together in
// one array: the 8 bytes that follow the prefix all names share, as a big-endian number (zeros
// past a name's end), then the name. Keys that differ in that number order their names as the
// bytes would (a name that ends sooner was a prefix of the other); equal numbers compare the names.
void sort_by_name(std::vector<const entry_source*>& entries) {
  if (entries.size() < 2) return;
  std::string_view common = entries.front()->name;
  for (const entry_source* e : entries)
    common = common.substr(0, static_cast<std::size_t>(std::ranges::mismatch(common, std::string_view(e->name)).in1 -
                                                       common.begin()));
  struct key {
    std::uint64_t head;
    const entry_source* entry;
  };
  std::vector<key> keys;
  keys.reserve(entries.size());
  for (const entry_source* e : entries) {
    std::uint64_t head = 0;
    for (std::size_t i = 0; i < 8; ++i) {
      const std::size_t at = common.size() + i;
      head = head << 8 | (at < e->name.size() ? static_cast<unsigned char>(e->name[at]) : 0u);
    }
    keys.push_back({head, e});
  }
  std::ranges::sort(keys, [](const key& a, const key& b) {
    return a.head != b.head ? a.head < b.head : a.entry->name < b.entry->name;
  });
  for (std::size_t i = 0; i < keys.size(); ++i) entries[i] = keys[i].entry;
}

}  // namespace

void order_entries(std::vector<const entry_source*>& entries, std::string_view function) {
  for (const auto* e : entries)
    if (e->name == metadata_key) entry_name_error(e->name, function);
  sort_by_name(entries);
  // Sorted, an empty name comes first and a name given twice is next to itself.
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (entries[i]->name.empty() || (i > 0 && entries[i]->name == entries[i - 1]->name))
      entry_name_error(entries[i]->name, function);
}

std::vector<const entry_source*> ordered_entries(std::span<const section> sections, std::string_view function) {
  std::vector<const entry_source*> order;
  for (const section& s : sections)
    for (const entry_source& e : s.entries_) order.push_back(&e);
  order_entries(order, function);
  return order;
}

}  // namespace detail

void save(const std::filesystem::path& path, std::span<const section> sections, const metadata_map& metadata,
          const save_options& options) {
  const std::vector<const detail::entry_source*> order = detail::ordered_entries(sections, "save");
  // Lay out the descriptors (not the bytes) in name order.
  std::vector<detail::entry_source> entries;
  entries.reserve(order.size());
  for (const auto* e : order) entries.push_back(*e);
  detail::write_file(path, entries, metadata, options);
}

// Declared in ckpt/file.hpp (Raven's `Kaun.Checkpoint.save`), defined here as the one-section case
// of the save of sections, so that every save goes through one path.
void save(const std::filesystem::path& path, const checkpoint& t, const save_options& options) {
  const section whole(t);
  save(path, std::span<const section>(&whole, 1), t.metadata(), options);
}

}  // namespace ckpt
