// ckpt_bench_rss: one small program per memory measurement of issue 5 (rows 4 and 5), each meant
// to run as its own process under `/usr/bin/time -v` so that its "Maximum resident set size" is
// the figure. bench/run.sh drives it:
//
//   ckpt_bench_rss machine        - [--mib=256]  (what fresh memory costs on this machine)
//   ckpt_bench_rss make           FILE [--tensors=64 --rows-per=2048 --cols=2048]
//   ckpt_bench_rss load-extract   FILE [--layout=row|col] [--template=shape|init] [sizes]
//   ckpt_bench_rss pread-extract  FILE [sizes]          (baseline: pread into a fresh struct)
//   ckpt_bench_rss save-live      FILE [sizes]          (holds the params, save of sections)
//   ckpt_bench_rss save-snapshot  FILE [sizes]          (holds the params, save(of_params))
//   ckpt_bench_rss write-plain    FILE [sizes]          (baseline: holds the params, write+fsync)
//   ckpt_bench_rss make-sparse    FILE [--entries=2560 --entry-rows=1024 --entry-cols=1024]
//   ckpt_bench_rss sparse-extract FILE [--index=1234 --reps=7] [entry sizes]
//
// Each prints INFO lines (its own view of its memory) on stdout; sparse-extract prints RESULT lines.

#include "common.hpp"

#include <boost/json.hpp>

#include <sys/mman.h>
#include <sys/sysmacros.h>

#include <optional>

namespace {

using namespace bench;

struct sizes {
  long tensors, rows, cols;
  explicit sizes(const args& a)
      : tensors(a.num("tensors", 64)), rows(a.num("rows-per", 2048)), cols(a.num("cols", 2048)) {}
};

void info(const std::string& what) {
  const mem_status s = read_status();
  std::printf("INFO %s: VmRSS %ld KiB (anon %ld, file %ld), VmHWM %ld KiB\n", what.c_str(), s.rss_kib, s.anon_kib,
              s.file_kib, s.hwm_kib);
  std::fflush(stdout);
}

// A block of parameters as the 10 GiB file names them: blocks.<i>.w
struct block {
  row_matrix w;
};

std::string sparse_name(long i) {
  char text[32];
  std::snprintf(text, sizeof text, "blocks.%04ld", i);
  return text;
}

// How many pages of `path` are in the page cache (mincore of a fresh mapping: mapping faults
// nothing in).
std::size_t cached_pages(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open");
  const std::size_t size = fs::file_size(path);
  void* base = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) die("mmap");
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  // The vector of flags is mapped and unmapped here, not taken from the heap, so that it leaves
  // nothing resident behind to blur the RSS figures.
  const std::size_t pages = (size + page - 1) / page;
  void* flags = ::mmap(nullptr, pages, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (flags == MAP_FAILED) die("mmap");
  auto* in_core = static_cast<unsigned char*>(flags);
  if (::mincore(base, size, in_core) != 0) die("mincore");
  std::size_t n = 0;
  for (std::size_t i = 0; i < pages; ++i) n += in_core[i] & 1u;
  ::munmap(flags, pages);
  ::munmap(base, size);
  ::close(fd);
  return n;
}

void drop_cache(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) die("open");
  ::fdatasync(fd);  // dirty pages cannot be dropped
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// The readahead window (KiB) of the block device holding `path`, for the report.
std::string read_ahead_kb(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "unknown";
  const std::string dev = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  for (const char* q : {"/queue/read_ahead_kb", "/../queue/read_ahead_kb"}) {
    std::ifstream in(dev + q);
    std::string value;
    if (in >> value) return value;
  }
  return "unknown";
}

std::string proc_io() {
  std::ifstream in("/proc/self/io");
  std::string line, out;
  while (std::getline(in, line))
    if (line.rfind("rchar", 0) == 0 || line.rfind("read_bytes", 0) == 0) out += line + "; ";
  return out;
}

int run(const args& a) {
  if (a.positional.size() < 2) throw std::invalid_argument("usage: ckpt_bench_rss COMMAND FILE [--options]");
  const std::string& command = a.positional[0];
  const fs::path path = a.positional[1];

  if (command == "machine") {
    // What fresh memory costs here: first touch of never-used anonymous pages, and whether
    // reading an untouched page maps the shared zero page (not resident) or a new page.
    const std::size_t size = static_cast<std::size_t>(a.num("mib", 256)) << 20;
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    auto* p = static_cast<char*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) die("mmap");
    double t0 = now_s();
    for (std::size_t i = 0; i < size; i += page) p[i] = 1;
    const double touch = now_s() - t0;
    t0 = now_s();
    std::memset(p, 2, size);
    const double memset_s = now_s() - t0;
    ::munmap(p, size);
    auto* q = static_cast<volatile char*>(::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    const long before = read_status().anon_kib;
    long sum = 0;
    for (std::size_t i = 0; i < size; i += page) sum += q[i];
    const long read_rise = read_status().anon_kib - before;
    ::munmap(const_cast<char*>(q), size);
    const double mib = static_cast<double>(size) / 1048576.0;
    char what[200], cell[64], memory[160];
    std::snprintf(what, sizeof what, "machine: first write to fresh anonymous memory, %.0f MiB in 4 KiB pages (%.1f us/page), "
                  "vs memset of the same pages once mapped", mib, touch * 1e6 / static_cast<double>(size / page));
    std::snprintf(cell, sizeof cell, "%.2f s/GiB", touch * 1024.0 / mib);
    std::snprintf(memory, sizeof memory, "%s; reading %.0f MiB of untouched memory made %.0f MiB resident (zero page %s)%s",
                  cell, mib, static_cast<double>(read_rise) / 1024.0, read_rise > 1024 ? "not used" : "used", sum ? "" : "");
    result("0", what, fmt_time(touch), fmt_time(memset_s), fmt_ratio(touch / memset_s), "-", "-", memory);
    return 0;
  }
  if (command == "make") {
    const sizes z(a);
    const row_model m = make_row_model(z.tensors, z.rows, z.cols);
    ckpt::save(path, {{m, "model"}});
    return 0;
  }
  if (command == "load-extract") {
    const sizes z(a);
    const bool init = a.str("template", "shape") == "init";
    info("start");
    float check = 0;  // read, so that the extraction cannot be optimized away
    if (a.str("layout", "row") == "col") {
      // A template that only gives the shapes: Eigen leaves the storage uninitialized, so its
      // pages are never touched. With --template=init it is zeroed, as live parameters would be.
      col_model like = make_col_model(z.tensors, z.rows, z.cols, false);
      if (init) for (auto& l : like.layers) l.setZero();
      info("template made");
      ckpt::read_params(ckpt::load(path), like, {.prefix = "model"});
      check = like.layers.back()(0, 1);
      info("extracted (value " + std::to_string(check) + ")");
    } else {
      row_model like = make_row_model(z.tensors, z.rows, z.cols, false);
      if (init) for (auto& l : like.layers) l.setZero();
      info("template made");
      ckpt::read_params(ckpt::load(path), like, {.prefix = "model"});
      check = like.layers.back()(0, 1);
      info("extracted (value " + std::to_string(check) + ")");
    }
    return 0;
  }
  if (command == "pread-extract") {
    const sizes z(a);
    std::string block_bytes = read_header_block(path);
    const boost::json::object header = boost::json::parse(std::string_view(block_bytes).substr(8)).as_object();
    row_model m = make_row_model(z.tensors, z.rows, z.cols, false);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    for (const auto& [key, value] : header) {
      if (key == "__metadata__") continue;
      const std::string name(key);
      const auto& offsets = value.as_object().at("data_offsets").as_array();
      const auto begin = static_cast<std::uint64_t>(offsets[0].to_number<std::int64_t>());
      const auto end = static_cast<std::uint64_t>(offsets[1].to_number<std::int64_t>());
      auto& leaf = m.layers.at(static_cast<std::size_t>(std::stol(name.substr(name.rfind('.') + 1))));
      pread_all(fd, leaf.data(), end - begin, block_bytes.size() + begin);
    }
    ::close(fd);
    info("extracted (value " + std::to_string(m.layers.back()(0, 1)) + ")");
    return 0;
  }
  if (command == "save-live" || command == "save-snapshot" || command == "write-plain") {
    const sizes z(a);
    const row_model m = make_row_model(z.tensors, z.rows, z.cols);
    info("params made");
    if (command == "save-live") {
      ckpt::save(path, {{m, "model"}});
    } else if (command == "save-snapshot") {
      ckpt::save(path, ckpt::of_params(m, "model"));
    } else {
      const fs::path tmp = path.string() + ".tmp";
      const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) die("open");
      for (const auto& l : m.layers) write_all(fd, l.data(), static_cast<std::size_t>(l.size()) * sizeof(float));
      if (::fsync(fd) != 0 || ::close(fd) != 0) die("fsync");
      if (::rename(tmp.c_str(), path.c_str()) != 0) die("rename");
    }
    info("saved");
    return 0;
  }
  if (command == "make-sparse") {
    const long entries = a.num("entries", 2560), rows = a.num("entry-rows", 1024), cols = a.num("entry-cols", 1024);
    const std::uint64_t entry_bytes = static_cast<std::uint64_t>(rows * cols) * 4;
    std::string json = "{";
    for (long i = 0; i < entries; ++i) {
      if (i) json += ',';
      json += "\"" + sparse_name(i) + ".w\":{\"dtype\":\"F32\",\"shape\":[" + std::to_string(rows) + "," +
              std::to_string(cols) + "],\"data_offsets\":[" + std::to_string(entry_bytes * static_cast<std::uint64_t>(i)) +
              "," + std::to_string(entry_bytes * static_cast<std::uint64_t>(i + 1)) + "]}";
    }
    json += '}';
    json.append((8 - json.size() % 8) % 8, ' ');
    const std::uint64_t n = json.size();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) die("open");
    write_all(fd, &n, 8);
    write_all(fd, json.data(), json.size());
    if (::ftruncate(fd, static_cast<off_t>(8 + n + entry_bytes * static_cast<std::uint64_t>(entries))) != 0)
      die("ftruncate");
    if (::fsync(fd) != 0) die("fsync");  // clean pages, so that sparse-extract can drop them
    ::close(fd);
    return 0;
  }
  if (command == "sparse-extract") {
    const long index = a.num("index", 1234), reps = a.num("reps", 7);
    const long rows = a.num("entry-rows", 1024), cols = a.num("entry-cols", 1024);
    const double entry_mib = static_cast<double>(rows * cols) * 4 / (1024.0 * 1024.0);
    const auto page_kib = static_cast<double>(::sysconf(_SC_PAGESIZE)) / 1024.0;
    const double file_gib = static_cast<double>(fs::file_size(path)) / (1024.0 * 1024.0 * 1024.0);
    const std::string header = read_header_block(path);
    const double header_mib = static_cast<double>(header.size()) / (1024.0 * 1024.0);

    drop_cache(path);
    const std::size_t pages0 = cached_pages(path);
    std::printf("INFO io before: %s\n", proc_io().c_str());
    info("before load");
    const mem_status m0 = read_status();
    double t0 = now_s();
    std::optional<ckpt::checkpoint> t = ckpt::load(path);
    const double first_load = now_s() - t0;
    const mem_status m1 = read_status();
    const std::size_t pages1 = cached_pages(path);
    info("after load (" + std::to_string(t->size()) + " entries)");
    block one{row_matrix(rows, cols)};  // shapes only: storage untouched
    t0 = now_s();
    ckpt::read_params(*t, one, {.prefix = sparse_name(index)});
    const double extract = now_s() - t0;
    const mem_status m2 = read_status();
    const std::size_t pages2 = cached_pages(path);
    info("after extracting " + sparse_name(index) + ".w (value " + std::to_string(one.w(3, 4)) + ")");
    std::printf("INFO io after: %s\n", proc_io().c_str());
    const double load_rise = static_cast<double>(m1.rss_kib - m0.rss_kib) / 1024.0;
    const double extract_rise = static_cast<double>(m2.rss_kib - m1.rss_kib) / 1024.0;
    const double extract_file = static_cast<double>(m2.file_kib - m1.file_kib) / 1024.0;
    const double touched_load = static_cast<double>(pages1 - pages0) * page_kib / 1024.0;
    const double touched_extract = static_cast<double>(pages2 - pages1) * page_kib / 1024.0;
    std::printf("INFO file pages brought into the page cache: by load %.2f MiB (header %.2f MiB), by the extraction "
                "%.2f MiB (entry %.2f MiB)\n", touched_load, header_mib, touched_extract, entry_mib);

    // Timing: load (header warm now) vs Boost.JSON parsing the header alone, median of reps.
    series s_load{"load"}, s_json{"json"};
    for (long r = 0; r < reps; ++r) {
      s_load.add(measure([&] { t = ckpt::load(path); }));
      std::optional<boost::json::value> v;
      s_json.add(measure([&] { v = boost::json::parse(std::string_view(header).substr(8)); }));
    }
    std::fprintf(stderr, "  sparse: first load %.4f s, extraction %.4f s; load %s; json %s\n", first_load, extract,
                 s_load.spread().c_str(), s_json.spread().c_str());
    char what[256], memory[256], cell[64];
    std::snprintf(what, sizeof what,
                  "load of a %.3g GiB sparse file (%zu entries, header %.2f MiB) vs boost::json::parse of its header; "
                  "then read_params of one %.3g MiB entry: resident size",
                  file_gib, t->size(), header_mib, entry_mib);
    std::snprintf(memory, sizeof memory, "RSS +%.2f MiB by load, +%.2f MiB by extraction (file-backed %+.2f MiB)",
                  load_rise, extract_rise, extract_file);
    std::snprintf(cell, sizeof cell, "RSS <= +%.2f MiB", entry_mib + 0.5);
    // The process: the header's parse at load, the entry's own copy at extraction.
    const bool resident_ok = extract_rise <= entry_mib + 0.5 && load_rise <= header_mib * 4 + 1;
    result("5", what, fmt_time(s_load.med()), fmt_time(s_json.med()), fmt_ratio(s_load.med() / s_json.med()), cell,
           resident_ok ? "pass" : "MISS", memory);
    // The file: which of its pages the kernel brought in (mincore), readahead included.
    std::snprintf(what, sizeof what,
                  "the same: pages of the file read into the page cache (mincore), the kernel's readahead included "
                  "(read_ahead_kb %s)", read_ahead_kb(path).c_str());
    std::snprintf(memory, sizeof memory, "read %.2f MiB by load (header %.2f), %.2f MiB by extraction (entry %.2f)",
                  touched_load, header_mib, touched_extract, entry_mib);
    std::snprintf(cell, sizeof cell, "read <= %.2f MiB", entry_mib + 0.5);
    result("5", what, "load " + fmt_time(first_load) + ", extraction " + fmt_time(extract) + " (first, cold)", "-", "-",
           cell,
           touched_extract <= entry_mib + 0.5 && touched_load <= header_mib + 0.5 ? "pass" : "MISS", memory);
    return 0;
  }
  throw std::invalid_argument("unknown command " + command);
}

}  // namespace

int main(int argc, char** argv) try {
  return run(args(argc, argv));
} catch (const std::exception& e) {
  std::fprintf(stderr, "ckpt_bench_rss: %s\n", e.what());
  return 1;
}
