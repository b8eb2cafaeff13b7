#pragma once
// An S3 server in the test's process that stores what it is sent, for the races and lost answers
// a real server does not make on demand. Path-style (`/bucket/key`), any bucket, signatures
// accepted unchecked; objects (PUT, a conditional `If-None-Match: *` answered 412 when the key
// is there; GET, whole or a Range; HEAD; DELETE; a server-side copy), ListObjectsV2 (pages of
// max-keys), multipart uploads (initiate, part, complete, abort, list). Each connection is served
// by a thread of its own and kept alive, so requests run at once. A script, called for every
// request before it is handled (on that request's thread, so it may block: a delay), says how it
// is answered: at once, trickled, or not at all after being handled (a lost answer).

#include "s3/client.hpp"

// A test program without Boost.Test (an MPI test) defines its own check first.
#ifndef CKPT_FAKE_STORE_REQUIRE
#include <boost/test/unit_test.hpp>
#define CKPT_FAKE_STORE_REQUIRE BOOST_TEST_REQUIRE
#endif

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ckpt_s3_test {

class fake_store {
 public:
  struct request {
    std::string method, bucket, key;               // key percent-decoded; empty for a bucket
    std::map<std::string, std::string> query;      // decoded
    std::map<std::string, std::string> headers;    // names in lower case
    std::string body;
    [[nodiscard]] bool has(const std::string& name) const { return query.contains(name); }
    [[nodiscard]] std::string arg(const std::string& name) const { return has(name) ? query.at(name) : ""; }
  };
  // How a request is answered.
  struct plan {
    enum { answer, lose_answer, drop } how = answer;  // lose_answer: handled, then the connection
                                                      // closes unanswered; drop: closed unhandled
    std::size_t bytes_per_second = 0;                 // > 0: the answer trickles at this rate
  };
  using script = std::function<plan(const request&)>;

  explicit fake_store(script s = {}) : script_(std::move(s)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CKPT_FAKE_STORE_REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    CKPT_FAKE_STORE_REQUIRE(::listen(listener_, 64) == 0);
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_all(); });
  }
  fake_store(const fake_store&) = delete;
  fake_store& operator=(const fake_store&) = delete;
  ~fake_store() {
    stopping_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    acceptor_.join();
    ::close(listener_);
    {
      const std::lock_guard lock(mutex_);
      for (const int fd : open_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : connections_) t.join();
  }

  [[nodiscard]] std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  // A client's settings for this server.
  [[nodiscard]] ckpt::detail::s3::config settings() const {
    ckpt::detail::s3::config c;
    c.endpoint = endpoint();
    c.access_key = "key";
    c.secret_key = "secret";
    c.path_style = true;
    return c;
  }

  [[nodiscard]] std::optional<std::string> object(const std::string& bucket, const std::string& key) const {
    const std::lock_guard lock(mutex_);
    const auto it = objects_.find(bucket + "/" + key);
    return it == objects_.end() ? std::nullopt : std::optional(it->second);
  }
  void put_object(const std::string& bucket, const std::string& key, std::string bytes) {
    const std::lock_guard lock(mutex_);
    objects_[bucket + "/" + key] = std::move(bytes);
  }
  // "METHOD /path?query" of every request so far, in the order they came.
  [[nodiscard]] std::vector<std::string> request_lines() const {
    const std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  struct response {
    int status = 200;
    std::string body{};
    std::vector<std::string> headers{};
    std::optional<std::size_t> length{};  // a HEAD's Content-Length (it sends no body)
  };

  void accept_all() {
    while (!stopping_) {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      const std::lock_guard lock(mutex_);
      open_.insert(fd);
      connections_.emplace_back([this, fd] { serve(fd); });
    }
  }

  // The requests of one connection, until the client or the server closes it.
  void serve(int fd) {
    std::string buffered;
    for (std::optional<request> r; (r = read_request(fd, buffered));) {
      const plan p = script_ ? script_(*r) : plan{};
      if (p.how == plan::drop) break;
      const std::string out = serialize(handle(*r), r->method == "HEAD");
      if (p.how == plan::lose_answer) break;
      if (!send(fd, out, p.bytes_per_second)) break;
    }
    const std::lock_guard lock(mutex_);
    ::close(fd);
    open_.erase(fd);
  }

  bool send(int fd, std::string_view out, std::size_t bytes_per_second) {
    // A trickle: a tenth of the rate every 100 ms.
    const std::size_t piece = bytes_per_second == 0 ? out.size() : std::max<std::size_t>(bytes_per_second / 10, 1);
    while (!out.empty() && !stopping_) {
      const ssize_t n = ::send(fd, out.data(), std::min(piece, out.size()), MSG_NOSIGNAL);
      if (n <= 0) return false;
      out.remove_prefix(static_cast<std::size_t>(n));
      if (bytes_per_second > 0 && !out.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return out.empty();
  }

  // The next request on `fd` (its head and its Content-Length body), or nothing once it closes.
  std::optional<request> read_request(int fd, std::string& buffered) {
    const auto fill = [&] {
      char chunk[65536];
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n > 0) buffered.append(chunk, static_cast<std::size_t>(n));
      return n > 0;
    };
    std::size_t end;
    while ((end = buffered.find("\r\n\r\n")) == std::string::npos)
      if (!fill()) return std::nullopt;
    request r;
    const std::string head = buffered.substr(0, end);
    buffered.erase(0, end + 4);
    std::size_t at = head.find("\r\n");
    const std::string line = head.substr(0, at);
    {
      const std::lock_guard lock(mutex_);
      lines_.push_back(line.substr(0, line.rfind(' ')));
    }
    while (at != std::string::npos && at < head.size()) {
      const std::size_t next = head.find("\r\n", at + 2);
      const std::string field = head.substr(at + 2, next == std::string::npos ? std::string::npos : next - at - 2);
      if (const std::size_t colon = field.find(':'); colon != std::string::npos) {
        std::string name = field.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        r.headers[name] = field.substr(field.find_first_not_of(' ', colon + 1));
      }
      at = next;
    }
    const std::size_t space = line.find(' ');
    r.method = line.substr(0, space);
    const std::string target = line.substr(space + 1, line.rfind(' ') - space - 1);
    const std::string path = decode(target.substr(1, target.find('?') - 1));
    r.bucket = path.substr(0, path.find('/'));
    r.key = path.find('/') == std::string::npos ? "" : path.substr(path.find('/') + 1);
    if (const std::size_t q = target.find('?'); q != std::string::npos) {
      for (std::size_t from = q + 1; from <= target.size();) {
        const std::size_t amp = std::min(target.find('&', from), target.size());
        const std::string pair = target.substr(from, amp - from);
        const std::size_t eq = pair.find('=');
        r.query[decode(pair.substr(0, eq))] = eq == std::string::npos ? "" : decode(pair.substr(eq + 1));
        from = amp + 1;
      }
    }
    if (r.headers["expect"] == "100-continue") static_cast<void>(send(fd, "HTTP/1.1 100 Continue\r\n\r\n", 0));
    const std::size_t length = r.headers.contains("content-length") ? std::stoull(r.headers["content-length"]) : 0;
    while (buffered.size() < length)
      if (!fill()) return std::nullopt;
    r.body = buffered.substr(0, length);
    buffered.erase(0, length);
    return r;
  }

  response handle(const request& r) {
    const std::lock_guard lock(mutex_);
    const std::string name = r.bucket + "/" + r.key;
    const auto object = objects_.find(name);
    const bool exists = object != objects_.end();
    const bool if_absent = r.headers.contains("if-none-match");
    if (r.key.empty()) {
      if (r.method == "PUT") return {};  // a bucket: any exists
      if (r.has("uploads")) return {200, list_uploads(r)};
      return {200, list_objects(r)};
    }
    if (r.method == "POST" && r.has("uploads")) {
      const std::string id = "upload-" + std::to_string(++count_);
      uploads_[id] = {name, {}};
      return {200, "<InitiateMultipartUploadResult><UploadId>" + id + "</UploadId></InitiateMultipartUploadResult>"};
    }
    if (r.has("uploadId")) {
      const auto upload = uploads_.find(r.arg("uploadId"));
      if (upload == uploads_.end() || upload->second.name != name)
        return error(404, "NoSuchUpload", "The specified upload does not exist.");
      std::map<int, stored_part>& parts = upload->second.parts;
      if (r.method == "DELETE") {
        uploads_.erase(upload);
        return {204};
      }
      if (r.method == "PUT") {
        const std::string etag = etag_of(r.body);
        parts[std::stoi(r.arg("partNumber"))] = {r.body, etag};
        return {200, "", {"ETag: " + etag}};
      }
      if (if_absent && exists) return precondition_failed();
      // Complete: the parts in the order the body lists them, each with its ETag.
      std::string bytes;
      for (std::size_t at = 0; (at = r.body.find("<PartNumber>", at)) != std::string::npos;) {
        const int number = std::stoi(r.body.substr(at + 12));
        const std::size_t tag = r.body.find("<ETag>", at) + 6;
        const auto it = parts.find(number);
        if (it == parts.end() || r.body.substr(tag, r.body.find("</ETag>", tag) - tag) != it->second.etag)
          return error(400, "InvalidPart", "One or more of the specified parts could not be found.");
        bytes += it->second.bytes;
        at = tag;
      }
      objects_[name] = std::move(bytes);
      uploads_.erase(upload);
      return {200, "<CompleteMultipartUploadResult><Key>" + escape(r.key) + "</Key></CompleteMultipartUploadResult>"};
    }
    if (r.method == "PUT") {
      if (if_absent && exists) return precondition_failed();
      if (const auto source = r.headers.find("x-amz-copy-source"); source != r.headers.end()) {
        const auto from = objects_.find(decode(source->second.substr(1)));
        if (from == objects_.end()) return error(404, "NoSuchKey", "The specified key does not exist.");
        objects_[name] = from->second;
        return {200, "<CopyObjectResult></CopyObjectResult>"};
      }
      objects_[name] = r.body;
      return {200, "", {"ETag: " + etag_of(r.body)}};
    }
    if (r.method == "DELETE") {
      objects_.erase(name);
      return {204};
    }
    if (!exists && r.method == "HEAD") return {404};
    if (!exists) return error(404, "NoSuchKey", "The specified key does not exist.");
    const std::string& bytes = object->second;
    if (r.method == "HEAD") return {200, "", {"ETag: " + etag_of(bytes)}, bytes.size()};
    const auto range = r.headers.find("range");
    if (range == r.headers.end()) return {200, bytes};
    // "bytes=first-last"
    const std::size_t first = std::stoull(range->second.substr(6));
    const std::size_t last = std::min<std::size_t>(std::stoull(range->second.substr(range->second.find('-') + 1)),
                                                   bytes.size() - 1);
    if (first >= bytes.size()) return error(416, "InvalidRange", "The requested range is not satisfiable");
    const std::string range_sent = std::to_string(first) + "-" + std::to_string(last);
    return {206, bytes.substr(first, last - first + 1),
            {"Content-Range: bytes " + range_sent + "/" + std::to_string(bytes.size())}};
  }

  std::string list_objects(const request& r) const {
    const std::string prefix = r.bucket + "/" + r.arg("prefix");
    const std::size_t page = r.has("max-keys") ? std::stoull(r.arg("max-keys")) : 1000;
    // The continuation token is the last key of the page before.
    auto it = r.has("continuation-token") ? objects_.upper_bound(r.bucket + "/" + r.arg("continuation-token"))
                                          : objects_.lower_bound(prefix);
    std::string body, last;
    std::size_t n = 0;
    for (; it != objects_.end() && it->first.starts_with(prefix) && n < page; ++it, ++n) {
      last = it->first.substr(r.bucket.size() + 1);
      body += "<Contents><Key>" + escape(last) + "</Key><Size>" + std::to_string(it->second.size()) +
              "</Size><ETag>" + escape(etag_of(it->second)) + "</ETag></Contents>";
    }
    const bool more = it != objects_.end() && it->first.starts_with(prefix);
    if (more) body += "<NextContinuationToken>" + escape(last) + "</NextContinuationToken>";
    return "<ListBucketResult><IsTruncated>" + std::string(more ? "true" : "false") + "</IsTruncated>" + body +
           "</ListBucketResult>";
  }

  std::string list_uploads(const request& r) const {
    const std::string prefix = r.bucket + "/" + r.arg("prefix");
    std::string body;
    for (const auto& [id, u] : uploads_)
      if (u.name.starts_with(prefix))
        body += "<Upload><Key>" + escape(u.name.substr(r.bucket.size() + 1)) + "</Key><UploadId>" + id +
                "</UploadId></Upload>";
    return "<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>" + body + "</ListMultipartUploadsResult>";
  }

  static response error(int status, const std::string& code, const std::string& message) {
    return {status, "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code + "</Code><Message>" + message +
                        "</Message></Error>"};
  }
  static response precondition_failed() {
    return error(412, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold");
  }

  static std::string serialize(const response& r, bool head) {
    static const std::map<int, std::string> reasons{{200, "OK"}, {204, "No Content"}, {206, "Partial Content"},
                                                    {400, "Bad Request"}, {404, "Not Found"},
                                                    {412, "Precondition Failed"}, {416, "Range Not Satisfiable"}};
    std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + reasons.at(r.status) + "\r\n";
    for (const std::string& h : r.headers) out += h + "\r\n";
    out += "Content-Length: " + std::to_string(r.length.value_or(r.body.size())) + "\r\n\r\n";
    return head ? out : out + r.body;
  }

  static std::string etag_of(const std::string& bytes) {
    return "\"" + std::to_string(std::hash<std::string>{}(bytes)) + "\"";
  }

  static std::string escape(const std::string& text) {
    std::string out;
    for (const char c : text) out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
    return out;
  }

  static std::string decode(const std::string& text) {
    std::string out;
    for (std::size_t i = 0; i < text.size(); ++i)
      if (text[i] == '%' && i + 2 < text.size()) {
        out += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
        i += 2;
      } else {
        out += text[i];
      }
    return out;
  }

  script script_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  mutable std::mutex mutex_;
  std::set<int> open_;                         // the connections' sockets, until closed
  std::vector<std::thread> connections_;
  std::vector<std::string> lines_;
  std::map<std::string, std::string> objects_;  // "bucket/key" -> bytes
  struct stored_part {
    std::string bytes, etag;
  };
  struct open_upload {
    std::string name;  // "bucket/key"
    std::map<int, stored_part> parts;
  };
  std::map<std::string, open_upload> uploads_;  // by upload id
  int count_ = 0;  // upload ids made
};

}  // namespace ckpt_s3_test
