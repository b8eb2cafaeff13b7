// Helpers shared by the test suites, so that each exists once instead of once per file.
// Header-only: its functions are inline, for the suites of one executable (tests/CMakeLists.txt).
//
// message_of() uses BOOST_FAIL: include it after <boost/test/unit_test.hpp>.
#pragma once

#include <boost/test/unit_test.hpp>

#include <ckpt/tensor.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <span>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <functional>

#include <stdlib.h>    // mkdtemp (POSIX)
#include <sys/wait.h>  // waitpid
#include <unistd.h>    // fork, pipe

namespace ckpt_test {

// Runs `f`, which must throw E, and returns the exception's what(). Fails the test case when
// nothing is thrown; any other exception propagates, so the test case reports it as an error.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  BOOST_FAIL("no exception was thrown");
  return {};  // not reached: BOOST_FAIL throws
}

// A folder of this test's own under the system's temporary folder, removed with its contents at
// the end (errors ignored: a test may have removed it already). mkdtemp makes the name unique
// per process and per test, so that parallel ctest runs and several build trees never share one.
//
// By default path() exists and is empty. With `absent`, path() is a folder that does not exist
// yet (inside the private one), for tests of code that must create its folder itself.
class temp_dir {
 public:
  enum state { created, absent };

  explicit temp_dir(state initial = created) {
    const std::string module = boost::unit_test::framework::master_test_suite().p_name.get();
    std::string pattern = (std::filesystem::temp_directory_path() / ("ckpt-" + module + "-XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::system_error(errno, std::generic_category(), "mkdtemp('" + pattern + "')");
    root_ = pattern;
    path_ = initial == created ? root_ : root_ / "dir";
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }

  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path root_;  // what mkdtemp made, and what the destructor removes
  std::filesystem::path path_;
};

// The whole file as bytes. Throws when it cannot be opened, so that a missing file is an error of
// its own rather than an empty string compared with the expected contents.
inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open '" + path.string() + "'");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The text of an index save_sharded wrote without the line of its save id (each save has its
// own): the text transformers writes.
inline std::string without_save_id(std::string index) {
  const std::size_t at = index.find("    \"ckpt.save_id\": \"");
  BOOST_TEST_REQUIRE(at != std::string::npos, "the index records no save id");
  index.erase(at, index.find('\n', at) + 1 - at);
  return index;
}

// The names in `dir`, sorted: what a test expects a folder to hold, leftovers included.
inline std::vector<std::string> folder_listing(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// A 1-D F32 tensor holding `values`.
inline ckpt::tensor floats(std::initializer_list<float> values) {
  return ckpt::tensor::copy_of(ckpt::dtype::f32, {static_cast<std::int64_t>(values.size())},
                               std::as_bytes(std::span(values.begin(), values.size())));
}

// Runs `f` in a child process (for what must not outlive it: a lower limit, another user, a
// signal disposition) and returns the string it returned, sent back through a pipe. An
// exception escaping `f` fails the child, and so the test.
inline std::string in_child(const std::function<std::string()>& f) {
  int pipe_fds[2];
  BOOST_REQUIRE(::pipe(pipe_fds) == 0);
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string out;
    try {
      out = f();
    } catch (...) {
      ::_exit(2);
    }
    const bool sent = ::write(pipe_fds[1], out.data(), out.size()) == static_cast<ssize_t>(out.size());
    ::_exit(sent ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string out;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<std::size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  BOOST_TEST((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  return out;
}

// Kibibytes of file-backed pages mapped into this process (RssFile of /proc/self/status), or -1.
inline long rss_file_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  return -1;
}

}  // namespace ckpt_test
