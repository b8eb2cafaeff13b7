// The S3 client (src/s3/client.hpp) on libcurl: requests signed by libcurl's AWS Signature V4,
// answers read with Boost.PropertyTree's XML parser.
#include "client.hpp"

#include <curl/curl.h>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>

namespace ckpt::detail::s3 {

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// RFC 3986 percent-encoding of everything but the unreserved characters (and '/' in a key's path),
// as Signature V4's canonical request wants it: libcurl signs the URL as it is given.
std::string encode(std::string_view text, bool keep_slash) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

// The text of the child `path` of `tree`, or "".
std::string text_of(const boost::property_tree::ptree& tree, const std::string& path) {
  return tree.get<std::string>(path, "");
}

boost::property_tree::ptree parse_xml(const std::string& body) {
  boost::property_tree::ptree tree;
  std::istringstream in(body);
  boost::property_tree::read_xml(in, tree);
  return tree;
}

bool is_success(long status) { return status >= 200 && status < 300; }

// The code and message of an S3 error body (`<Error><Code>..</Code><Message>..</Message>`); a body
// that is not XML says what it is by its start.
std::pair<std::string, std::string> error_in(const std::string& body) {
  if (body.empty()) return {};
  try {
    const boost::property_tree::ptree tree = parse_xml(body);
    return {text_of(tree, "Error.Code"), text_of(tree, "Error.Message")};
  } catch (const std::exception&) {
    return {std::string(), body.substr(0, 200)};
  }
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::runtime_error("ckpt: s3: curl_global_init failed");
  });
}

}  // namespace

config config::from_environment() {
  config c;
  c.access_key = environment("AWS_ACCESS_KEY_ID");
  c.secret_key = environment("AWS_SECRET_ACCESS_KEY");
  c.session_token = environment("AWS_SESSION_TOKEN");
  if (c.access_key.empty())
    throw std::invalid_argument("ckpt: s3: no credentials: AWS_ACCESS_KEY_ID is not set");
  if (c.secret_key.empty())
    throw std::invalid_argument("ckpt: s3: no credentials: AWS_SECRET_ACCESS_KEY is not set");
  c.region = environment("AWS_REGION");
  if (c.region.empty()) c.region = environment("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = environment("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = environment("AWS_ENDPOINT_URL");
  c.path_style = !c.endpoint.empty();
  if (c.endpoint.empty()) c.endpoint = "https://s3." + c.region + ".amazonaws.com";
  while (c.endpoint.ends_with('/')) c.endpoint.pop_back();
  if (const std::string addressing = environment("CKPT_S3_ADDRESSING"); addressing == "path") c.path_style = true;
  else if (addressing == "virtual") c.path_style = false;
  return c;
}

bool is_url(std::string_view text) noexcept { return text.starts_with("s3://"); }

object object::parse(std::string_view url, bool key_required) {
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument("ckpt: s3: '" + std::string(url) + "' is not an object URL s3://<bucket>/<key>: " + why);
  };
  if (!is_url(url)) refuse("it does not start with s3://");
  const std::string_view rest = url.substr(5);
  const std::size_t slash = rest.find('/');
  object o{std::string(rest.substr(0, slash)), slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1))};
  if (o.bucket.empty()) refuse("no bucket");
  if (key_required && o.key.empty()) refuse("no key");
  return o;
}

std::string object::url() const { return "s3://" + bucket + "/" + key; }

struct client::curl_handle {
  CURL* easy = nullptr;
  ~curl_handle() {
    if (easy != nullptr) curl_easy_cleanup(easy);
  }
};

struct client::request {
  std::string method{};  // GET, PUT, POST, DELETE, HEAD
  object target{};       // key empty: the bucket
  std::vector<std::pair<std::string, std::string>> query{};
  std::vector<std::string> headers{};
  std::span<const std::byte> body{};  // PUT and POST
  // A ranged GET into the caller's memory: bytes [offset, offset + sink.size()).
  std::span<std::byte> sink{};
  std::uint64_t offset = 0;
  bool ranged = false;
  bool fresh = false;  // on a new connection (client::tries)
};

struct client::response {
  long status = 0;
  std::string body;  // the body, unless it went to the sink (an error's body never does)
  std::string etag;
  std::uint64_t content_length = 0;
  std::size_t sunk = 0;
  CURLcode transport = CURLE_OK;
  std::string transport_message;
};

client::client(config settings) : config_(std::move(settings)), curl_(std::make_unique<curl_handle>()) {
  global_init();
  curl_->easy = curl_easy_init();
  if (curl_->easy == nullptr) throw std::runtime_error("ckpt: s3: curl_easy_init failed");
}
client::~client() = default;
client::client(client&&) noexcept = default;
client& client::operator=(client&&) noexcept = default;

namespace {

// What the callbacks of one try share.
struct transfer {
  CURL* easy;
  std::span<const std::byte> upload;
  std::size_t uploaded = 0;
  std::span<std::byte> sink;
  std::uint64_t skip = 0;  // bytes to drop first (a server that ignored the range)
  bool ranged = false;
  bool content_range = false;
  std::string* body;
  std::size_t* sunk;
  std::string* etag;
};

std::atomic<std::uint64_t> received_by_process{0};

std::size_t on_read(char* buffer, std::size_t size, std::size_t count, void* user) {
  auto& t = *static_cast<transfer*>(user);
  const std::size_t n = std::min(size * count, t.upload.size() - t.uploaded);
  if (n > 0) std::memcpy(buffer, t.upload.data() + t.uploaded, n);
  t.uploaded += n;
  return n;
}

std::size_t on_header(char* buffer, std::size_t size, std::size_t count, void* user) {
  auto& t = *static_cast<transfer*>(user);
  std::string_view line(buffer, size * count);
  const std::size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    std::ranges::transform(name, name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.remove_suffix(1);
    if (name == "etag") *t.etag = std::string(value);
    else if (name == "content-range") t.content_range = true;
  }
  return size * count;
}

std::size_t on_write(char* buffer, std::size_t size, std::size_t count, void* user) {
  auto& t = *static_cast<transfer*>(user);
  const std::size_t n = size * count;
  received_by_process.fetch_add(n, std::memory_order_relaxed);
  long status = 0;
  curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
  if (t.sink.data() == nullptr || !is_success(status)) {
    t.body->append(buffer, n);
    return n;
  }
  std::string_view bytes(buffer, n);
  if (t.ranged && !t.content_range && t.skip > 0) {  // the whole object came: skip to the offset
    const std::size_t dropped = static_cast<std::size_t>(std::min<std::uint64_t>(t.skip, bytes.size()));
    t.skip -= dropped;
    bytes.remove_prefix(dropped);
  }
  const std::size_t room = t.sink.size() - *t.sunk;
  const std::size_t kept = std::min(room, bytes.size());
  std::memcpy(t.sink.data() + *t.sunk, bytes.data(), kept);
  *t.sunk += kept;
  return n;  // a server that sends more than asked for: the rest is dropped
}

}  // namespace

client::response client::try_once(const request& r) {
  CURL* easy = curl_->easy;
  curl_easy_reset(easy);
  // The URL, as Signature V4 signs it: the key percent-encoded (its '/' kept), the query sorted.
  std::string url = config_.endpoint;
  if (config_.path_style) {
    url += "/" + r.target.bucket;
  } else {
    const std::size_t scheme = url.find("://");
    url.insert(scheme == std::string::npos ? 0 : scheme + 3, r.target.bucket + ".");
  }
  url += "/" + encode(r.target.key, true);
  if (!r.query.empty()) {
    std::vector<std::pair<std::string, std::string>> query;
    for (const auto& [name, value] : r.query) query.emplace_back(encode(name, false), encode(value, false));
    std::ranges::sort(query);
    char separator = '?';
    for (const auto& [name, value] : query) {
      url += separator + name + "=" + value;
      separator = '&';
    }
  }
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  const std::string sigv4 = "aws:amz:" + config_.region + ":s3";
  curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(easy, CURLOPT_USERNAME, config_.access_key.c_str());
  curl_easy_setopt(easy, CURLOPT_PASSWORD, config_.secret_key.c_str());
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  if (r.fresh) curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT, 1L);
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 10'000L);
  // A connection that carries less than a byte a second for 30 s has dropped: retried.
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(easy, CURLOPT_LOW_SPEED_TIME, 30L);
  char error_text[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error_text);

  // libcurl (7.88) does not add the payload's hash: without this header S3 refuses the request.
  curl_slist* headers = curl_slist_append(nullptr, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
  if (!config_.session_token.empty())
    headers = curl_slist_append(headers, ("x-amz-security-token: " + config_.session_token).c_str());
  for (const std::string& h : r.headers) headers = curl_slist_append(headers, h.c_str());
  if (r.ranged)
    headers = curl_slist_append(headers, ("Range: bytes=" + std::to_string(r.offset) + "-" +
                                          std::to_string(r.offset + r.sink.size() - 1))
                                             .c_str());
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);

  response out;
  transfer t{easy, r.body, 0, r.sink, r.offset, r.ranged, false, &out.body, &out.sunk, &out.etag};
  curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(easy, CURLOPT_HEADERDATA, &t);
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, &t);
  if (r.method == "PUT") {
    curl_easy_setopt(easy, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(easy, CURLOPT_READFUNCTION, on_read);
    curl_easy_setopt(easy, CURLOPT_READDATA, &t);
    // S3 takes no chunked uploads: the size is always given.
    curl_easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else if (r.method == "POST") {
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, r.body.empty() ? "" : reinterpret_cast<const char*>(r.body.data()));
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  } else if (r.method == "HEAD") {
    curl_easy_setopt(easy, CURLOPT_NOBODY, 1L);
  } else if (r.method == "DELETE") {
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, "DELETE");
  }
  out.transport = curl_easy_perform(easy);
  // Nothing of this call's stack stays with the handle (its connections outlive the call).
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  if (out.transport != CURLE_OK) {
    out.transport_message = error_text[0] != '\0' ? std::string(error_text) : curl_easy_strerror(out.transport);
    return out;
  }
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &out.status);
  curl_off_t length = 0;
  if (curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK && length > 0)
    out.content_length = static_cast<std::uint64_t>(length);
  return out;
}

client::response client::perform(const request& r) {
  const auto start = std::chrono::steady_clock::now();
  auto wait = config_.first_wait;
  std::minstd_rand jitter(std::random_device{}());
  for (int attempt = 1;; ++attempt) {
    tries_ = attempt;
    response out = try_once(r);
    std::string code;
    std::string message = out.transport_message;
    bool may_pass = false;
    if (out.transport != CURLE_OK) {
      // Connection-level failures may pass; a malformed URL or a missing feature will not.
      switch (out.transport) {
        case CURLE_COULDNT_CONNECT: case CURLE_COULDNT_RESOLVE_HOST: case CURLE_SEND_ERROR: case CURLE_RECV_ERROR:
        case CURLE_OPERATION_TIMEDOUT: case CURLE_GOT_NOTHING: case CURLE_PARTIAL_FILE: case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM: case CURLE_SSL_CONNECT_ERROR:
          may_pass = true;
          break;
        default:
          break;
      }
    } else {
      // A status that is not a failure that may pass is the caller's to take or refuse; so are 501
      // and 505, a feature the server lacks (conditional writes, on Swift's s3api), which no retry
      // brings.
      const bool server_failure = out.status >= 500 && out.status != 501 && out.status != 505;
      if (!server_failure && out.status != 429 && out.status != 400) return out;
      if (!out.body.empty()) std::tie(code, message) = error_in(out.body);
      may_pass = server_failure || out.status == 429 || code == "SlowDown" || code == "RequestTimeout" ||
                 code == "InternalError" || code == "ServiceUnavailable";
      if (!may_pass) return out;
    }
    const auto elapsed = std::chrono::steady_clock::now() - start;
    if (!may_pass || attempt >= config_.attempts || elapsed + wait > config_.deadline) {
      if (may_pass) message += " (after " + std::to_string(attempt) + (attempt == 1 ? " try)" : " tries)");
      throw remote_error(r.target.url(), r.method, out.status, std::move(code), message);
    }
    std::this_thread::sleep_for(wait + std::chrono::milliseconds(jitter() % (wait.count() / 2 + 1)));
    wait *= 2;
  }
}

namespace {

// The error of a request that came back with a status the caller does not take.
[[noreturn]] void refuse(const object& o, const std::string& method, long status, const std::string& body) {
  auto [code, message] = error_in(body);
  if (code.empty() && status == 404) code = "NoSuchKey";
  throw remote_error(o.url(), method, status, std::move(code), message);
}

}  // namespace

void client::create_bucket(const std::string& bucket) {
  const object o{bucket, ""};
  const response out = perform({.method = "PUT", .target = o});
  if (is_success(out.status)) return;
  // Ours already: fine (AWS answers 200 in us-east-1, 409 BucketAlreadyOwnedByYou elsewhere).
  if (out.status == 409 && out.body.find("BucketAlreadyOwnedByYou") != std::string::npos) return;
  refuse(o, "PUT", out.status, out.body);
}

bool client::put(const object& o, std::span<const std::byte> bytes, bool if_absent) {
  request r{.method = "PUT", .target = o, .body = bytes, .fresh = if_absent};
  if (if_absent) r.headers.emplace_back("If-None-Match: *");
  const response out = perform(r);
  if (is_success(out.status)) return true;
  if (if_absent && out.status == 412) return false;
  refuse(o, "PUT", out.status, out.body);
}

std::size_t client::get(const object& o, std::uint64_t offset, std::span<std::byte> out) {
  if (out.empty()) return 0;
  const response got = perform({.method = "GET", .target = o, .sink = out, .offset = offset, .ranged = true});
  if (got.status == 416) return 0;  // the range starts at or past the end
  if (!is_success(got.status)) refuse(o, "GET", got.status, got.body);
  return got.sunk;
}

std::string client::get(const object& o) {
  const response out = perform({.method = "GET", .target = o});
  if (!is_success(out.status)) refuse(o, "GET", out.status, out.body);
  return out.body;
}

std::optional<object_info> client::head(const object& o) {
  const response out = perform({.method = "HEAD", .target = o});
  if (out.status == 404) return std::nullopt;
  if (!is_success(out.status)) refuse(o, "HEAD", out.status, out.body);
  return object_info{o.key, out.content_length, out.etag};
}

std::vector<object_info> client::list(const std::string& bucket, const std::string& prefix, int page_size) {
  std::vector<object_info> found;
  std::string token;
  for (;;) {
    request r{.method = "GET",
              .target = {bucket, ""},
              .query = {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(page_size)}}};
    if (!token.empty()) r.query.emplace_back("continuation-token", token);
    const response out = perform(r);
    if (!is_success(out.status)) refuse(r.target, "GET", out.status, out.body);
    const boost::property_tree::ptree tree = parse_xml(out.body);
    const boost::property_tree::ptree& result = tree.get_child("ListBucketResult");
    for (const auto& [name, item] : result)
      if (name == "Contents")
        found.push_back({text_of(item, "Key"), item.get<std::uint64_t>("Size", 0), text_of(item, "ETag")});
    if (text_of(result, "IsTruncated") != "true") break;
    token = text_of(result, "NextContinuationToken");
    if (token.empty()) break;
  }
  std::ranges::sort(found, {}, &object_info::key);
  return found;
}

void client::remove(const object& o) {
  const response out = perform({.method = "DELETE", .target = o});
  if (!is_success(out.status) && out.status != 404) refuse(o, "DELETE", out.status, out.body);
}

void client::copy(const object& from, const object& to) {
  const response out = perform({.method = "PUT",
                                .target = to,
                                .headers = {"x-amz-copy-source: /" + from.bucket + "/" + encode(from.key, true)}});
  // A 200 may still carry an error (a copy that failed after it began).
  if (!is_success(out.status) || out.body.find("<Error>") != std::string::npos) refuse(to, "PUT", out.status, out.body);
}

std::string client::start_upload(const object& o) {
  const response out = perform({.method = "POST",
                                .target = o,
                                .query = {{"uploads", ""}},
                                .headers = {"Content-Type: application/octet-stream"}});
  if (!is_success(out.status)) refuse(o, "POST", out.status, out.body);
  std::string id = text_of(parse_xml(out.body), "InitiateMultipartUploadResult.UploadId");
  if (id.empty()) throw remote_error(o.url(), "POST", out.status, "", "the answer names no UploadId");
  return id;
}

std::string client::upload_part(const object& o, const std::string& upload_id, int number,
                                std::span<const std::byte> bytes) {
  const response out = perform({.method = "PUT",
                                .target = o,
                                .query = {{"partNumber", std::to_string(number)}, {"uploadId", upload_id}},
                                .body = bytes});
  if (!is_success(out.status)) refuse(o, "PUT", out.status, out.body);
  if (out.etag.empty()) throw remote_error(o.url(), "PUT", out.status, "", "part " + std::to_string(number) + " came back without an ETag");
  return out.etag;
}

bool client::complete_upload(const object& o, const std::string& upload_id, const std::vector<std::string>& etags,
                             bool if_absent) {
  std::string xml = "<CompleteMultipartUpload>";
  for (std::size_t i = 0; i < etags.size(); ++i)
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags[i] + "</ETag></Part>";
  xml += "</CompleteMultipartUpload>";
  request r{.method = "POST",
            .target = o,
            .query = {{"uploadId", upload_id}},
            .headers = {"Content-Type: application/xml"},
            .body = std::as_bytes(std::span(xml)),
            .fresh = true};
  if (if_absent) r.headers.emplace_back("If-None-Match: *");
  const response out = perform(r);
  if (if_absent && out.status == 412) return false;
  // A 200 may still carry an error (S3 reports a failure that came late in the body).
  if (!is_success(out.status) || out.body.find("<Error>") != std::string::npos) refuse(o, "POST", out.status, out.body);
  return true;
}

void client::abort_upload(const object& o, const std::string& upload_id) {
  const response out = perform({.method = "DELETE", .target = o, .query = {{"uploadId", upload_id}}});
  if (!is_success(out.status) && out.status != 404) refuse(o, "DELETE", out.status, out.body);
}

std::vector<upload_info> client::uploads(const std::string& bucket, const std::string& prefix) {
  std::vector<upload_info> found;
  std::string key_marker, id_marker;
  for (;;) {
    request r{.method = "GET", .target = {bucket, ""}, .query = {{"uploads", ""}, {"prefix", prefix}}};
    if (!key_marker.empty()) r.query.emplace_back("key-marker", key_marker);
    if (!id_marker.empty()) r.query.emplace_back("upload-id-marker", id_marker);
    const response out = perform(r);
    if (!is_success(out.status)) refuse(r.target, "GET", out.status, out.body);
    const boost::property_tree::ptree tree = parse_xml(out.body);
    const boost::property_tree::ptree& result = tree.get_child("ListMultipartUploadsResult");
    for (const auto& [name, item] : result)
      if (name == "Upload") found.push_back({text_of(item, "Key"), text_of(item, "UploadId")});
    if (text_of(result, "IsTruncated") != "true") break;
    key_marker = text_of(result, "NextKeyMarker");
    id_marker = text_of(result, "NextUploadIdMarker");
    if (key_marker.empty()) break;
  }
  return found;
}

std::uint64_t bytes_received() noexcept { return received_by_process.load(std::memory_order_relaxed); }

}  // namespace ckpt::detail::s3
