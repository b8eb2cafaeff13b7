#pragma once
// The S3 servers of the S3 suites: the CTest fixture s3_server's (tests/s3/s3_server.sh; its
// endpoint in $CKPT_S3_SERVER_DIR/endpoint, its key "test:tester", its secret "testing"), and a
// scripted HTTP server in the test's process for the failures a real server does not make on
// demand (5xx, throttling, dropped connections, wrong ranges, endless listings, bodies that
// trickle in).

#include "s3/client.hpp"

#include <boost/test/unit_test.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ckpt_s3_test {

inline ckpt::detail::s3::config local_server() {
  const char* dir = std::getenv("CKPT_S3_SERVER_DIR");
  BOOST_TEST_REQUIRE(dir != nullptr, "CKPT_S3_SERVER_DIR is not set: run the test through ctest (fixture s3_server)");
  std::ifstream in(std::string(dir) + "/endpoint");
  std::string endpoint;
  in >> endpoint;
  BOOST_TEST_REQUIRE(!endpoint.empty());
  ckpt::detail::s3::config c;
  c.endpoint = endpoint;
  c.access_key = "test:tester";
  c.secret_key = "testing";
  c.path_style = true;
  return c;
}


// How a scripted_server writes its answers: the first `at_once` bytes at once, then `chunk`
// bytes every `gap` (a body that trickles in), giving up after `give_up` (the connection closed).
struct pace {
  std::size_t at_once = std::string::npos;
  std::size_t chunk = 1;
  std::chrono::milliseconds gap{0};
  std::chrono::milliseconds give_up{10'000};
};

// An HTTP server on 127.0.0.1 that answers each request with what `answer_to` returns for the
// request's head (its request line and headers): a status line, headers and body, written as
// they are (at the `pace` given), or, if empty, nothing (the connection is closed without an
// answer). One connection a request; it records the request lines.
class scripted_server {
 public:
  explicit scripted_server(std::function<std::string(const std::string& head)> answer_to, pace how = {})
      : answer_to_(std::move(answer_to)), pace_(how) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_TEST_REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    BOOST_TEST_REQUIRE(::listen(listener_, 8) == 0);
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  // Answers the requests with `answers` in turn, then closes connections unanswered.
  explicit scripted_server(std::vector<std::string> answers)
      : scripted_server([answers = std::move(answers), next = std::size_t{0}](const std::string&) mutable {
          return next < answers.size() ? answers[next++] : std::string();
        }) {}
  scripted_server(const scripted_server&) = delete;
  scripted_server& operator=(const scripted_server&) = delete;
  ~scripted_server() {
    stopping_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    thread_.join();
  }
  [[nodiscard]] std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  [[nodiscard]] int requests() const { return requests_; }
  // "METHOD /path?query HTTP/1.1" of each request so far.
  [[nodiscard]] std::vector<std::string> request_lines() const {
    const std::lock_guard lock(mutex_);
    return lines_;
  }

 private:
  void serve() {
    for (;;) {
      const int connection = ::accept(listener_, nullptr, nullptr);
      if (connection < 0) return;
      // The request's head (the tests send no bodies).
      std::string head;
      char buffer[4096];
      while (head.find("\r\n\r\n") == std::string::npos) {
        const ssize_t n = ::read(connection, buffer, sizeof buffer);
        if (n <= 0) break;
        head.append(buffer, static_cast<std::size_t>(n));
      }
      {
        const std::lock_guard lock(mutex_);
        lines_.push_back(head.substr(0, head.find("\r\n")));
      }
      ++requests_;
      send(connection, answer_to_(head));
      ::close(connection);
    }
  }

  // Writes `answer` at the server's pace; stops where the client has gone.
  void send(int connection, const std::string& answer) const {
    const auto start = std::chrono::steady_clock::now();
    std::size_t sent = 0;
    while (sent < answer.size() && !stopping_) {
      if (sent >= pace_.at_once) {
        if (std::chrono::steady_clock::now() - start > pace_.give_up) return;
        std::this_thread::sleep_for(pace_.gap);
      }
      const std::size_t n = sent < pace_.at_once ? std::min(answer.size(), pace_.at_once) - sent
                                                 : std::min(pace_.chunk, answer.size() - sent);
      const ssize_t written = ::send(connection, answer.data() + sent, n, MSG_NOSIGNAL);
      if (written <= 0) return;
      sent += static_cast<std::size_t>(written);
    }
  }

  std::function<std::string(const std::string&)> answer_to_;
  pace pace_;
  std::atomic<bool> stopping_{false};
  int listener_ = -1;
  int port_ = 0;
  std::atomic<int> requests_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
  std::thread thread_;
};

inline std::string answer(int status, const std::string& reason, const std::string& body) {
  return "HTTP/1.1 " + std::to_string(status) + " " + reason + "\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

inline std::string s3_error(const std::string& code, const std::string& message) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" + code + "</Code><Message>" + message +
         "</Message></Error>";
}

}  // namespace ckpt_s3_test
