#include <ckpt/params.hpp>
#include <ckpt/section.hpp>

namespace ckpt::detail {

void check_leaf_names(std::vector<std::string> names, std::string_view function) {
  std::sort(names.begin(), names.end());
  if (!names.empty() && names.front().empty())
    throw std::invalid_argument("ckpt: " + std::string(function) +
                                ": a leaf has an empty name (a bare leaf needs a prefix)");
  const auto duplicate = std::adjacent_find(names.begin(), names.end());
  if (duplicate != names.end())
    throw std::invalid_argument("ckpt: " + std::string(function) + ": two leaves are named '" +
                                *duplicate + "'");
}

void throw_missing_entry(std::string_view function, std::string_view name) {
  throw std::invalid_argument("ckpt: " + std::string(function) + ": no entry named '" + std::string(name) + "'");
}

void throw_shape_mismatch(std::string_view function, std::string_view name,
                          std::span<const std::int64_t> entry, std::span<const std::int64_t> leaf) {
  throw std::invalid_argument("ckpt: " + std::string(function) + ": entry '" + std::string(name) + "' has shape " +
                              to_string(entry) + " but the template's leaf has shape " +
                              to_string(leaf));
}

void throw_dtype_mismatch(std::string_view function, std::string_view name, dtype entry, dtype leaf) {
  throw std::invalid_argument("ckpt: " + std::string(function) + ": entry '" + std::string(name) + "' has dtype " +
                              std::string(to_string(entry)) + " but the template's leaf has dtype " +
                              std::string(to_string(leaf)) + " (pass cast = true to convert)");
}

}  // namespace ckpt::detail

namespace ckpt {

namespace detail {

std::vector<const entry_source*> ordered_entries(std::initializer_list<section> sections, std::string_view function) {
  std::vector<const entry_source*> order;
  for (const section& s : sections)
    for (const entry_source& e : s.entries_) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
  std::vector<std::string> names;
  names.reserve(order.size());
  for (const auto* e : order) {
    if (e->name == "__metadata__")
      throw std::invalid_argument("ckpt: '__metadata__' is reserved by the safetensors format and cannot name an entry");
    names.push_back(e->name);
  }
  check_leaf_names(std::move(names), function);
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
