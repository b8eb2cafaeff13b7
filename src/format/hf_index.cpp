#include "hf_index.hpp"

#include "base/entry_name.hpp"
#include "base/json_sax.hpp"
#include "io/posix_file.hpp"
#include "safetensors.hpp"

#include <boost/json/basic_parser_impl.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ckpt::detail {

bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

namespace {

using boost::json::error_code;
using boost::json::string_view;
using shard_lists = std::map<std::string, std::vector<std::string>, std::less<>>;

// The index is read and parsed this many bytes at a time.
constexpr std::size_t read_size = std::size_t{1} << 20;

std::string json_string(std::string_view s) { return boost::json::serialize(string_view(s.data(), s.size())); }

// A SAX handler for boost::json::basic_parser that reads an index straight into its weight_map,
// by shard: neither the text nor a DOM is held, and duplicate names (which a DOM would silently
// merge, the last one winning) are seen and refused. Only `metadata` and `weight_map` of the
// top-level object are read; other members, and of `metadata` all but a string save_id_key, are
// skipped.
//
// The rules are reported in the order a whole-document check would find them, not as the parse
// meets them: the first broken rule of each kind is kept and the parse goes on (the parser
// still checks that the text is JSON, which comes first); `result` throws the first in the order
// not an object, a repeated `metadata` or `weight_map`, `metadata` not an object, no
// `weight_map`, `weight_map` not an object, the first bad entry of the weight_map, a name given
// twice. From the first bad entry on, the rest of the weight_map is skipped.
class index_handler : public unlimited_sax_handler {
 public:
  explicit index_handler(const std::filesystem::path& shown) : shown_(shown) {}

  bool on_object_begin(error_code&) { return begin_compound('{'); }
  bool on_object_end(std::size_t, error_code&) { return end_compound('}'); }
  bool on_array_begin(error_code&) { return begin_compound('['); }
  bool on_array_end(std::size_t, error_code&) { return end_compound(']'); }

  // Keys and strings may arrive in parts (around escapes, or across two pieces of the text):
  // both gather into partial_ where they are needed.
  bool on_key_part(string_view s, std::size_t, error_code&) { return gather(s); }
  bool on_key(string_view s, std::size_t, error_code&) {
    gather(s);
    take_key();
    partial_.clear();
    return true;
  }
  bool on_string_part(string_view s, std::size_t, error_code&) { return gather(s); }
  bool on_string(string_view s, std::size_t, error_code&) {
    gather(s);
    take_string();
    partial_.clear();
    return true;
  }

  bool on_number_part(string_view, error_code&) { return true; }
  bool on_int64(std::int64_t i, string_view, error_code&) { return take_scalar(boost::json::value(i)); }
  bool on_uint64(std::uint64_t u, string_view, error_code&) { return take_scalar(boost::json::value(u)); }
  bool on_double(double d, string_view, error_code&) { return take_scalar(boost::json::value(d)); }
  bool on_bool(bool b, error_code&) { return take_scalar(boost::json::value(b)); }
  bool on_null(error_code&) { return take_scalar(boost::json::value(nullptr)); }
  bool on_comment_part(string_view, error_code&) { return true; }
  bool on_comment(string_view, error_code&) { return true; }

  // The save id of the index's metadata (save_id_key), or "".
  [[nodiscard]] const std::string& save_id() const noexcept { return save_id_; }

  // The weight_map read, once the parser has accepted the whole text as JSON.
  // Throws index_error for the first rule the index breaks (in the order above).
  shard_lists result() {
    if (not_object_) fail("it is not a JSON object");
    if (repeated_) fail(*repeated_);
    if (metadata_not_object_) fail("its 'metadata' is not an object");
    if (map_ == map_state::absent) fail("it has no 'weight_map'");
    if (map_ == map_state::not_object) fail("its 'weight_map' is not an object");
    if (entry_error_) fail(*entry_error_);
    check_names_unique();
    return std::move(by_shard_);
  }

 private:
  // Where the parse stands: before the document's value; in the top-level object (before a key,
  // before a key's value); in the metadata (before a key, before its value); in the weight_map
  // (before a name, before its shard); inside the weight_map's value of an entry that is not a
  // string (shown_value_ spells it); inside a value skipped (back to `back_` when it ends); after
  // the document's value.
  enum class place { root, top, top_value, metadata, metadata_value, map, map_value, showing, skipping, done };
  // The top-level member whose value comes next.
  enum class member { metadata, weight_map, other };
  enum class map_state { absent, not_object, object };

  // Where an entry stands in by_shard_: its shard's number in shards_, and its place in the list.
  struct entry_at {
    std::uint32_t shard;
    std::uint32_t position;
  };

  [[noreturn]] void fail(const std::string& rule) const { throw index_error(shown_, rule); }

  bool gather(string_view s) {
    if (where_ == place::top || where_ == place::metadata || where_ == place::metadata_value || where_ == place::map ||
        where_ == place::map_value || where_ == place::showing)
      partial_.append(s.data(), s.size());
    return true;
  }

  // A compound value (`open` is '{' or '[') begins.
  bool begin_compound(char open) {
    switch (where_) {
      case place::root:
        if (open == '{') {
          where_ = place::top;
          return true;
        }
        not_object_ = true;
        return skip(place::done);
      case place::top_value: return begin_top_compound(open == '{');
      case place::metadata_value: return skip(place::metadata);
      case place::map_value:
        shown_value_.assign(1, open);
        where_ = place::showing;
        depth_ = 1;
        return true;
      case place::showing:
        show(std::string_view(&open, 1));
        ++depth_;
        return true;
      case place::skipping: ++depth_; return true;
      default: return true;  // the parser calls no value where a key stands
    }
  }

  // A compound value (`close` is '}' or ']') ends.
  bool end_compound(char close) {
    switch (where_) {
      case place::top: where_ = place::done; return true;
      case place::metadata:
      case place::map: where_ = place::top; return true;
      case place::showing:
        shown_value_ += close;
        if (--depth_ == 0) entry_fails("is " + shown_value_ + ", not a shard file name");
        return true;
      case place::skipping:
        if (--depth_ == 0) where_ = back_;
        return true;
      default: return true;
    }
  }

  // The value of `metadata` (an object, read for its save id), of `weight_map` (an object, read
  // entry by entry) or of another member (skipped).
  bool begin_top_compound(bool is_object) {
    switch (member_) {
      case member::metadata:
        if (is_object) {
          where_ = place::metadata;
          return true;
        }
        metadata_not_object_ = true;
        break;
      case member::weight_map:
        if (is_object) {
          map_ = map_state::object;
          where_ = place::map;
          return true;
        }
        map_ = map_state::not_object;
        break;
      case member::other: break;
    }
    return skip(place::top);
  }

  // A string or a scalar as the value of a top-level member.
  void take_top_scalar() {
    if (member_ == member::metadata) metadata_not_object_ = true;
    if (member_ == member::weight_map) map_ = map_state::not_object;
    where_ = place::top;
  }

  bool take_key() {
    switch (where_) {
      case place::top: return take_top_key();
      case place::metadata:
        is_save_id_ = partial_ == save_id_key;
        where_ = place::metadata_value;
        return true;
      case place::map: return take_name();
      case place::showing:
        show(json_string(partial_));
        shown_value_ += ':';
        return true;
      default: return true;
    }
  }

  // A top-level key: `metadata` and `weight_map` may each appear once (a second one is skipped).
  bool take_top_key() {
    member_ = partial_ == "metadata" ? member::metadata : partial_ == "weight_map" ? member::weight_map : member::other;
    if (member_ != member::other) {
      bool& seen = member_ == member::metadata ? seen_metadata_ : seen_weight_map_;
      if (seen) {
        if (!repeated_) repeated_ = "its '" + partial_ + "' appears twice";
        member_ = member::other;
      }
      seen = true;
    }
    where_ = place::top_value;
    return true;
  }

  // A name of the weight_map: a valid entry name.
  bool take_name() {
    name_.assign(partial_);
    if (!is_entry_name(name_)) return entry_fails("is not a valid entry name");
    where_ = place::map_value;
    return true;
  }

  bool take_string() {
    switch (where_) {
      case place::root: not_object_ = true; where_ = place::done; return true;
      case place::top_value: take_top_scalar(); return true;
      case place::metadata_value:
        if (is_save_id_) save_id_ = partial_;
        where_ = place::metadata;
        return true;
      case place::map_value: return take_shard();
      case place::showing: show(json_string(partial_)); return true;
      default: return true;
    }
  }

  bool take_scalar(const boost::json::value& value) {
    switch (where_) {
      case place::root: not_object_ = true; where_ = place::done; return true;
      case place::top_value: take_top_scalar(); return true;
      case place::metadata_value: where_ = place::metadata; return true;
      case place::map_value: return entry_fails("is " + boost::json::serialize(value) + ", not a shard file name");
      case place::showing: show(boost::json::serialize(value)); return true;
      default: return true;
    }
  }

  // The shard of the entry name_: a plain file name, in the index's folder. The name joins the
  // shard's list (a copy of exactly its size: name_ and partial_ keep their buffers for the next).
  bool take_shard() {
    if (!is_plain_file_name(partial_))
      return entry_fails("names the shard " + json_string(partial_) +
                         ", which is not a file name in the index's folder");
    auto number = shard_numbers_.find(partial_);
    if (number == shard_numbers_.end()) {
      shards_.push_back(by_shard_.emplace(partial_, std::vector<std::string>()).first);
      number = shard_numbers_.emplace(shards_.back()->first, static_cast<std::uint32_t>(shards_.size() - 1)).first;
    }
    std::vector<std::string>& names = shards_[number->second]->second;
    order_.push_back({number->second, static_cast<std::uint32_t>(names.size())});
    names.push_back(name_);
    where_ = place::map;
    return true;
  }

  // The first bad entry, name_: `rule` completes "the weight_map entry '<name>' ...". The rest of
  // the weight_map is skipped.
  bool entry_fails(const std::string& rule) {
    entry_error_ = "the weight_map entry '" + name_ + "' " + rule;
    return skip(place::top);
  }

  // Skips the rest of the value the parse is in (depth 1), then stands at `back`.
  bool skip(place back) {
    where_ = place::skipping;
    depth_ = 1;
    back_ = back;
    return true;
  }

  // Appends `text` to the value shown, after a comma unless it opens it, follows '[' or '{', or
  // is a key's value: what boost::json::serialize writes.
  void show(std::string_view text) {
    const char last = shown_value_.back();
    if (last != '[' && last != '{' && last != ':') shown_value_ += ',';
    shown_value_ += text;
  }

  // Each name appears once in the weight_map: the entries' places, sorted by name (equal names
  // keep the weight_map's order), hold no two equal names side by side.
  void check_names_unique() {
    const auto name_of = [this](entry_at e) -> const std::string& { return shards_[e.shard]->second[e.position]; };
    std::stable_sort(order_.begin(), order_.end(), [&](entry_at a, entry_at b) { return name_of(a) < name_of(b); });
    const auto same_name = [&](entry_at a, entry_at b) { return name_of(a) == name_of(b); };
    const auto first = std::adjacent_find(order_.begin(), order_.end(), same_name);
    if (first == order_.end()) return;
    const auto end = std::find_if_not(first, order_.end(), [&](entry_at e) { return same_name(e, *first); });
    const std::string& one = shards_[first[0].shard]->first;
    const std::string& other = shards_[first[1].shard]->first;
    const auto times = end - first;
    const std::string where = one != other ? "in '" + one + "' and '" + other + "'"
                                           : (times == 2 ? "both times in '" : "both in '") + one + "'";
    fail("the weight_map entry '" + name_of(*first) + "' appears " +
         (times == 2 ? std::string("twice, ") : std::to_string(times) + " times, the first two ") + where);
  }

  const std::filesystem::path& shown_;
  place where_ = place::root;
  place back_ = place::done;
  member member_ = member::other;
  std::size_t depth_ = 0;
  std::string partial_, name_, shown_value_;
  bool not_object_ = false, metadata_not_object_ = false, seen_metadata_ = false, seen_weight_map_ = false;
  bool is_save_id_ = false;  // the metadata's key being read is save_id_key
  std::string save_id_;
  map_state map_ = map_state::absent;
  std::optional<std::string> repeated_, entry_error_;
  shard_lists by_shard_;
  // The shards of by_shard_ by number, in the order met, and their numbers by name.
  std::vector<shard_lists::iterator> shards_;
  std::map<std::string_view, std::uint32_t, std::less<>> shard_numbers_;
  // Every entry's place in by_shard_, in the weight_map's order.
  std::vector<entry_at> order_;
};

// An index lists names only; one larger than the format's header cap is no index.
void check_index_size(std::uint64_t size, const std::filesystem::path& shown) {
  if (size > max_header_size)
    throw index_error(shown, "it is " + std::to_string(size) + " bytes, more than the " +
                                 std::to_string(max_header_size) + " an index may have");
}

[[noreturn]] void not_json(const error_code& ec, const std::filesystem::path& shown) {
  throw index_error(shown, "it is not JSON: " + ec.message());
}

// The weight_map of a parse, and its save id into `save_id` if wanted.
shard_lists result_of(index_handler& handler, std::string* save_id) {
  shard_lists by_shard = handler.result();
  if (save_id != nullptr) *save_id = handler.save_id();
  return by_shard;
}

}  // namespace

shard_lists read_weight_map(int fd, const std::filesystem::path& shown, std::string* save_id) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) throw io_error(shown, "stat", last_error());
  if (!S_ISREG(info.st_mode)) throw index_error(shown, "it is not a regular file");
  const auto size = static_cast<std::uint64_t>(info.st_size);
  check_index_size(size, shown);

  // The parser's defaults are JSON's rules (no comments, no trailing commas, valid UTF-8) and a
  // nesting depth of 32, which it keeps without recursing deeper.
  boost::json::basic_parser<index_handler> parser(boost::json::parse_options{}, shown);
  std::vector<std::byte> piece(static_cast<std::size_t>(std::min<std::uint64_t>(size, read_size)));
  error_code ec;
  // The file as fstat gave its size (a file that grows meanwhile is read that far).
  for (std::uint64_t offset = 0; offset < size && !ec;) {
    const auto wanted = static_cast<std::size_t>(std::min<std::uint64_t>(size - offset, piece.size()));
    const std::size_t got = read_fully(fd, piece.data(), wanted, static_cast<off_t>(offset), shown);
    const std::size_t used = parser.write_some(true, reinterpret_cast<const char*>(piece.data()), got, ec);
    // After the document's value, nothing but spaces.
    if (!ec && used < got) ec = boost::json::error::extra_data;
    offset += got;
    if (got < wanted) break;
  }
  if (!ec) parser.write_some(false, nullptr, 0, ec);
  if (ec) not_json(ec, shown);
  return result_of(parser.handler(), save_id);
}

shard_lists parse_weight_map(std::string_view text, const std::filesystem::path& shown, std::string* save_id) {
  check_index_size(text.size(), shown);
  boost::json::basic_parser<index_handler> parser(boost::json::parse_options{}, shown);
  error_code ec;
  const std::size_t used = parser.write_some(false, text.data(), text.size(), ec);
  // After the document's value, nothing but spaces.
  if (!ec && used < text.size()) ec = boost::json::error::extra_data;
  if (ec) not_json(ec, shown);
  return result_of(parser.handler(), save_id);
}

shard_lists read_weight_map(const std::filesystem::path& index, std::string* save_id) {
  struct stat info {};
  const file_descriptor fd = open_to_read(index, info);
  return read_weight_map(fd.get(), index, save_id);
}

}  // namespace ckpt::detail
