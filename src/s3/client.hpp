#pragma once
// Not part of the API yet (issue 40: checkpoints in object storage build on it): a client of the
// S3 protocol on libcurl, which signs every request with AWS Signature V4 itself
// (CURLOPT_AWS_SIGV4). It speaks to AWS S3 and to S3-compatible servers (MinIO, R2, Ceph, Swift's
// s3api) with path-style addressing. Requests that fail for a reason that may pass (a dropped
// connection, a 5xx, throttling, a try over its time) are retried with exponential backoff,
// bounded in attempts and in time; a request the server refuses (a 4xx) throws at once a
// remote_error that names the URL and quotes the server's code and message.
//
// Nothing a server answers is trusted: a ranged GET's answer must be the range asked for (its
// Content-Range, its length, the object's size where the caller knows it), a HEAD must give the
// size, a listing must stay under its prefix and end, and XML is read within limits (src/s3/
// xml.hpp). What does not hold is a remote_error, never bytes taken for the object's. Keys are
// sent as they are (CURLOPT_PATH_AS_IS: no dot segment removed), and URLs whose key or bucket
// would change the request's host or path are refused (object::parse).
//
// A client is one connection (reused from request to request) and is not thread-safe: parallel
// transfers use one client each.

#include <ckpt/error.hpp>

#include "xml.hpp"  // object_info, upload_info: what listings say

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail::s3 {

// What requests cost: each try of a request (a retry is another), and the bytes of the answers'
// bodies. A load counts what it fetched into one (load_options::fetched, through counting below).
struct traffic {
  std::atomic<std::uint64_t> requests{0};
  std::atomic<std::uint64_t> bytes{0};
};

// Where requests go and who signs them.
struct config {
  // "https://s3.<region>.amazonaws.com" for AWS; a server's URL otherwise (AWS_ENDPOINT_URL).
  std::string endpoint;
  std::string region = "us-east-1";
  std::string access_key, secret_key, session_token;
  // Bucket in the path (http://host/bucket/key) rather than in the host name.
  bool path_style = false;
  // Retries of a request that may pass: at most `attempts` tries in all, waiting `first_wait`,
  // then twice as long each time (with jitter).
  int attempts = 6;
  std::chrono::milliseconds first_wait{100};
  // The time rule: a try that moves n bytes (its body up, or the range down) may take
  // max(try_time, n / min_rate seconds), enforced on the transfer in progress (a body that
  // trickles in ends there, and the try is retried); the tries of one request, with the waits
  // between them, end within twice that (a minute for all but transfers of more than 30 MiB).
  std::chrono::milliseconds try_time{30'000};
  std::uint64_t min_rate = std::uint64_t{1} << 20;  // bytes a second
  // If set, every client made from this config (copies included: a transfer's helpers) adds its
  // tries and the bytes it receives to it, which must outlive them. from_environment sets it to
  // the counter of this thread's `counting`, if one lives.
  traffic* counted = nullptr;

  // The standard AWS environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
  // AWS_REGION (else AWS_DEFAULT_REGION, else us-east-1), AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL
  // (then path-style addressing, which every S3-compatible server takes), else AWS S3 in the
  // region with virtual-hosted addressing; CKPT_S3_ADDRESSING=path|virtual overrides. The time
  // rule: CKPT_S3_TRY_SECONDS (try_time, a decimal number of seconds) and CKPT_S3_MIN_RATE
  // (min_rate, bytes a second). `counted`: the counter of this thread's `counting`, if any.
  // \throws std::invalid_argument if the key or the secret is missing, or a setting is not a
  // positive number (naming the variable).
  static config from_environment();
  // The longest a try that moves `bytes` may take (the time rule above).
  [[nodiscard]] std::chrono::milliseconds try_limit(std::uint64_t bytes) const noexcept;
};

// An object: its bucket and key, parsed from `s3://bucket/key`.
struct object {
  std::string bucket, key;

  // A key's segments (between '/') are neither empty, `.` nor `..` (so that no server or proxy
  // that resolves dot segments reads another key); a prefix (`key_required` false: `s3://bucket`,
  // `s3://bucket/run` or `s3://bucket/run/`) may be empty or end with one '/'. A bucket holds no
  // character that would change a request's host or path (`/ : # ? @ \ %`, whitespace, control
  // characters); with virtual-hosted addressing, which every request checks, it also follows DNS's
  // rules for bucket names.
  // \throws std::invalid_argument if `url` is not `s3://<bucket>/<key>` by these rules, naming it
  // and what is wrong.
  static object parse(std::string_view url, bool key_required = true);
  // `s3://bucket/key`.
  [[nodiscard]] std::string url() const;
};

// Failures are ckpt::remote_error (ckpt/error.hpp).
using ckpt::remote_error;

class client {
 public:
  // \throws std::runtime_error if libcurl cannot be initialized.
  explicit client(config settings);
  ~client();
  client(client&&) noexcept;
  client& operator=(client&&) noexcept;

  [[nodiscard]] const config& settings() const noexcept { return config_; }

  // Creates the bucket; one that exists and is ours already is fine.
  void create_bucket(const std::string& bucket);
  // Stores `bytes` as `o`. With `if_absent`, only if no object is there (`If-None-Match: *`):
  // false if one is (HTTP 412).
  bool put(const object& o, std::span<const std::byte> bytes, bool if_absent = false);
  // Reads bytes [offset, offset + out.size()) of `o` into `out` (a ranged GET; another for the
  // rest if the server answers a part of the range, as HTTP allows); returns how many there were
  // (fewer at the end of the object). `size`, the object's size if the caller knows it (a HEAD),
  // is checked against the answer's. \throws remote_error if an answer is not the range asked
  // for, or says another size (the object changed).
  std::size_t get(const object& o, std::uint64_t offset, std::span<std::byte> out,
                  std::optional<std::uint64_t> size = std::nullopt);
  // The whole object.
  std::string get(const object& o);
  // The object's size and ETag, or nothing if there is none. \throws remote_error if the answer
  // gives no size (Content-Length).
  std::optional<object_info> head(const object& o);
  // The objects whose keys start with `prefix`, in key order (every page, of at most `page_size`
  // keys each: 1000 is the protocol's largest). \throws remote_error if the server lists a key
  // outside the prefix, sends a continuation token twice, or more than max_pages pages.
  std::vector<object_info> list(const std::string& bucket, const std::string& prefix, int page_size = 1000);
  // Deletes `o` (no error if it is not there).
  void remove(const object& o);
  // Copies `from` to `to` on the server (objects up to 5 GiB, the protocol's limit for one copy).
  void copy(const object& from, const object& to);

  // Multipart upload: a part is at least 5 MiB but for the last; numbers run from 1.
  std::string start_upload(const object& o);
  // Returns the part's ETag, for complete_upload.
  std::string upload_part(const object& o, const std::string& upload_id, int number, std::span<const std::byte> bytes);
  // Makes the object of the parts, in order (`etags[i]` is part i + 1's). With `if_absent`, only if
  // no object is there (`If-None-Match: *`): false if one is (HTTP 412), the upload left open.
  bool complete_upload(const object& o, const std::string& upload_id, const std::vector<std::string>& etags,
                       bool if_absent = false);
  void abort_upload(const object& o, const std::string& upload_id);
  // The uploads started and neither completed nor aborted, of keys starting with `prefix`.
  // \throws remote_error as list does.
  std::vector<upload_info> uploads(const std::string& bucket, const std::string& prefix);

  // How many tries the last request took: more than 1 if it was retried, when an answer may be to
  // a repeat of a request that took effect (a conditional commit's 412). The requests that commit
  // an object (a conditional PUT, a CompleteMultipartUpload) go on a new connection, which
  // libcurl does not silently send again as it does on a reused one that dropped.
  [[nodiscard]] int tries() const noexcept { return tries_; }
  // The most pages a listing takes: 100,000 pages of 1,000 keys.
  static constexpr int max_pages = 100'000;

 private:
  struct request;
  struct response;
  response perform(const request& r);
  response try_once(const request& r, std::chrono::milliseconds limit);

  config config_;
  int tries_ = 0;
  struct curl_handle;
  std::unique_ptr<curl_handle> curl_;
};

// While it lives, the configs that config::from_environment makes on this thread count into
// `into` (config::counted): so a load (src/format/load.cpp) counts every request it makes, however
// deep in the readers its clients are made, and on whichever thread they work. Scopes nest: the
// innermost counts.
class counting {
 public:
  explicit counting(traffic& into) noexcept;
  counting(const counting&) = delete;
  counting& operator=(const counting&) = delete;
  ~counting();

 private:
  traffic* outer_;
};

// The bytes of response bodies every client of this process has received, over every request and
// its tries: what the servers sent (for tests, and the bench's count of a partial load's bytes).
[[nodiscard]] std::uint64_t bytes_received() noexcept;

}  // namespace ckpt::detail::s3
