#include <ckpt/section.hpp>

#include "file.hpp"
#include "safetensors.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace ckpt {

namespace detail {

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
