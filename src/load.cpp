// `ckpt::load`: a file, or a Hugging Face sharded checkpoint (an index file, or a folder holding
// one). The dispatch sits above both readers, so that neither includes the other.
#include <ckpt/file.hpp>
#include <ckpt/sharded.hpp>

#include "file.hpp"

namespace ckpt {

checkpoint load(const std::filesystem::path& path, const load_options& options) {
  if (is_sharded_path(path)) return load_sharded(path, options);
  return detail::load_file(path, options);
}

}  // namespace ckpt
