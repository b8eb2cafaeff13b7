// `ckpt::load`: every layout Hugging Face's `save_pretrained` and `torch.save` produce. It only
// tells them apart and calls down, never back: a file goes to src/format/by_content.hpp (a safetensors
// file or a torch.save zip, by its content); an index, by its name, to the sharded reader
// (src/format/sharded.hpp: a `*.safetensors.index.json` through load_sharded, any other `*.index.json`,
// such as `pytorch_model.bin.index.json`, through load_sharded_by_content, its shards by
// content); a folder (or a bucket's prefix) by the checkpoint files it holds, to one of those;
// an object in a bucket to src/format/remote.hpp. `ckpt::parse` hands bytes in memory to
// src/format/by_content.hpp. The dispatch sits above the file, sharded and torch readers, none of
// which calls it. describe (src/format/describe.hpp), the headers alone, goes through the same
// dispatch; both count what they fetch from object storage (load_options::fetched).
#include <ckpt/file.hpp>
#include <ckpt/name_pattern.hpp>
#include <ckpt/torch.hpp>

#include "by_content.hpp"
#include "describe.hpp"
#include "reader.hpp"
#include "remote.hpp"
#include "sharded.hpp"

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace ckpt {
namespace {

using detail::safetensors_file;
using detail::torch_file;
using detail::torch_index_suffix;

std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

// The names in the folder `folder`: on disk, or the objects directly under a prefix of a bucket.
std::vector<std::string> names_in(const std::filesystem::path& folder) {
  if (detail::is_remote(folder)) return detail::remote_folder(folder).names();
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().filename().string());
  if (ec) throw io_error(folder, "list the folder", ec);
  return out;
}

// What ckpt::load reads of the folder `folder` whose entries are `names`: its model.safetensors
// or pytorch_model.bin, its one *.bin.index.json, or else its one *.safetensors.index.json.
std::filesystem::path chosen_in_folder(const std::filesystem::path& folder, const std::vector<std::string>& names) {
  // What the folder holds of each kind: the single file's name first if present, then the indexes.
  struct found_kind {
    std::vector<std::string> files;
    bool single = false;
  };
  found_kind st, pt;
  std::vector<std::string> pt_indexes;
  for (const std::string& name : names) {
    if (name == safetensors_file) st.single = true;
    else if (name == torch_file) pt.single = true;
    else if (name.size() > detail::safetensors_index_suffix.size() && name.ends_with(detail::safetensors_index_suffix))
      st.files.push_back(name);
    else if (name.size() > torch_index_suffix.size() && name.ends_with(torch_index_suffix)) pt_indexes.push_back(name);
  }
  std::ranges::sort(st.files);
  std::ranges::sort(pt_indexes);
  pt.files = pt_indexes;
  // The single file first (made in place and rotated there: g++ 12 warns of an insert of a
  // temporary string at the front, -Warray-bounds, wrongly).
  for (const auto& [kind, file] : {std::pair{&st, safetensors_file}, std::pair{&pt, torch_file}})
    if (kind->single) {
      kind->files.emplace_back(file);
      std::rotate(kind->files.begin(), std::prev(kind->files.end()), kind->files.end());
    }

  const std::string where = "ckpt: the folder '" + folder.string() + "' holds ";
  if (!st.files.empty() && !pt.files.empty())
    throw error(folder, where + "a safetensors checkpoint (" + in_quotes(st.files.front()) + ") and a torch.save one (" +
                            in_quotes(pt.files.front()) + "); load the file you mean");
  for (const found_kind* kind : {&st, &pt})
    if (kind->single && kind->files.size() > 1)
      throw error(folder, where + "a single-file checkpoint (" + in_quotes(kind->files[0]) + ") and a sharded one (" +
                              in_quotes(kind->files[1]) + "); load the file you mean");
  if (st.single) return folder / safetensors_file;
  if (pt.single) return folder / torch_file;
  if (pt_indexes.size() > 1) throw detail::several_indexes(folder, pt_indexes);
  if (pt_indexes.size() == 1) return folder / pt_indexes.front();
  // A sharded safetensors checkpoint, or nothing: the sharded reader's rules and messages.
  return folder / detail::index_among(names, folder);
}

// Whether the URL `url` names a prefix of a bucket read as a folder: it ends with '/', or names no
// object (`missing`, the answer to the object's read, is a 404) and objects lie under it.
bool is_remote_folder(const std::filesystem::path& url, const remote_error* missing) {
  if (url.native().ends_with('/')) return true;
  if (missing == nullptr || missing->status() != 404 || missing->code() != "NoSuchKey") return false;
  return !detail::remote_folder(url).names().empty();
}

// Reads the checkpoint at `path` by `read_file` (a file, an object, an index) or, for a folder or
// a bucket's prefix, what ckpt::load reads there (read_file of it).
template <class Read>
auto read_whole(const std::filesystem::path& path, const Read& read_file) -> decltype(read_file(path)) {
  if (!detail::is_remote(path)) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) return read_file(chosen_in_folder(path, names_in(path)));
    return read_file(path);
  }
  if (detail::names_index(path.native())) return read_file(path);
  if (is_remote_folder(path, nullptr)) return read_file(chosen_in_folder(path, names_in(path)));
  try {
    return read_file(path);
  } catch (const remote_error& e) {
    if (!is_remote_folder(path, &e)) throw;
  }
  return read_file(chosen_in_folder(path, names_in(path)));
}

// A file, an object or an index, by the readers of each.
checkpoint load_file_at(const std::filesystem::path& path, const load_options& options, const torch_options& torch) {
  const std::string_view name(path.native());
  if (detail::is_remote(path)) {
    // An index in a bucket: its shards, objects beside it, each recognized by its content.
    if (detail::names_index(name)) return detail::load_sharded_by_content(path, options, torch);
    return detail::load_remote(path, options, torch);
  }
  if (detail::names_index(name)) {
    if (name.ends_with(detail::safetensors_index_suffix)) return detail::load_sharded(path, options);
    return detail::load_sharded_by_content(path, options, torch);
  }
  return detail::load_by_content(path, options, torch);
}

checkpoint load_whole(const std::filesystem::path& path, const load_options& options, const torch_options& torch) {
  return read_whole(path, [&](const std::filesystem::path& file) { return load_file_at(file, options, torch); });
}

}  // namespace

checkpoint load(const std::filesystem::path& path, const load_options& options, const torch_options& torch) {
  // The readers leave the digest unchecked when `only` is set (a remote one fetches only what it
  // matches); the choice of entries is made here, once, for every layout.
  const detail::fetch_count fetched(options);
  checkpoint out = detail::chosen(load_whole(path, options, torch), options);
  fetched.report();
  return out;
}

checkpoint load(const std::filesystem::path& path, const load_options& options) { return load(path, options, {}); }

checkpoint parse(std::span<const std::byte> file_bytes, const std::filesystem::path& origin, const load_options& options,
                 const torch_options& torch) {
  return detail::chosen(detail::parse_by_content(file_bytes, origin, options, torch), options);
}

checkpoint parse(std::span<const std::byte> file_bytes, const std::filesystem::path& origin, const load_options& options) {
  return parse(file_bytes, origin, options, {});
}

namespace detail {

description description_of(const checkpoint& t) {
  description out;
  for (const auto& [name, x] : t)
    out.entries.push_back({{name, x.dtype(), dims(x.shape().begin(), x.shape().end())}, x.nbytes()});
  std::ranges::sort(out.entries, {}, &description::entry::name);
  out.metadata = t.metadata();
  return out;
}

description describe(const std::filesystem::path& path, const load_options& options, const torch_options& torch) {
  const fetch_count fetched(options);
  // On disk, a load reads the headers alone (the data stay mapped, unread); in a bucket, the
  // headers are fetched alone.
  load_options header_only = options;
  header_only.verify_digest = false;
  description out = read_whole(path, [&](const std::filesystem::path& file) {
    if (!is_remote(file)) return description_of(chosen(load_file_at(file, header_only, torch), options));
    if (names_index(file.native())) return describe_sharded(file, header_only, torch);
    return describe_remote(file, header_only, torch);
  });
  fetched.report();
  return out;
}

}  // namespace detail

}  // namespace ckpt
