#include <ckpt/section.hpp>

#include "base/digest.hpp"
#include "base/metadata.hpp"
#include "format/safetensors.hpp"
#include "format/save.hpp"
#include "format/writer.hpp"
#include "section.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace ckpt {

namespace detail {

std::vector<const entry_source*> ordered_entries(std::span<const section> sections, std::string_view function,
                                                 slices_are slices) {
  std::vector<const entry_source*> order;
  for (const section& s : sections)
    for (const entry_source& e : section_access::entries(s)) {
      if (e.first >= 0 && slices == slices_are::refused)
        throw std::invalid_argument("ckpt: " + std::string(function) + ": '" + e.name +
                                    "' is a slice of a global tensor (ckpt::mpi::sliced); slices are saved by all the "
                                    "ranks together, with ckpt::mpi::save or a ckpt::mpi::checkpoint_manager");
      order.push_back(&e);
    }
  order_entries(order, function);
  return order;
}

metadata_map merged_metadata(std::span<const section> sections, const metadata_map& metadata,
                             std::string_view function) {
  metadata_map merged;
  for (const section& s : sections)
    for (const auto& [key, value] : section_access::metadata(s))
      if (!is_digest_key(key)) add_metadata(merged, key, value, function, " in the checkpoint sections");
  for (const auto& [key, value] : metadata) merged.insert_or_assign(key, value);
  return merged;
}

}  // namespace detail

void detail::save_sections(byte_sink& sink, std::span<const section> sections, const metadata_map& metadata,
                           const save_options& options, write_path path) {
  write_file(sink, detail::ordered_entries(sections, "save"), metadata, options, path);
}

void save(const std::filesystem::path& path, std::span<const section> sections, const metadata_map& metadata,
          const save_options& options) {
  // The entries and the metadata are checked before the folder is opened: a bad name or a
  // metadata conflict is refused as such.
  const std::vector<const detail::entry_source*> entries = detail::ordered_entries(sections, "save");
  const metadata_map merged = detail::merged_metadata(sections, metadata, "save");
  detail::save_entries(path, entries, merged, options);
}

}  // namespace ckpt

namespace ckpt {

void detail::section_access::add_to(const section& s, std::size_t index, read_plan& plan) {
  if (!s.read_)
    throw std::invalid_argument("ckpt: read_params: section " + std::to_string(index) +
                                (s.prefix_.empty() ? std::string() : " ('" + s.prefix_ + "')") +
                                " was made from a checkpoint or a const structure: it can be saved, not read into");
  s.read_(plan);
}

read_report detail::read_sections(const checkpoint& t, std::span<const section> sections,
                                  const extract_options& options, std::string_view function) {
  if (!options.prefix.empty())
    throw std::invalid_argument("ckpt: " + std::string(function) + ": extract_options::prefix ('" +
                                std::string(options.prefix) + "') is for a single structure; sections carry their own");
  detail::read_plan plan;
  plan.leaves.reserve(t.size());
  for (std::size_t k = 0; k < sections.size(); ++k) detail::section_access::add_to(sections[k], k, plan);
  return detail::read_planned(t, plan, options, function, true);
}

read_report read_params(const checkpoint& t, std::span<const section> sections, const extract_options& options) {
  return detail::read_sections(t, sections, options, "read_params");
}

}  // namespace ckpt
