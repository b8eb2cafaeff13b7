#pragma once
// The restricted unpickler of src/format/pickle.cpp, as the torch.save reader (src/format/torch.cpp) calls it:
// its one job is to run the pickle `<name>/data.pkl` into objects (None, bools, ints, floats,
// strings, tuples, lists, dicts and the allowed globals), naming nothing outside its allow-list.
// What a pickle's storages and tensors become is not its business: it hands the persistent ids
// and the calls of `_rebuild_tensor_v2` to `tensor_calls`, which src/format/torch_tensors.cpp
// implements. It calls nothing of the library but the error and budgets of src/format/torch_error.hpp.

#include <ckpt/dtype.hpp>
#include <ckpt/tensor.hpp>

#include "torch_error.hpp"

#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt::detail::pickle {

/// The callables and classes a torch.save state dict refers to; nothing else may be named.
enum class callable { ordered_dict, rebuild_tensor, rebuild_parameter, device, storage_type };

/// A global of the allow-list: its module and name, what it is, and for a storage type its dtype.
struct allowed_global {
  std::string_view module, name;
  callable what;
  dtype storage_dtype = dtype::f32;
};

/// Objects are owned by an `arena` and referred to by plain pointers: a pickle can build cycles
/// (a list appended to itself), which shared ownership would leak.
struct object;
using ref = object*;

/// A storage: the bytes of the record its persistent id names, their dtype, and its key.
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

/// "None", "a dict", ...: what an object of kind `k` is, for messages.
[[nodiscard]] std::string_view kind_name(object::kind k);

/// A rule of the pickle `<prefix>data.pkl` of the file `origin` broken.
/// \throws torch_format_error naming `origin`, the rule after "<prefix>data.pkl: ".
[[noreturn]] void fail(const std::filesystem::path& origin, std::string_view prefix, const std::string& rule);

/// The objects of one pickle, which live as long as it: every object is charged to the objects'
/// budget at its size, and the containers that grow with their contents (lists, dicts, strings,
/// the memo) by what they hold (`spend`): growth counted twice, for the spare capacity a vector
/// keeps. The immutable values that need no object of their own are shared.
class arena {
 public:
  explicit arena(torch_budget& objects) : budget_(objects) {}
  arena(const arena&) = delete;
  arena& operator=(const arena&) = delete;

  /// A new object of kind `k`, charged.
  ref make(object::kind k) {
    budget_.spend(sizeof(object));
    objects_.emplace_back().k = k;
    return &objects_.back();
  }
  /// Charges `n` bytes more that the objects take.
  void spend(std::size_t n) { budget_.spend(n); }

  [[nodiscard]] ref none() noexcept { return &none_; }
  [[nodiscard]] ref boolean(bool value) noexcept { return value ? &true_ : &false_; }
  [[nodiscard]] ref empty_tuple() noexcept { return &empty_tuple_; }

 private:
  static object constant(object::kind k, bool flag) {
    object x;
    x.k = k;
    x.flag = flag;
    return x;
  }

  torch_budget& budget_;
  std::deque<object> objects_;
  object none_ = constant(object::kind::none, false), true_ = constant(object::kind::boolean, true),
         false_ = constant(object::kind::boolean, false), empty_tuple_ = constant(object::kind::tuple, false);
};

/// What a pickle's references to tensors turn into, as Python's Unpickler.persistent_load and
/// the functions it calls: src/format/torch_tensors.cpp. Each returns an object of the arena (a storage,
/// a tensor) or throws torch_format_error.
class tensor_calls {
 public:
  /// BINPERSID: the object the persistent id `id` names.
  virtual ref persistent_load(const ref& id) = 0;
  /// REDUCE of torch._utils._rebuild_tensor_v2 with the arguments `args`.
  virtual ref rebuild_tensor(const std::vector<ref>& args) = 0;

 protected:
  ~tensor_calls() = default;  // not owned through this interface
};

/// Runs `pickle` (protocol 2 at most, only the opcodes torch.save emits) to its STOP opcode and
/// returns the object it built, its objects made in `objects`; `origin` and `prefix` name it in
/// messages ("<prefix>data.pkl: ..."). A GLOBAL is resolved against the allow-list at once, so
/// that nothing outside it is ever even named on the stack; persistent ids and tensor rebuilds
/// go to `tensors`.
/// \throws torch_format_error for an opcode, global or structure it refuses, a pickle cut short,
///   or the objects' budget spent; whatever `tensors` throws.
[[nodiscard]] ref unpickle(std::span<const std::byte> pickle, const std::filesystem::path& origin,
                           std::string_view prefix, arena& objects, tensor_calls& tensors);

}  // namespace ckpt::detail::pickle
