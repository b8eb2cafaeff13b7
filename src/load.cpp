// `ckpt::load`: every layout Hugging Face's `save_pretrained` and `torch.save` produce. A file is
// recognized by its content (a safetensors file, or a torch.save zip); an index by its name (a
// `*.safetensors.index.json` through load_sharded, any other `*.index.json`, such as
// `pytorch_model.bin.index.json`, shard by shard by content); a folder by the checkpoint files
// it holds. `ckpt::parse` recognizes bytes in memory by their content as load does a file. The
// dispatch sits above the file, sharded and torch readers, so that none includes another.
#include <ckpt/file.hpp>
#include <ckpt/torch.hpp>

#include "file.hpp"
#include "hf_index.hpp"
#include "sharded.hpp"
#include "torch.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace ckpt {
namespace {

// True if `path` is a regular file that begins as a torch.save file does (a zip, or the pickled
// magic number of the format before PyTorch 1.6). Opened without waiting (a FIFO or a device is
// left to the safetensors reader, which refuses it by name); a file that cannot be opened is
// left to it too, so that its error names the file as before.
bool is_torch_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  std::array<std::byte, 32> start{};
  struct stat info {};
  ssize_t got = -1;
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode)) got = ::pread(fd, start.data(), start.size(), 0);
  ::close(fd);
  return got > 0 && detail::looks_like_torch(std::span(start).first(static_cast<std::size_t>(got)));
}

checkpoint load_file_by_content(const std::filesystem::path& path, const load_options& options,
                                const torch_options& torch) {
  if (is_torch_file(path)) return detail::load_torch(path, torch);
  return detail::load_file(detail::file_at_path(path), options);
}

// A sharded checkpoint whose shards are recognized by content (a .bin index's torch.save files).
checkpoint load_index_by_content(const std::filesystem::path& index, const load_options& options,
                                 const torch_options& torch) {
  return detail::assemble_shards(index, detail::read_weight_map(index), [&](const std::string& shard) {
    return load_file_by_content(index.parent_path() / shard, options, torch);
  });
}

// Transformers' file names (SAFE_WEIGHTS_NAME, WEIGHTS_NAME) and the suffixes of their indexes.
constexpr std::string_view safetensors_file = "model.safetensors";
constexpr std::string_view torch_file = "pytorch_model.bin";
constexpr std::string_view safetensors_index = ".safetensors.index.json";
constexpr std::string_view torch_index = ".bin.index.json";

// What a folder holds of each kind: the single file's name if present, and the indexes.
struct found_kind {
  std::vector<std::string> files;  // the single file first if present, then the indexes, sorted
  bool single = false;
  [[nodiscard]] bool empty() const noexcept { return files.empty(); }
};

std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

checkpoint load_folder(const std::filesystem::path& folder, const load_options& options, const torch_options& torch) {
  found_kind st, pt;
  std::vector<std::string> st_indexes, pt_indexes;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name == safetensors_file) st.single = true;
    else if (name == torch_file) pt.single = true;
    else if (name.size() > safetensors_index.size() && name.ends_with(safetensors_index)) st_indexes.push_back(name);
    else if (name.size() > torch_index.size() && name.ends_with(torch_index)) pt_indexes.push_back(name);
  }
  if (ec) throw io_error(folder, "list the folder", ec);
  std::ranges::sort(st_indexes);
  std::ranges::sort(pt_indexes);
  if (st.single) st.files.emplace_back(safetensors_file);
  st.files.insert(st.files.end(), st_indexes.begin(), st_indexes.end());
  if (pt.single) pt.files.emplace_back(torch_file);
  pt.files.insert(pt.files.end(), pt_indexes.begin(), pt_indexes.end());

  const std::string where = "ckpt: the folder '" + folder.string() + "' holds ";
  if (!st.empty() && !pt.empty())
    throw error(folder, where + "a safetensors checkpoint (" + in_quotes(st.files.front()) + ") and a torch.save one (" +
                            in_quotes(pt.files.front()) + "); load the file you mean");
  for (const found_kind* kind : {&st, &pt})
    if (kind->single && kind->files.size() > 1)
      throw error(folder, where + "a single-file checkpoint (" + in_quotes(kind->files[0]) + ") and a sharded one (" +
                              in_quotes(kind->files[1]) + "); load the file you mean");
  if (st.single) return load_file_by_content(folder / safetensors_file, options, torch);
  if (pt.single) return load_file_by_content(folder / torch_file, options, torch);
  if (pt_indexes.size() > 1)
    throw error(folder, where + std::to_string(pt_indexes.size()) + " sharded checkpoint indexes (" +
                            in_quotes(pt_indexes[0]) + ", " + in_quotes(pt_indexes[1]) +
                            (pt_indexes.size() > 2 ? ", ...)" : ")") + "; load the one you mean");
  if (pt_indexes.size() == 1) return load_index_by_content(folder / pt_indexes.front(), options, torch);
  // A sharded safetensors checkpoint, or nothing: load_sharded's rules and messages.
  return detail::load_sharded(folder, options);
}

}  // namespace

checkpoint load(const std::filesystem::path& path, const load_options& options, const torch_options& torch) {
  const std::string_view name(path.native());
  if (name.ends_with(".index.json")) {
    if (name.ends_with(safetensors_index)) return detail::load_sharded(path, options);
    return load_index_by_content(path, options, torch);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_folder(path, options, torch);
  return load_file_by_content(path, options, torch);
}

checkpoint load(const std::filesystem::path& path, const load_options& options) { return load(path, options, {}); }

checkpoint parse(std::span<const std::byte> file_bytes, const std::filesystem::path& origin, const load_options& options,
                 const torch_options& torch) {
  if (detail::looks_like_torch(file_bytes)) return detail::parse_torch(file_bytes, origin, torch);
  return detail::parse_bytes(file_bytes, origin, options);
}

checkpoint parse(std::span<const std::byte> file_bytes, const std::filesystem::path& origin, const load_options& options) {
  return parse(file_bytes, origin, options, {});
}

}  // namespace ckpt
