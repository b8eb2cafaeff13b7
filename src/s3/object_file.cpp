// Checkpoint files as S3 objects (src/s3/object_file.hpp), and ckpt::save / ckpt::load of
// `s3://` URLs (src/remote.hpp) on them.
#include "object_file.hpp"

#include "../by_content.hpp"
#include "../file.hpp"
#include "../remote.hpp"
#include "../safetensors.hpp"
#include "../torch.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <stdexcept>

namespace ckpt::detail::s3 {

namespace {

// S3's limits: at most 10,000 parts, each at least 5 MiB but the last.
constexpr std::uint64_t max_parts = 10'000;
constexpr std::size_t min_part_bytes = std::size_t{5} << 20;

}  // namespace

upload::upload(config settings, object target, transfer_options options, existing rule)
    : config_(std::move(settings)), target_(std::move(target)), options_(options), rule_(rule), client_(config_) {
  options_.part_bytes = std::max(options_.part_bytes, min_part_bytes);
  options_.threads = std::max(options_.threads, 1);
}

upload::~upload() {
  stop();
  if (committed_ || upload_id_.empty()) return;
  try {
    client_.abort_upload(target_, upload_id_);
  } catch (const std::exception&) {  // the server drops it after its own delay; a new manager aborts it too
  }
}

void upload::begin(std::uint64_t total) {
  // Parts large enough for the whole file to fit in 10,000, in whole MiB.
  const std::uint64_t needed = (total + max_parts - 1) / max_parts;
  const std::uint64_t mib = std::uint64_t{1} << 20;
  options_.part_bytes = std::max<std::size_t>(options_.part_bytes, static_cast<std::size_t>((needed + mib - 1) / mib * mib));
}

void upload::write(std::vector<iovec>& pieces) {
  rethrow_failure();
  for (const iovec& piece : pieces) add(static_cast<const std::byte*>(piece.iov_base), piece.iov_len);
  pieces.clear();
}

void upload::add(const std::byte* bytes, std::size_t n) {
  while (n > 0) {
    // The first part is kept to the end; the others go as soon as they are full.
    std::vector<std::byte>& into = first_.size() < options_.part_bytes ? first_ : filling_;
    if (into.capacity() < options_.part_bytes) into.reserve(options_.part_bytes);
    const std::size_t take = std::min(n, options_.part_bytes - into.size());
    into.insert(into.end(), bytes, bytes + take);
    bytes += take;
    n -= take;
    written_ += take;
    if (&into == &filling_ && filling_.size() == options_.part_bytes) submit();
  }
}

void upload::submit() {
  if (upload_id_.empty()) {
    upload_id_ = client_.start_upload(target_);
    for (int i = 0; i < options_.threads; ++i) senders_.emplace_back([this] { work(); });
  }
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return failure_ || static_cast<int>(queue_.size()) + busy_ < options_.threads; });
  if (failure_) std::rethrow_exception(failure_);
  queue_.push_back({next_number_++, std::move(filling_)});
  filling_ = {};
  changed_.notify_all();
}

void upload::work() {
  client mine(config_);
  for (;;) {
    part p;
    bool failed_already = false;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      p = std::move(queue_.front());
      queue_.pop_front();
      ++busy_;
      failed_already = failure_ != nullptr;
    }
    std::string etag;
    std::exception_ptr failed;
    try {
      if (!failed_already) etag = mine.upload_part(target_, upload_id_, p.number, p.bytes);
    } catch (...) {
      failed = std::current_exception();
    }
    const std::lock_guard lock(mutex_);
    --busy_;
    if (failed && !failure_) failure_ = failed;
    if (!etag.empty()) {
      if (etags_.size() < static_cast<std::size_t>(p.number)) etags_.resize(static_cast<std::size_t>(p.number));
      etags_[static_cast<std::size_t>(p.number) - 1] = std::move(etag);
    }
    changed_.notify_all();
  }
}

void upload::rethrow_failure() {
  const std::lock_guard lock(mutex_);
  if (failure_) std::rethrow_exception(failure_);
}

void upload::stop() noexcept {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (std::thread& t : senders_) t.join();
  senders_.clear();
}

void upload::write_at(std::string_view text, off_t offset) {
  const auto at = static_cast<std::size_t>(offset);
  if (at + text.size() > first_.size())
    throw std::logic_error("ckpt: s3: '" + target_.url() + "': a rewrite past the first part of the upload (at " +
                           std::to_string(at) + ")");
  std::memcpy(first_.data() + at, text.data(), text.size());
}

void upload::truncate(off_t size) {
  if (static_cast<std::uint64_t>(size) != written_)
    throw std::logic_error("ckpt: s3: '" + target_.url() + "': an upload cannot be cut");
}

bool upload::commit() {
  std::vector<std::string> etags;
  const bool one_part = upload_id_.empty() && filling_.empty();  // one PUT
  if (!one_part) send_parts(etags);
  // A commit retried after its answer was lost may have taken effect: its retry finds the object
  // there (412) or, for an upload, the upload gone (404 NoSuchUpload). It is this one's if the
  // object is.
  const auto write = [&](bool if_absent) {
    try {
      if (one_part ? client_.put(target_, first_, if_absent)
                   : client_.complete_upload(target_, upload_id_, etags, if_absent))
        return true;
    } catch (const remote_error& e) {
      const bool upload_gone = !one_part && e.status() == 404 && e.code() == "NoSuchUpload";
      if (!upload_gone || client_.tries() == 1 || !landed()) throw;
      return true;
    }
    return client_.tries() > 1 && landed();  // a 412
  };
  if (rule_ == existing::replaced) {
    committed_ = write(false);
  } else {
    try {
      committed_ = write(true);
    } catch (const remote_error& e) {
      if (e.status() != 501) throw;
      committed_ = !client_.head(target_) && write(false);
    }
  }
  return committed_;
}

bool upload::landed() {
  const std::optional<object_info> there = client_.head(target_);
  if (!there || there->size != written_) return false;
  // The first bytes: the header (its length, then its text) as far as the first part holds it.
  std::size_t n = first_.size();
  if (std::uint64_t length = 0; n >= sizeof length) {
    std::memcpy(&length, first_.data(), sizeof length);
    n = std::min<std::uint64_t>(n, sizeof length + std::min<std::uint64_t>(length, n));
  }
  std::vector<std::byte> head(n);
  return client_.get(target_, 0, head) == n && std::ranges::equal(head, std::span(first_).first(n));
}

void upload::send_parts(std::vector<std::string>& etags) {
  if (!filling_.empty()) submit();
  // Every part sent, then the first, then the object.
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return failure_ || (queue_.empty() && busy_ == 0); });
    if (failure_) std::rethrow_exception(failure_);
  }
  const std::string first = client_.upload_part(target_, upload_id_, 1, first_);
  etags = etags_;
  etags.resize(static_cast<std::size_t>(next_number_ - 1));
  etags[0] = first;
}

bool write_object(const config& settings, const object& target, entry_list entries,
                  const metadata_map& metadata, const save_options& options, upload::existing rule) {
  upload out(settings, target, {}, rule);
  write_file(out, entries, metadata, options);
  return out.commit();
}

void fetch(const config& settings, client& first, const object& o, std::uint64_t size, std::span<const piece> pieces,
           int threads) {
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::exception_ptr failure;
  const auto work = [&](client& c) {
    for (std::size_t k = next++; k < pieces.size(); k = next++) {
      const piece& p = pieces[k];
      try {
        if (c.get(o, p.offset, p.out, size) != p.out.size())
          throw remote_error(o.url(), "GET", 206, "", "the object is shorter than its size: it changed during the read");
      } catch (...) {
        const std::lock_guard lock(mutex);
        if (!failure) failure = std::current_exception();
        next = pieces.size();
      }
    }
  };
  std::vector<std::thread> helpers;
  for (std::size_t i = 1; i < std::min(static_cast<std::size_t>(std::max(threads, 1)), pieces.size()); ++i)
    helpers.emplace_back([&] {
      client c(settings);
      work(c);
    });
  work(first);
  for (std::thread& t : helpers) t.join();
  if (failure) std::rethrow_exception(failure);
}

std::uint64_t size_of(client& c, const object& o) {
  const std::optional<object_info> info = c.head(o);
  if (!info) throw remote_error(o.url(), "HEAD", 404, "NoSuchKey", "no such object");
  return info->size;
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

std::shared_ptr<std::byte[]> download(const config& settings, const object& o, std::size_t& size,
                                      transfer_options options) {
  client first(settings);
  size = static_cast<std::size_t>(size_of(first, o));
  auto bytes = std::make_shared_for_overwrite<std::byte[]>(std::max<std::size_t>(size, 1));
  const std::size_t part = std::max<std::size_t>(options.part_bytes, 1);
  std::vector<piece> pieces;
  for (std::size_t at = 0; at < size; at += part) pieces.push_back({at, {bytes.get() + at, std::min(part, size - at)}});
  fetch(settings, first, o, size, pieces, options.threads);
  return bytes;
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

checkpoint load_remote(const std::filesystem::path& url, const load_options& options, const torch_options& torch) {
  const s3::config settings = s3::config::from_environment();
  const s3::object o = s3::object::parse(url.native());
  if (options.only) {
    s3::client c(settings);
    const std::uint64_t size = s3::size_of(c, o);
    const std::vector<std::byte> head = s3::read_head(c, o, size);
    // A torch.save file is read whole (its entries are found by unpickling, not by offsets).
    if (!looks_like_torch(head)) return load_chosen(settings, c, o, size, head, url, options);
  }
  std::size_t size = 0;
  std::shared_ptr<std::byte[]> bytes = s3::download(settings, o, size);
  return parse_owned_by_content(std::move(bytes), size, url, options, torch);
}

}  // namespace ckpt::detail
