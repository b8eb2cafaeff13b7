// The torch.save reader: a zip of records (through minizip, which tells where a stored record's
// bytes start, so storages are viewed in the mapping rather than copied), a restricted
// unpickler for the pickle in `<name>/data.pkl`, and the walk that names the tensors.
#include <ckpt/torch.hpp>
#include <ckpt/detail/pages.hpp>

#include <ckpt/detail/transpose.hpp>

#include "hex.hpp"
#include "mapped_file.hpp"
#include "safetensors.hpp"
#include "torch.hpp"
#include "utf8.hpp"

#include <unzip.h>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ckpt {
namespace {

using detail::torch_format_error;

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
std::map<std::string, std::span<const std::byte>, std::less<>> read_records(std::span<const std::byte> bytes,
                                                                            const std::filesystem::path& origin) {
  zip_reader zip(bytes, origin);
  std::map<std::string, std::span<const std::byte>, std::less<>> records;
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
// The restricted unpickler.

// The callables and classes a torch.save state dict refers to; nothing else may be named.
enum class callable { ordered_dict, rebuild_tensor, rebuild_parameter, device, storage_type };

struct allowed_global {
  std::string_view module, name;
  callable what;
  dtype storage_dtype = dtype::f32;
};

constexpr std::array<allowed_global, 15> allowed_globals{{
    {"collections", "OrderedDict", callable::ordered_dict},
    {"torch._utils", "_rebuild_tensor_v2", callable::rebuild_tensor},
    {"torch._utils", "_rebuild_parameter", callable::rebuild_parameter},
    {"torch", "device", callable::device},
    {"torch", "DoubleStorage", callable::storage_type, dtype::f64},
    {"torch", "FloatStorage", callable::storage_type, dtype::f32},
    {"torch", "HalfStorage", callable::storage_type, dtype::f16},
    {"torch", "BFloat16Storage", callable::storage_type, dtype::bf16},
    {"torch", "LongStorage", callable::storage_type, dtype::i64},
    {"torch", "IntStorage", callable::storage_type, dtype::i32},
    {"torch", "ShortStorage", callable::storage_type, dtype::i16},
    {"torch", "CharStorage", callable::storage_type, dtype::i8},
    {"torch", "ByteStorage", callable::storage_type, dtype::u8},
    {"torch", "BoolStorage", callable::storage_type, dtype::boolean},
    {"torch", "ComplexFloatStorage", callable::storage_type, dtype::c64},
}};

// Objects are owned by the unpickler's arena and referred to by plain pointers: a pickle can
// build cycles (a list appended to itself), which shared ownership would leak.
struct object;
using ref = object*;

struct storage_ref {
  dtype type = dtype::f32;
  std::span<const std::byte> bytes;
  std::string key;
};

struct object {
  enum class kind { none, boolean, integer, real, string, tuple, list, dict, global, storage, tensor } k = kind::none;
  bool flag = false;
  bool copied = false;  // a tensor whose bytes are a copy (a strided view), charged when it was made
  std::int64_t integer = 0;
  double real = 0;
  std::string text;
  std::vector<ref> items;                   // tuple, list
  std::vector<std::pair<ref, ref>> pairs;   // dict, in insertion order
  const allowed_global* global = nullptr;   // global
  std::unique_ptr<storage_ref> storage;     // storage (apart: most objects are not one)
  std::unique_ptr<tensor> value;            // tensor
};

// A budget of bytes in proportion to the input: `factor` bytes for each byte of it, plus `base`.
// Spending past it fails with a message naming the budget's option and how to raise it.
class budget {
 public:
  budget(const std::filesystem::path& origin, std::string_view what, std::string_view option, std::size_t factor,
         std::string_view input, std::size_t input_size, std::size_t base)
      : origin_(origin), what_(what), option_(option), factor_(factor), input_(input), base_(base) {
    if (__builtin_mul_overflow(factor, input_size, &left_) || __builtin_add_overflow(left_, base, &left_))
      left_ = std::numeric_limits<std::size_t>::max();
    limit_ = left_;
  }
  void spend(std::size_t n) {
    if (n <= left_) {
      left_ -= n;
      return;
    }
    throw torch_format_error(origin_, std::string(what_) + " take more than " + std::to_string(limit_) + " bytes (" +
                                          std::to_string(factor_) + " per byte of " + std::string(input_) + ", plus " +
                                          std::to_string(base_ >> 20) + " MiB: the budget torch_options::" +
                                          std::string(option_) +
                                          "; raise it to read this file, in the ckpt tool with --torch-budget)");
  }

 private:
  const std::filesystem::path& origin_;
  std::string_view what_, option_;
  std::size_t factor_;
  std::string_view input_;
  std::size_t base_;
  std::size_t left_ = 0, limit_ = 0;
};

std::string_view kind_name(object::kind k) {
  switch (k) {
    case object::kind::none: return "None";
    case object::kind::boolean: return "a bool";
    case object::kind::integer: return "an int";
    case object::kind::real: return "a float";
    case object::kind::string: return "a str";
    case object::kind::tuple: return "a tuple";
    case object::kind::list: return "a list";
    case object::kind::dict: return "a dict";
    case object::kind::global: return "a class or function";
    case object::kind::storage: return "a storage";
    case object::kind::tensor: return "a tensor";
  }
  return "an object";
}

class unpickler {
 public:
  unpickler(std::span<const std::byte> pickle, const std::filesystem::path& origin, std::string_view prefix,
            const std::map<std::string, std::span<const std::byte>, std::less<>>& records, bool big_endian,
            std::shared_ptr<const void> owner, const detail::mapped_file* mapping, budget& data, budget& objects)
      : in_(pickle), origin_(origin), prefix_(prefix), records_(records), big_endian_(big_endian),
        owner_(std::move(owner)), mapping_(mapping), data_(data), objects_(objects) {}

  // Runs the pickle to its STOP opcode and returns the object it built.
  ref run() {
    for (unsigned char op = opcode(); op != '.'; op = opcode()) execute(op);
    return stop();
  }

 private:
  // ----- The pickle machine: one function for each opcode torch.save emits (protocol 2).

  unsigned char opcode() { return static_cast<unsigned char>(byte()); }

  void execute(unsigned char op) {
    switch (op) {
      case 0x80: return proto();
      case '(': return marks_.push_back(stack_.size());  // MARK
      case '}': return push(make(object::kind::dict));   // EMPTY_DICT
      case ']': return push(make(object::kind::list));   // EMPTY_LIST
      case ')': return push(&empty_tuple_);              // EMPTY_TUPLE
      case 't': return mark_tuple();                     // TUPLE
      case 0x85: case 0x86: case 0x87: return small_tuple(op - 0x84u);  // TUPLE1, TUPLE2, TUPLE3
      case 'N': return push(&none_);
      case 0x88: return push(&true_);   // NEWTRUE
      case 0x89: return push(&false_);  // NEWFALSE
      case 'K': return push(integer(static_cast<std::int64_t>(unsigned_le(1))));  // BININT1
      case 'M': return push(integer(static_cast<std::int64_t>(unsigned_le(2))));  // BININT2
      case 'J': return push(integer(static_cast<std::int32_t>(unsigned_le(4))));  // BININT
      case 0x8a: return long1();
      case 'G': return binfloat();
      case 'X': return binunicode();
      case 'c': return global();
      case 'q': return memo(unsigned_le(1));          // BINPUT
      case 'r': return memo(unsigned_le(4));          // LONG_BINPUT
      case 'h': return push(recall(unsigned_le(1)));  // BINGET
      case 'j': return push(recall(unsigned_le(4)));  // LONG_BINGET
      case 'Q': return persistent();                  // BINPERSID
      case 'R': return reduce();
      case 'b': return build();
      case 's': return setitem();
      case 'u': return setitems();
      case 'a': return append();
      case 'e': return appends();
      default:
        fail("pickle opcode 0x" + detail::to_hex(op, 2) + " at byte " + std::to_string(position_ - 1) +
             " (only the opcodes torch.save emits are read)");
    }
  }

  // PROTO: the protocol, at most 2.
  void proto() {
    const auto version = static_cast<unsigned char>(byte());
    if (version > 2) fail("pickle protocol " + std::to_string(version) + " (torch.save writes protocol 2)");
  }
  // STOP: the one object left on the stack, with no MARK open.
  ref stop() const {
    if (stack_.size() != 1 || !marks_.empty()) fail("the pickle stops with an unbalanced stack");
    return stack_.back();
  }
  // TUPLE and TUPLE1-3: a tuple of the objects above the MARK, or of the top `n` objects.
  void mark_tuple() {
    auto t = make(object::kind::tuple);
    t->items = pop_to_mark();
    objects_.spend(t->items.size() * sizeof(ref));
    push(std::move(t));
  }
  void small_tuple(std::size_t n) {
    need(n);
    auto t = make(object::kind::tuple);
    objects_.spend(n * sizeof(ref));
    t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    push(std::move(t));
  }
  // LONG1: a little-endian two's-complement integer of n bytes (at most 8 here).
  void long1() {
    const auto n = static_cast<unsigned char>(byte());
    if (n > 8) fail("an integer of " + std::to_string(n) + " bytes (at most 8 are read)");
    std::uint64_t value = n == 0 ? 0 : unsigned_le(n);
    if (n > 0 && n < 8 && (value >> (8 * n - 1)) != 0) value |= ~std::uint64_t{0} << (8 * n);
    push(integer(static_cast<std::int64_t>(value)));
  }
  // BINFLOAT: a big-endian IEEE double.
  void binfloat() {
    auto r = make(object::kind::real);
    r->real = std::bit_cast<double>(unsigned_be(8));
    push(std::move(r));
  }
  // BINUNICODE: a string of a 4-byte length.
  void binunicode() {
    const auto n = unsigned_le(4);
    auto s = make(object::kind::string);
    s->text = std::string(text(n));
    objects_.spend(s->text.size());
    push(std::move(s));
  }
  // SETITEM, SETITEMS: a pair, or the pairs above the MARK, added to the dict below them.
  void setitem() {
    need(3);
    auto value = pop(), key = pop();
    objects_.spend(2 * sizeof(std::pair<ref, ref>));
    dict_of(top())->pairs.emplace_back(std::move(key), std::move(value));
  }
  void setitems() {
    auto items = pop_to_mark();
    if (items.size() % 2 != 0) fail("SETITEMS with an odd number of items");
    auto& d = dict_of(top())->pairs;
    objects_.spend(items.size() * sizeof(std::pair<ref, ref>));
    for (std::size_t i = 0; i < items.size(); i += 2) d.emplace_back(items[i], items[i + 1]);
  }
  // APPEND, APPENDS: an object, or the objects above the MARK, appended to the list below them.
  void append() {
    need(2);
    auto value = pop();
    objects_.spend(2 * sizeof(ref));
    list_of(top())->items.push_back(std::move(value));
  }
  void appends() {
    auto items = pop_to_mark();
    auto& l = list_of(top())->items;
    objects_.spend(2 * items.size() * sizeof(ref));
    l.insert(l.end(), items.begin(), items.end());
  }

  [[noreturn]] void fail(const std::string& rule) const { throw torch_format_error(origin_, prefix_ + "data.pkl: " + rule); }

  std::byte byte() {
    if (position_ >= in_.size()) fail("the pickle ends before its STOP opcode");
    return in_[position_++];
  }
  std::string_view text(std::uint64_t n) {
    if (n > in_.size() - position_) fail("a string runs past the end of the pickle");
    std::string_view out(reinterpret_cast<const char*>(in_.data() + position_), n);
    position_ += n;
    return out;
  }
  std::uint64_t unsigned_le(unsigned n) {
    std::uint64_t value = 0;
    for (unsigned i = 0; i < n; ++i) value |= static_cast<std::uint64_t>(byte()) << (8 * i);
    return value;
  }
  std::uint64_t unsigned_be(unsigned n) {
    std::uint64_t value = 0;
    for (unsigned i = 0; i < n; ++i) value = (value << 8) | static_cast<std::uint64_t>(byte());
    return value;
  }
  // Every object is charged to the unpickler's budget at its size, and the containers that
  // grow with their contents (lists, dicts, strings, the memo) by what they hold: growth counted
  // twice, for the spare capacity a vector keeps.
  ref make(object::kind k) {
    objects_.spend(sizeof(object));
    arena_.emplace_back().k = k;
    return &arena_.back();
  }
  void memo(std::uint64_t key) {
    objects_.spend(memo_entry_bytes);
    memo_[key] = top();
  }
  ref integer(std::int64_t value) {
    auto i = make(object::kind::integer);
    i->integer = value;
    return i;
  }

  void push(ref x) {
    if (stack_.size() >= max_stack) fail("the pickle's stack grows past " + std::to_string(max_stack) + " objects");
    stack_.push_back(std::move(x));
  }
  void need(std::size_t n) const {
    const std::size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail("an opcode at byte " + std::to_string(position_ - 1) + " finds too few objects on the stack");
  }
  ref pop() {
    need(1);
    ref x = stack_.back();
    stack_.pop_back();
    return x;
  }
  const ref& top() const {
    need(1);
    return stack_.back();
  }
  std::vector<ref> pop_to_mark() {
    if (marks_.empty()) fail("an opcode at byte " + std::to_string(position_ - 1) + " needs a MARK that is not there");
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<ref> items(std::make_move_iterator(stack_.begin() + static_cast<std::ptrdiff_t>(mark)),
                           std::make_move_iterator(stack_.end()));
    stack_.resize(mark);
    return items;
  }
  ref recall(std::uint64_t key) const {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail("the pickle recalls memo " + std::to_string(key) + ", which was never stored");
    return it->second;
  }
  object* dict_of(const ref& x) const {
    if (x->k != object::kind::dict) fail("items set on " + std::string(kind_name(x->k)) + ", not a dict");
    return x;
  }
  object* list_of(const ref& x) const {
    if (x->k != object::kind::list) fail("items appended to " + std::string(kind_name(x->k)) + ", not a list");
    return x;
  }

  // GLOBAL: "module\nname\n", resolved against the allow-list at once, so that nothing outside
  // it is ever even named on the stack.
  void global() {
    const std::string_view module = line(), name = line();
    for (const auto& g : allowed_globals) {
      if (g.module == module && g.name == name) {
        auto x = make(object::kind::global);
        x->global = &g;
        push(std::move(x));
        return;
      }
    }
    fail("it refers to the global " + detail::quote_bytes(std::string(module) + "." + std::string(name)) +
         ", which is not one of the tensor-rebuilding functions and storage types a torch.save state "
         "dict uses; nothing in the file was run");
  }
  std::string_view line() {
    const auto* begin = reinterpret_cast<const char*>(in_.data() + position_);
    const auto* end = static_cast<const char*>(std::memchr(begin, '\n', in_.size() - position_));
    if (end == nullptr || end - begin > 256) fail("a GLOBAL opcode without a short name line");
    position_ += static_cast<std::size_t>(end - begin) + 1;
    return {begin, static_cast<std::size_t>(end - begin)};
  }

  // BINPERSID: ('storage', <storage type>, key, location, numel) names the record data/<key>.
  void persistent() {
    const ref id = pop();
    if (id->k != object::kind::tuple || id->items.size() != 5 || id->items[0]->k != object::kind::string ||
        id->items[0]->text != "storage" || id->items[1]->k != object::kind::global ||
        id->items[1]->global->what != callable::storage_type || id->items[2]->k != object::kind::string ||
        id->items[4]->k != object::kind::integer)
      fail("a persistent id that is not ('storage', <storage type>, key, location, size)");
    const std::string& key = id->items[2]->text;
    const auto record = records_.find(prefix_ + "data/" + key);
    if (record == records_.end()) fail("storage " + detail::quote_bytes(key) + " has no record " + detail::quote_bytes(prefix_ + "data/" + key));
    const dtype type = id->items[1]->global->storage_dtype;
    const std::int64_t numel = id->items[4]->integer;
    const std::size_t element = (detail::bit_width(type) / 8);
    if (numel < 0 || static_cast<std::uint64_t>(numel) > record->second.size() / element ||
        static_cast<std::uint64_t>(numel) * element != record->second.size())
      fail("storage " + detail::quote_bytes(key) + " holds " + std::to_string(record->second.size()) + " bytes, not " +
           std::to_string(numel) + " elements of " + std::string(to_string(type)));
    auto s = make(object::kind::storage);
    objects_.spend(sizeof(storage_ref) + key.size());
    s->storage = std::make_unique<storage_ref>(storage_ref{type, record->second, key});
    push(std::move(s));
  }

  void reduce() {
    const ref args = pop();
    const ref function = pop();
    if (function->k != object::kind::global || function->global->what == callable::storage_type)
      fail("REDUCE calls " + std::string(kind_name(function->k)) + " that is not an allowed function");
    if (args->k != object::kind::tuple) fail("REDUCE with arguments that are not a tuple");
    const auto& a = args->items;
    switch (function->global->what) {
      case callable::ordered_dict:
        if (!a.empty()) fail("collections.OrderedDict called with arguments");
        push(make(object::kind::dict));
        return;
      case callable::device: {
        if (a.empty() || a[0]->k != object::kind::string) fail("torch.device called without a device name");
        push(a[0]);
        return;
      }
      case callable::rebuild_parameter:
        if (a.empty() || a[0]->k != object::kind::tensor) fail("torch._utils._rebuild_parameter called without a tensor");
        push(a[0]);
        return;
      case callable::rebuild_tensor:
        push(rebuild_tensor(a));
        return;
      case callable::storage_type: break;
    }
    fail("REDUCE of a storage type");
  }

  // BUILD sets an object's state: torch.save uses it to attach `_metadata` (module versions) to
  // a state dict, which carries no tensor; it is accepted on dicts and ignored.
  void build() {
    need(2);
    const ref state = pop();
    if (top()->k != object::kind::dict || state->k != object::kind::dict)
      fail("BUILD of " + std::string(kind_name(top()->k)) + " (only a dict's attributes may be set)");
  }

  std::vector<std::int64_t> int_tuple(const ref& x, std::string_view what) const {
    if (x->k != object::kind::tuple) fail("a tensor's " + std::string(what) + " is not a tuple");
    std::vector<std::int64_t> out;
    for (const auto& item : x->items) {
      if (item->k != object::kind::integer || item->integer < 0) fail("a tensor's " + std::string(what) + " holds a value that is not a non-negative int");
      out.push_back(item->integer);
    }
    return out;
  }

  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  ref rebuild_tensor(const std::vector<ref>& a) {
    if (a.size() < 4 || a[0]->k != object::kind::storage || a[1]->k != object::kind::integer)
      fail("torch._utils._rebuild_tensor_v2 called without (storage, offset, size, stride, ...)");
    const storage_ref& s = *a[0]->storage;
    dims shape = int_tuple(a[2], "size");  // read before the stride, for the first failure's message
    std::vector<std::int64_t> stride = int_tuple(a[3], "stride");
    const strided_view v = checked_view(s, a[1]->integer, std::move(shape), std::move(stride));
    // The same view of the same storage, rebuilt again, is the same tensor: its names are tied
    // (one object, which the walk recognizes), and it is copied once if it must be copied.
    std::string signature = s.key + '\0' + std::string(to_string(s.type)) + '\0' + std::to_string(v.offset);
    for (std::size_t i = 0; i < v.shape.size(); ++i)
      signature += ',' + std::to_string(v.shape[i]) + ':' + std::to_string(v.stride[i]);
    if (const auto it = views_.find(signature); it != views_.end()) return it->second;
    objects_.spend(memo_entry_bytes + signature.size() + sizeof(tensor) + v.shape.size() * sizeof(std::int64_t));
    ref out = tensor_of(s, v);
    views_.emplace(std::move(signature), out);
    return out;
  }

  // A tensor's view of its storage: `shape` elements `stride` apart from element `offset`.
  struct strided_view {
    std::int64_t offset = 0;
    dims shape;
    std::vector<std::int64_t> stride;
    std::int64_t numel = 1;
    std::size_t nbytes = 0;
    bool contiguous = true;  // C order, so that the tensor can view the file
    std::int64_t last = 0;   // the last element of the storage it reaches (when numel > 0)
  };

  // The view, checked: as many strides as sizes, every element it reaches inside the storage,
  // and no overflow on the way.
  strided_view checked_view(const storage_ref& s, std::int64_t offset, dims shape, std::vector<std::int64_t> stride) const {
    strided_view v{.offset = offset, .shape = std::move(shape), .stride = std::move(stride)};
    if (v.stride.size() != v.shape.size())
      fail("a tensor of storage " + detail::quote_bytes(s.key) + " has " + std::to_string(v.shape.size()) + " sizes but " +
           std::to_string(v.stride.size()) + " strides");
    const std::size_t element = (detail::bit_width(s.type) / 8);
    const auto capacity = static_cast<std::int64_t>(s.bytes.size() / element);
    // The last element the view reaches must lie in the storage.
    std::int64_t last = offset;
    std::int64_t expected_stride = 1;
    for (std::size_t i = v.shape.size(); i-- > 0;) {
      const std::int64_t size = v.shape[i];
      if (size == 0) v.numel = 0;
      if (v.numel != 0 && __builtin_mul_overflow(v.numel, size, &v.numel))
        fail("a tensor of storage " + detail::quote_bytes(s.key) + " has too many elements");
      if (size > 1) {
        std::int64_t reach = 0;
        if (__builtin_mul_overflow(size - 1, v.stride[i], &reach) || __builtin_add_overflow(last, reach, &last))
          fail("a tensor of storage " + detail::quote_bytes(s.key) + " reaches past any storage");
        if (v.stride[i] != expected_stride) v.contiguous = false;
      }
      if (size > 0 && __builtin_mul_overflow(expected_stride, size, &expected_stride))
        expected_stride = std::numeric_limits<std::int64_t>::max();
    }
    v.last = last;
    if (offset < 0 || (v.numel > 0 && last >= capacity))
      fail("a tensor of shape " + to_string(v.shape) + " at offset " + std::to_string(offset) + " reaches past the " +
           std::to_string(capacity) + " elements of storage " + detail::quote_bytes(s.key));
    if (__builtin_mul_overflow(static_cast<std::size_t>(v.numel), element, &v.nbytes))
      fail("a tensor of storage " + detail::quote_bytes(s.key) + " has " + std::to_string(v.numel) + " elements of " +
           std::string(to_string(s.type)) + ", more bytes than memory has");
    return v;
  }

  // The tensor of a checked view: empty, a view of the file where its bytes are C order and
  // little-endian, else a copy.
  ref tensor_of(const storage_ref& s, const strided_view& v) {
    auto out = make(object::kind::tensor);
    if (v.numel == 0) {
      out->value = std::make_unique<tensor>(tensor::copy_of(s.type, v.shape, {}));
    } else if (v.contiguous && !big_endian_) {
      const std::size_t element = (detail::bit_width(s.type) / 8);
      out->value = std::make_unique<tensor>(detail::tensor_access::view_of(
          s.type, v.shape, s.bytes.subspan(static_cast<std::size_t>(v.offset) * element, v.nbytes), owner_, mapping_));
    } else {
      // A view with zero strides (torch's expand) holds more elements than its storage: copies
      // are charged to the data budget when made, so that a small file cannot claim an unbounded
      // allocation.
      data_.spend(v.nbytes);
      out->copied = true;
      // The bytes of the storage the view reaches, read from the file with pread (not through the
      // mapping: a file truncated meanwhile is an error naming it, not a SIGBUS) and charged to
      // the data budget too, so that many views of one large storage cannot read it unboundedly.
      const std::size_t element = detail::bit_width(s.type) / 8;
      const std::span<const std::byte> reach = s.bytes.subspan(static_cast<std::size_t>(v.offset) * element,
                                                               static_cast<std::size_t>(v.last - v.offset + 1) * element);
      tensor read;
      if (mapping_ != nullptr) {
        data_.spend(reach.size());
        read = detail::tensor_access::in_memory(detail::tensor_access::view_of(
            dtype::u8, {static_cast<std::int64_t>(reach.size())}, reach, owner_, mapping_));
      }
      const std::byte* source = mapping_ != nullptr ? read.bytes().data() : reach.data();
      out->value = std::make_unique<tensor>(
          tensor::make(s.type, v.shape, [&](std::span<std::byte> dst) { gather(source, s.type, v.shape, v.stride, dst); }));
    }
    return out;
  }

  // Copies a strided view whose first element is at `source` into C order: a transposed matrix
  // (`.t()`) through the transpose kernel, anything else a run at a time (a run is the last axis
  // when its stride is 1, else one element); big-endian storages are byte-swapped afterwards.
  void gather(const std::byte* source, dtype type, const dims& shape, const std::vector<std::int64_t>& stride,
              std::span<std::byte> dst) const {
    const std::size_t element = detail::bit_width(type) / 8;
    const std::size_t rank = shape.size();
    if (rank == 2 && stride[0] == 1 && stride[1] >= shape[0]) {
      // Element (i, j) is at i + j * stride[1]: the transpose of a row-major shape[1] x shape[0]
      // matrix whose rows are stride[1] elements apart.
      const auto rows = static_cast<std::size_t>(shape[1]), cols = static_cast<std::size_t>(shape[0]);
      detail::transpose(source, static_cast<std::size_t>(stride[1]), dst.data(), rows, rows, cols, element);
    } else {
      const bool runs = rank > 0 && stride.back() == 1;
      const std::size_t outer = runs ? rank - 1 : rank;
      const std::size_t run_bytes = (runs ? static_cast<std::size_t>(shape.back()) : 1) * element;
      std::vector<std::int64_t> index(outer, 0);
      std::int64_t at = 0;
      for (std::size_t done = 0; done < dst.size(); done += run_bytes) {
        std::memcpy(dst.data() + done, source + static_cast<std::size_t>(at) * element, run_bytes);
        for (std::size_t d = outer; d-- > 0;) {  // odometer over the outer indices, last fastest
          at += stride[d];
          if (++index[d] < shape[d]) break;
          at -= stride[d] * shape[d];
          index[d] = 0;
        }
      }
    }
    if (big_endian_)
      for (std::size_t done = 0; done < dst.size(); done += element) swap_element(dst.data() + done, type);
  }
  static void swap_element(std::byte* element, dtype type) {
    // Complex numbers swap each of their two parts.
    const std::size_t part = type == dtype::c64 ? 4 : (detail::bit_width(type) / 8);
    for (std::size_t at = 0; at < (detail::bit_width(type) / 8); at += part)
      std::reverse(element + at, element + at + part);
  }

  static constexpr std::size_t max_stack = 1u << 20;
  // What an entry of a hash map costs (its node and bucket), as charged to the budget.
  static constexpr std::size_t memo_entry_bytes = 64;

  std::span<const std::byte> in_;
  std::size_t position_ = 0;
  const std::filesystem::path& origin_;
  std::string prefix_;
  const std::map<std::string, std::span<const std::byte>, std::less<>>& records_;
  bool big_endian_;
  std::shared_ptr<const void> owner_;
  const detail::mapped_file* mapping_;  // the loaded file the records are in, or null
  budget& data_;     // tensor bytes: copies made here, entries' bytes in the walk
  budget& objects_;  // the memory the objects built here take
  std::deque<object> arena_;
  // The immutable values that need no object of their own.
  object none_ = constant(object::kind::none, false), true_ = constant(object::kind::boolean, true),
         false_ = constant(object::kind::boolean, false), empty_tuple_ = constant(object::kind::tuple, false);
  static object constant(object::kind k, bool flag) {
    object x;
    x.k = k;
    x.flag = flag;
    return x;
  }
  std::unordered_map<std::string, ref> views_;  // each tensor built, by storage, dtype, offset, shape and strides
  std::vector<ref> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, ref> memo_;
};

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
  flattener(const std::filesystem::path& origin, std::size_t visit_budget, budget& names, budget& data, bool keep_tied)
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
  budget& names_;
  budget& data_;
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
  budget data(origin, "its tensors' bytes", "data_budget", options.data_budget, "the file", bytes.size(), std::size_t{16} << 20);
  budget objects(origin, "the objects its pickle builds", "object_budget", options.object_budget, "its pickle",
                 pickle.size(), std::size_t{64} << 20);
  budget names(origin, "its names", "name_budget", options.name_budget, "its pickle", pickle.size(), std::size_t{1} << 20);
  unpickler reader(pickle, origin, prefix, records, big_endian, owner, mapping, data, objects);
  const ref root = reader.run();
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
