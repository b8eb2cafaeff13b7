// The order of entry sources (ckpt/detail/live_source.hpp): by name, each name checked.
#include <ckpt/detail/live_source.hpp>

#include "base/entry_name.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

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
  // A checkpoint's entries (the one-section save) come in name order already: checked in one pass.
  if (!std::ranges::is_sorted(entries, {}, [](const entry_source* e) { return std::string_view(e->name); }))
    sort_by_name(entries);
  // Sorted, an empty name comes first and a name given twice is next to itself. Slices may share
  // a name: a rank may hold several pieces of one global tensor (the MPI save checks that they
  // do not overlap).
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (entries[i]->name.empty() || (i > 0 && entries[i]->name == entries[i - 1]->name &&
                                     (entries[i]->first < 0 || entries[i - 1]->first < 0)))
      entry_name_error(entries[i]->name, function);
}

}  // namespace ckpt::detail
