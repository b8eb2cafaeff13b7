// The S3 client (src/s3/client.hpp) on libcurl: requests signed by libcurl's AWS Signature V4,
// answers checked against the requests, XML answers read by src/s3/xml.hpp.
#include "client.hpp"

#include "base/hex.hpp"
#include "io/remote_path.hpp"
#include "xml.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

namespace ckpt::detail::s3 {

namespace {

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// The positive number of the environment variable `name`, at most `most`; `fallback` if unset.
double positive_setting(const char* name, double fallback, double most) {
  const std::string text = environment(name);
  if (text.empty()) return fallback;
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || !std::isfinite(value) || value <= 0)
    throw std::invalid_argument("ckpt: s3: " + std::string(name) + "='" + text + "' is not a positive number");
  return std::min(value, most);
}

// RFC 3986 percent-encoding of everything but the unreserved characters (and '/' in a key's path),
// as Signature V4's canonical request wants it (hex digits in upper case): libcurl signs the URL
// as it is given.
std::string encode(std::string_view text, bool keep_slash) {
  std::string out;
  out.reserve(text.size());
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~' || (keep_slash && c == '/')) {
      out += ch;
    } else {
      out += '%';
      append_hex(out, c, 2, /*uppercase=*/true);
    }
  }
  return out;
}

bool is_success(long status) { return status >= 200 && status < 300; }

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Why `bucket` cannot name a bucket in a request, or "" if it can: a character that would change
// the request's host or path, or, in the host name (virtual-hosted addressing), DNS's rules as
// S3 has them for bucket names.
std::string bucket_problem(std::string_view bucket, bool in_host) {
  if (bucket.empty()) return "no bucket";
  const std::string name = "the bucket '" + std::string(bucket) + "'";
  for (const char ch : bucket) {
    const auto c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c == 0x7f)
      return name + " holds the byte 0x" + to_hex(c, 2) + " (whitespace or a control character)";
    if (std::string_view("/:#?@\\%").find(ch) != std::string_view::npos)
      return name + " holds '" + std::string(1, ch) + "', which would change the request's host or path";
  }
  if (!in_host) return {};
  const std::string rule =
      ": with the bucket in the host name (virtual-hosted addressing; CKPT_S3_ADDRESSING=path puts it in the path), a "
      "bucket's name is 3 to 63 lowercase letters, digits, '.' and '-', in labels between dots that begin and end "
      "with a letter or a digit, and not an IP address";
  if (bucket.size() < 3 || bucket.size() > 63) return name + " is " + std::to_string(bucket.size()) + " characters long" + rule;
  for (const char c : bucket)
    if (!((c >= 'a' && c <= 'z') || is_digit(c) || c == '.' || c == '-'))
      return name + " holds '" + std::string(1, c) + "'" + rule;
  std::size_t labels = 0;
  bool all_digits = true;
  for (std::size_t begin = 0; begin <= bucket.size(); ++labels) {
    const std::size_t end = std::min(bucket.find('.', begin), bucket.size());
    const std::string_view label = bucket.substr(begin, end - begin);
    if (label.empty() || label.front() == '-' || label.back() == '-')
      return name + " has a label that is empty or begins or ends with '-'" + rule;
    all_digits = all_digits && std::ranges::all_of(label, is_digit);
    begin = end + 1;
  }
  if (labels == 4 && all_digits) return name + " is an IP address" + rule;
  return {};
}

// Why `key` cannot be an object's key (or, with `prefix`, a prefix of keys), or "" if it can.
std::string key_problem(std::string_view key, bool prefix) {
  if (key.empty()) return prefix ? std::string() : "no key";
  const std::string name = "the key '" + std::string(key) + "'";
  std::string_view rest = key;
  if (rest.ends_with('/')) {
    if (!prefix) return name + " ends with '/', which names a prefix, not an object";
    rest.remove_suffix(1);
  }
  for (std::size_t begin = 0; begin <= rest.size();) {
    const std::size_t end = std::min(rest.find('/', begin), rest.size());
    const std::string_view segment = rest.substr(begin, end - begin);
    if (segment.empty()) return name + " has an empty segment ('/' at its start or two in a row)";
    if (segment == "." || segment == "..")
      return name + " has a '" + std::string(segment) + "' segment, which a server or proxy may resolve into another key";
    begin = end + 1;
  }
  return {};
}

// Turns what an XML reader found wrong with an answer (bad_answer) into a remote_error.
template <class Read>
auto read_answer(const object& o, const std::string& method, long status, Read&& read) {
  try {
    return read();
  } catch (const bad_answer& e) {
    throw remote_error(o.url(), method, status, "", e.what());
  }
}

void global_init() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw std::runtime_error("ckpt: s3: curl_global_init failed");
  });
}

}  // namespace

namespace {

// The counter of this thread's innermost `counting`.
thread_local traffic* counting_here = nullptr;

}  // namespace

counting::counting(traffic& into) noexcept : outer_(counting_here) { counting_here = &into; }

counting::~counting() { counting_here = outer_; }

config config::from_environment() {
  config c;
  c.counted = counting_here;
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
  c.try_time = std::chrono::milliseconds(
      static_cast<std::int64_t>(std::llround(1000 * positive_setting("CKPT_S3_TRY_SECONDS", 30, 1e9))));
  c.min_rate = static_cast<std::uint64_t>(std::ceil(positive_setting("CKPT_S3_MIN_RATE", 1 << 20, 1e15)));
  return c;
}

std::chrono::milliseconds config::try_limit(std::uint64_t bytes) const noexcept {
  const double ms = static_cast<double>(bytes) * 1000 / static_cast<double>(std::max<std::uint64_t>(min_rate, 1));
  return std::max({try_time, std::chrono::milliseconds(static_cast<std::int64_t>(std::min(ms, 1e12))),
                   std::chrono::milliseconds(1)});
}

object object::parse(std::string_view url, bool key_required) {
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument("ckpt: s3: '" + std::string(url) + "' is not an object URL s3://<bucket>/<key>: " + why);
  };
  if (!is_remote(url)) refuse("it does not start with s3://");
  const std::string_view rest = url.substr(5);
  const std::size_t slash = rest.find('/');
  object o{std::string(rest.substr(0, slash)), slash == std::string_view::npos ? std::string() : std::string(rest.substr(slash + 1))};
  if (std::string why = bucket_problem(o.bucket, /*in_host=*/false); !why.empty()) refuse(why);
  if (std::string why = key_problem(o.key, !key_required); !why.empty()) refuse(why);
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
  // A ranged GET into the caller's memory: bytes [offset, offset + sink.size()) of an object of
  // `size` bytes if the caller knows it.
  std::span<std::byte> sink{};
  std::uint64_t offset = 0;
  bool ranged = false;
  bool fresh = false;  // on a new connection (client::tries)
  std::optional<std::uint64_t> size{};
  // When the tries must end (else twice the time rule's limit from the first try).
  std::optional<std::chrono::steady_clock::time_point> deadline{};
};

struct client::response {
  long status = 0;
  std::string body;  // the body, unless it went to the sink (an error's body never does)
  std::string etag;
  std::optional<std::uint64_t> content_length;
  std::size_t sunk = 0;
  // The object's size as a ranged GET's answer gives it (its Content-Range's, or a 200's length).
  std::optional<std::uint64_t> total;
  // Why the answer is not what was asked for (and whether another try may bring it).
  std::string invalid;
  bool invalid_may_pass = false;
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

// The most of an error's body kept (the rest is read and dropped).
constexpr std::size_t max_error_body = std::size_t{1} << 20;

// A Content-Range: `bytes first-last/total` (total '*': unknown), or `bytes */total` (a 416's).
struct content_range {
  std::optional<std::uint64_t> first, last, total;
};

std::optional<std::uint64_t> number_in(std::string_view text) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<content_range> parse_content_range(std::string_view text) {
  if (!text.starts_with("bytes ")) return std::nullopt;
  text.remove_prefix(6);
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  content_range out;
  if (const std::string_view total = text.substr(slash + 1); total != "*") {
    out.total = number_in(total);
    if (!out.total) return std::nullopt;
  }
  const std::string_view range = text.substr(0, slash);
  if (range == "*") return out.total ? std::optional(out) : std::nullopt;
  const std::size_t dash = range.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  out.first = number_in(range.substr(0, dash));
  out.last = number_in(range.substr(dash + 1));
  if (!out.first || !out.last || *out.last < *out.first || (out.total && *out.last >= *out.total)) return std::nullopt;
  return out;
}

// What the callbacks of one try share.
struct transfer {
  CURL* easy;
  std::span<const std::byte> upload;
  std::size_t uploaded = 0;
  // A ranged GET: bytes [offset, offset + sink.size()) of an object of `size` bytes if known.
  std::span<std::byte> sink;
  std::uint64_t offset = 0;
  bool ranged = false;
  std::optional<std::uint64_t> size{};
  // The answer's headers.
  std::string etag{}, content_range{};
  // The body of any answer but a 2xx to a ranged GET, whose bytes go to the sink.
  std::string body{};
  // A 2xx to a ranged GET, once checked against the request (check_range).
  bool checked = false;
  std::uint64_t skip = 0;                 // bytes to drop first (a 200: the whole object came)
  std::optional<std::uint64_t> expected{};  // body bytes announced (a 206's range, a 200's length)
  std::optional<std::uint64_t> total{};     // the object's size, as the answer gives it
  std::uint64_t received = 0;
  std::size_t sunk = 0;
  std::string refused{};  // why the answer is not taken: the transfer stops
  traffic* counted = nullptr;  // the config's counter, if any
};

std::atomic<std::uint64_t> received_by_process{0};

long status_of(CURL* easy) {
  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  return status;
}

std::optional<std::uint64_t> content_length_of(CURL* easy) {
  curl_off_t length = -1;
  if (curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) != CURLE_OK || length < 0) return std::nullopt;
  return static_cast<std::uint64_t>(length);
}

// Checks a 2xx to a ranged GET against the request: a 206's Content-Range must be the range asked
// for or its start (a server may answer a part), within the object's size as the caller knows it;
// a 200 is the whole object (its length, if given, the size the caller knows), read from the
// offset. False, with the reason in `t.refused`, if it is not.
bool check_range(transfer& t, long status) {
  t.checked = true;
  const std::uint64_t last_asked = t.offset + t.sink.size() - 1;
  const std::string asked = "bytes " + std::to_string(t.offset) + "-" + std::to_string(last_asked);
  const auto changed = [&](std::uint64_t now) {
    t.refused = "the object is " + std::to_string(now) + " bytes, not " + std::to_string(*t.size) +
                " as its size was read: it changed during the read";
    return false;
  };
  if (status == 206) {
    const std::optional<content_range> range = parse_content_range(t.content_range);
    if (!range || !range->first) {
      t.refused = t.content_range.empty() ? "the answer to a request for " + asked + " has no Content-Range"
                                          : "its Content-Range '" + t.content_range + "' is not a byte range";
      return false;
    }
    if (*range->first != t.offset || *range->last > last_asked) {
      t.refused = "its Content-Range '" + t.content_range + "' is not the range asked for, " + asked;
      return false;
    }
    if (range->total && t.size && *range->total != *t.size) return changed(*range->total);
    t.expected = *range->last - *range->first + 1;
    t.total = range->total;
    return true;
  }
  if (status == 200) {  // the range ignored: the whole object, read from the offset
    const std::optional<std::uint64_t> length = content_length_of(t.easy);
    if (length && t.size && *length != *t.size) return changed(*length);
    t.expected = length ? length : t.size;
    t.total = t.expected;
    t.skip = t.offset;
    return true;
  }
  t.refused = "HTTP " + std::to_string(status) + " is no answer to a request for " + asked;
  return false;
}

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
  if (line.starts_with("HTTP/")) {  // a new answer (after a 100 Continue): its own headers
    t.etag.clear();
    t.content_range.clear();
    return size * count;
  }
  const std::size_t colon = line.find(':');
  if (colon != std::string_view::npos) {
    std::string name(line.substr(0, colon));
    std::ranges::transform(name, name.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == '\r' || value.back() == '\n' || value.back() == ' ')) value.remove_suffix(1);
    if (name == "etag") t.etag = std::string(value);
    else if (name == "content-range") t.content_range = std::string(value);
  }
  return size * count;
}

std::size_t on_write(char* buffer, std::size_t size, std::size_t count, void* user) {
  auto& t = *static_cast<transfer*>(user);
  const std::size_t n = size * count;
  received_by_process.fetch_add(n, std::memory_order_relaxed);
  if (t.counted != nullptr) t.counted->bytes.fetch_add(n, std::memory_order_relaxed);
  const long status = status_of(t.easy);
  if (!t.ranged || !is_success(status)) {
    if (is_success(status) || t.body.size() < max_error_body)
      t.body.append(buffer, is_success(status) ? n : std::min(n, max_error_body - t.body.size()));
    return n;
  }
  if (!t.checked && !check_range(t, status)) return 0;  // stops the transfer: CURLE_WRITE_ERROR
  t.received += n;
  if (status == 206 && t.received > *t.expected) {
    t.refused = "its body is longer than its Content-Range '" + t.content_range + "'";
    return 0;
  }
  std::string_view bytes(buffer, n);
  const std::size_t dropped = static_cast<std::size_t>(std::min<std::uint64_t>(t.skip, bytes.size()));
  t.skip -= dropped;
  bytes.remove_prefix(dropped);
  const std::size_t kept = std::min(t.sink.size() - t.sunk, bytes.size());
  std::memcpy(t.sink.data() + t.sunk, bytes.data(), kept);
  t.sunk += kept;
  return n;  // a 200's bytes past the range are dropped
}

}  // namespace

client::response client::try_once(const request& r, std::chrono::milliseconds limit) {
  CURL* easy = curl_->easy;
  curl_easy_reset(easy);
  // The URL, as Signature V4 signs it: the key percent-encoded (its '/' kept), the query sorted.
  std::string url = config_.endpoint;
  if (config_.path_style) {
    url += "/" + encode(r.target.bucket, false);
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
  // The key as it is: no dot segment resolved (object::parse refuses them in URLs; a key made
  // otherwise still names itself, never another).
  curl_easy_setopt(easy, CURLOPT_PATH_AS_IS, 1L);
  const std::string sigv4 = "aws:amz:" + config_.region + ":s3";
  curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, sigv4.c_str());
  curl_easy_setopt(easy, CURLOPT_USERNAME, config_.access_key.c_str());
  curl_easy_setopt(easy, CURLOPT_PASSWORD, config_.secret_key.c_str());
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
  if (r.fresh) curl_easy_setopt(easy, CURLOPT_FRESH_CONNECT, 1L);
  // The time rule, on the transfer in progress: a body that trickles in ends here.
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(limit.count()));
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(std::min<std::int64_t>(limit.count(), 10'000)));
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

  transfer t{.easy = easy,
             .upload = r.body,
             .sink = r.sink,
             .offset = r.offset,
             .ranged = r.ranged,
             .size = r.size,
             .counted = config_.counted};
  if (config_.counted != nullptr) config_.counted->requests.fetch_add(1, std::memory_order_relaxed);
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
  response out;
  out.transport = curl_easy_perform(easy);
  // Nothing of this call's stack stays with the handle (its connections outlive the call).
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, nullptr);
  curl_slist_free_all(headers);
  out.body = std::move(t.body);
  out.etag = std::move(t.etag);
  out.sunk = t.sunk;
  if (out.transport == CURLE_WRITE_ERROR && !t.refused.empty()) {
    out.transport = CURLE_OK;  // stopped here: the answer is not the range asked for
    out.invalid = std::move(t.refused);
  }
  if (out.transport != CURLE_OK) {
    out.transport_message = error_text[0] != '\0' ? std::string(error_text) : curl_easy_strerror(out.transport);
    return out;
  }
  out.status = status_of(easy);
  out.content_length = content_length_of(easy);
  if (!r.ranged || !out.invalid.empty()) return out;
  if (out.status == 416) {  // nothing at the offset: the object's size, if the answer says it
    if (const auto range = parse_content_range(t.content_range)) out.total = range->total;
    return out;
  }
  if (!is_success(out.status)) return out;
  if (!t.checked && !check_range(t, out.status)) {  // an empty body: no write came
    out.invalid = std::move(t.refused);
    return out;
  }
  out.total = t.total;
  // A body shorter than announced (a connection that ended early without saying so): another
  // try may bring it whole.
  if (t.expected && t.received != *t.expected) {
    out.invalid = "its body holds " + std::to_string(t.received) + " of the " + std::to_string(*t.expected) +
                  " bytes expected";
    out.invalid_may_pass = true;
  }
  return out;
}

client::response client::perform(const request& r) {
  if (const std::string why = bucket_problem(r.target.bucket, !config_.path_style); !why.empty())
    throw std::invalid_argument("ckpt: s3: '" + r.target.url() + "': " + why);
  const auto limit = config_.try_limit(std::max<std::uint64_t>(r.body.size(), r.sink.size()));
  const auto end = r.deadline.value_or(std::chrono::steady_clock::now() + 2 * limit);
  auto wait = config_.first_wait;
  std::minstd_rand jitter(std::random_device{}());
  for (int attempt = 1;; ++attempt) {
    tries_ = attempt;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    response out = try_once(r, std::clamp(left, std::chrono::milliseconds(1), limit));
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
    } else if (!out.invalid.empty()) {
      message = out.invalid;
      may_pass = out.invalid_may_pass;
    } else {
      // A status that is not a failure that may pass is the caller's to take or refuse; so are 501
      // and 505, a feature the server lacks (conditional writes, on Swift's s3api), which no retry
      // brings.
      const bool server_failure = out.status >= 500 && out.status != 501 && out.status != 505;
      if (!server_failure && out.status != 429 && out.status != 400) return out;
      if (!out.body.empty()) {
        error_answer e = error_in(out.body);
        code = std::move(e.code);
        message = std::move(e.message);
      }
      may_pass = server_failure || out.status == 429 || code == "SlowDown" || code == "RequestTimeout" ||
                 code == "InternalError" || code == "ServiceUnavailable";
      if (!may_pass) return out;
    }
    if (!may_pass || attempt >= config_.attempts || std::chrono::steady_clock::now() + wait >= end) {
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
  error_answer e = error_in(body);
  if (e.code.empty() && status == 404) e.code = "NoSuchKey";
  throw remote_error(o.url(), method, status, std::move(e.code), e.message);
}

// A 2xx whose body may still carry an error (a copy or a completion that failed after it began,
// S3 reporting it late in the body): an <Error> document is refused as any other, and so is a body
// that is not XML. An empty body is taken.
void refuse_failure_in(const object& o, const std::string& method, long status, const std::string& body) {
  if (body.empty()) return;
  if (read_answer(o, method, status, [&] { return root_of(body); }) == "Error") refuse(o, method, status, body);
}

}  // namespace

void client::create_bucket(const std::string& bucket) {
  const object o{bucket, ""};
  const response out = perform({.method = "PUT", .target = o});
  if (is_success(out.status)) return;
  // Ours already: fine (AWS answers 200 in us-east-1, 409 BucketAlreadyOwnedByYou elsewhere).
  if (out.status == 409 && error_in(out.body).code == "BucketAlreadyOwnedByYou") return;
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

std::size_t client::get(const object& o, std::uint64_t offset, std::span<std::byte> out,
                        std::optional<std::uint64_t> size) {
  if (out.empty()) return 0;
  // One time rule for the whole range, whatever the parts it comes in.
  const auto deadline = std::chrono::steady_clock::now() + 2 * config_.try_limit(out.size());
  std::size_t done = 0;
  while (done < out.size()) {
    if (done > 0 && std::chrono::steady_clock::now() >= deadline)
      throw remote_error(o.url(), "GET", 206, "",
                         "the range came in parts for longer than the time rule allows (" + std::to_string(done) +
                             " of " + std::to_string(out.size()) + " bytes)");
    const response got = perform({.method = "GET",
                                  .target = o,
                                  .sink = out.subspan(done),
                                  .offset = offset + done,
                                  .ranged = true,
                                  .size = size,
                                  .deadline = deadline});
    const std::optional<std::uint64_t> end = got.total ? got.total : size;
    if (got.status == 416) {  // the range starts at or past the end
      if (end && offset + done < *end)
        throw remote_error(o.url(), "GET", 416, error_in(got.body).code,
                           "a range from byte " + std::to_string(offset + done) + " was refused, inside the object's " +
                               std::to_string(*end) + " bytes");
      break;
    }
    if (!is_success(got.status)) refuse(o, "GET", got.status, got.body);
    done += got.sunk;
    // A 200 is the whole object: what it had from the offset is all there is. A 206 may be a part
    // of the range (HTTP allows it): the rest is asked for, up to the object's end.
    if (got.status != 206 || (end && offset + done >= *end)) break;
  }
  return done;
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
  if (!out.content_length)
    throw remote_error(o.url(), "HEAD", out.status, "", "the answer has no Content-Length: the object's size is unknown");
  return object_info{o.key, *out.content_length, out.etag};
}

namespace {

// The checks of a listing's page (list and uploads): every key under the prefix asked for, and
// pages that end: a token or marker the server sent before, or more than max_pages pages, is an
// error rather than a listing without end.
struct page_check {
  const object& where;  // the bucket and the prefix
  std::set<std::string> seen{};
  int pages = 0;

  void key(const std::string& key, long status) const {
    if (!key.starts_with(where.key))
      throw remote_error(where.url(), "GET", status, "",
                         "the listing holds the key '" + key + "', which is not under the prefix '" + where.key + "'");
  }
  // Whether to ask for another page, after `next` (the token or markers the page ended with).
  bool next(bool truncated, const std::string& next, const char* what, long status) {
    if (!truncated) return false;
    if (next.empty())
      throw remote_error(where.url(), "GET", status, "", std::string("the page is truncated and gives no ") + what);
    if (!seen.insert(next).second)
      throw remote_error(where.url(), "GET", status, "",
                         std::string("the server sent the same ") + what + " twice ('" + next +
                             "'): the listing would never end");
    if (++pages >= client::max_pages)
      throw remote_error(where.url(), "GET", status, "",
                         "the listing goes on past " + std::to_string(client::max_pages) + " pages");
    return true;
  }
};

}  // namespace

std::vector<object_info> client::list(const std::string& bucket, const std::string& prefix, int page_size) {
  const object where{bucket, prefix};
  page_check check{where};
  std::vector<object_info> found;
  std::string token;
  for (;;) {
    request r{.method = "GET",
              .target = {bucket, ""},
              .query = {{"list-type", "2"}, {"prefix", prefix}, {"max-keys", std::to_string(page_size)}}};
    if (!token.empty()) r.query.emplace_back("continuation-token", token);
    const response out = perform(r);
    if (!is_success(out.status)) refuse(where, "GET", out.status, out.body);
    list_page page = read_answer(where, "GET", out.status, [&] { return list_page_in(out.body); });
    for (object_info& o : page.objects) {
      check.key(o.key, out.status);
      found.push_back(std::move(o));
    }
    if (!check.next(page.truncated, page.next_token, "NextContinuationToken", out.status)) break;
    token = std::move(page.next_token);
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
  if (!is_success(out.status)) refuse(to, "PUT", out.status, out.body);
  refuse_failure_in(to, "PUT", out.status, out.body);
}

std::string client::start_upload(const object& o) {
  const response out = perform({.method = "POST",
                                .target = o,
                                .query = {{"uploads", ""}},
                                .headers = {"Content-Type: application/octet-stream"}});
  if (!is_success(out.status)) refuse(o, "POST", out.status, out.body);
  return read_answer(o, "POST", out.status, [&] { return upload_id_in(out.body); });
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
  if (!is_success(out.status)) refuse(o, "POST", out.status, out.body);
  refuse_failure_in(o, "POST", out.status, out.body);
  return true;
}

void client::abort_upload(const object& o, const std::string& upload_id) {
  const response out = perform({.method = "DELETE", .target = o, .query = {{"uploadId", upload_id}}});
  if (!is_success(out.status) && out.status != 404) refuse(o, "DELETE", out.status, out.body);
}

std::vector<upload_info> client::uploads(const std::string& bucket, const std::string& prefix) {
  const object where{bucket, prefix};
  page_check check{where};
  std::vector<upload_info> found;
  std::string key_marker, id_marker;
  for (;;) {
    request r{.method = "GET", .target = {bucket, ""}, .query = {{"uploads", ""}, {"prefix", prefix}}};
    if (!key_marker.empty()) r.query.emplace_back("key-marker", key_marker);
    if (!id_marker.empty()) r.query.emplace_back("upload-id-marker", id_marker);
    const response out = perform(r);
    if (!is_success(out.status)) refuse(where, "GET", out.status, out.body);
    uploads_page page = read_answer(where, "GET", out.status, [&] { return uploads_page_in(out.body); });
    for (upload_info& u : page.uploads) {
      check.key(u.key, out.status);
      found.push_back(std::move(u));
    }
    // The markers as a pair: a key's next uploads share its key marker.
    const std::string next = page.next_key_marker.empty() ? std::string()
                                                           : page.next_key_marker + "', NextUploadIdMarker '" +
                                                                 page.next_upload_id_marker;
    if (!check.next(page.truncated, next, "NextKeyMarker", out.status)) break;
    key_marker = std::move(page.next_key_marker);
    id_marker = std::move(page.next_upload_id_marker);
  }
  return found;
}

std::uint64_t bytes_received() noexcept { return received_by_process.load(std::memory_order_relaxed); }

}  // namespace ckpt::detail::s3
