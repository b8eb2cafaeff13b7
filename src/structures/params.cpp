#include <ckpt/params.hpp>
#include <ckpt/detail/pages.hpp>
#include <ckpt/detail/lazy_copy.hpp>

#include "base/entry_name.hpp"
#include "base/memory.hpp"
#include "base/parallel.hpp"
#include "base/tuning.hpp"
#include "io/mapped_file.hpp"
#include "tensor/cast.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <unordered_set>
#include <string>
#include <vector>

namespace ckpt::detail {

void leaf_name_error(std::string_view name, std::string_view function) { entry_name_error(name, function); }

void check_leaf_names(std::span<const std::string> names, std::string_view function) {
  // A hash set, not a sort: the check takes time linear in the names, whatever their order.
  std::unordered_set<std::string_view> seen;
  seen.reserve(names.size());
  for (const std::string& name : names)
    if (name.empty() || !seen.insert(name).second) leaf_name_error(name, function);
}

namespace {

bool under_prefix(std::string_view name, std::string_view prefix) {
  return prefix.empty() || name == prefix ||
         (name.size() > prefix.size() && name.starts_with(prefix) && name[prefix.size()] == '.');
}

bool under_any(std::string_view name, std::span<const std::string_view> prefixes) {
  return std::ranges::any_of(prefixes, [name](std::string_view prefix) { return under_prefix(name, prefix); });
}

// "'a', 'b'": names quoted and joined.
std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "'" : ", '") + name + "'";
  return out;
}

std::string counted(std::size_t count, std::string_view one, std::string_view many) {
  return std::to_string(count) + " " + std::string(count == 1 ? one : many);
}

// When nothing in `t` is under any of `under` (none of them empty), the hint " (nothing in the
// checkpoint is under 'p'; its prefixes are 'a', 'b')" naming the first parts of the entries'
// names (the first five, with the count when there are more); otherwise nothing.
std::string prefix_hint(const checkpoint& t, std::span<const std::string_view> under) {
  if (under.empty() || std::ranges::any_of(under, &std::string_view::empty)) return {};
  std::set<std::string> prefixes;
  for (const auto& [name, entry] : t) {
    if (under_any(name, under)) return {};
    prefixes.insert(name.substr(0, name.find('.')));
  }
  std::string hint = " (nothing in the checkpoint is under " +
                     quoted_list(std::vector<std::string>(under.begin(), under.end()));
  if (prefixes.empty()) return hint + "; it is empty)";
  constexpr std::size_t shown = 5;
  const std::vector<std::string> first(prefixes.begin(), std::next(prefixes.begin(), static_cast<std::ptrdiff_t>(
                                                                                         std::min(shown, prefixes.size()))));
  if (prefixes.size() <= shown) return hint + "; its prefixes are " + quoted_list(first) + ")";
  return hint + "; its " + std::to_string(prefixes.size()) + " prefixes begin " + quoted_list(first) + ")";
}

// The small entries of a loaded file, read into a staging band a window at a time.
class staged_entries {
 public:
  // `entry` as a tensor in memory if it is a small entry of a loaded file (read, with the
  // entries that follow it and fit the band, if the band does not hold it yet); null otherwise,
  // for the leaf to read from `entry` itself. upcoming(visit) calls visit(next) for the entries
  // read next, in order, until it returns false.
  template <class Upcoming>
  std::optional<tensor> stage(const tensor& entry, const Upcoming& upcoming) {
    const mapped_file* file = tensor_access::file_of(entry);
    const std::span<const std::byte> b = entry.bytes();
    if (file == nullptr || b.empty() || b.size() >= tuning::staged_bytes) return std::nullopt;
    if (file != file_ || b.data() < window_.data() || b.data() + b.size() > window_.data() + window_.size()) {
      if (!band_) band_.emplace();
      // The window starts 64-byte aligned in the file, so that entries keep the alignment the
      // file gives them; it ends with the last of the next entries that fit the band.
      const std::byte* const base = file->bytes().data();
      const std::byte* const begin = base + (b.data() - base) / 64 * 64;
      const std::byte* end = b.data() + b.size();
      upcoming([&](const tensor& next) {
        const std::span<const std::byte> n = next.bytes();
        if (tensor_access::file_of(next) != file || n.size() >= tuning::staged_bytes || n.data() < begin ||
            n.data() + n.size() > begin + tuning::staging_bytes)
          return false;
        end = std::max(end, n.data() + n.size());
        return true;
      });
      window_ = {begin, static_cast<std::size_t>(end - begin)};
      file_ = file;
      file->read(window_, band_->data());
    }
    const std::span<const std::int64_t> shape = entry.shape();
    return tensor::view_of(entry.dtype(), dims(shape.begin(), shape.end()),
                           {band_->data() + (b.data() - window_.data()), b.size()}, band_->owner());
  }

 private:
  std::optional<staging_band> band_;
  const mapped_file* file_ = nullptr;
  std::span<const std::byte> window_;  // the bytes of the file's mapping the band holds
};

// The reads of read_entries: leaf k from entries[k], the leaves in the order order_ gives, in one
// run or in two runs on two threads.
class entry_reads {
 public:
  entry_reads(std::span<const leaf_read> leaves, std::span<const tensor* const> entries)
      : leaves_(leaves), entries_(entries), alone_(std::ranges::all_of(leaves, &leaf_read::reads_alone)),
        total_(total_bytes()), order_(read_order()) {}

  // Reads every leaf: in two runs on two threads when every leaf reads alone and they read
  // tuning::parallel_read_bytes or more, else in one run.
  void read_all() const {
    const std::size_t count = order_.size();
    if (!alone_ || total_ < tuning::parallel_read_bytes || count < 2) return read_run(0, count);
    const std::size_t middle = second_run();
    run_in_parallel(2, [&](std::size_t part, std::size_t parts) {
      if (parts == 1) read_run(0, count);
      else if (part == 0) read_run(0, middle);
      else read_run(middle, count);
    });
  }

 private:
  // The bytes leaf k reads.
  [[nodiscard]] std::size_t bytes_of(std::size_t k) const {
    return leaves_[k].reads_bytes && entries_[k] != nullptr ? entries_[k]->nbytes() : 0;
  }

  [[nodiscard]] std::size_t total_bytes() const {
    std::size_t total = 0;
    for (std::size_t k = 0; k < leaves_.size(); ++k) total += bytes_of(k);
    return total;
  }

  // Leaves that read alone are read in the order of their bytes in the file (reading a file
  // front to back is what its read-ahead and the disk do best; entries named layers.0 ..
  // layers.10 are not stored in that order), unless they average less than tuning::file_order_bytes;
  // other leaves in their own order. Leaves without an entry (kept) are not read.
  [[nodiscard]] std::vector<std::size_t> read_order() const {
    std::vector<std::size_t> order;
    order.reserve(leaves_.size());
    for (std::size_t k = 0; k < leaves_.size(); ++k)
      if (entries_[k] != nullptr) order.push_back(k);
    if (alone_ && total_ >= tuning::file_order_bytes * leaves_.size())
      std::ranges::sort(order, std::less<>{}, [this](std::size_t k) { return entries_[k]->bytes().data(); });
    return order;
  }

  // Where the second run starts in order_: at the first entry at or past half of the bytes,
  // leaving the first run at least one entry.
  [[nodiscard]] std::size_t second_run() const {
    std::size_t middle = 1;
    for (std::size_t before = bytes_of(order_[0]); middle + 1 < order_.size() && before < total_ / 2; ++middle)
      before += bytes_of(order_[middle]);
    return middle;
  }

  // Reads the leaves at positions [first, last) of order_, the small entries of a loaded file
  // staged with those that follow them.
  void read_run(std::size_t first, std::size_t last) const {
    staged_entries staged;
    for (std::size_t pos = first; pos < last; ++pos) {
      const std::size_t k = order_[pos];
      // The entries after this one whose leaves read bytes: the band's window may cover them.
      const auto upcoming = [&](const auto& visit) {
        for (std::size_t p = pos + 1; p < last; ++p)
          if (leaves_[order_[p]].reads_bytes && !visit(*entries_[order_[p]])) return;
      };
      const std::optional<tensor> copy = leaves_[k].reads_bytes ? staged.stage(*entries_[k], upcoming) : std::nullopt;
      leaves_[k].read(copy ? *copy : *entries_[k]);
    }
  }

  std::span<const leaf_read> leaves_;
  std::span<const tensor* const> entries_;
  bool alone_;                      // every leaf reads alone
  std::size_t total_;               // the bytes the leaves read
  std::vector<std::size_t> order_;  // the leaves in the order they are read
};

// Reads each entry into its leaf (none where the entry is null: the leaf is kept). Small entries
// of a loaded file (under tuning::staged_bytes) reach their leaves staged: runs of them read with one
// pread into a staging band, which the leaves copy from; larger ones are read by the leaves
// themselves, from the file (ckpt/detail/pages.hpp). When every leaf reads alone, two runs of
// leaves of about equal bytes are read on two threads; otherwise the leaves are read in order on
// this thread.
void read_entries(std::span<const leaf_read> leaves, std::span<const tensor* const> entries) {
  entry_reads(leaves, entries).read_all();
}

// The strict error's hints: how to relax each kind of problem.
constexpr std::string_view keep_hint = "keep_missing = true keeps the template's values";
constexpr std::string_view ignore_hint = "strict = false ignores them";
constexpr std::string_view overlap_hint = "copy_overlap = true copies the block both shapes share";

// " (hint)" where `shown`, else nothing.
std::string hint(bool shown, std::string_view text) { return shown ? " (" + std::string(text) + ")" : std::string(); }

// "'w' [2, 3] (the template's [4, 3])": one shape that differs.
std::string shape_difference(std::string_view name, std::span<const std::int64_t> saved, std::span<const std::int64_t> now) {
  return "'" + std::string(name) + "' " + to_string(saved) + " (the template's " + to_string(now) + ")";
}

// Whether copy_overlap can copy `entry` into a leaf of shape `now`: as many dimensions (at least
// one), whole bytes per element.
bool overlaps(const tensor& entry, std::span<const std::int64_t> now) {
  return !now.empty() && entry.shape().size() == now.size() && bit_width(entry.dtype()) % 8 == 0;
}

// `into` (the leaf's value, C order) with the block it shares with `from` (same dtype and number
// of dimensions, C order) replaced by `from`'s elements: one run of the last dimension at a time.
tensor overlay(const tensor& into, const tensor& from) {
  const std::span<const std::int64_t> to_shape = into.shape(), from_shape = from.shape();
  const std::size_t rank = to_shape.size(), element = bit_width(into.dtype()) / 8;
  dims common(rank);
  for (std::size_t d = 0; d < rank; ++d) common[d] = std::min(to_shape[d], from_shape[d]);
  const dims shape(to_shape.begin(), to_shape.end());
  return tensor::make(into.dtype(), shape, [&](std::span<std::byte> out) {
    if (!out.empty()) std::memcpy(out.data(), into.bytes().data(), out.size());
    if (std::ranges::any_of(common, [](std::int64_t n) { return n == 0; })) return;
    const auto run = static_cast<std::size_t>(common[rank - 1]) * element;
    std::vector<std::int64_t> index(rank, 0);  // the first rank - 1 indices of the current run
    for (;;) {
      std::size_t to_offset = 0, from_offset = 0;
      for (std::size_t d = 0; d < rank; ++d) {
        to_offset = to_offset * static_cast<std::size_t>(to_shape[d]) + static_cast<std::size_t>(index[d]);
        from_offset = from_offset * static_cast<std::size_t>(from_shape[d]) + static_cast<std::size_t>(index[d]);
      }
      std::memcpy(out.data() + to_offset * element, from.bytes().data() + from_offset * element, run);
      std::size_t d = rank - 1;  // the next run: the last of the first rank - 1 indices that can grow
      while (d > 0 && ++index[d - 1] == common[d - 1]) index[--d] = 0;
      if (d == 0) return;
    }
  });
}

}  // namespace

read_report read_planned(const checkpoint& t, read_plan& plan, const extract_options& options,
                         std::string_view function, bool strict_default) {
  // A read replaces leaves a background save may still have to copy: they are copied first.
  finish_lazy_copies();
  const std::span<const leaf_read> leaves = plan.leaves;
  const bool strict = options.strict.value_or(strict_default);
  const std::vector<std::string_view> prefixes(plan.prefixes.begin(), plan.prefixes.end());
  // Each leaf's entry, looked up once (null where there is none). Entries are in name order, and
  // consecutive leaves are often consecutive entries (`layers.12345`, `layers.12346`): the entry
  // after the last one found is tried before a binary search (100,000 leaves: a fifth of a read
  // of small leaves went to the searches' string comparisons).
  std::vector<const tensor*> entries;
  entries.reserve(leaves.size());
  // Two leaves of one name find the same entry: marking the entries found sees that without
  // hashing every name (a tenth of a read of 100,000 small leaves).
  std::vector<bool> found(t.size());
  bool twice = false;
  auto next = t.end();  // the entry after the last one found
  for (const leaf_read& leaf : leaves) {
    auto it = next;
    if (it == t.end() || it->first != leaf.name) {
      it = std::ranges::lower_bound(t, std::string_view(leaf.name), std::less<>{}, &checkpoint::entry::first);
      if (it != t.end() && it->first != leaf.name) it = t.end();
    }
    if (it == t.end()) {
      entries.push_back(nullptr);
      continue;
    }
    entries.push_back(&it->second);
    const auto index = static_cast<std::size_t>(it - t.begin());
    twice = twice || found[index];
    found[index] = true;
    next = std::next(it);
  }
  // The names first: none empty, no two alike. The names themselves are checked where two leaves
  // found one entry, or where an entry is missing (an error or a report follows in either case).
  const bool names_checked = !twice && std::ranges::none_of(entries, [](const tensor* e) { return e == nullptr; }) &&
                             std::ranges::none_of(leaves, [](const leaf_read& l) { return l.name.empty(); });
  if (!names_checked) {
    std::vector<std::string> names;
    names.reserve(leaves.size());
    for (const leaf_read& leaf : leaves) names.push_back(leaf.name);
    check_leaf_names(names, function);
  }
  const std::string prefix = "ckpt: " + std::string(function) + ": ";
  read_report report;

  // Missing: leaves without an entry, and the entries the sections read themselves.
  std::vector<std::string> missing;
  for (std::size_t k = 0; k < leaves.size(); ++k)
    if (entries[k] == nullptr) missing.push_back(leaves[k].name);
  std::vector<bool> own_present;
  for (const own_entry& own : plan.own) {
    own_present.push_back(t.find(own.name) != nullptr);
    if (!own_present.back()) missing.push_back(own.name);
  }
  // Not strict, the first missing leaf in the template's order is reported (Kaun's rule).
  const std::string first_missing = missing.empty() ? std::string() : missing.front();
  std::ranges::sort(missing);
  // Left over: the entries under the prefixes no leaf found, in the checkpoint's (name) order.
  std::vector<std::string> left_over;
  std::size_t index = 0;
  for (const checkpoint::entry& e : t)
    if (!found[index++] && under_any(e.first, prefixes) &&
        std::ranges::none_of(plan.own, [&e](const own_entry& own) { return own.name == e.first; }))
      left_over.push_back(e.first);
  // Shapes that differ, and those copy_overlap copies.
  std::vector<std::size_t> differ, overlapped;
  for (std::size_t k = 0; k < leaves.size(); ++k)
    if (entries[k] != nullptr && !std::ranges::equal(entries[k]->shape(), leaves[k].shape))
      (options.copy_overlap && overlaps(*entries[k], leaves[k].shape) ? overlapped : differ).push_back(k);

  if (options.keep_missing) report.kept = missing;
  if (!strict) report.ignored = left_over;
  if (strict) {
    // Architecture drift first, all of it at once: every entry missing, left over or reshaped.
    std::vector<std::string> parts;
    if (!options.keep_missing && !missing.empty())
      parts.push_back(counted(missing.size(), "entry", "entries") + " missing: " + quoted_list(missing) +
                      hint(plan.keeps_values, keep_hint));
    if (!left_over.empty())
      parts.push_back(counted(left_over.size(), "entry", "entries") + " not in the template: " +
                      quoted_list(left_over) + " (" + std::string(ignore_hint) + ")");
    if (!differ.empty()) {
      std::ranges::sort(differ, std::less<>{}, [&](std::size_t k) -> const std::string& { return leaves[k].name; });
      std::string shapes;
      for (const std::size_t k : differ)
        shapes += (shapes.empty() ? "" : ", ") + shape_difference(leaves[k].name, entries[k]->shape(), leaves[k].shape);
      parts.push_back(counted(differ.size(), "entry", "entries") + " of another shape: " + shapes +
                      hint(plan.keeps_values && !options.copy_overlap, overlap_hint));
    }
    if (!parts.empty()) {
      std::string message = prefix + "strict read: ";
      for (std::size_t p = 0; p < parts.size(); ++p) message += (p == 0 ? "" : "; ") + parts[p];
      throw std::invalid_argument(message + prefix_hint(t, prefixes));
    }
  }
  if (!options.keep_missing && !missing.empty())
    throw std::invalid_argument(prefix + "no entry named '" + first_missing + "'" + prefix_hint(t, prefixes));
  if (!differ.empty()) {
    const std::size_t k = differ.front();
    throw std::invalid_argument(prefix + "entry '" + leaves[k].name + "' has shape " + to_string(entries[k]->shape()) +
                                " but the template's leaf has shape " + to_string(leaves[k].shape) +
                                hint(plan.keeps_values && !options.copy_overlap, overlap_hint));
  }
  for (std::size_t k = 0; k < leaves.size(); ++k) {
    const leaf_read& leaf = leaves[k];
    const tensor* entry = entries[k];
    if (entry == nullptr || entry->dtype() == leaf.dtype) continue;
    if (!options.cast)
      throw std::invalid_argument(prefix + "entry '" + leaf.name + "' has dtype " +
                                  std::string(to_string(entry->dtype())) + " but the template's leaf has dtype " +
                                  std::string(to_string(leaf.dtype)) + " (pass cast = true to convert)");
    if (!can_cast(entry->dtype(), leaf.dtype)) (void)cast_tensor(*entry, leaf.dtype);  // throws cast's own message
    report.cast.push_back({leaf.name, entry->dtype(), leaf.dtype});
  }
  // A loaded file truncated since `load` is refused here, before any leaf is written (a truncation
  // during the reads is caught by pread too, with the leaves read so far written). Consecutive
  // entries share their file.
  const mapped_file* checked = nullptr;
  for (const tensor* entry : entries)
    if (entry != nullptr)
      if (const mapped_file* file = tensor_access::file_of(*entry); file != nullptr && file != checked) {
        file->check_size();
        checked = file;
      }
  // The entries the sections read themselves check and keep their values.
  for (std::size_t o = 0; o < plan.own.size(); ++o)
    if (own_present[o]) plan.own[o].prepare(t, function);
  // The entries copied partly become tensors of their leaves' shapes, the leaves' values around
  // the block they share.
  std::vector<tensor> made;
  made.reserve(overlapped.size());
  for (const std::size_t k : overlapped) {
    const tensor* entry = entries[k];
    const tensor converted = entry->dtype() == leaves[k].dtype ? *entry : cast_tensor(*entry, leaves[k].dtype);
    made.push_back(overlay(leaves[k].current(), converted));
    report.reshaped.push_back({leaves[k].name, dims(entry->shape().begin(), entry->shape().end()), leaves[k].shape});
    entries[k] = &made.back();
  }
  read_entries(leaves, entries);
  for (const auto& commit : plan.commits) commit();

  report.restored = static_cast<std::size_t>(std::ranges::count_if(entries, [](const tensor* e) { return e != nullptr; })) -
                    overlapped.size() + static_cast<std::size_t>(std::ranges::count(own_present, true));
  std::ranges::sort(report.reshaped, std::less<>{}, &read_report::reshape::name);
  std::ranges::sort(report.cast, std::less<>{}, &read_report::conversion::name);
  return report;
}

}  // namespace ckpt::detail

namespace ckpt {

std::string read_report::to_string() const {
  std::string out = "restored " + detail::counted(restored, "entry", "entries") + " as saved";
  const auto names = [](const std::vector<std::string>& list) { return detail::quoted_list(list); };
  if (!cast.empty()) {
    out += "\ncast " + detail::counted(cast.size(), "entry", "entries") + ": ";
    for (std::size_t k = 0; k < cast.size(); ++k)
      out += (k == 0 ? "'" : ", '") + cast[k].name + "' " + std::string(ckpt::to_string(cast[k].saved)) + " -> " +
             std::string(ckpt::to_string(cast[k].now));
  }
  if (!reshaped.empty()) {
    out += "\ncopied " + detail::counted(reshaped.size(), "entry", "entries") + " partly: ";
    for (std::size_t k = 0; k < reshaped.size(); ++k)
      out += (k == 0 ? "'" : ", '") + reshaped[k].name + "' " + ckpt::to_string(reshaped[k].saved) + " -> " +
             ckpt::to_string(reshaped[k].now);
  }
  if (!kept.empty())
    out += "\nkept " + detail::counted(kept.size(), "leaf", "leaves") + " with no entry: " + names(kept);
  if (!ignored.empty())
    out += "\nignored " + detail::counted(ignored.size(), "entry", "entries") + " with no leaf: " + names(ignored);
  return out;
}

}  // namespace ckpt
