// The transfers of whole objects (src/s3/transfer.hpp): the upload written in order, parallel
// ranged reads, downloads.
#include "transfer.hpp"

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
  committed_ = commit_object(
      client_, target_, rule_, !one_part,
      [&](bool if_absent) {
        return one_part ? client_.put(target_, first_, if_absent)
                        : client_.complete_upload(target_, upload_id_, etags, if_absent);
      },
      [this] { return landed(); });
  return committed_;
}

bool commit_object(client& c, const object& o, upload::existing rule, bool multipart,
                   const std::function<bool(bool if_absent)>& write, const std::function<bool()>& landed) {
  // A commit retried after its answer was lost may have taken effect: its retry finds the object
  // there (412) or, for an upload, the upload gone (404 NoSuchUpload). It is this one's if the
  // object is.
  const auto attempt = [&](bool if_absent) {
    try {
      if (write(if_absent)) return true;
    } catch (const remote_error& e) {
      const bool upload_gone = multipart && e.status() == 404 && e.code() == "NoSuchUpload";
      if (!upload_gone || c.tries() == 1 || !landed()) throw;
      return true;
    }
    return c.tries() > 1 && landed();  // a 412
  };
  if (rule == upload::existing::replaced) return attempt(false);
  try {
    return attempt(true);
  } catch (const remote_error& e) {
    if (e.status() != 501) throw;
    return !c.head(o) && attempt(false);
  }
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

void fetch(const config& settings, client& first, const object& o, std::uint64_t size, std::span<const piece> pieces,
           int threads, const std::function<void(std::size_t piece)>& arrived) {
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  std::exception_ptr failure;
  const auto work = [&](client& c) {
    for (std::size_t k = next++; k < pieces.size(); k = next++) {
      const piece& p = pieces[k];
      try {
        if (c.get(o, p.offset, p.out, size) != p.out.size())
          throw remote_error(o.url(), "GET", 206, "", "the object is shorter than its size: it changed during the read");
        if (arrived) arrived(k);
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
