// The tensor rebuild of the torch.save reader (src/format/torch_tensors.hpp): the storages a pickle's
// persistent ids name (records of the zip, their sizes checked), and the tensors
// `_rebuild_tensor_v2` makes of them: each view checked against its storage, then a view of the
// file where it is C order and little-endian, else a copy gathered into C order (a transposed
// matrix through the transpose kernel) and byte-swapped where the file is big-endian, copies
// charged to the data budget. It calls the pickle's arena (src/format/pickle.hpp) for its objects,
// ckpt/detail/pages.hpp for views of the file and reads out of it, and ckpt/detail/transpose.hpp.
#include "torch_tensors.hpp"

#include <ckpt/detail/pages.hpp>
#include <ckpt/detail/transpose.hpp>

#include "base/utf8.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace ckpt::detail {

using pickle::callable;
using pickle::object;
using pickle::ref;
using pickle::storage_ref;

namespace {

void swap_element(std::byte* element, dtype type) {
  // Complex numbers swap each of their two parts.
  const std::size_t part = type == dtype::c64 ? 4 : (bit_width(type) / 8);
  for (std::size_t at = 0; at < (bit_width(type) / 8); at += part)
    std::reverse(element + at, element + at + part);
}

// Copies a strided view whose first element is at `source` into C order: a transposed matrix
// (`.t()`) through the transpose kernel, anything else a run at a time (a run is the last axis
// when its stride is 1, else one element); big-endian storages are byte-swapped afterwards.
void gather(const std::byte* source, dtype type, const dims& shape, const std::vector<std::int64_t>& stride,
            std::span<std::byte> dst, bool big_endian) {
  const std::size_t element = bit_width(type) / 8;
  const std::size_t rank = shape.size();
  if (rank == 2 && stride[0] == 1 && stride[1] >= shape[0]) {
    // Element (i, j) is at i + j * stride[1]: the transpose of a row-major shape[1] x shape[0]
    // matrix whose rows are stride[1] elements apart.
    const auto rows = static_cast<std::size_t>(shape[1]), cols = static_cast<std::size_t>(shape[0]);
    transpose(source, static_cast<std::size_t>(stride[1]), dst.data(), rows, rows, cols, element);
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
  if (big_endian)
    for (std::size_t done = 0; done < dst.size(); done += element) swap_element(dst.data() + done, type);
}

}  // namespace

// A tensor's view of its storage: `shape` elements `stride` apart from element `offset`.
struct torch_tensors::strided_view {
  std::int64_t offset = 0;
  dims shape;
  std::vector<std::int64_t> stride;
  std::int64_t numel = 1;
  std::size_t nbytes = 0;
  bool contiguous = true;  // C order, so that the tensor can view the file
  std::int64_t last = 0;   // the last element of the storage it reaches (when numel > 0)
};

torch_tensors::torch_tensors(const std::filesystem::path& origin, std::string_view prefix, const torch_records& records,
                             bool big_endian, std::shared_ptr<const void> owner, const mapped_file* mapping,
                             pickle::arena& objects, torch_budget& data)
    : origin_(origin), prefix_(prefix), records_(records), big_endian_(big_endian), owner_(std::move(owner)),
      mapping_(mapping), objects_(objects), data_(data) {}

void torch_tensors::fail(const std::string& rule) const { pickle::fail(origin_, prefix_, rule); }

ref torch_tensors::persistent_load(const ref& id) {
  if (id->k != object::kind::tuple || id->items.size() != 5 || id->items[0]->k != object::kind::string ||
      id->items[0]->text != "storage" || id->items[1]->k != object::kind::global ||
      id->items[1]->global->what != callable::storage_type || id->items[2]->k != object::kind::string ||
      id->items[4]->k != object::kind::integer)
    fail("a persistent id that is not ('storage', <storage type>, key, location, size)");
  const std::string& key = id->items[2]->text;
  const auto record = records_.find(prefix_ + "data/" + key);
  if (record == records_.end()) fail("storage " + quote_bytes(key) + " has no record " + quote_bytes(prefix_ + "data/" + key));
  const dtype type = id->items[1]->global->storage_dtype;
  const std::int64_t numel = id->items[4]->integer;
  const std::size_t element = (bit_width(type) / 8);
  if (numel < 0 || static_cast<std::uint64_t>(numel) > record->second.size() / element ||
      static_cast<std::uint64_t>(numel) * element != record->second.size())
    fail("storage " + quote_bytes(key) + " holds " + std::to_string(record->second.size()) + " bytes, not " +
         std::to_string(numel) + " elements of " + std::string(to_string(type)));
  auto s = objects_.make(object::kind::storage);
  objects_.spend(sizeof(storage_ref) + key.size());
  s->storage = std::make_unique<storage_ref>(storage_ref{type, record->second, key});
  return s;
}

ref torch_tensors::rebuild_tensor(const std::vector<ref>& a) {
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
  objects_.spend(map_entry_bytes + signature.size() + sizeof(tensor) + v.shape.size() * sizeof(std::int64_t));
  ref out = tensor_of(s, v);
  views_.emplace(std::move(signature), out);
  return out;
}

std::vector<std::int64_t> torch_tensors::int_tuple(const ref& x, std::string_view what) const {
  if (x->k != object::kind::tuple) fail("a tensor's " + std::string(what) + " is not a tuple");
  std::vector<std::int64_t> out;
  for (const auto& item : x->items) {
    if (item->k != object::kind::integer || item->integer < 0) fail("a tensor's " + std::string(what) + " holds a value that is not a non-negative int");
    out.push_back(item->integer);
  }
  return out;
}

// The view, checked: as many strides as sizes, every element it reaches inside the storage,
// and no overflow on the way.
torch_tensors::strided_view torch_tensors::checked_view(const storage_ref& s, std::int64_t offset, dims shape,
                                                        std::vector<std::int64_t> stride) const {
  strided_view v{.offset = offset, .shape = std::move(shape), .stride = std::move(stride)};
  if (v.stride.size() != v.shape.size())
    fail("a tensor of storage " + quote_bytes(s.key) + " has " + std::to_string(v.shape.size()) + " sizes but " +
         std::to_string(v.stride.size()) + " strides");
  const std::size_t element = (bit_width(s.type) / 8);
  const auto capacity = static_cast<std::int64_t>(s.bytes.size() / element);
  // The last element the view reaches must lie in the storage.
  std::int64_t last = offset;
  std::int64_t expected_stride = 1;
  for (std::size_t i = v.shape.size(); i-- > 0;) {
    const std::int64_t size = v.shape[i];
    if (size == 0) v.numel = 0;
    if (v.numel != 0 && __builtin_mul_overflow(v.numel, size, &v.numel))
      fail("a tensor of storage " + quote_bytes(s.key) + " has too many elements");
    if (size > 1) {
      std::int64_t reach = 0;
      if (__builtin_mul_overflow(size - 1, v.stride[i], &reach) || __builtin_add_overflow(last, reach, &last))
        fail("a tensor of storage " + quote_bytes(s.key) + " reaches past any storage");
      if (v.stride[i] != expected_stride) v.contiguous = false;
    }
    if (size > 0 && __builtin_mul_overflow(expected_stride, size, &expected_stride))
      expected_stride = std::numeric_limits<std::int64_t>::max();
  }
  v.last = last;
  if (offset < 0 || (v.numel > 0 && last >= capacity))
    fail("a tensor of shape " + to_string(v.shape) + " at offset " + std::to_string(offset) + " reaches past the " +
         std::to_string(capacity) + " elements of storage " + quote_bytes(s.key));
  if (__builtin_mul_overflow(static_cast<std::size_t>(v.numel), element, &v.nbytes))
    fail("a tensor of storage " + quote_bytes(s.key) + " has " + std::to_string(v.numel) + " elements of " +
         std::string(to_string(s.type)) + ", more bytes than memory has");
  return v;
}

// The tensor of a checked view: empty, a view of the file where its bytes are C order and
// little-endian, else a copy.
ref torch_tensors::tensor_of(const storage_ref& s, const strided_view& v) {
  auto out = objects_.make(object::kind::tensor);
  if (v.numel == 0) {
    out->value = std::make_unique<tensor>(tensor::copy_of(s.type, v.shape, {}));
  } else if (v.contiguous && !big_endian_) {
    const std::size_t element = (bit_width(s.type) / 8);
    out->value = std::make_unique<tensor>(tensor_access::view_of(
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
    const std::size_t element = bit_width(s.type) / 8;
    const std::span<const std::byte> reach = s.bytes.subspan(static_cast<std::size_t>(v.offset) * element,
                                                             static_cast<std::size_t>(v.last - v.offset + 1) * element);
    tensor read;
    if (mapping_ != nullptr) {
      data_.spend(reach.size());
      read = tensor_access::in_memory(tensor_access::view_of(
          dtype::u8, {static_cast<std::int64_t>(reach.size())}, reach, owner_, mapping_));
    }
    const std::byte* source = mapping_ != nullptr ? read.bytes().data() : reach.data();
    out->value = std::make_unique<tensor>(tensor::make(
        s.type, v.shape, [&](std::span<std::byte> dst) { gather(source, s.type, v.shape, v.stride, dst, big_endian_); }));
  }
  return out;
}

}  // namespace ckpt::detail
