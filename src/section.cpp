#include <ckpt/section.hpp>

#include "file.hpp"
#include "safetensors.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace ckpt {

namespace detail {

std::vector<const entry_source*> ordered_entries(std::initializer_list<section> sections, std::string_view function) {
  std::vector<const entry_source*> order;
  for (const section& s : sections)
    for (const entry_source& e : s.entries_) order.push_back(&e);
  order_entries(order, function);
  return order;
}

}  // namespace detail

void save(const std::filesystem::path& path, std::initializer_list<section> sections,
                 const metadata_map& metadata, const save_options& options) {
  const std::vector<const detail::entry_source*> order = detail::ordered_entries(sections, "save");
  // Lay out the descriptors (not the bytes) in name order.
  std::vector<detail::entry_source> entries;
  entries.reserve(order.size());
  for (const auto* e : order) entries.push_back(*e);
  detail::write_file(path, entries, metadata, options);
}

}  // namespace ckpt
