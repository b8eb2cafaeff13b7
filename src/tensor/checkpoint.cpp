#include <ckpt/checkpoint.hpp>

#include "base/entry_name.hpp"
#include "base/metadata.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace ckpt {

struct checkpoint::contents {
  std::vector<entry> entries;  // sorted by name, names distinct
  metadata_map metadata;
};

namespace {
const checkpoint::entry* lower_bound(const std::vector<checkpoint::entry>& entries,
                                     std::string_view name) noexcept {
  const auto it = std::lower_bound(entries.begin(), entries.end(), name,
                                   [](const checkpoint::entry& e, std::string_view n) {
                                     return std::string_view(e.first) < n;
                                   });
  return it == entries.end() || it->first != name ? nullptr : &*it;
}

const std::vector<checkpoint::entry>& no_entries() {
  static const std::vector<checkpoint::entry> none;
  return none;
}
}  // namespace

checkpoint::checkpoint(std::vector<entry> entries, metadata_map metadata) {
  for (const entry& e : entries) detail::check_entry_name(e.first);
  const auto by_name = [](const entry& a, const entry& b) { return a.first < b.first; };
  // Entries mostly arrive sorted already (a loaded file, concat of sorted parts).
  if (!std::is_sorted(entries.begin(), entries.end(), by_name))
    std::sort(entries.begin(), entries.end(), by_name);
  const auto duplicate = std::adjacent_find(
      entries.begin(), entries.end(), [](const entry& a, const entry& b) { return a.first == b.first; });
  if (duplicate != entries.end())
    detail::entry_name_error(duplicate->first);
  if (!entries.empty() || !metadata.empty())
    contents_ = std::make_shared<const contents>(contents{std::move(entries), std::move(metadata)});
}

std::vector<std::string> checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(size());
  for (const entry& e : *this) out.push_back(e.first);
  return out;
}

const tensor* checkpoint::find(std::string_view name) const noexcept {
  if (!contents_) return nullptr;
  const entry* e = lower_bound(contents_->entries, name);
  return e ? &e->second : nullptr;
}

const tensor& checkpoint::get(std::string_view name) const {
  if (const tensor* t = find(name)) return *t;
  throw std::invalid_argument("ckpt: no entry named '" + std::string(name) + "'");
}

std::size_t checkpoint::size() const noexcept { return contents_ ? contents_->entries.size() : 0; }

checkpoint::const_iterator checkpoint::begin() const noexcept {
  return contents_ ? contents_->entries.begin() : no_entries().begin();
}

checkpoint::const_iterator checkpoint::end() const noexcept {
  return contents_ ? contents_->entries.end() : no_entries().end();
}

const metadata_map& checkpoint::metadata() const noexcept {
  static const metadata_map none;
  return contents_ ? contents_->metadata : none;
}

checkpoint checkpoint::with_metadata(metadata_map metadata) const {
  checkpoint out;
  if (size() != 0 || !metadata.empty())
    out.contents_ = std::make_shared<const contents>(
        contents{contents_ ? contents_->entries : std::vector<entry>{}, std::move(metadata)});
  return out;
}

checkpoint of_tensor(std::string_view name, const tensor& x) {
  std::vector<checkpoint::entry> entries;
  entries.emplace_back(std::string(name), x);
  return checkpoint(std::move(entries));
}

checkpoint of_int(std::string_view name, std::int64_t i) {
  detail::check_entry_name(name);
  if (i < std::numeric_limits<std::int32_t>::min() || i > std::numeric_limits<std::int32_t>::max())
    return of_tensor(name, tensor::copy_of(dtype::i64, {1}, std::as_bytes(std::span(&i, 1))));
  const auto value = static_cast<std::int32_t>(i);
  return of_tensor(name, tensor::copy_of(dtype::i32, {1}, std::as_bytes(std::span(&value, 1))));
}

std::int64_t to_int(std::string_view name, const checkpoint& t) {
  const tensor* x = t.find(name);
  if (!x) throw std::invalid_argument("ckpt: to_int: no entry named '" + std::string(name) + "'");
  if (x->numel() == 1 && x->dtype() == dtype::i32) return x->as<std::int32_t>()[0];
  if (x->numel() == 1 && x->dtype() == dtype::i64) return x->as<std::int64_t>()[0];
  throw std::invalid_argument("ckpt: to_int: entry '" + std::string(name) +
                              "' is not a one-element I32 or I64 tensor (it is " + std::string(to_string(x->dtype())) +
                              " of shape " + to_string(x->shape()) + ")");
}

checkpoint concat(std::span<const checkpoint> ts) {
  std::size_t total = 0;
  for (const checkpoint& t : ts) total += t.size();
  std::vector<checkpoint::entry> entries;
  entries.reserve(total);
  metadata_map metadata;
  for (const checkpoint& t : ts) {
    entries.insert(entries.end(), t.begin(), t.end());
    for (const auto& [key, value] : t.metadata()) detail::add_metadata(metadata, key, value, "concat");
  }
  return checkpoint(std::move(entries), std::move(metadata));
}

checkpoint concat(std::initializer_list<checkpoint> ts) {
  return concat(std::span<const checkpoint>(ts.begin(), ts.size()));
}

}  // namespace ckpt
