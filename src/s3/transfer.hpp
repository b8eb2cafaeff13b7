#pragma once
// The bytes of whole objects: an `upload` that a writer fills in order (a multipart upload, parts
// sent in parallel while the writer goes on, memory bounded by a few parts), ranged GETs in
// parallel, downloads. What the bytes are is the caller's (src/format/object_file.hpp).

#include "io/byte_sink.hpp"
#include "client.hpp"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ckpt::detail::s3 {

// How transfers are cut: parts of `part_bytes` (S3 wants at least 5 MiB but for the last, and at
// most 10,000 parts: a larger file gets larger parts), `threads` requests at once.
struct transfer_options {
  std::size_t part_bytes = std::size_t{8} << 20;
  int threads = 4;
};

// The bytes of one object, written in order by the file writer, as a multipart upload. The first
// part is kept in memory until the end (the digest's digits, in the header, are written last);
// the others go as soon as they are full, `threads` at a time, the writer waiting when that many
// are in flight: memory holds at most threads + 2 parts. `commit` sends the first part and
// completes the upload, and only then does the object exist (a file of one part is one PUT).
// Dropped without a commit, or after a failure, the upload is aborted: no object, no parts kept.
class upload final : public byte_sink {
 public:
  // Whether the commit may replace an object at the target.
  enum class existing { replaced, kept };

  upload(config settings, object target, transfer_options options = {}, existing rule = existing::replaced);
  upload(const upload&) = delete;
  upload& operator=(const upload&) = delete;
  ~upload() override;

  void begin(std::uint64_t total) override;
  void write(std::vector<iovec>& pieces) override;
  // Only within the first part (or the part being filled).
  void write_at(std::string_view text, off_t offset) override;
  void truncate(off_t size) override;  // the file is as long as what was written: a check
  // Sends what is left and completes the upload: true once the object is there. With
  // `existing::kept`, false, and no object written, if one is there already: a conditional write
  // (`If-None-Match: *`) where the server has them (AWS S3, MinIO, R2); where it answers that it
  // has none (HTTP 501: Swift's s3api), a HEAD first, which a writer between the two can race.
  // A commit whose answer was lost and that was retried may find its own object there (412) or
  // its upload completed (404 NoSuchUpload): then the object is compared with this upload (landed)
  // and, if it is this one, the commit succeeded.
  // \throws remote_error.
  bool commit();

 private:
  void add(const std::byte* bytes, std::size_t n);
  void submit();           // sends `filling_` as the next part
  void send_parts(std::vector<std::string>& etags);  // every part, the first last; their ETags
  void work();             // a sender thread
  void rethrow_failure();  // the first sender's failure, if any
  void stop() noexcept;
  // Whether the object at the target is this upload's: its size, and its first bytes, the
  // file's header (which holds the file's digest when it has one) as far as the first part goes.
  bool landed();

  config config_;
  object target_;
  transfer_options options_;
  existing rule_;
  client client_;  // this thread's: the upload's start, its first part, its end
  std::string upload_id_;
  std::vector<std::byte> first_, filling_;
  std::uint64_t written_ = 0;
  int next_number_ = 2;
  bool committed_ = false;

  struct part {
    int number;
    std::vector<std::byte> bytes;
  };
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<part> queue_;
  int busy_ = 0;
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::vector<std::string> etags_;  // etags_[n - 1]: part n's
  std::vector<std::thread> senders_;
};

// The commit of the object `o` by `write(if_absent)`, a PUT or a CompleteMultipartUpload (`multipart`)
// on `c` that returns false on a 412, as upload::commit does it: with `existing::kept`, a conditional
// write, or, where the server has none (501), a HEAD first; a commit retried after its answer was
// lost that finds the object there (412) or the upload gone (404 NoSuchUpload) succeeded if
// `landed()` says the object there is this one.
// \throws remote_error.
bool commit_object(client& c, const object& o, upload::existing rule, bool multipart,
                   const std::function<bool(bool if_absent)>& write, const std::function<bool()>& landed);

// Bytes [offset, offset + out.size()) of an object, into `out`.
struct piece {
  std::uint64_t offset = 0;
  std::span<std::byte> out;
};

// Reads `pieces` of `o` (an object of `size` bytes, as a HEAD gave it), one ranged GET each,
// `threads` at once: `first` reads, and threads with clients of their own from `settings` help.
// `arrived`, if set, is called with a piece's index by the thread that read it, once its bytes
// are in (to work on them while they are in that core's cache: the digest's hashing).
// \throws remote_error (the first that failed; the others stop), naming `o`; one if a piece
// comes back short or an answer gives another size (the object changed meanwhile); what
// `arrived` throws.
void fetch(const config& settings, client& first, const object& o, std::uint64_t size, std::span<const piece> pieces,
           int threads, const std::function<void(std::size_t piece)>& arrived = {});

// The size of `o`.
// \throws remote_error (a missing object: HTTP 404; an answer without a size).
std::uint64_t size_of(client& c, const object& o);

// The whole object `o`, read by ranged GETs of `options.part_bytes`, `options.threads` at once,
// into memory the result owns; its size in `size`.
// \throws remote_error (a missing object: HTTP 404).
std::shared_ptr<std::byte[]> download(const config& settings, const object& o, std::size_t& size,
                                      transfer_options options = {});

}  // namespace ckpt::detail::s3
