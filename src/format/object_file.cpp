// Checkpoint files as S3 objects (src/format/object_file.hpp), and ckpt::save / ckpt::load of
// `s3://` URLs (save_remote of src/format/save.hpp, src/format/remote.hpp) on them.
#include "object_file.hpp"

#include "base/digest.hpp"
#include "by_content.hpp"
#include "reader.hpp"
#include "remote.hpp"
#include "safetensors.hpp"
#include "save.hpp"
#include "torch.hpp"
#include "writer.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <thread>

namespace ckpt::detail::s3 {

bool write_object(const config& settings, const object& target, entry_list entries,
                  const metadata_map& metadata, const save_options& options, upload::existing rule) {
  upload out(settings, target, {}, rule);
  write_file(out, entries, metadata, options);
  return out.commit();
}

std::vector<std::byte> read_head(client& c, const object& o, std::optional<std::uint64_t> size) {
  // 64 KiB hold the length and the header of files of up to some 600 entries.
  constexpr std::size_t first_read = std::size_t{64} << 10;
  std::vector<std::byte> head(first_read);
  head.resize(c.get(o, 0, head, size));
  std::uint64_t length = 0;
  if (head.size() < 8 || looks_like_torch(head)) return head;
  std::memcpy(&length, head.data(), sizeof length);
  if (head.size() == first_read && length <= max_header_size && 8 + length > head.size()) {
    const std::size_t had = head.size();
    head.resize(static_cast<std::size_t>(8 + length));
    head.resize(had + c.get(o, had, std::span(head).subspan(had), size));
  }
  return head;
}

}  // namespace ckpt::detail::s3

namespace ckpt::detail {

void save_remote(const std::filesystem::path& url, entry_list entries, const metadata_map& metadata,
                 const save_options& options) {
  static_cast<void>(s3::write_object(s3::config::from_environment(), s3::object::parse(url.native()), entries, metadata,
                                     options, s3::upload::existing::replaced));
}

namespace {

// Entries whose bytes lie within this many bytes of each other are fetched by one ranged GET:
// about what a request costs in time on a fast link, so that a selection of many small
// neighbouring entries is a few requests, not one each.
constexpr std::uint64_t coalesce_gap = std::uint64_t{1} << 20;

// The safetensors object `o` of `size` bytes, whose first bytes `head` holds (read_head), with
// only the entries `options.only` matches: their bytes by ranged GETs in parallel, neighbours
// coalesced, into memory the checkpoint owns.
checkpoint load_chosen(const s3::config& settings, s3::client& c, const s3::object& o, std::uint64_t size,
                       std::span<const std::byte> head, const std::filesystem::path& url, const load_options& options) {
  file_layout layout = parse_layout(head, size, url, options.skipped);
  std::vector<file_layout::entry*> chosen;
  for (file_layout::entry& e : layout.entries)
    if (options.only->matches(e.name)) chosen.push_back(&e);
  std::ranges::sort(chosen, {}, &file_layout::entry::begin);

  // Runs of chosen entries fetched together, each placed in the buffer at an address with the
  // file offset's place in a 64-byte line, so that an entry aligned in the file is aligned here.
  struct run {
    std::uint64_t begin, end;  // in the data section
    std::size_t at;            // in the buffer
  };
  std::vector<run> runs;
  std::size_t total = 0;
  for (const file_layout::entry* e : chosen) {
    if (e->begin == e->end) continue;
    if (!runs.empty() && e->begin <= runs.back().end + coalesce_gap) {
      runs.back().end = std::max(runs.back().end, e->end);
      continue;
    }
    if (!runs.empty()) total += static_cast<std::size_t>(runs.back().end - runs.back().begin);
    total = (total + 63) / 64 * 64 + static_cast<std::size_t>((layout.data_start + e->begin) % 64);
    runs.push_back({e->begin, e->end, total});
  }
  if (!runs.empty()) total += static_cast<std::size_t>(runs.back().end - runs.back().begin);
  const std::shared_ptr<std::byte[]> bytes = std::make_shared_for_overwrite<std::byte[]>(std::max<std::size_t>(total, 1));
  std::vector<s3::piece> pieces;
  const std::size_t part = s3::transfer_options{}.part_bytes;
  for (const run& r : runs)
    for (std::uint64_t at = r.begin; at < r.end; at += part)
      pieces.push_back({layout.data_start + at, {bytes.get() + r.at + (at - r.begin),
                                                 static_cast<std::size_t>(std::min<std::uint64_t>(part, r.end - at))}});
  s3::fetch(settings, c, o, size, pieces, s3::transfer_options{}.threads);

  std::vector<checkpoint::entry> entries;
  entries.reserve(chosen.size());
  auto r = runs.begin();
  for (file_layout::entry* e : chosen) {
    while (r != runs.end() && r->end < e->end) ++r;
    const std::span<const std::byte> data =
        e->begin == e->end ? std::span<const std::byte>()
                           : std::span<const std::byte>(bytes.get() + r->at + (e->begin - r->begin), e->end - e->begin);
    entries.emplace_back(std::move(e->name), tensor::view_of(e->type, std::move(e->shape), data, bytes));
  }
  return checkpoint(std::move(entries), std::move(layout.metadata));
}

}  // namespace

struct remote_folder::impl {
  s3::client client;
  s3::object prefix;  // the key: "" or ending with '/'
};

remote_folder::remote_folder(const std::filesystem::path& url) {
  s3::object prefix = s3::object::parse(url.native(), /*key_required=*/false);
  while (prefix.key.ends_with('/')) prefix.key.pop_back();
  if (!prefix.key.empty()) prefix.key += '/';
  impl_ = std::make_unique<impl>(impl{s3::client(s3::config::from_environment()), std::move(prefix)});
}

remote_folder::~remote_folder() = default;

std::optional<std::string> remote_folder::read(const std::string& name) {
  const s3::object o{impl_->prefix.bucket, impl_->prefix.key + name};
  try {
    return impl_->client.get(o);
  } catch (const remote_error& e) {
    if (e.status() == 404 && e.code() != "NoSuchBucket") return std::nullopt;
    throw;
  }
}

void remote_folder::write(const std::string& name, std::string_view text) {
  static_cast<void>(impl_->client.put({impl_->prefix.bucket, impl_->prefix.key + name}, std::as_bytes(std::span(text))));
}

std::vector<std::string> remote_folder::names() {
  std::vector<std::string> out;
  for (const s3::object_info& o : impl_->client.list(impl_->prefix.bucket, impl_->prefix.key))
    if (std::string name = o.key.substr(impl_->prefix.key.size()); name.find('/') == std::string::npos)
      out.push_back(std::move(name));
  return out;
}

void remote_folder::remove(const std::string& name) { impl_->client.remove({impl_->prefix.bucket, impl_->prefix.key + name}); }

std::filesystem::path remote_folder::path_of(const std::string& name) const {
  return s3::object{impl_->prefix.bucket, impl_->prefix.key + name}.url();
}

namespace {

// The object `o` of `size` bytes whose first bytes `head` holds (read_head's) whole in memory,
// the rest fetched by ranged GETs in parallel. With `data_start` (a safetensors object whose
// digest is to be checked: where its data section starts), the pieces are cut on the section's
// 1 MiB chunks and the thread that fetched a piece hashes its chunks while they are in its cache,
// into `hashes` as verify_file gives them (the header's first, left for the reader to take), so
// that the digest check reads no byte again; `progress` (load_options::progress) hears of the
// bytes hashed, on this thread.
std::shared_ptr<std::byte[]> fetch_whole(const s3::config& settings, s3::client& c, const s3::object& o,
                                         std::uint64_t size, std::span<const std::byte> head,
                                         std::optional<std::size_t> data_start, std::vector<std::uint64_t>& hashes,
                                         const load_options& options) {
  const auto whole = static_cast<std::size_t>(size);
  auto bytes = std::make_shared_for_overwrite<std::byte[]>(std::max<std::size_t>(whole, 1));
  std::memcpy(bytes.get(), head.data(), std::min(head.size(), whole));
  const std::size_t part = s3::transfer_options{}.part_bytes;
  static_assert(s3::transfer_options{}.part_bytes % file_digest_chunk_bytes == 0, "a piece is whole chunks");
  // Each piece of the object, [first, last): from the data section's start with a digest to
  // check (the first piece's fetch starting where the head ends), else from the head's end.
  struct span {
    std::size_t first, last;
  };
  std::vector<span> spans;
  for (std::size_t at = data_start.value_or(head.size()); at < whole; at += part)
    spans.push_back({at, std::min(whole, at + part)});
  std::vector<s3::piece> pieces;
  std::vector<std::size_t> span_of;  // of each piece
  std::vector<std::size_t> in_head;  // the spans the head holds whole
  for (std::size_t k = 0; k < spans.size(); ++k) {
    const std::size_t from = std::max(spans[k].first, head.size());
    if (from >= spans[k].last) {
      in_head.push_back(k);
      continue;
    }
    pieces.push_back({from, {bytes.get() + from, spans[k].last - from}});
    span_of.push_back(k);
  }
  std::function<void(std::size_t)> arrived;
  std::atomic<std::uint64_t> hashed{0};
  std::optional<std::uint64_t> reported;
  const std::thread::id loader = std::this_thread::get_id();
  const std::uint64_t data = data_start ? whole - *data_start : 0;
  const auto report = [&](std::uint64_t done) {
    if (!options.progress || reported == done) return;
    reported = done;
    options.progress(done, data);
  };
  const auto hash = [&](std::size_t k) {
    const span s = spans[k];
    for (std::size_t at = s.first; at < s.last; at += file_digest_chunk_bytes)
      hashes[1 + (at - *data_start) / file_digest_chunk_bytes] =
          xxh3_of({bytes.get() + at, std::min(file_digest_chunk_bytes, s.last - at)});
    const std::uint64_t done = hashed += s.last - s.first;
    if (std::this_thread::get_id() == loader) report(done);
  };
  if (data_start) {
    hashes.assign(1 + (data + file_digest_chunk_bytes - 1) / file_digest_chunk_bytes, 0);
    for (const std::size_t k : in_head) hash(k);
    arrived = [&](std::size_t piece) { hash(span_of[piece]); };
  }
  s3::fetch(settings, c, o, size, pieces, s3::transfer_options{}.threads, arrived);
  if (data_start) report(data);
  return bytes;
}

// Ignores entries of unknown dtypes: the reader that parses the header again reports them.
void unheard(std::string_view, std::string_view) {}

// An object in a bucket, its size and the first read of it (the header, or its start).
struct opened_object {
  s3::config settings = s3::config::from_environment();
  s3::object o;
  s3::client c{settings};
  std::uint64_t size;
  std::vector<std::byte> head;

  explicit opened_object(const std::filesystem::path& url)
      : o(s3::object::parse(url.native())), size(s3::size_of(c, o)), head(s3::read_head(c, o, size)) {}

  // A torch.save file is read whole (its entries are found by unpickling, not by offsets);
  // nothing if it is not one.
  std::optional<checkpoint> torch_file(const std::filesystem::path& url, const load_options& options,
                                       const torch_options& torch) {
    if (!looks_like_torch(head)) return std::nullopt;
    std::vector<std::uint64_t> none;
    std::shared_ptr<std::byte[]> bytes = fetch_whole(settings, c, o, size, head, std::nullopt, none, options);
    return parse_owned_by_content(std::move(bytes), static_cast<std::size_t>(size), url, options, torch);
  }
};

}  // namespace

checkpoint load_remote(const std::filesystem::path& url, const load_options& options, const torch_options& torch) {
  opened_object object(url);
  if (std::optional<checkpoint> t = object.torch_file(url, options, torch)) return std::move(*t);
  auto& [settings, o, c, size, head] = object;
  if (options.only) return load_chosen(settings, c, o, size, head, url, options);
  // The header first: a broken one is refused before the data are fetched, and the digest's
  // chunks are known.
  const file_layout layout = parse_layout(head, size, url, unheard);
  std::optional<std::size_t> data_start;
  if (layout.digest_at && checks_digest(options)) data_start = layout.data_start;
  std::vector<std::uint64_t> hashes;
  std::shared_ptr<std::byte[]> bytes = fetch_whole(settings, c, o, size, head, data_start, hashes, options);
  return parse_owned(std::move(bytes), static_cast<std::size_t>(size), url, options, hashes);
}

description describe_remote(const std::filesystem::path& url, const load_options& options, const torch_options& torch) {
  opened_object object(url);
  if (std::optional<checkpoint> t = object.torch_file(url, options, torch)) return description_of(detail::chosen(*t, options));
  file_layout layout = parse_layout(object.head, object.size, url, options.skipped);
  description out;
  for (file_layout::entry& e : layout.entries)
    if (!options.only || options.only->matches(e.name))
      out.entries.push_back({{std::move(e.name), e.type, std::move(e.shape)}, e.end - e.begin});
  std::ranges::sort(out.entries, {}, &description::entry::name);
  out.metadata = std::move(layout.metadata);
  return out;
}

struct fetch_count::impl {
  s3::traffic traffic;
  s3::counting scope{traffic};
};

fetch_count::fetch_count(const load_options& options)
    : options_(options), impl_(options.fetched ? std::make_unique<impl>() : nullptr) {}

fetch_count::~fetch_count() = default;

void fetch_count::report() const {
  if (impl_) options_.fetched(impl_->traffic.bytes.load(), impl_->traffic.requests.load());
}

}  // namespace ckpt::detail
