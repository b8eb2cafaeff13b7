// The restricted unpickler (src/format/pickle.hpp): a pickle machine with one function for each opcode
// torch.save emits (protocol 2), its objects made in an arena and charged to its budget. It
// resolves globals against the allow-list below and hands persistent ids and tensor rebuilds to
// pickle::tensor_calls (src/format/torch_tensors.cpp); it reads no record, tensor or file itself.
#include "pickle.hpp"

#include "base/hex.hpp"
#include "base/utf8.hpp"

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ckpt::detail::pickle {
namespace {

// The globals a pickle may name: the callables and classes a torch.save state dict refers to.
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

class unpickler {
 public:
  unpickler(std::span<const std::byte> pickle, const std::filesystem::path& origin, std::string_view prefix,
            arena& objects, tensor_calls& tensors)
      : in_(pickle), origin_(origin), prefix_(prefix), objects_(objects), tensors_(tensors) {}

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
      case '}': return push(objects_.make(object::kind::dict));  // EMPTY_DICT
      case ']': return push(objects_.make(object::kind::list));  // EMPTY_LIST
      case ')': return push(objects_.empty_tuple());             // EMPTY_TUPLE
      case 't': return mark_tuple();                             // TUPLE
      case 0x85: case 0x86: case 0x87: return small_tuple(op - 0x84u);  // TUPLE1, TUPLE2, TUPLE3
      case 'N': return push(objects_.none());
      case 0x88: return push(objects_.boolean(true));   // NEWTRUE
      case 0x89: return push(objects_.boolean(false));  // NEWFALSE
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
      case 'Q': return push(tensors_.persistent_load(pop()));  // BINPERSID: a storage, of torch_tensors
      case 'R': return reduce();
      case 'b': return build();
      case 's': return setitem();
      case 'u': return setitems();
      case 'a': return append();
      case 'e': return appends();
      default:
        fail("pickle opcode 0x" + to_hex(op, 2) + " at byte " + std::to_string(position_ - 1) +
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
    auto t = objects_.make(object::kind::tuple);
    t->items = pop_to_mark();
    objects_.spend(t->items.size() * sizeof(ref));
    push(std::move(t));
  }
  void small_tuple(std::size_t n) {
    need(n);
    auto t = objects_.make(object::kind::tuple);
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
    auto r = objects_.make(object::kind::real);
    r->real = std::bit_cast<double>(unsigned_be(8));
    push(std::move(r));
  }
  // BINUNICODE: a string of a 4-byte length.
  void binunicode() {
    const auto n = unsigned_le(4);
    auto s = objects_.make(object::kind::string);
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

  [[noreturn]] void fail(const std::string& rule) const { pickle::fail(origin_, prefix_, rule); }

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
  void memo(std::uint64_t key) {
    objects_.spend(map_entry_bytes);
    memo_[key] = top();
  }
  ref integer(std::int64_t value) {
    auto i = objects_.make(object::kind::integer);
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
        auto x = objects_.make(object::kind::global);
        x->global = &g;
        push(std::move(x));
        return;
      }
    }
    fail("it refers to the global " + quote_bytes(std::string(module) + "." + std::string(name)) +
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
        push(objects_.make(object::kind::dict));
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
        push(tensors_.rebuild_tensor(a));
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

  static constexpr std::size_t max_stack = 1u << 20;

  std::span<const std::byte> in_;
  std::size_t position_ = 0;
  const std::filesystem::path& origin_;
  std::string prefix_;
  arena& objects_;
  tensor_calls& tensors_;
  std::vector<ref> stack_;
  std::vector<std::size_t> marks_;
  std::unordered_map<std::uint64_t, ref> memo_;
};

}  // namespace

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

void fail(const std::filesystem::path& origin, std::string_view prefix, const std::string& rule) {
  throw torch_format_error(origin, std::string(prefix) + "data.pkl: " + rule);
}

ref unpickle(std::span<const std::byte> pickle, const std::filesystem::path& origin, std::string_view prefix,
             arena& objects, tensor_calls& tensors) {
  return unpickler(pickle, origin, prefix, objects, tensors).run();
}

}  // namespace ckpt::detail::pickle
