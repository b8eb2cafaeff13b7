#pragma once
// Shared pieces of the benchmark programs: the parameter structures, a median-of-N timer, file
// helpers for the baselines, /proc readers for memory, and the RESULT lines bench/run.sh tabulates
// (the load and save harnesses share more in harness.hpp).

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace bench {

namespace fs = std::filesystem;

using row_matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// 1 GiB of parameters in the full run: `layers` of `rows` x `cols` F32 matrices.
struct row_model {
  std::vector<row_matrix> layers;
};
struct col_model {
  std::vector<Eigen::MatrixXf> layers;
};

// --key=value flags; a bare --key means "1".
class args {
 public:
  args(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a.rfind("--", 0) == 0) {
        const auto eq = a.find('=');
        if (eq == std::string::npos) values_[a.substr(2)] = "1";
        else values_[a.substr(2, eq - 2)] = a.substr(eq + 1);
      } else {
        positional.push_back(std::move(a));
      }
    }
  }
  [[nodiscard]] long num(const std::string& key, long fallback) const {
    const auto it = values_.find(key);
    return it == values_.end() ? fallback : std::stol(it->second);
  }
  [[nodiscard]] double real(const std::string& key, double fallback) const {
    const auto it = values_.find(key);
    return it == values_.end() ? fallback : std::stod(it->second);
  }
  [[nodiscard]] std::string str(const std::string& key, std::string fallback) const {
    const auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }
  std::vector<std::string> positional;

 private:
  std::map<std::string, std::string> values_;
};

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

[[noreturn]] inline void die(const std::string& what) {
  throw std::system_error(errno, std::system_category(), what);
}

// Deterministic, cheap, non-constant contents (a linear congruential sequence).
inline void fill(float* p, std::size_t n, std::uint32_t seed) {
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (std::size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<float>(x >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
}

inline row_model make_row_model(long count, long rows, long cols, bool touch = true) {
  row_model m;
  m.layers.reserve(static_cast<std::size_t>(count));
  for (long i = 0; i < count; ++i) {
    m.layers.emplace_back(rows, cols);
    if (touch) fill(m.layers.back().data(), static_cast<std::size_t>(rows * cols), static_cast<std::uint32_t>(i));
  }
  return m;
}

inline col_model make_col_model(long count, long rows, long cols, bool touch = true) {
  col_model m;
  m.layers.reserve(static_cast<std::size_t>(count));
  for (long i = 0; i < count; ++i) {
    m.layers.emplace_back(rows, cols);
    if (touch) fill(m.layers.back().data(), static_cast<std::size_t>(rows * cols), static_cast<std::uint32_t>(i + 1000));
  }
  return m;
}

inline void write_all(int fd, const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("write");
    p += n;
    size -= static_cast<std::size_t>(n);
  }
}

inline void pread_all(int fd, void* data, std::size_t size, std::uint64_t offset) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) die("pread");
    if (n == 0) throw std::runtime_error("pread: unexpected end of file");
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
}

// The first 8 + header-length bytes of a safetensors file.
inline std::string read_header_block(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open " + path.string());
  std::uint64_t n = 0;
  pread_all(fd, &n, 8, 0);
  std::string out(8 + n, '\0');
  pread_all(fd, out.data(), out.size(), 0);
  ::close(fd);
  return out;
}

struct mem_status {
  long rss_kib = 0, hwm_kib = 0, anon_kib = 0, file_kib = 0;
};

inline mem_status read_status() {
  std::ifstream in("/proc/self/status");
  mem_status s;
  std::string key;
  long value = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    ls >> key >> value;
    if (key == "VmRSS:") s.rss_kib = value;
    else if (key == "VmHWM:") s.hwm_kib = value;
    else if (key == "RssAnon:") s.anon_kib = value;
    else if (key == "RssFile:") s.file_kib = value;
  }
  return s;
}

// Resets VmHWM to the current RSS (Linux >= 4.0).
inline void reset_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
}

// One timed run: seconds, and how far the peak RSS rose above the RSS at its start.
struct sample {
  double seconds = 0;
  double extra_peak_mib = 0;
};

template <class F>
sample measure(F&& f) {
  reset_peak();
  const long before = read_status().rss_kib;
  const double t0 = now_s();
  f();
  const double t1 = now_s();
  const long peak = read_status().hwm_kib;
  return {t1 - t0, static_cast<double>(peak - before) / 1024.0};
}

struct series {
  explicit series(std::string n) : name(std::move(n)) {}
  std::string name;
  std::vector<double> seconds, extra_mib;
  void add(const sample& s) {
    seconds.push_back(s.seconds);
    extra_mib.push_back(s.extra_peak_mib);
  }
  [[nodiscard]] double med() const { return median(seconds); }
  [[nodiscard]] double peak() const {
    return extra_mib.empty() ? 0 : *std::max_element(extra_mib.begin(), extra_mib.end());
  }
  // "0.123 [0.120 .. 0.140]" for the log.
  [[nodiscard]] std::string spread() const {
    char text[128];
    std::snprintf(text, sizeof text, "median %.4f s, min %.4f, max %.4f, n=%zu, extra peak RSS %.0f MiB",
                  med(), *std::min_element(seconds.begin(), seconds.end()),
                  *std::max_element(seconds.begin(), seconds.end()), seconds.size(), peak());
    return text;
  }
};

inline std::string fmt_time(double s) {
  char text[64];
  if (s >= 1) std::snprintf(text, sizeof text, "%.3f s", s);
  else if (s >= 1e-3) std::snprintf(text, sizeof text, "%.2f ms", s * 1e3);
  else std::snprintf(text, sizeof text, "%.1f us", s * 1e6);
  return text;
}

inline std::string fmt_mib(double mib) {
  char text[64];
  std::snprintf(text, sizeof text, "%.0f MiB", mib);
  return text;
}

inline std::string fmt_ratio(double r) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2fx", r);
  return text;
}

// One line of the table, for bench/run.sh: RESULT|case|what|ckpt|baseline|ratio|target|verdict|memory,
// where `case` names what was measured ("load.read_params.row_major").
inline void result(const std::string& id, const std::string& what, const std::string& ckpt_cell,
                   const std::string& base_cell, const std::string& ratio, const std::string& target,
                   const std::string& verdict, const std::string& memory) {
  std::printf("RESULT|%s|%s|%s|%s|%s|%s|%s|%s\n", id.c_str(), what.c_str(), ckpt_cell.c_str(),
              base_cell.c_str(), ratio.c_str(), target.c_str(), verdict.c_str(), memory.c_str());
  std::fflush(stdout);
}

// A timed figure against a baseline with a ratio target (0 for a diagnostic without one).
inline void ratio_result(const std::string& id, const std::string& what, const series& ck,
                         const series& base, double target, const std::string& memory) {
  const double r = ck.med() / base.med();
  std::string target_cell = "-", verdict = "-";
  if (target > 0) {
    char text[32];
    std::snprintf(text, sizeof text, "<= %.2fx", target);
    target_cell = text;
    verdict = r <= target ? "pass" : "MISS";
  }
  result(id, what, fmt_time(ck.med()), fmt_time(base.med()), fmt_ratio(r), target_cell, verdict, memory);
}

inline void log(const std::string& s) {
  std::fprintf(stderr, "%s\n", s.c_str());
  std::fflush(stderr);
}

// A program that has allocated and freed memory before it saves (what the Kaun path's allocation
// costs after memory churn). Allocates
// blocks of 64 KiB to 64 MiB (log-uniform sizes, each written whole) up to `gib` GiB, frees a
// random half, allocates another half of `gib` in other sizes, then frees everything: the heap
// is left with holes of many sizes and the kernel with pages to find again.
inline void churn(double gib, std::mt19937_64& random) {
  if (gib <= 0) return;
  std::uniform_real_distribution<double> log_size(std::log(64.0 * 1024), std::log(64.0 * 1024 * 1024));
  std::vector<std::unique_ptr<char[]>> blocks;
  const auto fill = [&](double bytes) {
    for (double total = 0; total < bytes;) {
      const auto size = static_cast<std::size_t>(std::exp(log_size(random)));
      blocks.push_back(std::make_unique_for_overwrite<char[]>(size));
      std::memset(blocks.back().get(), static_cast<int>(blocks.size()), size);
      total += static_cast<double>(size);
    }
  };
  fill(gib * (1 << 30));
  std::shuffle(blocks.begin(), blocks.end(), random);
  blocks.resize(blocks.size() / 2);
  fill(gib / 2 * (1 << 30));
  blocks.clear();
}

}  // namespace bench
