// The front door of a save (src/format/save.hpp).
#include "save.hpp"

#include "io/remote_path.hpp"
#include "writer.hpp"

#include <vector>

namespace ckpt {

namespace detail {

namespace {

// The sources of `t`'s entries, and their list in file order (a checkpoint iterates its entries in
// name order, and their names were checked when it was made).
struct checkpoint_entries {
  explicit checkpoint_entries(const checkpoint& t) {
    sources.reserve(t.size());
    for (const auto& [name, x] : t) sources.push_back(tensor_source(name, x));
    order.reserve(sources.size());
    for (const entry_source& e : sources) order.push_back(&e);
  }
  std::vector<entry_source> sources;
  std::vector<const entry_source*> order;
};

}  // namespace

void save_entries(const std::filesystem::path& path, entry_list entries, const metadata_map& metadata,
                  const save_options& options) {
  if (is_remote(path)) return save_remote(path, entries, metadata, options);
  write_file(target_in_folder(path), entries, metadata, options);
}

void save_checkpoint(const file_at& target, const checkpoint& t, const save_options& options, write_path path) {
  const checkpoint_entries entries(t);
  write_file(target, entries.order, t.metadata(), options, path);
}

void save_checkpoint(byte_sink& sink, const checkpoint& t, const save_options& options, write_path path) {
  const checkpoint_entries entries(t);
  write_file(sink, entries.order, t.metadata(), options, path);
}

}  // namespace detail

// Declared in ckpt/file.hpp (Raven's `Kaun.Checkpoint.save`): the same file as the save of the one
// section `{t}` (ckpt/section.hpp), which brings t's metadata.
void save(const std::filesystem::path& path, const checkpoint& t, const save_options& options) {
  const detail::checkpoint_entries entries(t);
  detail::save_entries(path, entries.order, t.metadata(), options);
}

}  // namespace ckpt
