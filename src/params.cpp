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

std::vector<const tensor*> check_extraction(const checkpoint& t, std::span<const leaf_read> leaves, bool cast,
                                            std::string_view function) {
  std::vector<std::string> names;
  names.reserve(leaves.size());
  for (const leaf_read& leaf : leaves) names.push_back(leaf.name);
  check_leaf_names(std::move(names), function);
  const std::string prefix = "ckpt: " + std::string(function) + ": ";
  std::vector<const tensor*> entries;
  entries.reserve(leaves.size());
  for (const leaf_read& leaf : leaves) {
    const tensor* entry = t.find(leaf.name);
    if (!entry) throw std::invalid_argument(prefix + "no entry named '" + leaf.name + "'");
    if (!std::ranges::equal(entry->shape(), leaf.shape))
      throw std::invalid_argument(prefix + "entry '" + leaf.name + "' has shape " + to_string(entry->shape()) +
                                  " but the template's leaf has shape " + to_string(leaf.shape));
    if (entry->dtype() != leaf.dtype && !cast)
      throw std::invalid_argument(prefix + "entry '" + leaf.name + "' has dtype " +
                                  std::string(to_string(entry->dtype())) + " but the template's leaf has dtype " +
                                  std::string(to_string(leaf.dtype)) + " (pass cast = true to convert)");
    if (!can_cast(entry->dtype(), leaf.dtype)) (void)ckpt::cast(*entry, leaf.dtype);  // throws cast's own message
    entries.push_back(entry);
  }
  return entries;
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
