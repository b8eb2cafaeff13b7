// The S3 client (src/s3/client.hpp) against a real S3-compatible server started by the CTest
// fixture s3_server (tests/s3/s3_server.sh: Swift's s3api on 127.0.0.1, its endpoint in
// $CKPT_S3_SERVER_DIR/endpoint), and against a scripted HTTP server in this process for the
// failures a real server does not make on demand (5xx, throttling, dropped connections).
#define BOOST_TEST_MODULE s3_client
#include <boost/test/unit_test.hpp>

#include "local_server.hpp"
#include "s3/client.hpp"


#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace s3 = ckpt::detail::s3;

namespace {

s3::config server() { return ckpt_s3_test::local_server(); }

// A bucket of its own for each test case.
std::string fresh_bucket(s3::client& c) {
  static int n = 0;
  const std::string bucket = "ckpt-test-" + std::to_string(::getpid()) + "-" + std::to_string(++n);
  c.create_bucket(bucket);
  return bucket;
}

std::vector<std::byte> pattern(std::size_t n, unsigned seed) {
  std::vector<std::byte> out(n);
  std::minstd_rand random(seed);
  for (auto& b : out) b = static_cast<std::byte>(random() & 0xff);
  return out;
}

std::string text(std::span<const std::byte> bytes) { return {reinterpret_cast<const char*>(bytes.data()), bytes.size()}; }

// The message of the remote_error `f` throws (and its status and code).
template <class F>
s3::remote_error failure_of(F&& f) {
  try {
    f();
  } catch (const s3::remote_error& e) {
    return e;
  }
  BOOST_FAIL("no remote_error was thrown");
  throw std::logic_error("unreachable");
}

void set_environment(const char* name, const char* value) {
  if (value == nullptr) ::unsetenv(name);
  else ::setenv(name, value, 1);
}

}  // namespace

BOOST_AUTO_TEST_CASE(configuration_and_urls) {
  set_environment("AWS_ACCESS_KEY_ID", "key");
  set_environment("AWS_SECRET_ACCESS_KEY", "secret");
  set_environment("AWS_SESSION_TOKEN", nullptr);
  set_environment("AWS_REGION", nullptr);
  set_environment("AWS_DEFAULT_REGION", "eu-west-3");
  set_environment("AWS_ENDPOINT_URL", nullptr);
  set_environment("AWS_ENDPOINT_URL_S3", nullptr);
  set_environment("CKPT_S3_ADDRESSING", nullptr);
  s3::config c = s3::config::from_environment();
  BOOST_TEST(c.region == "eu-west-3");
  BOOST_TEST(c.endpoint == "https://s3.eu-west-3.amazonaws.com");
  BOOST_TEST(!c.path_style);
  set_environment("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/");
  c = s3::config::from_environment();
  BOOST_TEST(c.endpoint == "http://127.0.0.1:9000");
  BOOST_TEST(c.path_style);
  set_environment("CKPT_S3_ADDRESSING", "virtual");
  BOOST_TEST(!s3::config::from_environment().path_style);
  set_environment("AWS_SECRET_ACCESS_KEY", nullptr);
  try {
    static_cast<void>(s3::config::from_environment());
    BOOST_FAIL("no error without a secret");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "ckpt: s3: no credentials: AWS_SECRET_ACCESS_KEY is not set");
  }

  const s3::object o = s3::object::parse("s3://bucket/runs/a/step-1.safetensors");
  BOOST_TEST(o.bucket == "bucket");
  BOOST_TEST(o.key == "runs/a/step-1.safetensors");
  BOOST_TEST(o.url() == "s3://bucket/runs/a/step-1.safetensors");
  BOOST_TEST(s3::object::parse("s3://bucket", false).key.empty());
  BOOST_TEST(s3::is_url("s3://b/k"));
  BOOST_TEST(!s3::is_url("/tmp/s3://b"));
  for (const auto& [url, why] : std::vector<std::pair<std::string, std::string>>{
           {"http://bucket/key", "it does not start with s3://"}, {"s3:///key", "no bucket"}, {"s3://bucket", "no key"},
           {"s3://bucket/", "no key"}}) {
    try {
      static_cast<void>(s3::object::parse(url));
      BOOST_FAIL("accepted " + url);
    } catch (const std::invalid_argument& e) {
      BOOST_TEST(std::string(e.what()) == "ckpt: s3: '" + url + "' is not an object URL s3://<bucket>/<key>: " + why);
    }
  }
}

BOOST_AUTO_TEST_CASE(objects_round_trip_with_ranges) {
  s3::client c(server());
  const std::string bucket = fresh_bucket(c);
  c.create_bucket(bucket);  // ours already: fine
  const std::vector<std::byte> bytes = pattern(3 << 20, 1);
  // A key with characters that must be encoded in the signed URL.
  const s3::object o{bucket, "runs/a b+c/step=1~x.safetensors"};
  BOOST_TEST(c.put(o, bytes));
  const std::optional<s3::object_info> info = c.head(o);
  BOOST_TEST_REQUIRE(info.has_value());
  BOOST_TEST(info->size == bytes.size());
  BOOST_TEST(!info->etag.empty());
  BOOST_TEST(c.get(o) == text(bytes));

  // A range in the middle: those bytes, and only those, come over the wire.
  std::vector<std::byte> middle(1000);
  const std::uint64_t before = s3::bytes_received();
  BOOST_TEST(c.get(o, 123456, middle) == 1000u);
  BOOST_TEST(s3::bytes_received() - before == 1000u);
  BOOST_TEST(text(middle) == text(std::span(bytes).subspan(123456, 1000)));
  // A range past the end is cut short; one that starts at the end is empty.
  std::vector<std::byte> tail(100);
  BOOST_TEST(c.get(o, bytes.size() - 40, tail) == 40u);
  BOOST_TEST(text(std::span(tail).first(40)) == text(std::span(bytes).last(40)));
  BOOST_TEST(c.get(o, bytes.size(), tail) == 0u);

  c.remove(o);
  BOOST_TEST(!c.head(o).has_value());
  c.remove(o);  // gone already: fine
}

BOOST_AUTO_TEST_CASE(listing_takes_every_page) {
  s3::client c(server());
  const std::string bucket = fresh_bucket(c);
  for (const char* key : {"run/b", "run/a", "run/c/x", "other/d", "run/e", "runner"})
    c.put({bucket, key}, std::as_bytes(std::span(std::string_view(key))));
  std::vector<std::string> keys;
  for (const s3::object_info& i : c.list(bucket, "run/", 2)) keys.push_back(i.key);
  BOOST_TEST(keys == (std::vector<std::string>{"run/a", "run/b", "run/c/x", "run/e"}), boost::test_tools::per_element());
  BOOST_TEST(c.list(bucket, "run", 1000).size() == 5u);
  BOOST_TEST(c.list(bucket, "none/").empty());
}

BOOST_AUTO_TEST_CASE(multipart_uploads_complete_and_abort) {
  s3::client c(server());
  const std::string bucket = fresh_bucket(c);
  const s3::object o{bucket, "big.safetensors"};
  const std::vector<std::byte> bytes = pattern((5 << 20) * 2 + 12345, 2);
  const std::string id = c.start_upload(o);
  std::vector<std::string> etags;
  for (std::size_t first = 0, part = 1; first < bytes.size(); first += 5 << 20, ++part)
    etags.push_back(c.upload_part(o, id, static_cast<int>(part),
                                  std::span(bytes).subspan(first, std::min<std::size_t>(5 << 20, bytes.size() - first))));
  BOOST_TEST(etags.size() == 3u);
  // Not visible before it completes; listed as an upload in flight.
  BOOST_TEST(!c.head(o).has_value());
  const std::vector<s3::upload_info> flying = c.uploads(bucket, "big");
  BOOST_TEST_REQUIRE(flying.size() == 1u);
  BOOST_TEST(flying[0].key == o.key);
  BOOST_TEST(flying[0].upload_id == id);
  c.complete_upload(o, id, etags);
  BOOST_TEST(c.head(o)->size == bytes.size());
  BOOST_TEST(c.get(o) == text(bytes));
  BOOST_TEST(c.uploads(bucket, "").empty());

  // An aborted upload leaves no object and no upload.
  const s3::object dropped{bucket, "dropped.safetensors"};
  const std::string other = c.start_upload(dropped);
  static_cast<void>(c.upload_part(dropped, other, 1, std::span(bytes).first(5 << 20)));
  c.abort_upload(dropped, other);
  BOOST_TEST(c.uploads(bucket, "").empty());
  BOOST_TEST(!c.head(dropped).has_value());
}

BOOST_AUTO_TEST_CASE(refusals_name_the_url_and_quote_the_server) {
  s3::client c(server());
  const std::string bucket = fresh_bucket(c);
  const s3::remote_error missing = failure_of([&] { static_cast<void>(c.get({bucket, "absent"})); });
  BOOST_TEST(missing.status() == 404);
  BOOST_TEST(missing.code() == "NoSuchKey");
  BOOST_TEST(std::string(missing.what()).starts_with("ckpt: s3: GET 's3://" + bucket + "/absent' failed: HTTP 404 NoSuchKey: "));
  BOOST_TEST(missing.path() == "s3://" + bucket + "/absent");

  const s3::remote_error no_bucket = failure_of([&] { c.put({"ckpt-no-such-bucket", "k"}, {}); });
  BOOST_TEST(no_bucket.status() == 404);
  BOOST_TEST(no_bucket.code() == "NoSuchBucket");

  s3::config wrong = server();
  wrong.secret_key = "not-the-secret";
  s3::client stranger(wrong);
  const s3::remote_error denied = failure_of([&] { stranger.put({bucket, "k"}, {}); });
  BOOST_TEST(denied.status() == 403);
  BOOST_TEST(denied.code() == "SignatureDoesNotMatch");
  BOOST_TEST(std::string(denied.what()).starts_with("ckpt: s3: PUT 's3://" + bucket + "/k' failed: HTTP 403 SignatureDoesNotMatch: "));

  // Swift's s3api does not implement conditional writes (If-None-Match: *): a refusal, never an
  // overwrite.
  c.put({bucket, "k"}, {});
  const s3::remote_error conditional = failure_of([&] { c.put({bucket, "k"}, {}, /*if_absent=*/true); });
  BOOST_TEST(conditional.status() == 501);
}

namespace {

using ckpt_s3_test::answer;
using ckpt_s3_test::s3_error;
using ckpt_s3_test::scripted_server;

s3::config scripted(const scripted_server& s, int attempts) {
  s3::config c;
  c.endpoint = s.endpoint();
  c.access_key = "key";
  c.secret_key = "secret";
  c.path_style = true;
  c.attempts = attempts;
  c.first_wait = std::chrono::milliseconds(5);
  return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(failures_that_may_pass_are_retried_with_a_bound) {
  {
    // Throttled, then a 503, then a dropped connection, then the object.
    scripted_server s({answer(503, "Slow Down", s3_error("SlowDown", "Please reduce your request rate.")),
                       answer(500, "Internal Server Error", s3_error("InternalError", "We encountered an internal error.")),
                       std::string(), answer(200, "OK", "payload")});
    s3::client c(scripted(s, 6));
    BOOST_TEST(c.get({"bucket", "key"}) == "payload");
    BOOST_TEST(s.requests() == 4);
  }
  {
    // Always 503: the last try's error, after the bounded number of tries.
    scripted_server s(std::vector<std::string>(3, answer(503, "Service Unavailable",
                                                         s3_error("ServiceUnavailable", "Please try again."))));
    s3::client c(scripted(s, 3));
    const s3::remote_error e = failure_of([&] { static_cast<void>(c.get({"bucket", "key"})); });
    BOOST_TEST(e.status() == 503);
    BOOST_TEST(std::string(e.what()) ==
               "ckpt: s3: GET 's3://bucket/key' failed: HTTP 503 ServiceUnavailable: Please try again. (after 3 tries)");
    BOOST_TEST(s.requests() == 3);
  }
  {
    // A refusal (4xx) is not retried.
    scripted_server s({answer(403, "Forbidden", s3_error("AccessDenied", "Access Denied")), answer(200, "OK", "")});
    s3::client c(scripted(s, 6));
    const s3::remote_error e = failure_of([&] { static_cast<void>(c.get({"bucket", "key"})); });
    BOOST_TEST(std::string(e.what()) == "ckpt: s3: GET 's3://bucket/key' failed: HTTP 403 AccessDenied: Access Denied");
    BOOST_TEST(s.requests() == 1);
  }
  {
    // 501, a feature the server lacks (Swift's answer to a conditional write): no retry brings it.
    scripted_server s({answer(501, "Not Implemented", s3_error("NotImplemented", "A header you provided implies functionality that is not implemented")),
                       answer(200, "OK", "")});
    s3::client c(scripted(s, 6));
    const s3::remote_error e = failure_of([&] { static_cast<void>(c.put({"bucket", "key"}, {}, /*if_absent=*/true)); });
    BOOST_TEST(e.status() == 501);
    BOOST_TEST(s.requests() == 1);
  }
  {
    // Nobody listening: the transport's error, after the tries.
    s3::config c;
    c.endpoint = "http://127.0.0.1:1";
    c.access_key = "key";
    c.secret_key = "secret";
    c.path_style = true;
    c.attempts = 2;
    c.first_wait = std::chrono::milliseconds(5);
    s3::client nobody(c);
    const s3::remote_error e = failure_of([&] { static_cast<void>(nobody.head({"bucket", "key"})); });
    BOOST_TEST(e.status() == 0);
    BOOST_TEST(std::string(e.what()).starts_with("ckpt: s3: HEAD 's3://bucket/key' failed: "));
    BOOST_TEST(std::string(e.what()).ends_with(" (after 2 tries)"));
  }
}
