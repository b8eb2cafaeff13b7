#pragma once
// Not part of the API yet (issue 40: checkpoints in object storage build on it): a client of the
// S3 protocol on libcurl, which signs every request with AWS Signature V4 itself
// (CURLOPT_AWS_SIGV4). It speaks to AWS S3 and to S3-compatible servers (MinIO, R2, Ceph, Swift's
// s3api) with path-style addressing. Requests that fail for a reason that may pass (a dropped
// connection, a 5xx, throttling) are retried with exponential backoff, bounded in attempts and
// in time; a request the server refuses (a 4xx) throws at once a remote_error that names the URL
// and quotes the server's code and message.
//
// A client is one connection (reused from request to request) and is not thread-safe: parallel
// transfers use one client each.

#include <ckpt/error.hpp>

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

// Where requests go and who signs them.
struct config {
  // "https://s3.<region>.amazonaws.com" for AWS; a server's URL otherwise (AWS_ENDPOINT_URL).
  std::string endpoint;
  std::string region = "us-east-1";
  std::string access_key, secret_key, session_token;
  // Bucket in the path (http://host/bucket/key) rather than in the host name.
  bool path_style = false;
  // Retries of a request that may pass: at most `attempts` tries in all, waiting `first_wait`,
  // then twice as long each time (with jitter), and never starting a try after `deadline`.
  int attempts = 6;
  std::chrono::milliseconds first_wait{100};
  std::chrono::milliseconds deadline{60'000};

  // The standard AWS environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN,
  // AWS_REGION (else AWS_DEFAULT_REGION, else us-east-1), AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL
  // (then path-style addressing, which every S3-compatible server takes), else AWS S3 in the
  // region with virtual-hosted addressing; CKPT_S3_ADDRESSING=path|virtual overrides.
  // \throws std::invalid_argument if the key or the secret is missing (naming the variable).
  static config from_environment();
};

// An object: its bucket and key, parsed from `s3://bucket/key`.
struct object {
  std::string bucket, key;

  // \throws std::invalid_argument if `url` is not `s3://<bucket>/<key>` (a key may be empty
  // when `key_required` is false: `s3://bucket` or `s3://bucket/` for a prefix).
  static object parse(std::string_view url, bool key_required = true);
  // `s3://bucket/key`.
  [[nodiscard]] std::string url() const;
};

// Whether `text` is an `s3://` URL.
[[nodiscard]] bool is_url(std::string_view text) noexcept;

// Failures are ckpt::remote_error (ckpt/error.hpp).
using ckpt::remote_error;

struct object_info {
  std::string key;
  std::uint64_t size = 0;
  std::string etag;
};

struct upload_info {
  std::string key, upload_id;
};

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
  // Reads bytes [offset, offset + out.size()) of `o` into `out` (one ranged GET); returns how
  // many there were (fewer at the end of the object).
  std::size_t get(const object& o, std::uint64_t offset, std::span<std::byte> out);
  // The whole object.
  std::string get(const object& o);
  // The object's size and ETag, or nothing if there is none.
  std::optional<object_info> head(const object& o);
  // The objects whose keys start with `prefix`, in key order (every page, of at most `page_size`
  // keys each: 1000 is the protocol's largest).
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
  std::vector<upload_info> uploads(const std::string& bucket, const std::string& prefix);

  // How many tries the last request took: more than 1 if it was retried, when an answer may be to
  // a repeat of a request that took effect (a conditional commit's 412). The requests that commit
  // an object (a conditional PUT, a CompleteMultipartUpload) go on a new connection, which
  // libcurl does not silently send again as it does on a reused one that dropped.
  [[nodiscard]] int tries() const noexcept { return tries_; }

 private:
  struct request;
  struct response;
  response perform(const request& r);
  response try_once(const request& r);

  config config_;
  int tries_ = 0;
  struct curl_handle;
  std::unique_ptr<curl_handle> curl_;
};

// The bytes of response bodies every client of this process has received, over every request and
// its tries: what the servers sent (for tests, and the bench's count of a partial load's bytes).
[[nodiscard]] std::uint64_t bytes_received() noexcept;

}  // namespace ckpt::detail::s3
