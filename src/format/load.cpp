// `ckpt::load`: every layout Hugging Face's `save_pretrained` and `torch.save` produce. It only
// tells them apart and calls down, never back: a file goes to src/format/by_content.hpp (a safetensors
// file or a torch.save zip, by its content); an index, by its name, to the sharded reader
// (src/format/sharded.hpp: a `*.safetensors.index.json` through load_sharded, any other `*.index.json`,
// such as `pytorch_model.bin.index.json`, through load_sharded_by_content, its shards by
// content); a folder by the checkpoint files it holds, to one of those. `ckpt::parse` hands bytes
// in memory to src/format/by_content.hpp. The dispatch sits above the file, sharded and torch readers,
// none of which calls it.
#include <ckpt/file.hpp>
#include <ckpt/name_pattern.hpp>
#include <ckpt/torch.hpp>

#include "by_content.hpp"
#include "reader.hpp"
#include "remote.hpp"
#include "sharded.hpp"

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace ckpt {
namespace {

// Transformers' file names (SAFE_WEIGHTS_NAME, WEIGHTS_NAME) and the suffix of the torch files'
// index (the safetensors one is detail::safetensors_index_suffix, src/format/sharded.hpp).
constexpr std::string_view safetensors_file = "model.safetensors";
constexpr std::string_view torch_file = "pytorch_model.bin";
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
    else if (name.size() > detail::safetensors_index_suffix.size() && name.ends_with(detail::safetensors_index_suffix))
      st_indexes.push_back(name);
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
  if (st.single) return detail::load_by_content(folder / safetensors_file, options, torch);
  if (pt.single) return detail::load_by_content(folder / torch_file, options, torch);
  if (pt_indexes.size() > 1) throw detail::several_indexes(folder, pt_indexes);
  if (pt_indexes.size() == 1) return detail::load_sharded_by_content(folder / pt_indexes.front(), options, torch);
  // A sharded safetensors checkpoint, or nothing: load_sharded's rules and messages.
  return detail::load_sharded(folder, options);
}

checkpoint load_whole(const std::filesystem::path& path, const load_options& options, const torch_options& torch) {
  const std::string_view name(path.native());
  if (detail::is_remote(path)) {
    // An index in a bucket: its shards, objects beside it, each recognized by its content.
    if (name.ends_with(".index.json")) return detail::load_sharded_by_content(path, options, torch);
    return detail::load_remote(path, options, torch);
  }
  if (name.ends_with(".index.json")) {
    if (name.ends_with(detail::safetensors_index_suffix)) return detail::load_sharded(path, options);
    return detail::load_sharded_by_content(path, options, torch);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) return load_folder(path, options, torch);
  return detail::load_by_content(path, options, torch);
}

}  // namespace

checkpoint load(const std::filesystem::path& path, const load_options& options, const torch_options& torch) {
  // The readers leave the digest unchecked when `only` is set (a remote one fetches only what it
  // matches); the choice of entries is made here, once, for every layout.
  return detail::chosen(load_whole(path, options, torch), options);
}

checkpoint load(const std::filesystem::path& path, const load_options& options) { return load(path, options, {}); }

checkpoint parse(std::span<const std::byte> file_bytes, const std::filesystem::path& origin, const load_options& options,
                 const torch_options& torch) {
  return detail::chosen(detail::parse_by_content(file_bytes, origin, options, torch), options);
}

checkpoint parse(std::span<const std::byte> file_bytes, const std::filesystem::path& origin, const load_options& options) {
  return parse(file_bytes, origin, options, {});
}

}  // namespace ckpt
