// Sharded checkpoints as Hugging Face writes them (ckpt/sharded.hpp, src/format/sharded.hpp): the index
// text (python_json_string, index_text), save_sharded (the shards written by the file writer,
// src/format/save.hpp, then the index, atomically), and the sharded reader: the weight_map read through
// src/format/hf_index.hpp, each shard loaded once, by the safetensors file reader (src/format/reader.hpp) from
// the folder held, or by content (src/format/by_content.hpp) for another kind of index, and the
// entries assembled (assemble_shards). It calls only down: ckpt::load (src/format/load.cpp) calls it.
#include <ckpt/sharded.hpp>

#include "base/digest.hpp"
#include "base/hex.hpp"
#include "base/utf8.hpp"
#include "io/atomic_file.hpp"
#include "io/folder.hpp"
#include "io/io_hooks.hpp"
#include "io/posix_file.hpp"
#include "by_content.hpp"
#include "describe.hpp"
#include "hf_index.hpp"
#include "reader.hpp"
#include "remote.hpp"
#include "safetensors.hpp"
#include "save.hpp"
#include "sharded.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace ckpt {

namespace detail {

std::string python_json_string(std::string_view s) {
  require_utf8_to_save("the name", s, "a sharded checkpoint's index holds UTF-8 names");
  std::string out = "\"";
  const auto escape = [&out](std::uint32_t unit) {
    out += "\\u";
    append_hex(out, unit, 4);
  };
  for (std::size_t at = 0; at < s.size();) {
    const utf8_step step = next_utf8(s.substr(at));
    at += step.bytes;
    const char32_t c = *step.code_point;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c >= 0x20 && c < 0x7f) {
          out += static_cast<char>(c);
        } else if (c < 0x10000) {
          escape(c);
        } else {
          escape(0xd800 + ((c - 0x10000) >> 10));
          escape(0xdc00 + ((c - 0x10000) & 0x3ff));
        }
    }
  }
  return out + "\"";
}

error several_indexes(const std::filesystem::path& folder, std::span<const std::string> indexes) {
  return error(folder, "ckpt: the folder '" + folder.string() + "' holds " + std::to_string(indexes.size()) +
                           " sharded checkpoint indexes ('" + indexes[0] + "', '" + indexes[1] +
                           (indexes.size() > 2 ? "', ...)" : "')") + "; load the one you mean");
}

std::string index_among(const std::vector<std::string>& names, const std::filesystem::path& folder) {
  std::vector<std::string> found;
  for (const std::string& name : names)
    if (name.size() > safetensors_index_suffix.size() && name.ends_with(safetensors_index_suffix)) found.push_back(name);
  std::ranges::sort(found);
  if (found.empty())
    throw error(folder, "ckpt: the folder '" + folder.string() + "' holds no sharded checkpoint index (*" +
                            std::string(safetensors_index_suffix) + ")");
  if (found.size() > 1) throw several_indexes(folder, found);
  return found.front();
}

std::string index_text(std::uint64_t total_size, std::span<const std::pair<std::string, std::string>> weight_map,
                       std::string_view save_id) {
  std::string out = "{\n  \"metadata\": {\n    ";
  if (!save_id.empty()) out += python_json_string(save_id_key) + ": " + python_json_string(save_id) + ",\n    ";
  out += "\"total_size\": " + std::to_string(total_size) + "\n  },\n";
  out += "  \"weight_map\": {";
  for (std::size_t i = 0; i < weight_map.size(); ++i) {
    out += i == 0 ? "\n    " : ",\n    ";
    out += python_json_string(weight_map[i].first) + ": " + python_json_string(weight_map[i].second);
  }
  out += weight_map.empty() ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

std::string shard_name(std::string_view base, std::size_t number, std::size_t count) {
  char digits[64];
  std::snprintf(digits, sizeof digits, "-%05zu-of-%05zu.safetensors", number, count);
  return std::string(base) + digits;
}

std::optional<std::size_t> shard_count_of(std::string_view name, std::string_view base) {
  if (!name.starts_with(base)) return std::nullopt;
  std::size_t number = 0, count = 0;
  char tail = 0;
  const std::string rest(name.substr(base.size()));
  if (std::sscanf(rest.c_str(), "-%5zu-of-%5zu.safetensor%c", &number, &count, &tail) != 3 || number == 0 ||
      number > count || shard_name(base, number, count) != name)
    return std::nullopt;
  return count;
}

}  // namespace detail

namespace {

using detail::file_descriptor;
using detail::index_error;
using detail::is_plain_file_name;
using detail::last_error;
using detail::python_json_string;
using detail::save_id_key;

constexpr std::string_view shard_suffix = ".safetensors";
using detail::safetensors_index_suffix;
using detail::shard_name;

// True for `<base>-NNNNN-of-NNNNN.safetensors`: a shard of some save with this base name.
bool is_shard_name(std::string_view name, std::string_view base) {
  if (!name.starts_with(base) || !name.ends_with(shard_suffix)) return false;
  std::string_view rest = name.substr(base.size(), name.size() - base.size() - shard_suffix.size());
  const auto digits = [&rest](std::string_view prefix) {
    if (!rest.starts_with(prefix)) return false;
    rest.remove_prefix(prefix.size());
    const std::size_t n = std::min(rest.find_first_not_of("0123456789"), rest.size());
    rest.remove_prefix(n);
    return n >= 5;
  };
  return digits("-") && digits("-of-") && rest.empty();
}

// The index in `folder`: its one `*.safetensors.index.json`.
std::string index_in(const detail::folder_handle& folder) { return detail::index_among(folder.names(), folder.path()); }

// A fresh hidden folder `.ckpt-staging-XXXXXX` in `folder`, removed with what it holds when
// the guard goes (the shards of a failed save; empty once they are moved into place).
class staging_folder {
 public:
  explicit staging_folder(const detail::folder_handle& folder) : parent_(folder) {
    for (int attempt = 0; attempt < 100 && held_.fd() == AT_FDCWD; ++attempt) {
      name_ = std::string(detail::staging_prefix) + detail::random_suffix();
      if (::mkdirat(folder.fd(), name_.c_str(), 0700) == 0) held_ = folder.subfolder(name_);
      else if (errno != EEXIST) throw io_error(folder.path(), "create a staging folder in", last_error());
    }
    if (held_.fd() == AT_FDCWD) throw io_error(folder.path(), "create a staging folder in", {EEXIST, std::system_category()});
  }
  staging_folder(const staging_folder&) = delete;
  staging_folder& operator=(const staging_folder&) = delete;
  ~staging_folder() {
    try {
      static_cast<void>(parent_.remove(name_));
    } catch (const error&) {  // a staging folder left behind is only wasted space
    }
  }
  [[nodiscard]] const detail::folder_handle& folder() const noexcept { return held_; }

 private:
  detail::folder_handle parent_;
  std::string name_;
  detail::folder_handle held_;
};

}  // namespace

sharded_files save_sharded(const std::filesystem::path& folder, const checkpoint& t, std::uint64_t max_shard_bytes,
                           const shard_options& options) {
  if (max_shard_bytes == 0) throw std::invalid_argument("ckpt: save_sharded: max_shard_bytes must be positive, got 0");
  if (options.base_name.empty() || !is_plain_file_name(options.base_name))
    throw std::invalid_argument("ckpt: save_sharded: the base name '" + options.base_name +
                                "' is not a plain file name part");
  static_cast<void>(python_json_string(options.base_name));  // valid UTF-8, before anything is written

  // huggingface_hub's split_state_dict_into_shards_factory, in name order: an entry over the
  // limit is appended as a shard of its own at once; the others fill the current shard, which is
  // appended when the next entry would take it over the limit, or at the end.
  std::vector<std::vector<checkpoint::entry>> groups;
  std::vector<checkpoint::entry> current;
  std::uint64_t current_size = 0;
  std::uint64_t total_size = 0;
  for (const auto& e : t) {
    const std::uint64_t size = e.second.nbytes();
    total_size += size;
    if (size > max_shard_bytes) {
      groups.push_back({e});
      continue;
    }
    if (current_size + size > max_shard_bytes) {
      groups.push_back(std::exchange(current, {}));
      current_size = 0;
    }
    current.push_back(e);
    current_size += size;
  }
  if (!current.empty()) groups.push_back(std::move(current));

  sharded_files files;
  files.index = folder / (options.base_name + std::string(safetensors_index_suffix));
  const std::string index_name = files.index.filename().string();
  std::vector<std::pair<std::string, std::string>> weight_map;
  weight_map.reserve(t.size());
  std::vector<std::string> names;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::string name = shard_name(options.base_name, i + 1, groups.size());
    for (const auto& e : groups[i]) weight_map.emplace_back(e.first, name);
    files.shards.push_back(folder / name);
    names.push_back(name);
  }
  // Sorted by name, as transformers' json.dumps(sort_keys=True) writes it.
  std::sort(weight_map.begin(), weight_map.end());
  // The save's id, in the index and every shard: a load tells a shard of another save by it.
  const std::string save_id = detail::random_suffix() + detail::random_suffix();
  metadata_map shard_metadata = t.metadata();
  shard_metadata.insert_or_assign(std::string(save_id_key), save_id);
  const std::string index = detail::index_text(total_size, weight_map, save_id);
  const auto is_stale = [&](const std::string& name) {
    return is_shard_name(name, options.base_name) && std::ranges::find(names, name) == names.end();
  };

  if (detail::is_remote(folder)) {
    // In a bucket each shard appears whole when its upload completes, and the index is written
    // last, as on disk; a shard that replaces one of the previous save's removes that save's index
    // first. There is no staging: a save that fails part-way leaves the shards it wrote (no index
    // names them if the previous one had to go, else they are stale shards no index names).
    detail::remote_folder out(folder);
    const std::vector<std::string> present = out.names();
    const auto there = [&](const std::string& name) { return std::ranges::find(present, name) != present.end(); };
    if (std::ranges::any_of(names, there) && there(index_name)) out.remove(index_name);
    for (std::size_t i = 0; i < groups.size(); ++i)
      save(out.path_of(names[i]), checkpoint(std::move(groups[i]), shard_metadata), options.save);
    out.write(index_name, index);
    if (options.remove_stale_shards) {
      try {
        for (const std::string& name : present)
          if (is_stale(name)) out.remove(name);
      } catch (const error&) {  // best effort, as on disk
      }
    }
    return files;
  }

  const detail::folder_handle held = detail::folder_handle::open(folder, /*create=*/true);
  // Every shard is written into a staging folder first: a save that fails part-way (a name that
  // is not UTF-8, a full disk) removes it and leaves the folder as it was.
  staging_folder staging(held);
  for (std::size_t i = 0; i < groups.size(); ++i)
    detail::save_checkpoint({staging.folder(), names[i]}, checkpoint(std::move(groups[i]), shard_metadata), options.save);
  // Then the shards move into place. If one replaces a shard of the previous save, that save's
  // index goes first: an interruption from here on leaves a folder without an index (which
  // `load` refuses), never an index naming shards of two saves.
  const bool replaces = std::ranges::any_of(names, [&](const std::string& name) { return held.status(name).has_value(); });
  if (replaces && ::unlinkat(held.fd(), index_name.c_str(), 0) != 0 && errno != ENOENT)
    throw io_error(files.index, "remove the previous index", last_error());
  for (const std::string& name : names)
    if (detail::hooks().renameat(staging.folder().fd(), name.c_str(), held.fd(), name.c_str()) != 0)
      throw io_error(folder / name, "move a new shard into place as", last_error());
  held.sync();
  // Last: until the index names the new shards, readers of the folder see the previous save.
  detail::write_atomically({held, index_name}, index);

  if (options.remove_stale_shards) {
    // Best effort: the save is complete once the index is in place, and a shard left behind is
    // only wasted space (no index names it).
    try {
      for (const std::string& name : held.names())
        if (const auto info = held.status(name); info && !S_ISDIR(info->st_mode) && is_stale(name))
          static_cast<void>(held.remove(name));
    } catch (const error&) {
    }
  }
  return files;
}

namespace detail {

namespace {

// What assembling a sharded checkpoint checks of each shard and keeps of the shards' metadata,
// for a load (assemble_shards) and a description (describe_sharded) alike.
void check_save_id(const std::filesystem::path& index, const std::string& shard, const std::string& save_id,
                   const metadata_map& shard_metadata) {
  if (save_id.empty()) return;
  const auto it = shard_metadata.find(save_id_key);
  std::string theirs = it == shard_metadata.end() ? std::string() : it->second;
  if (theirs != save_id) throw mixed_save_error(index, index.parent_path() / shard, save_id, std::move(theirs));
}

void keep_common(std::optional<metadata_map>& common, const metadata_map& shard_metadata) {
  // Keep what every shard agrees on; a key that differs (a per-file digest) is not the whole's.
  if (!common) {
    common = shard_metadata;
    return;
  }
  std::erase_if(*common, [&shard_metadata](const auto& kv) {
    const auto it = shard_metadata.find(kv.first);
    return it == shard_metadata.end() || it->second != kv.second;
  });
}

metadata_map whole_metadata(std::optional<metadata_map> common) {
  metadata_map metadata = std::move(common).value_or(metadata_map{});
  // A digest describes one file's bytes, never a checkpoint spanning several; the save id is the
  // files'.
  std::erase_if(metadata, [](const auto& kv) { return is_digest_key(kv.first) || kv.first == save_id_key; });
  return metadata;
}

index_error missing_from_shard(const std::filesystem::path& index, const std::string& name, const std::string& shard) {
  return index_error(index, "the entry '" + name + "' is not in its shard '" + shard + "'");
}

}  // namespace

checkpoint assemble_shards(const std::filesystem::path& index,
                           const std::map<std::string, std::vector<std::string>, std::less<>>& by_shard,
                           const std::function<checkpoint(const std::string& shard)>& load_shard,
                           const std::string& save_id) {
  std::vector<checkpoint::entry> entries;
  std::optional<metadata_map> common;
  for (const auto& [shard, names] : by_shard) {
    const checkpoint part = load_shard(shard);
    check_save_id(index, shard, save_id, part.metadata());
    for (const std::string& name : names) {
      const tensor* x = part.find(name);
      if (x == nullptr) throw missing_from_shard(index, name, shard);
      entries.emplace_back(name, *x);
    }
    keep_common(common, part.metadata());
  }
  return checkpoint(std::move(entries), whole_metadata(std::move(common)));
}

namespace {

using shard_lists = std::map<std::string, std::vector<std::string>, std::less<>>;

// The shards of `by_shard` that hold an entry `options.only` chooses, with those entries only;
// all of them without `only`.
shard_lists chosen_shards(shard_lists by_shard, const load_options& options) {
  if (!options.only) return by_shard;
  for (auto it = by_shard.begin(); it != by_shard.end();) {
    std::erase_if(it->second, [&](const std::string& name) { return !options.only->matches(name); });
    it = it->second.empty() ? by_shard.erase(it) : std::next(it);
  }
  return by_shard;
}

// `load`, and once more if it met a shard of another save (the checkpoint saved again while it was
// read): the second reads the index anew, which then names the newer save's shards.
template <class Read>
auto once_more_if_mixed(const Read& load) -> decltype(load()) {
  try {
    return load();
  } catch (const mixed_save_error&) {
    return load();
  }
}

}  // namespace

checkpoint load_sharded(const folder_handle& folder, std::string_view index, const load_options& options) {
  const std::filesystem::path shown = folder.path_of(index);
  return once_more_if_mixed([&] {
    struct stat info {};
    const file_descriptor fd = folder.open_to_read(index, info);
    std::string save_id;
    // Entry names by shard, each shard loaded once, from the folder held.
    const shard_lists by_shard = chosen_shards(detail::read_weight_map(fd.get(), shown, &save_id), options);
    const auto load_shard = [&](const std::string& shard) { return detail::load_file({folder, shard}, options); };
    return detail::assemble_shards(shown, by_shard, load_shard, save_id);
  });
}

namespace {

// The weight_map of the index object `index` in a bucket, the entries `options` choose, and the
// prefix it is in (its shards' folder).
shard_lists remote_index(const std::filesystem::path& index, remote_folder& folder, const load_options& options,
                         std::string& save_id) {
  const std::optional<std::string> text = folder.read(index.filename().string());
  if (!text) throw remote_error(index.string(), "GET", 404, "NoSuchKey", "no such object");
  return chosen_shards(parse_weight_map(*text, index, &save_id), options);
}

}  // namespace

checkpoint load_sharded_by_content(const std::filesystem::path& index, const load_options& options,
                                   const torch_options& torch) {
  return once_more_if_mixed([&] {
    std::string save_id;
    if (is_remote(index)) {
      remote_folder folder(index.parent_path());
      const shard_lists by_shard = remote_index(index, folder, options, save_id);
      const auto load_shard = [&](const std::string& shard) { return load_remote(folder.path_of(shard), options, torch); };
      return assemble_shards(index, by_shard, load_shard, save_id);
    }
    const shard_lists by_shard = chosen_shards(read_weight_map(index, &save_id), options);
    const auto load_shard = [&](const std::string& shard) {
      return load_by_content(index.parent_path() / shard, options, torch);
    };
    return assemble_shards(index, by_shard, load_shard, save_id);
  });
}

description describe_sharded(const std::filesystem::path& index, const load_options& options,
                             const torch_options& torch) {
  return once_more_if_mixed([&] {
    std::string save_id;
    remote_folder folder(index.parent_path());
    const shard_lists by_shard = remote_index(index, folder, options, save_id);
    description out;
    std::optional<metadata_map> common;
    for (const auto& [shard, names] : by_shard) {
      const description part = describe_remote(folder.path_of(shard), options, torch);
      check_save_id(index, shard, save_id, part.metadata);
      for (const std::string& name : names) {
        const auto it = std::ranges::lower_bound(part.entries, name, {}, &description::entry::name);
        if (it == part.entries.end() || it->name != name) throw missing_from_shard(index, name, shard);
        out.entries.push_back(*it);
      }
      keep_common(common, part.metadata);
    }
    std::ranges::sort(out.entries, {}, &description::entry::name);
    out.metadata = whole_metadata(std::move(common));
    return out;
  });
}

checkpoint load_sharded(const std::filesystem::path& path, const load_options& options) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const folder_handle folder = folder_handle::open(path);
    return load_sharded(folder, index_in(folder), options);
  }
  // The index's folder, held for its shards (and their reopening: mapped_file).
  folder_handle folder;
  try {
    folder = folder_handle::open(path.parent_path());
  } catch (const io_error& e) {
    throw io_error(path, "open", e.code());
  }
  return load_sharded(folder, path.filename().string(), options);
}

}  // namespace detail

}  // namespace ckpt
