// The torch.save reader (src/format/torch.hpp): it reads the zip of records (through minizip, which
// tells where a stored record's bytes start, so storages are viewed in the mapping rather than
// copied), runs the pickle `<name>/data.pkl` through the restricted unpickler (src/format/pickle.hpp)
// with the tensor rebuild (src/format/torch_tensors.hpp) answering its storages and tensors, and walks
// the object it built into named entries and metadata, under the budgets of torch_options
// (src/format/torch_error.hpp). It calls those three units and the file mapping (src/io/mapped_file.hpp).
#include <ckpt/torch.hpp>

#include "base/utf8.hpp"
#include "io/mapped_file.hpp"
#include "pickle.hpp"
#include "torch.hpp"
#include "torch_error.hpp"
#include "torch_tensors.hpp"

#include <unzip.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ckpt {
namespace {

using detail::torch_budget;
using detail::torch_format_error;
using detail::torch_records;
using detail::pickle::kind_name;
using detail::pickle::object;
using detail::pickle::ref;

// ---------------------------------------------------------------------------------------------
// The zip container.

// True if `bytes` begin as a zip file does (a local file header), as every torch.save file of
// PyTorch 1.6 and later.
bool is_zip(std::span<const std::byte> bytes) noexcept {
  return bytes.size() >= 4 && bytes[0] == std::byte{'P'} && bytes[1] == std::byte{'K'} && bytes[2] == std::byte{3} &&
         bytes[3] == std::byte{4};
}

// minizip reads through these callbacks from a span in memory (the mapping of the file).
struct memory_stream {
  std::span<const std::byte> bytes;
  std::uint64_t position = 0;
};

voidpf ZCALLBACK stream_open(voidpf opaque, const void*, int) { return opaque; }
uLong ZCALLBACK stream_read(voidpf, voidpf stream, void* buffer, uLong size) {
  auto& s = *static_cast<memory_stream*>(stream);
  if (s.position >= s.bytes.size()) return 0;
  const auto n = static_cast<uLong>(std::min<std::uint64_t>(size, s.bytes.size() - s.position));
  std::memcpy(buffer, s.bytes.data() + s.position, n);
  s.position += n;
  return n;
}
uLong ZCALLBACK stream_write(voidpf, voidpf, const void*, uLong) { return 0; }
ZPOS64_T ZCALLBACK stream_tell(voidpf, voidpf stream) { return static_cast<memory_stream*>(stream)->position; }
long ZCALLBACK stream_seek(voidpf, voidpf stream, ZPOS64_T offset, int origin) {
  auto& s = *static_cast<memory_stream*>(stream);
  std::uint64_t base = 0;
  if (origin == ZLIB_FILEFUNC_SEEK_CUR) base = s.position;
  else if (origin == ZLIB_FILEFUNC_SEEK_END) base = s.bytes.size();
  else if (origin != ZLIB_FILEFUNC_SEEK_SET) return -1;
  if (offset > s.bytes.size() || base > s.bytes.size() - offset) return -1;
  s.position = base + offset;
  return 0;
}
int ZCALLBACK stream_close(voidpf, voidpf) { return 0; }
int ZCALLBACK stream_error(voidpf, voidpf) { return 0; }

class zip_reader {
 public:
  zip_reader(std::span<const std::byte> bytes, const std::filesystem::path& origin) : stream_{bytes, 0} {
    zlib_filefunc64_def functions{};
    functions.zopen64_file = stream_open;
    functions.zread_file = stream_read;
    functions.zwrite_file = stream_write;
    functions.ztell64_file = stream_tell;
    functions.zseek64_file = stream_seek;
    functions.zclose_file = stream_close;
    functions.zerror_file = stream_error;
    functions.opaque = &stream_;
    file_ = unzOpen2_64("", &functions);
    if (file_ == nullptr) throw torch_format_error(origin, "it is not a zip file (its central directory cannot be read)");
  }
  zip_reader(const zip_reader&) = delete;
  zip_reader& operator=(const zip_reader&) = delete;
  ~zip_reader() { unzClose(file_); }
  [[nodiscard]] unzFile get() const noexcept { return file_; }

 private:
  memory_stream stream_;
  unzFile file_ = nullptr;
};

// The records of the zip, by name: where each one's bytes stand in `bytes`.
torch_records read_records(std::span<const std::byte> bytes, const std::filesystem::path& origin) {
  zip_reader zip(bytes, origin);
  torch_records records;
  for (int status = unzGoToFirstFile(zip.get()); status != UNZ_END_OF_LIST_OF_FILE; status = unzGoToNextFile(zip.get())) {
    if (status != UNZ_OK) throw torch_format_error(origin, "its zip central directory is malformed");
    unz_file_info64 info{};
    std::array<char, 1024> name{};
    if (unzGetCurrentFileInfo64(zip.get(), &info, name.data(), name.size() - 1, nullptr, 0, nullptr, 0) != UNZ_OK ||
        info.size_filename >= name.size())
      throw torch_format_error(origin, "its zip central directory is malformed");
    const std::string record(name.data(), info.size_filename);
    if (info.compression_method != 0)
      throw torch_format_error(origin, "record " + detail::quote_bytes(record) + " is compressed (torch.save stores every record uncompressed)");
    if (info.compressed_size != info.uncompressed_size)
      throw torch_format_error(origin, "record " + detail::quote_bytes(record) + " has different stored and unpacked sizes");
    // Opening the record in raw mode reads its local header, which tells where its bytes start.
    if (unzOpenCurrentFile2(zip.get(), nullptr, nullptr, 1) != UNZ_OK)
      throw torch_format_error(origin, "the local header of record " + detail::quote_bytes(record) + " cannot be read");
    const ZPOS64_T start = unzGetCurrentFileZStreamPos64(zip.get());
    unzCloseCurrentFile(zip.get());
    if (start > bytes.size() || info.compressed_size > bytes.size() - start)
      throw torch_format_error(origin, "record " + detail::quote_bytes(record) + " claims " + std::to_string(info.compressed_size) +
                                           " bytes past the end of the file");
    if (!records.emplace(record, bytes.subspan(start, info.compressed_size)).second)
      throw torch_format_error(origin, "record " + detail::quote_bytes(record) + " appears twice");
  }
  // Records whose bytes overlap would make one storage alias another's: refused.
  std::vector<std::pair<std::span<const std::byte>, const std::string*>> spans;
  for (const auto& [name, bytes_of_record] : records) spans.emplace_back(bytes_of_record, &name);
  std::ranges::sort(spans, {}, [](const auto& s) { return s.first.data(); });
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i - 1].first.data() + spans[i - 1].first.size() > spans[i].first.data())
      throw torch_format_error(origin, "records " + detail::quote_bytes(*spans[i - 1].second) + " and " + detail::quote_bytes(*spans[i].second) + " overlap");
  return records;
}

// ---------------------------------------------------------------------------------------------
// From the unpickled object to entries and metadata.

// The shortest text that reads back as `value` (Python's repr, but "7" for 7.0).
std::string format_real(double value) {
  std::array<char, 32> text{};
  const auto end = std::to_chars(text.data(), text.data() + text.size(), value).ptr;
  return {text.data(), end};
}

class flattener {
 public:
  // Each reference costs a pickle at least one byte, so a walk that visits more objects than
  // the pickle has bytes follows shared references exponentially often (a reference bomb).
  // The names built (every path, partial ones included) are charged to `names`, the entries'
  // bytes to `data` (each name of a tensor counts, except the first of a copy, charged when made).
  flattener(const std::filesystem::path& origin, std::size_t visit_budget, torch_budget& names, torch_budget& data,
            bool keep_tied)
      : origin_(origin), visits_left_(visit_budget), names_(names), data_(data), keep_tied_(keep_tied) {}

  void walk(const ref& x, const std::string& path, int depth) {
    if (depth > max_depth) fail("the object nests deeper than " + std::to_string(max_depth) + " levels (or refers to itself)");
    if (visits_left_-- == 0) fail("the object refers to its parts more often than its pickle has bytes");
    switch (x->k) {
      case object::kind::tensor: {
        const auto [group, first] = groups_.try_emplace(x, tied_.size());
        if (first) tied_.emplace_back();
        tied_[group->second].push_back(path);
        if (!first && !keep_tied_) return;  // a tied name: the first one of its tensor stands for it
        if (x->copied && first) {
          // charged when the copy was made
        } else {
          data_.spend(x->value->nbytes());
        }
        entries_.emplace_back(path, *x->value);
        return;
      }
      case object::kind::dict:
        for (const auto& [key, value] : x->pairs) walk(value, join(path, key_text(key, path)), depth + 1);
        return;
      case object::kind::list:
      case object::kind::tuple:
        for (std::size_t i = 0; i < x->items.size(); ++i) walk(x->items[i], join(path, std::to_string(i)), depth + 1);
        return;
      case object::kind::none: meta(path, "none"); return;
      case object::kind::boolean: meta(path, x->flag ? "true" : "false"); return;
      case object::kind::integer: meta(path, std::to_string(x->integer)); return;
      case object::kind::real: meta(path, format_real(x->real)); return;
      case object::kind::string: meta(path, x->text); return;
      case object::kind::global:
      case object::kind::storage:
        fail(detail::quote_bytes(path) + " holds " + std::string(kind_name(x->k)) + ", which is neither a tensor nor a plain value");
    }
  }

  // The names of each tensor reached by more than one, in the order the walk met them.
  [[nodiscard]] std::vector<std::vector<std::string>> tied() && {
    std::vector<std::vector<std::string>> out;
    for (auto& names : tied_)
      if (names.size() > 1) out.push_back(std::move(names));
    return out;
  }

  checkpoint result() {
    try {
      return checkpoint(std::move(entries_), std::move(metadata_));
    } catch (const std::invalid_argument& e) {
      fail(e.what());
    }
  }

 private:
  static constexpr int max_depth = 64;

  [[noreturn]] void fail(const std::string& rule) const { throw torch_format_error(origin_, rule); }
  std::string join(const std::string& path, const std::string& key) {
    names_.spend(path.size() + 1 + key.size());
    return path.empty() ? key : path + "." + key;
  }
  std::string key_text(const ref& key, const std::string& path) const {
    if (key->k == object::kind::string) return key->text;
    if (key->k == object::kind::integer) return std::to_string(key->integer);
    fail("a dict under " + detail::quote_bytes(path) + " has a key that is " + std::string(kind_name(key->k)) + ", not a str or an int");
  }
  void meta(const std::string& path, std::string value) {
    if (!metadata_.emplace(path, std::move(value)).second) fail("two values are named " + detail::quote_bytes(path));
  }

  const std::filesystem::path& origin_;
  std::size_t visits_left_;
  torch_budget& names_;
  torch_budget& data_;
  bool keep_tied_;
  std::unordered_map<const object*, std::size_t> groups_;  // each tensor reached: its group in tied_
  std::vector<std::vector<std::string>> tied_;             // the names of each tensor
  std::vector<checkpoint::entry> entries_;
  metadata_map metadata_;
};

checkpoint read_torch(std::span<const std::byte> bytes, const std::filesystem::path& origin,
                      const std::shared_ptr<const void>& owner, const detail::mapped_file* mapping,
                      const torch_options& options) {
  if (!is_zip(bytes))
    throw torch_format_error(origin, "it is not a zip file (torch.save files before PyTorch 1.6 are not read; load "
                                     "and save such a file again with a newer PyTorch)");
  const auto records = read_records(bytes, origin);
  // The pickle is <name>/data.pkl, where <name> is the folder all records share.
  std::string prefix;
  bool found = false;
  for (const auto& [name, _] : records) {
    const auto slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      if (found) throw torch_format_error(origin, "it holds more than one data.pkl");
      prefix = name.substr(0, slash + 1);
      found = true;
    }
  }
  if (!found) throw torch_format_error(origin, "it has no record <name>/data.pkl (it is a zip, but not one torch.save wrote)");
  bool big_endian = false;
  if (const auto order = records.find(prefix + "byteorder"); order != records.end()) {
    const std::string_view text(reinterpret_cast<const char*>(order->second.data()), order->second.size());
    if (text == "big") big_endian = true;
    else if (text != "little") throw torch_format_error(origin, "its byteorder record says " + detail::quote_bytes(text.substr(0, 16)));
  }
  const std::span<const std::byte> pickle = records.at(prefix + "data.pkl");
  torch_budget data(origin, "its tensors' bytes", "data_budget", options.data_budget, "the file", bytes.size(),
                    std::size_t{16} << 20);
  torch_budget objects(origin, "the objects its pickle builds", "object_budget", options.object_budget, "its pickle",
                       pickle.size(), std::size_t{64} << 20);
  torch_budget names(origin, "its names", "name_budget", options.name_budget, "its pickle", pickle.size(),
                     std::size_t{1} << 20);
  // The objects live until the walk is done: the entries are taken from them.
  detail::pickle::arena arena(objects);
  detail::torch_tensors tensors(origin, prefix, records, big_endian, owner, mapping, arena, data);
  const ref root = detail::pickle::unpickle(pickle, origin, prefix, arena, tensors);
  if (root->k != object::kind::dict)
    throw torch_format_error(origin, "its object is " + std::string(kind_name(root->k)) + ", not a dict of tensors");
  flattener walk(origin, pickle.size(), names, data, options.keep_tied);
  walk.walk(root, "", 0);
  checkpoint out = walk.result();
  if (options.tied)
    for (const auto& group : std::move(walk).tied()) options.tied(group);
  return out;
}

}  // namespace

namespace detail {

bool looks_like_torch(std::span<const std::byte> file_bytes) noexcept {
  if (is_zip(file_bytes)) return true;
  // Before 1.6, torch.save wrote pickles one after another, the first the magic number
  // 0x1950a86a20f9469cfc6c: PROTO (0x80, the protocol), maybe a FRAME (0x95 and 8 bytes, from
  // protocol 4), then LONG1 (0x8a) of 10 little-endian bytes.
  static constexpr unsigned char magic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
  const auto magic_at = [&](std::size_t at) {
    if (file_bytes.size() < at + sizeof magic) return false;
    for (std::size_t i = 0; i < sizeof magic; ++i)
      if (file_bytes[at + i] != std::byte{magic[i]}) return false;
    return true;
  };
  if (file_bytes.size() < 2 || file_bytes[0] != std::byte{0x80}) return false;
  return magic_at(2) || (file_bytes.size() > 2 && file_bytes[2] == std::byte{0x95} && magic_at(11));
}

checkpoint load_torch(const std::filesystem::path& path, const torch_options& options) {
  detail::file_contents file;
  try {
    file = detail::map_file(detail::file_at_path(path));
  } catch (const torch_format_error&) {
    throw;
  } catch (const format_error& e) {  // not a regular file: said of a PyTorch file
    throw torch_format_error(path, e.rule());
  }
  return read_torch(file.bytes, path, file.owner, file.file, options);
}

checkpoint parse_torch(std::span<const std::byte> file_bytes, const std::filesystem::path& origin,
                       const torch_options& options) {
  auto copy = std::make_shared_for_overwrite<std::byte[]>(file_bytes.size());
  if (!file_bytes.empty()) std::memcpy(copy.get(), file_bytes.data(), file_bytes.size());
  return read_torch({copy.get(), file_bytes.size()}, origin, copy, nullptr, options);
}

}  // namespace detail

}  // namespace ckpt
