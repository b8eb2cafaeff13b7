#include <ckpt/detail/pages.hpp>
#include <ckpt/adapt.hpp>
#include <ckpt/detail/cast.hpp>
#include <ckpt/detail/transpose.hpp>

#include "cast.hpp"

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <utility>

namespace ckpt {
namespace {

std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }

const tensor& entry_of(const checkpoint& t, std::string_view name, std::string_view adapter) {
  const tensor* x = t.find(name);
  if (x == nullptr)
    throw std::invalid_argument("ckpt: " + std::string(adapter) + ": no entry named " + in_quotes(name));
  return *x;
}

// The entries of `t` with the one named `name` replaced by `replacement` (kept in name order by
// the checkpoint's constructor).
checkpoint replace(const checkpoint& t, std::string_view name, std::vector<checkpoint::entry> replacement) {
  std::vector<checkpoint::entry> entries;
  entries.reserve(t.size() + replacement.size());
  for (const auto& e : t)
    if (e.first != name) entries.push_back(e);
  for (auto& e : replacement) entries.push_back(std::move(e));
  return checkpoint(std::move(entries), t.metadata());
}

std::size_t product(std::span<const std::int64_t> extents) {
  std::size_t n = 1;
  for (const std::int64_t e : extents) n *= static_cast<std::size_t>(e);
  return n;
}

}  // namespace

checkpoint rename(const checkpoint& t, const std::function<std::string(std::string_view)>& fn) {
  std::vector<checkpoint::entry> entries;
  entries.reserve(t.size());
  std::map<std::string, std::string, std::less<>> source_of;  // new name -> old name
  for (const auto& [name, x] : t) {
    std::string renamed = fn(name);
    if (renamed.empty())
      throw std::invalid_argument("ckpt: rename: entry " + in_quotes(name) + " is renamed to the empty name");
    if (renamed == "__metadata__")
      throw std::invalid_argument("ckpt: rename: entry " + in_quotes(name) +
                                  " is renamed to '__metadata__', which the format reserves");
    const auto [it, inserted] = source_of.emplace(renamed, name);
    if (!inserted)
      throw std::invalid_argument("ckpt: rename: entries " + in_quotes(it->second) + " and " + in_quotes(name) +
                                  " are both renamed to " + in_quotes(renamed));
    entries.emplace_back(std::move(renamed), x);
  }
  return checkpoint(std::move(entries), t.metadata());
}

checkpoint rename(const checkpoint& t, const name_pattern& pattern, std::string_view replacement) {
  static_cast<void>(pattern.replace("", replacement));  // a group the pattern lacks, before any entry
  return rename(t, [&](std::string_view name) { return pattern.replace(name, replacement); });
}

checkpoint transpose(const checkpoint& t, std::string_view name) {
  const tensor& x = entry_of(t, name, "transpose");
  if (x.rank() < 2)
    throw std::invalid_argument("ckpt: transpose: entry " + in_quotes(name) + " has shape " + to_string(x.shape()) +
                                ", not the 2 or more axes a transpose of the last two needs");
  if (detail::is_sub_byte(x.dtype()))
    throw std::invalid_argument("ckpt: transpose: entry " + in_quotes(name) + " has dtype " +
                                std::string(to_string(x.dtype())) +
                                ", whose packed elements are not byte-addressable");
  const std::size_t rank = x.rank();
  const auto rows = static_cast<std::size_t>(x.shape()[rank - 2]);
  const auto cols = static_cast<std::size_t>(x.shape()[rank - 1]);
  const std::size_t batch = product(x.shape().first(rank - 2));
  const std::size_t element = detail::bit_width(x.dtype()) / 8;
  dims shape(x.shape().begin(), x.shape().end());
  std::swap(shape[rank - 2], shape[rank - 1]);
  const tensor in = detail::tensor_access::in_memory(x);
  tensor result = tensor::make(x.dtype(), std::move(shape), [&](std::span<std::byte> out) {
    const std::size_t matrix = rows * cols * element;
    for (std::size_t b = 0; b < batch; ++b)
      detail::transpose(in.bytes().data() + b * matrix, out.data() + b * matrix, rows, cols, element);
  });
  return replace(t, name, {{std::string(name), std::move(result)}});
}

checkpoint split(const checkpoint& t, std::string_view name, const std::vector<std::string>& into,
                 std::int64_t axis) {
  const tensor& x = entry_of(t, name, "split");
  const std::string what = "ckpt: split: entry " + in_quotes(name) + " of shape " + to_string(x.shape());
  if (into.empty()) throw std::invalid_argument(what + ": no names to split it into");
  std::set<std::string_view> seen;
  for (const std::string& part : into) {
    if (part.empty()) throw std::invalid_argument(what + ": a part name is empty");
    if (part == "__metadata__")
      throw std::invalid_argument(what + ": the part name '__metadata__' is reserved by the format");
    if (!seen.insert(part).second) throw std::invalid_argument(what + ": the part name " + in_quotes(part) + " appears twice");
    if (part != name && t.contains(part))
      throw std::invalid_argument(what + ": the part name " + in_quotes(part) + " is already an entry");
  }
  const auto rank = static_cast<std::int64_t>(x.rank());
  if (rank == 0) throw std::invalid_argument(what + ": a scalar has no axis to split along");
  if (axis < -rank || axis >= rank)
    throw std::invalid_argument(what + ": axis " + std::to_string(axis) + " is out of range for " +
                                std::to_string(rank) + " axes");
  const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
  const auto parts = static_cast<std::int64_t>(into.size());
  const std::int64_t extent = x.shape()[a];
  if (extent % parts != 0)
    throw std::invalid_argument(what + ": the extent " + std::to_string(extent) + " of axis " + std::to_string(a) +
                                " does not divide into " + std::to_string(parts) + " equal parts");
  dims shape(x.shape().begin(), x.shape().end());
  shape[a] = extent / parts;
  const std::size_t part_bytes = x.nbytes() / into.size();
  if (detail::is_sub_byte(x.dtype())) {
    if (a != 0)
      throw std::invalid_argument(what + ": its dtype " + std::string(to_string(x.dtype())) +
                                  " is packed, so it splits along axis 0 only, not axis " + std::to_string(a));
    if (static_cast<std::size_t>(detail::numel_of(shape)) * detail::bit_width(x.dtype()) % 8 != 0)
      throw std::invalid_argument(what + ": parts of shape " + to_string(shape) + " of " +
                                  std::string(to_string(x.dtype())) + " are not whole bytes");
  }

  std::vector<checkpoint::entry> pieces;
  pieces.reserve(into.size());
  if (a == 0) {
    // The parts are consecutive runs of the bytes: views, which keep `x` (and so its file
    // mapping, for a loaded entry) alive.
    const auto owner = std::make_shared<const tensor>(x);
    for (std::size_t i = 0; i < into.size(); ++i)
      pieces.emplace_back(into[i], detail::tensor_access::view_of(x.dtype(), shape,
                                                                  x.bytes().subspan(i * part_bytes, part_bytes), owner,
                                                                  detail::tensor_access::file_of(x)));
  } else {
    // Each outer index contributes one run of `run` bytes to every part.
    const std::size_t outer = product(x.shape().first(a));
    const std::size_t run = part_bytes / (outer == 0 ? 1 : outer);
    const tensor in = detail::tensor_access::in_memory(x);
    for (std::size_t i = 0; i < into.size(); ++i)
      pieces.emplace_back(into[i], tensor::make(x.dtype(), shape, [&](std::span<std::byte> out) {
                            for (std::size_t o = 0; o < outer && run != 0; ++o)
                              std::memcpy(out.data() + o * run, in.bytes().data() + (o * into.size() + i) * run, run);
                          }));
  }
  return replace(t, name, std::move(pieces));
}

checkpoint fuse(const checkpoint& t, const std::vector<std::string>& parts, std::string_view into,
                       std::int64_t axis) {
  const std::string what = "ckpt: fuse: into " + in_quotes(into);
  if (parts.empty()) throw std::invalid_argument(what + ": no entries to fuse");
  if (into.empty()) throw std::invalid_argument("ckpt: fuse: the name of the result is empty");
  if (into == "__metadata__")
    throw std::invalid_argument(what + ": the name '__metadata__' is reserved by the format");
  std::set<std::string_view> seen;
  std::vector<const tensor*> xs;
  for (const std::string& part : parts) {
    if (!seen.insert(part).second) throw std::invalid_argument(what + ": the entry " + in_quotes(part) + " is named twice");
    xs.push_back(&entry_of(t, part, "fuse"));
  }
  if (!seen.contains(into) && t.contains(into))
    throw std::invalid_argument(what + ": " + in_quotes(into) + " is already an entry, and not one of the parts");
  const tensor& first = *xs.front();
  const auto rank = static_cast<std::int64_t>(first.rank());
  if (rank == 0) throw std::invalid_argument(what + ": the entry " + in_quotes(parts.front()) + " is a scalar, which has no axis");
  if (axis < -rank || axis >= rank)
    throw std::invalid_argument(what + ": axis " + std::to_string(axis) + " is out of range for the " +
                                std::to_string(rank) + " axes of " + in_quotes(parts.front()) + " " + to_string(first.shape()));
  const auto a = static_cast<std::size_t>(axis < 0 ? axis + rank : axis);
  dims shape(first.shape().begin(), first.shape().end());
  shape[a] = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const tensor& x = *xs[i];
    const auto both = [&](const std::string& of_first, const std::string& of_this) {
      return in_quotes(parts.front()) + " " + of_first + " and " + in_quotes(parts[i]) + " " + of_this;
    };
    if (x.dtype() != first.dtype())
      throw std::invalid_argument(what + ": the dtypes differ: " +
                                  both(std::string(to_string(first.dtype())), std::string(to_string(x.dtype()))));
    bool fits = x.rank() == first.rank();
    for (std::size_t k = 0; fits && k < x.rank(); ++k) fits = k == a || x.shape()[k] == first.shape()[k];
    if (!fits)
      throw std::invalid_argument(what + " along axis " + std::to_string(a) + ": the shapes disagree off that axis: " +
                                  both(to_string(first.shape()), to_string(x.shape())));
    if (detail::is_sub_byte(x.dtype()) &&
        (a != 0 || static_cast<std::size_t>(x.numel()) * detail::bit_width(x.dtype()) % 8 != 0))
      throw std::invalid_argument(what + ": the dtype " + std::string(to_string(x.dtype())) +
                                  " is packed: its parts join along axis 0 only, each a whole number of bytes (" +
                                  in_quotes(parts[i]) + " " + to_string(x.shape()) + ", axis " + std::to_string(a) + ")");
    shape[a] += x.shape()[a];
  }
  // Each outer index takes one run of bytes from every part, in order.
  const std::size_t outer = product(first.shape().first(a));
  std::vector<tensor> ins;
  ins.reserve(xs.size());
  for (const tensor* x : xs) ins.push_back(detail::tensor_access::in_memory(*x));
  tensor joined = tensor::make(first.dtype(), std::move(shape), [&](std::span<std::byte> out) {
    std::size_t at = 0;
    for (std::size_t o = 0; o < outer; ++o)
      for (const tensor& x : ins) {
        const std::size_t run = x.nbytes() / (outer == 0 ? 1 : outer);
        if (run != 0) std::memcpy(out.data() + at, x.bytes().data() + o * run, run);
        at += run;
      }
  });
  std::vector<checkpoint::entry> entries;
  entries.reserve(t.size() - parts.size() + 1);
  for (const auto& e : t)
    if (!seen.contains(e.first)) entries.push_back(e);
  entries.emplace_back(std::string(into), std::move(joined));
  return checkpoint(std::move(entries), t.metadata());
}

tensor cast(const tensor& x, dtype to) { return detail::cast_tensor(x, to); }

checkpoint cast(const checkpoint& t, dtype to, const std::function<bool(std::string_view)>& filter) {
  std::vector<checkpoint::entry> entries;
  entries.reserve(t.size());
  for (const auto& [name, x] : t) {
    const dtype from = x.dtype();
    const bool selected = detail::is_floating(from) && from != to && (!filter || filter(name));
    if (!selected || (!filter && detail::is_sub_byte(from))) {
      entries.emplace_back(name, x);
      continue;
    }
    if (!detail::can_cast(from, to))
      throw std::invalid_argument("ckpt: cast: entry " + in_quotes(name) + " cannot be cast from " +
                                  std::string(to_string(from)) + " to " + std::string(to_string(to)) +
                                  ": F6_E2M3, F6_E3M2 and F4 are raw bytes only");
    entries.emplace_back(name, detail::cast_tensor(x, to));
  }
  return checkpoint(std::move(entries), t.metadata());
}

}  // namespace ckpt
