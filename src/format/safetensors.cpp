#include "safetensors.hpp"

#include "base/entry_name.hpp"
#include "base/hex.hpp"
#include "base/json_sax.hpp"
#include "base/utf8.hpp"
#include <ckpt/detail/pages.hpp>

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/string.hpp>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <limits>
#include <optional>
#include <vector>

namespace ckpt::detail {
namespace {

using boost::json::error_code;
using boost::json::string_view;

// One tensor as the header describes it. `type` is empty for a dtype the format does not define:
// such entries are skipped, but their bytes still take part in the layout checks.
struct header_entry {
  std::string name;
  std::string dtype_spelling;
  std::optional<dtype> type;
  dims shape;
  std::uint64_t begin = 0;
  std::uint64_t end = 0;
  bool has_dtype = false, has_shape = false, has_offsets = false;
};

struct parsed_header {
  std::vector<header_entry> entries;
  metadata_map metadata;
  bool has_metadata = false;
  // Where the value of __metadata__'s digest_key starts in the JSON, if it was read in one piece
  // straight from the JSON's bytes between its two quotes (no escape), and how long it is there.
  std::optional<std::size_t> digest_at;
};

[[noreturn]] void fail(const std::filesystem::path& origin, const std::string& rule) {
  throw format_error(origin, rule);
}

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// A SAX handler for boost::json::basic_parser that reads the header straight into
// header_entry records: no DOM, and duplicate keys (which a DOM would silently merge, last one
// winning) are seen and refused. Handlers may throw; the parser passes exceptions through.
// The parser's callbacks (on_*) only dispatch on where the parse stands; each rule of the header
// is a step of its own below them: an entry's fields (take_field_key, take_field_string,
// take_shape, take_data_offsets, end_entry), `__metadata__` (take_top_key, take_metadata_key,
// take_metadata_value), numbers (unsigned_value, number_value) and the messages of what may not
// stand where it does (bad_field, bad_metadata, unexpected).
class header_handler : public unlimited_sax_handler {
 public:
  header_handler(const std::filesystem::path& origin, std::string_view json) : origin_(origin), json_(json) {}

  parsed_header result;

  bool on_object_begin(error_code&) {
    switch (where_) {
      case place::root: where_ = place::top; return true;
      case place::top_value: return begin_top_value();
      case place::entry_value:
        if (field_ == field::unknown) return skip_begin();
        return bad_field("an object");
      case place::skipping: ++skip_depth_; return true;
      case place::metadata_value: return bad_metadata("an object");
      default: return unexpected("an object");
    }
  }

  bool on_object_end(std::size_t, error_code&) {
    switch (where_) {
      case place::top: where_ = place::done; return true;
      case place::metadata: where_ = place::top; return true;
      case place::entry: return end_entry();
      case place::skipping: return skip_end();
      default: return unexpected("the end of an object");
    }
  }

  bool on_array_begin(error_code&) {
    switch (where_) {
      case place::root: fail(origin_, "the header is a JSON array, not an object");
      case place::entry_value:
        if (field_ == field::shape || field_ == field::data_offsets) {
          numbers_.clear();
          where_ = place::entry_array;
          return true;
        }
        if (field_ == field::unknown) return skip_begin();
        return bad_field("an array");
      case place::skipping: ++skip_depth_; return true;
      case place::entry_array: return bad_field("a nested array");
      case place::metadata_value: return bad_metadata("an array");
      default: return unexpected("an array");
    }
  }

  bool on_array_end(std::size_t, error_code&) {
    if (where_ == place::skipping) return skip_end();
    if (where_ != place::entry_array) return unexpected("the end of an array");
    if (field_ == field::shape) take_shape();
    else take_data_offsets();
    where_ = place::entry;
    return true;
  }

  // A whole key or string, gathered into partial_: `take` uses it where the parse stands and
  // returns false if nothing may stand there (inside a skipped value, everything may).
  template <class Take>
  bool complete_text(string_view s, const char* what, Take take) {
    gather(s);
    if (where_ != place::skipping && !take()) unexpected(what);
    partial_.clear();
    return true;
  }

  // Keys and strings may arrive in parts (around escapes): both gather into partial_.
  bool on_key_part(string_view s, std::size_t, error_code&) { return gather(s); }

  bool on_key(string_view s, std::size_t, error_code&) {
    return complete_text(s, "a key", [this] {
      switch (where_) {
        case place::top: return take_top_key();
        case place::entry: return take_field_key();
        case place::metadata: return take_metadata_key();
        default: return false;
      }
    });
  }

  bool on_string_part(string_view s, std::size_t, error_code&) { return gather(s); }

  bool on_string(string_view s, std::size_t total, error_code&) {
    return complete_text(s, "a string", [this, s, total] {
      switch (where_) {
        case place::metadata_value: return take_metadata_value(s, total);
        case place::entry_value: return take_field_string();
        default: return false;
      }
    });
  }

  bool on_number_part(string_view, error_code&) { return true; }
  bool on_int64(std::int64_t i, string_view, error_code&) {
    if (i < 0) return number_value("a negative number");
    return unsigned_value(static_cast<std::uint64_t>(i));
  }
  bool on_uint64(std::uint64_t u, string_view, error_code&) { return unsigned_value(u); }
  bool on_double(double, string_view text, error_code&) {
    // Boost.JSON reports integers beyond 64 bits as doubles: tell them from fractions.
    if (text.find_first_of(".eE") == string_view::npos)
      return number_value(text.starts_with('-') ? "a negative number" : "a number too large");
    return number_value("a non-integer number");
  }
  bool on_bool(bool, error_code&) { return scalar_value("a boolean"); }
  bool on_null(error_code&) { return scalar_value("null"); }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }

 private:
  enum class place {
    root, top, top_value, entry, entry_value, entry_array, metadata, metadata_value, skipping, done
  };
  enum class field { dtype, shape, data_offsets, unknown };

  // The value of a top-level key: the metadata object, or an entry's object (the entry is named
  // from here on, in every error about it).
  bool begin_top_value() {
    if (is_metadata_) {
      where_ = place::metadata;
    } else {
      result.entries.emplace_back().name = std::move(key_);
      where_ = place::entry;
    }
    return true;
  }

  // A top-level key: an entry's name, or `__metadata__`, which may appear once.
  bool take_top_key() {
    is_metadata_ = partial_ == metadata_key;
    if (is_metadata_) {
      if (result.has_metadata) fail(origin_, "'__metadata__' appears twice");
      result.has_metadata = true;
    }
    key_ = std::move(partial_);
    where_ = place::top_value;
    return true;
  }

  // A key of an entry's object: `dtype`, `shape` and `data_offsets` may each appear once; other
  // fields are skipped, as the reference reader ignores them.
  bool take_field_key() {
    header_entry& e = result.entries.back();
    bool* seen = nullptr;
    if (partial_ == "dtype") field_ = field::dtype, seen = &e.has_dtype;
    else if (partial_ == "shape") field_ = field::shape, seen = &e.has_shape;
    else if (partial_ == "data_offsets") field_ = field::data_offsets, seen = &e.has_offsets;
    else field_ = field::unknown;
    if (seen) {
      if (*seen) fail(origin_, "entry " + quote(e.name) + " has '" + partial_ + "' twice");
      *seen = true;
    }
    where_ = place::entry_value;
    return true;
  }

  // The end of an entry's object: it has all of `dtype`, `shape` and `data_offsets`.
  bool end_entry() {
    const header_entry& e = result.entries.back();
    const char* missing = !e.has_dtype ? "dtype" : !e.has_shape ? "shape" : !e.has_offsets ? "data_offsets" : nullptr;
    if (missing) fail(origin_, "entry " + quote(e.name) + " has no '" + missing + "'");
    where_ = place::top;
    return true;
  }

  // A string as an entry's field: its `dtype` (a spelling the format does not define leaves the
  // entry without a type, to be skipped), or the value of a field skipped.
  bool take_field_string() {
    if (field_ == field::dtype) {
      header_entry& e = result.entries.back();
      e.type = dtype_from_string(partial_);
      e.dtype_spelling = std::move(partial_);
      where_ = place::entry;
    } else if (field_ == field::unknown) {
      where_ = place::entry;
    } else {
      bad_field("a string");
    }
    return true;
  }

  // `shape`: an array of non-negative integers (each checked as it came, in unsigned_value).
  void take_shape() { result.entries.back().shape.assign(numbers_.begin(), numbers_.end()); }

  // `data_offsets`: an array of exactly two non-negative integers, begin and end.
  void take_data_offsets() {
    header_entry& e = result.entries.back();
    if (numbers_.size() != 2)
      fail(origin_, "entry " + quote(e.name) + " has 'data_offsets' of " + std::to_string(numbers_.size()) +
                        " numbers instead of 2");
    e.begin = static_cast<std::uint64_t>(numbers_[0]);
    e.end = static_cast<std::uint64_t>(numbers_[1]);
  }

  // A key of `__metadata__`: each may appear once.
  bool take_metadata_key() {
    key_ = std::move(partial_);
    if (result.metadata.contains(key_)) fail(origin_, "'__metadata__' has the key " + quote(key_) + " twice");
    where_ = place::metadata_value;
    return true;
  }

  // A value of `__metadata__`, a string; where the digest's stands plain in the JSON is kept.
  bool take_metadata_value(string_view s, std::size_t total) {
    if (key_ == digest_key) result.digest_at = plain_at(s, total);
    result.metadata.emplace(std::move(key_), std::move(partial_));
    where_ = place::metadata;
    return true;
  }

  bool gather(string_view s) {
    partial_.append(s.data(), s.size());
    return true;
  }

  // Where the whole string `s` (`total` bytes long) stands in the JSON, if the parser passed it
  // in one piece from the JSON's own bytes, right between its quotes: then it has no escape and
  // its bytes in the file are its value. Strings with escapes come in parts or from a buffer of
  // the parser's.
  std::optional<std::size_t> plain_at(string_view s, std::size_t total) const {
    const auto first = reinterpret_cast<std::uintptr_t>(json_.data());
    const auto at = reinterpret_cast<std::uintptr_t>(s.data());
    if (total != s.size() || at <= first || at + s.size() >= first + json_.size()) return std::nullopt;
    const std::size_t offset = at - first;
    if (json_[offset - 1] != '"' || json_[offset + s.size()] != '"') return std::nullopt;
    return offset;
  }

  bool unsigned_value(std::uint64_t u) {
    if (where_ == place::entry_array) {
      // Extents and offsets are kept as int64: a file cannot be larger than that.
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return number_value("a number too large");
      numbers_.push_back(static_cast<std::int64_t>(u));
      return true;
    }
    return scalar_value("a number");
  }

  bool number_value(const char* what) {
    if (where_ == place::entry_array)
      fail(origin_, "entry " + quote(result.entries.back().name) + " has " + what + " in '" +
                        field_name() + "'");
    return scalar_value(what);
  }

  bool scalar_value(const char* what) {
    switch (where_) {
      case place::skipping: return true;
      case place::entry_value:
        if (field_ == field::unknown) {
          where_ = place::entry;
          return true;
        }
        return bad_field(what);
      case place::metadata_value: return bad_metadata(what);
      default: return unexpected(what);
    }
  }

  bool skip_begin() {
    where_ = place::skipping;
    skip_depth_ = 1;
    return true;
  }
  bool skip_end() {
    if (--skip_depth_ == 0) where_ = place::entry;
    return true;
  }

  std::string field_name() const {
    switch (field_) {
      case field::dtype: return "dtype";
      case field::shape: return "shape";
      case field::data_offsets: return "data_offsets";
      case field::unknown: break;
    }
    return "?";
  }

  bool bad_field(const char* what) {
    static constexpr const char* expected[] = {"a string", "an array of non-negative integers",
                                               "an array of two non-negative integers"};
    fail(origin_, "entry " + quote(result.entries.back().name) + " has " + what + " as '" +
                      field_name() + "' instead of " + expected[static_cast<int>(field_)]);
  }
  bool bad_metadata(const char* what) {
    fail(origin_, "'__metadata__' maps " + quote(key_) + " to " + what +
                      " instead of a string");
  }
  bool unexpected(const char* what) {
    if (where_ == place::entry_array)
      fail(origin_, "entry " + quote(result.entries.back().name) + " has " + what + " in '" +
                        field_name() + "'");
    if (where_ == place::root) fail(origin_, std::string("the header is ") + what + ", not a JSON object");
    if (where_ == place::top_value)
      fail(origin_, (is_metadata_ ? std::string("'__metadata__'") : "entry " + quote(key_)) +
                        " is " + what + " instead of an object");
    fail(origin_, std::string("unexpected ") + what + " in the header");
  }

  const std::filesystem::path& origin_;
  std::string_view json_;
  place where_ = place::root;
  field field_ = field::unknown;
  bool is_metadata_ = false;
  std::size_t skip_depth_ = 0;
  std::string key_, partial_;
  std::vector<std::int64_t> numbers_;
};

parsed_header parse_header(std::string_view json, const std::filesystem::path& origin) {
  boost::json::parse_options options;
  options.max_depth = 64;
  // Invalid UTF-8 anywhere (overlong forms, surrogates, stray or missing continuation bytes) and
  // lone escaped surrogates are refused by the parser itself: allow_invalid_utf8 stays false.
  boost::json::basic_parser<header_handler> parser(options, origin, json);
  // Room for entries in as many bytes as the header has, so that a header of many entries does
  // not move them again and again as the list grows (at most one move).
  parser.handler().result.entries.reserve(json.size() / sizeof(header_entry));
  error_code ec;
  const std::size_t used = parser.write_some(false, json.data(), json.size(), ec);
  if (ec) fail(origin, "the header is not valid JSON (" + ec.message() + ")");
  // The format pads the header with spaces; anything else after the object is garbage.
  if (json.find_first_not_of(" \t\r\n", used) != std::string_view::npos)
    fail(origin, "the header has bytes other than spaces after its JSON object");
  return std::move(parser.handler().result);
}

std::uint64_t read_le64(const std::byte* p) {
  std::uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Whether `value` is 16 hex digits, of either case (`lowercase` false) or lowercase only.
bool is_hex16(std::string_view value, bool lowercase) {
  return value.size() == 16 && std::ranges::all_of(value, [lowercase](char c) { return is_hex_digit(c, lowercase); });
}

// ckpt's rules for its digest entry (digest_key, src/base/digest.hpp), on a parsed header.
void check_digest_entry(const parsed_header& header, const std::filesystem::path& origin) {
  for (const auto& [key, value] : header.metadata)
    if (is_damaged_digest_entry(key, value))
      fail(origin, "the __metadata__ key " + quote_bytes(key) + " differs from '" + std::string(digest_key) +
                       "' in one byte and maps to 16 hex digits: a damaged digest entry");
  const auto it = header.metadata.find(digest_key);
  if (it == header.metadata.end()) return;
  if (!is_hex16(it->second, true))
    fail(origin, "the __metadata__ entry '" + std::string(digest_key) + "' is \"" + it->second +
                     "\", not 16 lowercase hex digits");
  if (!header.digest_at)
    fail(origin, "the __metadata__ entry '" + std::string(digest_key) +
                     "' spells its digits with JSON escapes, where ckpt writes them plain");
}

// The 8-byte little-endian length that starts a file of `file_size` bytes, and the JSON header of
// that length that follows it: the file holds the 8 bytes, and the header within max_header_size
// and the file. `head`, the file's first bytes, holds the header whenever those rules hold (read in
// parts, a file may have changed between the reads).
std::string_view header_json(std::span<const std::byte> head, std::uint64_t file_size,
                             const std::filesystem::path& origin) {
  if (file_size < 8)
    fail(origin, "the file has " + std::to_string(file_size) + " bytes, fewer than the 8 of the header length");
  const std::uint64_t header_size = read_le64(head.data());
  if (header_size > max_header_size)
    fail(origin, "the header length " + std::to_string(header_size) + " exceeds the limit of " +
                     std::to_string(max_header_size) + " bytes");
  if (header_size > file_size - 8)
    fail(origin, "the header length " + std::to_string(header_size) + " runs past the end of the " +
                     std::to_string(file_size) + "-byte file");
  if (head.size() < 8 + header_size)  // a file read in parts that changed between the reads
    fail(origin, "the header runs past the " + std::to_string(head.size()) + " bytes read: the file changed while it was being read");
  return {reinterpret_cast<const char*>(head.data() + 8), static_cast<std::size_t>(header_size)};
}

// The entries in name order, whose names must be distinct, even where two entries would describe
// the same bytes.
std::vector<const header_entry*> distinct_names(const std::vector<header_entry>& entries,
                                                const std::filesystem::path& origin) {
  std::vector<const header_entry*> by_name;
  by_name.reserve(entries.size());
  for (const header_entry& e : entries) by_name.push_back(&e);
  const auto name_order = [](const header_entry* a, const header_entry* b) { return a->name < b->name; };
  // Writers lay out headers in name order (ckpt's, the reference one's JSON): skip the sort then.
  if (!std::is_sorted(by_name.begin(), by_name.end(), name_order))
    std::sort(by_name.begin(), by_name.end(), name_order);
  for (std::size_t i = 1; i < by_name.size(); ++i)
    if (by_name[i]->name == by_name[i - 1]->name)
      fail(origin, "the entry name " + quote(by_name[i]->name) + " appears twice");
  return by_name;
}

// An entry's own rules: a name, data_offsets in order and within the data buffer (of
// `data_size` bytes), and, for a dtype the format defines, as many bytes as its shape needs.
void check_entry(const header_entry& e, std::size_t data_size, const std::filesystem::path& origin) {
  if (e.name.empty()) fail(origin, "an entry has an empty name");
  if (e.end < e.begin)
    fail(origin, "entry " + quote(e.name) + " has data_offsets [" + std::to_string(e.begin) +
                     ", " + std::to_string(e.end) + "] that end before they begin");
  if (e.end > data_size)
    fail(origin, "entry " + quote(e.name) + " has data_offsets [" + std::to_string(e.begin) +
                     ", " + std::to_string(e.end) + "] past the end of the " +
                     std::to_string(data_size) + "-byte data buffer");
  if (!e.type) return;
  std::size_t expected = 0;
  try {
    expected = nbytes_of(*e.type, numel_of(e.shape));
  } catch (const std::invalid_argument&) {
    fail(origin, "entry " + quote(e.name) + " has shape " + to_string(e.shape) +
                     " whose byte count as " + e.dtype_spelling +
                     " overflows or is not a whole number of bytes");
  }
  if (expected != e.end - e.begin)
    fail(origin, "entry " + quote(e.name) + " of dtype " + e.dtype_spelling + " and shape " +
                     to_string(e.shape) + " needs " + std::to_string(expected) +
                     " bytes but its data_offsets span " + std::to_string(e.end - e.begin));
}

// The entries (`by_offset`, any order) must tile the data buffer of `data_size` bytes exactly:
// no overlap, no hole, nothing after.
void check_tiling(std::vector<const header_entry*> by_offset, std::size_t data_size,
                  const std::filesystem::path& origin) {
  const auto offset_order = [](const header_entry* a, const header_entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  };
  if (!std::is_sorted(by_offset.begin(), by_offset.end(), offset_order))
    std::sort(by_offset.begin(), by_offset.end(), offset_order);
  std::uint64_t covered = 0;
  const header_entry* previous = nullptr;
  for (const header_entry* e : by_offset) {
    if (e->begin > covered)
      fail(origin, "bytes " + std::to_string(covered) + " to " + std::to_string(e->begin) +
                       " of the data buffer belong to no entry (a hole before " + quote(e->name) + ")");
    if (e->begin < covered)
      fail(origin, "entry " + quote(e->name) + " overlaps entry " + quote(previous->name));
    covered = e->end;
    previous = e;
  }
  if (covered != data_size)
    fail(origin, "the data buffer has " + std::to_string(data_size - covered) +
                     " trailing bytes after the last entry");
}

// The checked entries of a known dtype, in the header's order; an entry of a dtype the format
// does not define is passed to `skipped`, or without it reported on std::cerr, and left out.
std::vector<file_layout::entry> known_entries(std::vector<header_entry>& entries, const std::filesystem::path& origin,
                                              const std::function<void(std::string_view, std::string_view)>& skipped) {
  std::vector<file_layout::entry> out;
  out.reserve(entries.size());
  for (header_entry& e : entries) {
    if (!e.type) {
      if (skipped)
        skipped(e.name, e.dtype_spelling);
      else
        std::cerr << "ckpt: warning: '" << origin.string() << "': skipping entry '" << e.name
                  << "' of unknown dtype '" << e.dtype_spelling << "'\n";
      continue;
    }
    out.push_back({.name = std::move(e.name), .type = *e.type, .shape = std::move(e.shape), .begin = e.begin, .end = e.end});
  }
  return out;
}

}  // namespace

file_layout parse_layout(std::span<const std::byte> head, std::uint64_t file_size, const std::filesystem::path& origin,
                         const std::function<void(std::string_view, std::string_view)>& skipped) {
  const std::string_view json = header_json(head, file_size, origin);
  parsed_header header = parse_header(json, origin);
  check_digest_entry(header, origin);
  const std::uint64_t data_size = file_size - 8 - json.size();
  std::vector<const header_entry*> by_name = distinct_names(header.entries, origin);
  for (const header_entry& e : header.entries) check_entry(e, data_size, origin);
  check_tiling(std::move(by_name), data_size, origin);
  return {.entries = known_entries(header.entries, origin, skipped),
          .metadata = std::move(header.metadata),
          .data_start = 8 + json.size(),
          .digest_at = header.digest_at ? std::optional(8 + *header.digest_at) : std::nullopt};
}

parsed_file parse_file(std::span<const std::byte> file, const std::filesystem::path& origin,
                       const std::shared_ptr<const void>& owner, const mapped_file* mapping,
                       const std::function<void(std::string_view, std::string_view)>& skipped) {
  file_layout layout = parse_layout(file, file.size(), origin, skipped);
  const std::span<const std::byte> data = file.subspan(layout.data_start);
  std::vector<checkpoint::entry> entries;
  entries.reserve(layout.entries.size());
  for (file_layout::entry& e : layout.entries)
    entries.emplace_back(std::move(e.name), tensor_access::view_of(e.type, std::move(e.shape),
                                                                   data.subspan(e.begin, e.end - e.begin), owner, mapping));
  return {.contents = checkpoint(std::move(entries), std::move(layout.metadata)),
          .data_start = layout.data_start,
          .digest_at = layout.digest_at};
}

namespace {

constexpr std::string_view headers_are_json = "safetensors headers are JSON";

}  // namespace

bool is_damaged_digest_entry(std::string_view key, std::string_view value) {
  // A changed byte can also turn two bytes of the key's spelling into one escape (`_f` into
  // `\f`): compare the spellings, which for ckpt's own files are the bytes in the file.
  if (key.size() > digest_key.size() || key == digest_key || !is_hex16(value, false)) return false;
  const std::string spelled = boost::json::serialize(boost::json::string_view(key.data(), key.size()));
  if (spelled.size() != digest_key.size() + 2) return false;
  std::size_t differing = 0;
  for (std::size_t i = 0; i < digest_key.size(); ++i) differing += spelled[i + 1] != digest_key[i];
  return differing == 1;
}

file_header make_header(entry_list entries, const metadata_map& metadata, std::string_view digest) {
  file_header out;
  std::string& json = out.bytes;
  json.assign(8, '\0');
  json += '{';
  const auto append_string = [&json](std::string_view s) {
    // Most names need no escape: appended as they are, what Boost.JSON would write for them.
    if (std::ranges::none_of(s, [](char c) { return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20; })) {
      json += '"';
      json += s;
      json += '"';
      return;
    }
    json += boost::json::serialize(boost::json::string_view(s.data(), s.size()));
  };
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      require_utf8_to_save("the '__metadata__' key", key, headers_are_json);
      require_utf8_to_save("the '__metadata__' value of " + quote_bytes(key), value, headers_are_json);
      if (is_damaged_digest_entry(key, value))
        throw std::invalid_argument("ckpt: cannot save the '__metadata__' key " + quote_bytes(key) +
                                    " with 16 hex digits: it differs from '" + std::string(digest_key) +
                                    "' in one byte, and ckpt reads such an entry as a damaged digest");
      if (!first) json += ',';
      first = false;
      append_string(key);
      json += ':';
      if (!digest.empty() && key == digest) out.digest_at = json.size() + 1;
      append_string(value);
    }
    json += '}';
  }
  std::uint64_t offset = 0;
  for (const entry_source* e : entries) {
    const entry_source& x = *e;
    require_utf8_to_save("the entry name", x.name, headers_are_json);
    if (json.size() > 9) json += ',';
    append_string(x.name);
    json += ":{\"dtype\":\"";
    json += to_string(x.dtype);
    json += "\",\"shape\":[";
    for (std::size_t i = 0; i < x.shape.size(); ++i) {
      if (i != 0) json += ',';
      json += std::to_string(x.shape[i]);
    }
    json += "],\"data_offsets\":[";
    json += std::to_string(offset);
    json += ',';
    offset += x.nbytes;
    json += std::to_string(offset);
    json += "]}";
  }
  json += '}';
  // Pad with spaces so that the data starts at a multiple of 8 bytes into the file.
  json.append((8 - json.size() % 8) % 8, ' ');
  const std::uint64_t size = json.size() - 8;
  if (size > max_header_size)
    throw std::invalid_argument("ckpt: the header of " + std::to_string(entries.size()) +
                                " entries would take " + std::to_string(size) +
                                " bytes, over the format's limit of " +
                                std::to_string(max_header_size));
  std::memcpy(json.data(), &size, 8);
  return out;
}

metadata_map header_metadata(std::span<const std::byte> head, const std::filesystem::path& origin) {
  const parsed_header header = parse_header(header_json(head, head.size(), origin), origin);
  check_digest_entry(header, origin);
  return header.metadata;
}

}  // namespace ckpt::detail
