#pragma once
// What the load and save harnesses (load_bench.cpp, save_bench.cpp) share beside common.hpp: the
// sizes and named cases on their command lines, the rotation that runs the variants side by side,
// the file layout the baselines read and write, the small-tensor checkpoint, and child processes
// whose peak resident size is a figure.

#include "common.hpp"

#include <boost/json.hpp>

#include <malloc.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <functional>
#include <optional>
#include <span>
#include <utility>

extern char** environ;

namespace bench {

// The parameters every harness measures: `tensors` row-major F32 matrices of `rows` x `cols`
// (1 GiB in the full run), and the repetitions.
struct config {
  fs::path dir;
  long tensors = 64, rows = 2048, cols = 2048;
  long reps = 7, io_reps = 5, diag_reps = 3;
  long small = 100000;
  [[nodiscard]] double mib() const { return static_cast<double>(tensors * rows * cols) * 4.0 / (1024.0 * 1024.0); }
  [[nodiscard]] double gib() const { return mib() / 1024.0; }
  [[nodiscard]] std::string size_label() const {
    char text[96];
    std::snprintf(text, sizeof text, "%.3g GiB F32, %ld x (%ldx%ld)", gib(), tensors, rows, cols);
    return text;
  }
  // The flags that give these sizes to a child process.
  [[nodiscard]] std::vector<std::string> size_flags() const {
    return {"--tensors=" + std::to_string(tensors), "--rows-per=" + std::to_string(rows),
            "--cols=" + std::to_string(cols)};
  }
};

inline config read_config(const args& a, bool needs_dir) {
  config c;
  c.dir = a.str("dir", "");
  if (needs_dir && c.dir.empty()) throw std::invalid_argument("--dir=DIR is required");
  c.tensors = a.num("tensors", c.tensors);
  c.rows = a.num("rows-per", c.rows);
  c.cols = a.num("cols", c.cols);
  c.reps = a.num("reps", c.reps);
  c.io_reps = a.num("io-reps", c.io_reps);
  c.diag_reps = a.num("diag-reps", c.diag_reps);
  c.small = a.num("small", c.small);
  return c;
}

// A harness's named cases: --case=a,b runs those (default: all), in the harness's order.
class case_list {
 public:
  struct named {
    std::string name, what;
  };
  case_list(const args& a, std::vector<named> known) : known_(std::move(known)) {
    const std::string list = a.str("case", "");
    for (std::size_t begin = 0; begin < list.size();) {
      const std::size_t end = std::min(list.find(',', begin), list.size());
      const std::string name = list.substr(begin, end - begin);
      if (!name.empty()) {
        if (std::none_of(known_.begin(), known_.end(), [&](const named& k) { return k.name == name; }))
          throw std::invalid_argument("unknown case " + name + " (--help lists them)");
        chosen_.push_back(name);
      }
      begin = end + 1;
    }
  }
  [[nodiscard]] bool operator()(const std::string& name) const {
    return chosen_.empty() || std::find(chosen_.begin(), chosen_.end(), name) != chosen_.end();
  }
  // For --help (exit 0) or a stray argument (exit 2): prints `usage` and the cases, and returns the
  // exit code; otherwise nothing.
  [[nodiscard]] std::optional<int> help_asked(const args& a, const char* usage) const {
    if (a.str("help", "") != "1" && a.positional.empty()) return std::nullopt;
    std::fprintf(a.positional.empty() ? stdout : stderr, "%s%s", usage, help().c_str());
    return a.positional.empty() ? 0 : 2;
  }
  [[nodiscard]] std::string help() const {
    std::string out;
    for (const named& k : known_)
      out += "  " + k.name + std::string(k.name.size() < 18 ? 18 - k.name.size() : 1, ' ') + k.what + "\n";
    return out;
  }

 private:
  std::vector<named> known_;
  std::vector<std::string> chosen_;
};

// Runs the variants once per repetition, rotating which goes first, so that drift in the
// machine's load hits them alike.
inline void rotate(long reps, const std::vector<std::function<void()>>& variants) {
  for (long rep = 0; rep < reps; ++rep)
    for (std::size_t i = 0; i < variants.size(); ++i) variants[(i + static_cast<std::size_t>(rep)) % variants.size()]();
}

template <class... F>
void rotated(long reps, F&... variant) {
  rotate(reps, {std::function<void()>(variant)...});
}

inline void remove_quietly(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
}

// Drops the (clean) pages of `path` from the page cache, so that the next read goes to the disk.
inline void drop_from_page_cache(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open");
  if (::fdatasync(fd) != 0) die("fdatasync");
  if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) die("posix_fadvise");
  ::close(fd);
}

struct layout_entry {
  std::string name;
  std::uint64_t begin = 0, end = 0;
};

// The entries of a header block (8-byte length + JSON), in file order; parsed here with
// Boost.JSON's DOM, independently of ckpt's reader.
inline std::vector<layout_entry> layout_of(const std::string& block) {
  const boost::json::object header = boost::json::parse(std::string_view(block).substr(8)).as_object();
  std::vector<layout_entry> out;
  for (const auto& [key, value] : header) {
    if (key == "__metadata__") continue;
    const auto& offsets = value.as_object().at("data_offsets").as_array();
    out.push_back({std::string(key), static_cast<std::uint64_t>(offsets[0].to_number<std::int64_t>()),
                   static_cast<std::uint64_t>(offsets[1].to_number<std::int64_t>())});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  return out;
}

// "model.layers.17" -> 17
inline std::size_t layer_index(const std::string& name) {
  return static_cast<std::size_t>(std::stol(name.substr(name.rfind('.') + 1)));
}

// 100,000 small tensors in the full run: names blocks.<b>.attn.{q,k,v,o}.{w,b}, F32, w [4,4], b [4].
inline ckpt::checkpoint small_tensors(long count) {
  static constexpr const char* parts[] = {"q", "k", "v", "o"};
  std::vector<ckpt::checkpoint::entry> entries;
  entries.reserve(static_cast<std::size_t>(count));
  std::vector<float> values(16);
  for (long i = 0; i < count; ++i) {
    const long block = i / 8, part = (i / 2) % 4;
    const bool weight = i % 2 == 0;
    fill(values.data(), values.size(), static_cast<std::uint32_t>(i));
    const ckpt::dims shape = weight ? ckpt::dims{4, 4} : ckpt::dims{4};
    const std::size_t n = weight ? 16 : 4;
    entries.emplace_back("blocks." + std::to_string(block) + ".attn." + parts[part] + (weight ? ".w" : ".b"),
                         ckpt::tensor::copy_of(ckpt::dtype::f32, shape, std::as_bytes(std::span(values.data(), n))));
  }
  return ckpt::checkpoint(std::move(entries));
}

// --- Child processes, for the peak resident size of a whole program ------------------------------

// A program's peak resident size is the figure when the question is what a process that loads or
// saves needs (the libraries, the heap, the kernel's view): the harness runs itself again with
// --child=WHAT and reads the child's ru_maxrss from wait4, what `/usr/bin/time -v` prints as
// "Maximum resident set size". The child is spawned (vfork semantics) before the harness holds
// any model, and with its own peak reset, so that the harness's memory does not count for it.
struct child_result {
  double seconds = 0;
  double peak_mib = 0;
};

inline child_result run_child(const std::vector<std::string>& arguments) {
  std::vector<std::string> argv_strings{"/proc/self/exe"};
  argv_strings.insert(argv_strings.end(), arguments.begin(), arguments.end());
  std::vector<char*> argv;
  for (auto& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  ::malloc_trim(0);
  reset_peak();
  std::string line = "  child:";
  for (const auto& s : arguments) line += " " + s;
  log(line + " (harness VmRSS " + std::to_string(read_status().rss_kib / 1024) + " MiB)");
  const double t0 = now_s();
  pid_t pid = 0;
  if (const int e = ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ); e != 0) {
    errno = e;
    die("posix_spawn");
  }
  int status = 0;
  struct rusage usage {};
  while (::wait4(pid, &status, 0, &usage) < 0)
    if (errno != EINTR) die("wait4");
  const double seconds = now_s() - t0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("child " + arguments.at(0) + " failed");
  return {seconds, static_cast<double>(usage.ru_maxrss) / 1024.0};
}

// A child's view of its own memory, on stderr (the log).
inline void info(const std::string& what) {
  const mem_status s = read_status();
  std::fprintf(stderr, "  INFO %s: VmRSS %ld KiB (anon %ld, file %ld), VmHWM %ld KiB\n", what.c_str(), s.rss_kib,
               s.anon_kib, s.file_kib, s.hwm_kib);
  std::fflush(stderr);
}

// One line of a peak-RSS comparison: ckpt's program against a baseline program, the ratio of
// their peaks, and a target for ckpt's peak.
inline void peak_result(const std::string& id, const std::string& what, double target_mib, const child_result& base,
                        const child_result& ck) {
  char target[48], memory[96], base_cell[32], ck_cell[32];
  std::snprintf(target, sizeof target, "<= %.1f MiB", target_mib);
  std::snprintf(memory, sizeof memory, "%.0f MiB (baseline %.0f MiB)", ck.peak_mib, base.peak_mib);
  std::snprintf(ck_cell, sizeof ck_cell, "%.2f s", ck.seconds);
  std::snprintf(base_cell, sizeof base_cell, "%.2f s", base.seconds);
  result(id, what, ck_cell, base_cell, fmt_ratio(ck.peak_mib / base.peak_mib) + " RSS", target,
         ck.peak_mib <= target_mib ? "pass" : "MISS", memory);
}

}  // namespace bench
