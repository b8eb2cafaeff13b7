#include <ckpt/sharded.hpp>

#include "atomic_file.hpp"
#include "hf_index.hpp"
#include "io_hooks.hpp"
#include "posix_file.hpp"
#include "entry_name.hpp"
#include "file.hpp"
#include "safetensors.hpp"
#include "sharded.hpp"
#include "utf8.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string_view.hpp>
#include <boost/json/value.hpp>

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
  static constexpr char hex[] = "0123456789abcdef";
  require_utf8_to_save("the name", s, "a sharded checkpoint's index holds UTF-8 names");
  std::string out = "\"";
  const auto escape = [&out](std::uint32_t unit) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += hex[(unit >> shift) & 0xf];
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

std::string index_text(std::uint64_t total_size, std::span<const std::pair<std::string, std::string>> weight_map) {
  std::string out = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total_size) + "\n  },\n";
  out += "  \"weight_map\": {";
  for (std::size_t i = 0; i < weight_map.size(); ++i) {
    out += i == 0 ? "\n    " : ",\n    ";
    out += python_json_string(weight_map[i].first) + ": " + python_json_string(weight_map[i].second);
  }
  out += weight_map.empty() ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

}  // namespace detail

namespace {

using detail::file_descriptor;
using detail::index_error;
using detail::last_error;
using detail::python_json_string;

constexpr std::string_view shard_suffix = ".safetensors";
constexpr std::string_view index_suffix = ".safetensors.index.json";

std::string shard_name(const std::string& base, std::size_t number, std::size_t count) {
  char digits[64];
  std::snprintf(digits, sizeof digits, "-%05zu-of-%05zu", number, count);
  return base + digits + std::string(shard_suffix);
}

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

std::string json_string(std::string_view s) { return boost::json::serialize(boost::json::string_view(s.data(), s.size())); }

std::string read_index(const std::filesystem::path& path) {
  struct stat info {};
  const file_descriptor fd = detail::open_to_read(path, info);
  if (!S_ISREG(info.st_mode)) throw index_error(path, "it is not a regular file");
  // An index lists names only; one larger than the format's header cap is no index.
  if (static_cast<std::uint64_t>(info.st_size) > detail::max_header_size)
    throw index_error(path, "it is " + std::to_string(info.st_size) + " bytes, more than the " +
                                std::to_string(detail::max_header_size) + " an index may have");
  std::string text(static_cast<std::size_t>(info.st_size), '\0');
  const std::size_t done =
      detail::read_fully(fd.get(), reinterpret_cast<std::byte*>(text.data()), text.size(), 0, path);
  text.resize(done);
  return text;
}

// The index in `folder`: its one `*.safetensors.index.json`.
std::filesystem::path index_in(const std::filesystem::path& folder) {
  std::vector<std::string> found;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > index_suffix.size() && name.ends_with(index_suffix)) found.push_back(name);
  }
  if (ec) throw io_error(folder, "list the folder", ec);
  std::sort(found.begin(), found.end());
  if (found.empty())
    throw error(folder, "ckpt: the folder '" + folder.string() + "' holds no sharded checkpoint index (*" +
                            std::string(index_suffix) + ")");
  if (found.size() > 1)
    throw error(folder, "ckpt: the folder '" + folder.string() + "' holds " + std::to_string(found.size()) +
                            " sharded checkpoint indexes ('" + found[0] + "', '" + found[1] +
                            (found.size() > 2 ? "', ...)" : "')") + "; load the one you mean");
  return folder / found.front();
}

// A fresh hidden folder `.ckpt-staging-XXXXXX` in `folder`, removed with what it holds when
// the guard goes (the shards of a failed save; empty once they are moved into place).
class staging_folder {
 public:
  explicit staging_folder(const std::filesystem::path& folder) {
    std::string pattern = (folder / ".ckpt-staging-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw io_error(folder, "create a staging folder in", last_error());
    path_ = pattern;
  }
  staging_folder(const staging_folder&) = delete;
  staging_folder& operator=(const staging_folder&) = delete;
  ~staging_folder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

void sync_folder(const std::filesystem::path& folder) {
  const file_descriptor dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) throw io_error(folder, "open folder", last_error());
  if (detail::hooks().fsync(dir.get()) != 0) throw io_error(folder, "fsync folder", last_error());
}

bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

}  // namespace

sharded_files save_sharded(const std::filesystem::path& folder, const checkpoint& t, std::uint64_t max_shard_bytes,
                           const shard_options& options) {
  if (max_shard_bytes == 0) throw std::invalid_argument("ckpt: save_sharded: max_shard_bytes must be positive, got 0");
  if (options.base_name.empty() || !is_plain_file_name(options.base_name))
    throw std::invalid_argument("ckpt: save_sharded: the base name '" + options.base_name +
                                "' is not a plain file name part");
  static_cast<void>(python_json_string(options.base_name));  // valid UTF-8, before anything is written
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) throw io_error(folder, "create the folder", ec);

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
  files.index = folder / (options.base_name + std::string(index_suffix));
  std::vector<std::pair<std::string, std::string>> weight_map;
  weight_map.reserve(t.size());
  // Every shard is written into a staging folder first: a save that fails part-way (a name that
  // is not UTF-8, a full disk) removes it and leaves the folder as it was.
  staging_folder staging(folder);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const std::string name = shard_name(options.base_name, i + 1, groups.size());
    for (const auto& e : groups[i]) weight_map.emplace_back(e.first, name);
    files.shards.push_back(folder / name);
    names.push_back(name);
    save(staging.path() / name, checkpoint(std::move(groups[i]), t.metadata()), options.save);
  }
  // Sorted by name, as transformers' json.dumps(sort_keys=True) writes it.
  std::sort(weight_map.begin(), weight_map.end());
  const std::string index = detail::index_text(total_size, weight_map);
  // Then the shards move into place. If one replaces a shard of the previous save, that save's
  // index goes first: an interruption from here on leaves a folder without an index (which
  // `load` refuses), never an index naming shards of two saves.
  const bool replaces = std::ranges::any_of(names, [&](const std::string& name) {
    std::error_code ignored;
    return std::filesystem::exists(folder / name, ignored);
  });
  if (replaces && ::unlink(files.index.c_str()) != 0 && errno != ENOENT)
    throw io_error(files.index, "remove the previous index", last_error());
  for (const std::string& name : names)
    if (detail::hooks().rename((staging.path() / name).c_str(), (folder / name).c_str()) != 0)
      throw io_error(folder / name, "move a new shard into place as", last_error());
  sync_folder(folder);
  // Last: until the index names the new shards, readers of the folder see the previous save.
  detail::write_atomically(files.index, index);

  if (options.remove_stale_shards) {
    // Best effort: the save is complete once the index is in place, and a shard left behind is
    // only wasted space (no index names it).
    std::vector<std::filesystem::path> stale;
    for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (is_shard_name(name, options.base_name) &&
          std::find(files.shards.begin(), files.shards.end(), folder / name) == files.shards.end())
        stale.push_back(it->path());
    }
    for (const auto& path : stale) {
      std::error_code ignored;
      std::filesystem::remove(path, ignored);
    }
  }
  return files;
}

namespace detail {

std::map<std::string, std::vector<std::string>, std::less<>> read_weight_map(const std::filesystem::path& index) {
  const std::string text = read_index(index);
  boost::json::error_code json_error;
  const boost::json::value root = boost::json::parse(text, json_error);
  if (json_error) throw index_error(index, "it is not JSON: " + json_error.message());
  const boost::json::object* object = root.if_object();
  if (object == nullptr) throw index_error(index, "it is not a JSON object");
  if (const boost::json::value* metadata = object->if_contains("metadata");
      metadata != nullptr && !metadata->is_object())
    throw index_error(index, "its 'metadata' is not an object");
  const boost::json::value* map_value = object->if_contains("weight_map");
  if (map_value == nullptr) throw index_error(index, "it has no 'weight_map'");
  const boost::json::object* map = map_value->if_object();
  if (map == nullptr) throw index_error(index, "its 'weight_map' is not an object");

  std::map<std::string, std::vector<std::string>, std::less<>> by_shard;
  for (const auto& [key, value] : *map) {
    const std::string name(key);
    if (!detail::is_entry_name(name))
      throw index_error(index, "the weight_map entry '" + name + "' is not a valid entry name");
    const boost::json::string* shard = value.if_string();
    if (shard == nullptr)
      throw index_error(index, "the weight_map entry '" + name + "' is " + boost::json::serialize(value) +
                                   ", not a shard file name");
    if (!is_plain_file_name(*shard))
      throw index_error(index, "the weight_map entry '" + name + "' names the shard " + json_string(*shard) +
                                   ", which is not a file name in the index's folder");
    by_shard[std::string(*shard)].push_back(name);
  }
  return by_shard;
}

checkpoint assemble_shards(const std::filesystem::path& index,
                           const std::map<std::string, std::vector<std::string>, std::less<>>& by_shard,
                           const std::function<checkpoint(const std::filesystem::path& shard)>& load_shard) {
  const std::filesystem::path folder = index.has_parent_path() ? index.parent_path() : ".";
  std::vector<checkpoint::entry> entries;
  std::optional<metadata_map> common;
  for (const auto& [shard, names] : by_shard) {
    const checkpoint part = load_shard(folder / shard);
    for (const std::string& name : names) {
      const tensor* x = part.find(name);
      if (x == nullptr)
        throw index_error(index, "the entry '" + name + "' is not in its shard '" + shard + "'");
      entries.emplace_back(name, *x);
    }
    // Keep what every shard agrees on; a key that differs (a per-file digest) is not the whole's.
    if (!common) {
      common = part.metadata();
    } else {
      std::erase_if(*common, [&part](const auto& kv) {
        const auto it = part.metadata().find(kv.first);
        return it == part.metadata().end() || it->second != kv.second;
      });
    }
  }
  metadata_map metadata = common.value_or(metadata_map{});
  // A digest describes one file's bytes, never a checkpoint spanning several.
  metadata.erase(std::string(digest_key));
  for (const std::string_view key : earlier_digest_keys) metadata.erase(std::string(key));
  return checkpoint(std::move(entries), std::move(metadata));
}

checkpoint load_sharded(const std::filesystem::path& path, const load_options& options) {
  std::error_code ec;
  const std::filesystem::path index = std::filesystem::is_directory(path, ec) ? index_in(path) : path;
  // Entry names by shard, each shard loaded once.
  return detail::assemble_shards(index, detail::read_weight_map(index),
                                 [&options](const std::filesystem::path& shard) { return detail::load_file(shard, options); });
}

}  // namespace detail

}  // namespace ckpt
