// The machine probe of bench/machine.hpp (ckpt_machine, and the top of ckpt_peers' output).
//
// Writes a temporary file of MIB MiB in DIR (default: the system's temporary folder), keeps it in
// the page cache, and measures, each the median of REPS runs:
//   - pread of the whole file into memory already touched (what a load costs at best);
//   - memcpy between two touched buffers (the memory's own speed, for comparison);
//   - memcpy out of a fresh read-only MAP_PRIVATE mapping of the file (as ckpt maps it), faults
//     included; madvise(MADV_POPULATE_READ) of a fresh mapping, and memcpy out of it afterwards;
//   - one byte read per 4 KiB page of a fresh mapping of the file: the cost of a file-mapping fault;
//   each of these three twice: the mapping where the kernel places it (the page cache's 2 MiB
//   folios may then be mapped by 2 MiB page-table entries), and placed so that only 4 KiB entries
//   can map it (what reading through a mapping costs when the page cache holds small folios);
//   - one byte written per 4 KiB page of fresh anonymous memory (MADV_NOHUGEPAGE; at most 64 MiB);
//   - one byte written per 2 MiB of a 2 MiB-aligned anonymous region (MADV_HUGEPAGE), with the
//     number of huge pages the kernel actually gave (AnonHugePages in /proc/self/smaps);
// and reports the transparent-huge-page settings, the kernel, the CPU, its cores and vector
// extensions, and whether it runs under a hypervisor. Without --json: one `key: value` line a
// figure; with --json: one JSON object. The file is removed at the end.

#include "machine.hpp"

#include "common.hpp"

#include <boost/json.hpp>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <sys/vfs.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <array>
#include <optional>
#include <thread>

namespace {

namespace fs = std::filesystem;
using bench::die;
using bench::median;
using bench::now_s;

constexpr std::size_t small_page = 4096;
constexpr std::size_t huge_page = std::size_t{2} << 20;

class unique_fd {
 public:
  explicit unique_fd(int fd) : fd_(fd) {}
  ~unique_fd() { ::close(fd_); }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  [[nodiscard]] int get() const { return fd_; }

 private:
  int fd_;
};

char* align_up(char* p, std::size_t alignment) {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  return p + (alignment - at % alignment) % alignment;
}

// A mapping, unmapped when it goes out of scope.
class mapping {
 public:
  mapping(std::size_t size, int prot, int flags, int fd) : size_(size) {
    void* p = ::mmap(nullptr, size, prot, flags, fd, 0);
    if (p == MAP_FAILED) die("mmap of " + std::to_string(size) + " bytes");
    base_ = data_ = static_cast<char*>(p);
  }
  ~mapping() { ::munmap(base_, size_); }
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  [[nodiscard]] char* data() const { return data_; }

  // Where a read-only MAP_PRIVATE mapping of the first `size` bytes of `fd` goes (as ckpt maps a
  // file). kernel: where the kernel places it (for a large file, at a 2 MiB boundary, so that the
  // page cache's 2 MiB folios can be mapped by one page-table entry each); small_pages: 4 KiB past a
  // 2 MiB boundary, inside a reserved region, so that only 4 KiB entries can map it (the address
  // and the file offset differ modulo 2 MiB).
  enum class placement { kernel, small_pages };
  static constexpr std::array placements = {placement::kernel, placement::small_pages};
  mapping(int fd, std::size_t size, placement where)
      : mapping(where == placement::kernel ? size : size + huge_page + small_page,
                where == placement::kernel ? PROT_READ : PROT_NONE,
                where == placement::kernel ? MAP_PRIVATE : MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                where == placement::kernel ? fd : -1) {
    if (where == placement::kernel) return;
    data_ = align_up(base_, huge_page) + small_page;
    if (::mmap(data_, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) die("mmap (MAP_FIXED)");
  }

 private:
  char* base_ = nullptr;
  char* data_ = nullptr;
  std::size_t size_;
};
using placement = mapping::placement;

// The temporary file, removed when it goes out of scope.
class scratch_file {
 public:
  explicit scratch_file(fs::path path) : path_(std::move(path)) {}
  ~scratch_file() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  scratch_file(const scratch_file&) = delete;
  scratch_file& operator=(const scratch_file&) = delete;
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

long minor_faults() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Keeps the copies from being optimized away.
volatile unsigned char sink = 0;
void consume(const char* p, std::size_t size) {
  unsigned char sum = 0;
  for (std::size_t i = 0; i < size; i += small_page) sum = static_cast<unsigned char>(sum + p[i]);
  sink = static_cast<unsigned char>(sink + sum);
}

// REPS runs of f, which returns the seconds it measured; the median.
template <class F>
double median_of(int reps, F&& f) {
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) seconds.push_back(f());
  return median(std::move(seconds));
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// "always [madvise] never" -> "madvise"; the text itself when nothing is bracketed.
std::string bracketed(const std::string& s) {
  const auto open = s.find('['), close = s.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return s.empty() ? "n/a" : s;
  return s.substr(open + 1, close - open - 1);
}

// The value of the first "key<tabs>: value" line of /proc/cpuinfo whose key is one of `keys`.
std::string cpuinfo_value(std::initializer_list<std::string_view> keys) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    for (const auto k : keys) {
      if (key == k) {
        const auto start = line.find_first_not_of(' ', colon + 1);
        return start == std::string::npos ? std::string() : line.substr(start);
      }
    }
  }
  return {};
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The hypervisor's vendor signature (CPUID leaf 0x40000000), e.g. "KVMKVMKVM"; "" if none.
std::string hypervisor_vendor() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  __cpuid(0x40000000, a, b, c, d);
  char name[13] = {};
  std::memcpy(name, &b, 4);
  std::memcpy(name + 4, &c, 4);
  std::memcpy(name + 8, &d, 4);
  std::string s(name);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  const auto printable = std::all_of(s.begin(), s.end(), [](char ch) { return ch >= 0x20 && ch < 0x7f; });
  return printable ? s : std::string();
#else
  return {};
#endif
}

std::string filesystem_of(const fs::path& dir) {
  struct statfs info {};
  if (::statfs(dir.c_str(), &info) != 0) return "unknown";
  switch (static_cast<unsigned long>(info.f_type)) {
    case 0xEF53: return "ext4";
    case 0x01021994: return "tmpfs";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x794c7630: return "overlayfs";
    case 0x6969: return "nfs";
    case 0x65735546: return "fuse";
    case 0x2FC12FC1: return "zfs";
    case 0xF2F52010: return "f2fs";
    default: {
      char text[32];
      std::snprintf(text, sizeof text, "f_type 0x%lx", static_cast<unsigned long>(info.f_type));
      return text;
    }
  }
}

// A field (in KiB: "AnonHugePages:", "FilePmdMapped:") of the mapping of /proc/self/smaps that
// contains `address`; -1 if not found.
long smaps_kib(const void* address, const std::string& field) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(in, line)) {
    const auto dash = line.find('-');
    const auto space = line.find(' ');
    if (dash != std::string::npos && space != std::string::npos && dash < space &&
        line.find(':') > space) {  // a mapping's header line: "start-end perms ..."
      const auto start = std::stoull(line.substr(0, dash), nullptr, 16);
      const auto end = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
      inside = start <= at && at < end;
      continue;
    }
    if (inside && line.rfind(field, 0) == 0) return std::stol(line.substr(field.size()));
  }
  return -1;
}

struct costs {
  // The machine.
  std::string cpu, hypervisor, kernel, arch, thp_enabled, thp_defrag, mthp, filesystem, load;
  std::vector<std::string> vector_extensions;
  bool under_hypervisor = false;
  unsigned cores = 0;
  double memory_gib = 0;
  // The figures (seconds, medians).
  double pread_s = 0, memcpy_s = 0, anon_s = 0, huge_s = 0, anon_faults = 0;
  // Through a mapping of the file, for each placement (kernel, small_pages).
  struct through_mapping {
    double copy_s = 0, copy_faults = 0, pmd_mapped_mib = 0, touch_s = 0, touch_faults = 0;
    std::optional<double> populate_s, populated_copy_s;
  };
  std::array<through_mapping, 2> mapped;
  double cached_fraction = 0;
  std::size_t anon_bytes = 0;
  std::size_t huge_regions = 0, huge_given = 0;
};

void describe_machine(costs& c, const fs::path& dir) {
  c.cpu = cpuinfo_value({"model name", "Model", "cpu model"});
  if (c.cpu.empty()) c.cpu = "unknown";
  const auto flags = words(cpuinfo_value({"flags", "Features"}));
  const auto has = [&](std::string_view f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
  for (const char* f : {"sse2", "ssse3", "sse4_1", "sse4_2", "avx", "f16c", "fma", "avx2", "avx_vnni", "avx512f",
                        "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
                        "amx_tile", "amx_bf16", "asimd", "sve", "sve2"}) {
    if (has(f)) c.vector_extensions.emplace_back(f);
  }
  c.under_hypervisor = has("hypervisor");
  if (c.under_hypervisor) c.hypervisor = hypervisor_vendor();
  c.cores = std::thread::hardware_concurrency();
  utsname names{};
  if (::uname(&names) == 0) {
    c.kernel = names.release;
    c.arch = names.machine;
  }
  const fs::path thp = "/sys/kernel/mm/transparent_hugepage";
  c.thp_enabled = bracketed(read_text(thp / "enabled"));
  c.thp_defrag = bracketed(read_text(thp / "defrag"));
  // The multi-size THP (Linux >= 6.8) that a fault may use besides 2 MiB: the sizes not "never".
  std::vector<std::pair<long, std::string>> sizes;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(thp, error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("hugepages-", 0) != 0) continue;
    if (!fs::exists(entry.path() / "enabled")) continue;
    const std::string setting = bracketed(read_text(entry.path() / "enabled"));
    if (setting != "never") sizes.emplace_back(std::atol(name.c_str() + 10), name.substr(10) + "=" + setting);
  }
  std::sort(sizes.begin(), sizes.end());
  for (const auto& s : sizes) c.mthp += (c.mthp.empty() ? "" : " ") + s.second;
  if (c.mthp.empty()) c.mthp = "none";
  std::istringstream meminfo(read_text("/proc/meminfo"));
  std::string key;
  long kib = 0;
  if (meminfo >> key >> kib && key == "MemTotal:") c.memory_gib = static_cast<double>(kib) / (1 << 20);
  c.filesystem = filesystem_of(dir);
  const auto loadavg = words(read_text("/proc/loadavg"));
  for (std::size_t i = 0; i < 3 && i < loadavg.size(); ++i) c.load += (i ? " " : "") + loadavg[i];
}

void measure(costs& c, const fs::path& dir, std::size_t bytes, int reps) {
  const fs::path path = dir / ("ckpt_machine." + std::to_string(::getpid()) + ".tmp");
  const unique_fd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (fd.get() < 0) die("cannot create " + path.string());
  const scratch_file file(path);  // created here: removed at the end, whatever happens

  // The file, written through a touched buffer and read back once: warm in the page cache.
  std::vector<char> buffer(bytes), other(bytes);
  bench::fill(reinterpret_cast<float*>(other.data()), bytes / sizeof(float), 26);
  bench::write_all(fd.get(), other.data(), bytes);
  if (::fdatasync(fd.get()) != 0) die("fdatasync " + file.path().string());
  bench::pread_all(fd.get(), buffer.data(), bytes, 0);
  {
    mapping m(bytes, PROT_READ, MAP_PRIVATE, fd.get());
    std::vector<unsigned char> resident((bytes + small_page - 1) / small_page);
    if (::mincore(m.data(), bytes, resident.data()) != 0) die("mincore");
    const auto cached = std::count_if(resident.begin(), resident.end(), [](unsigned char r) { return r & 1; });
    c.cached_fraction = static_cast<double>(cached) / static_cast<double>(resident.size());
  }

  c.pread_s = median_of(reps, [&] {
    const double t0 = now_s();
    bench::pread_all(fd.get(), buffer.data(), bytes, 0);
    const double t = now_s() - t0;
    consume(buffer.data(), bytes);
    return t;
  });

  c.memcpy_s = median_of(reps, [&] {
    const double t0 = now_s();
    std::memcpy(buffer.data(), other.data(), bytes);
    const double t = now_s() - t0;
    consume(buffer.data(), bytes);
    return t;
  });

  std::vector<double> faults;
  for (const placement where : mapping::placements) {
    auto& r = c.mapped[static_cast<std::size_t>(where)];
    faults.clear();
    std::vector<double> pmd;
    r.copy_s = median_of(reps, [&] {
      const long f0 = minor_faults();
      const double t0 = now_s();
      const mapping m(fd.get(), bytes, where);
      std::memcpy(buffer.data(), m.data(), bytes);
      const double t = now_s() - t0;
      faults.push_back(static_cast<double>(minor_faults() - f0));
      pmd.push_back(static_cast<double>(std::max(0L, smaps_kib(m.data(), "FilePmdMapped:"))) / 1024);
      consume(buffer.data(), bytes);
      return t;
    });
    r.copy_faults = median(faults);
    r.pmd_mapped_mib = median(pmd);

#ifdef MADV_POPULATE_READ
    std::vector<double> populate, copy;
    for (int i = 0; i < reps; ++i) {
      const mapping m(fd.get(), bytes, where);
      const double t0 = now_s();
      if (::madvise(m.data(), bytes, MADV_POPULATE_READ) != 0) {
        if (errno == EINVAL) break;  // Linux < 5.14
        die("madvise(MADV_POPULATE_READ)");
      }
      const double t1 = now_s();
      std::memcpy(buffer.data(), m.data(), bytes);
      const double t2 = now_s();
      consume(buffer.data(), bytes);
      populate.push_back(t1 - t0);
      copy.push_back(t2 - t1);
    }
    if (!populate.empty()) {
      r.populate_s = median(populate);
      r.populated_copy_s = median(copy);
    }
#endif

    faults.clear();
    r.touch_s = median_of(reps, [&] {
      const mapping m(fd.get(), bytes, where);
      const long f0 = minor_faults();
      const double t0 = now_s();
      consume(m.data(), bytes);
      const double t = now_s() - t0;
      faults.push_back(static_cast<double>(minor_faults() - f0));
      return t;
    });
    r.touch_faults = median(faults);
  }

  // At most 64 MiB (16384 pages): the slowest figure where fresh memory is dear.
  c.anon_bytes = std::min(bytes, std::size_t{64} << 20);
  faults.clear();
  c.anon_s = median_of(reps, [&] {
    mapping m(c.anon_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    if (::madvise(m.data(), c.anon_bytes, MADV_NOHUGEPAGE) != 0) die("madvise(MADV_NOHUGEPAGE)");
    const long f0 = minor_faults();
    const double t0 = now_s();
    for (std::size_t i = 0; i < c.anon_bytes; i += small_page) m.data()[i] = 1;
    const double t = now_s() - t0;
    faults.push_back(static_cast<double>(minor_faults() - f0));
    return t;
  });
  c.anon_faults = median(faults);

  // Whole 2 MiB pages, at a 2 MiB boundary inside a mapping 2 MiB larger.
  c.huge_regions = std::max<std::size_t>(1, bytes / huge_page);
  const std::size_t huge_bytes = c.huge_regions * huge_page;
  c.huge_given = c.huge_regions;
  c.huge_s = median_of(reps, [&] {
    mapping m(huge_bytes + huge_page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    char* base = align_up(m.data(), huge_page);
    if (::madvise(base, huge_bytes, MADV_HUGEPAGE) != 0) die("madvise(MADV_HUGEPAGE)");
    const double t0 = now_s();
    for (std::size_t i = 0; i < huge_bytes; i += huge_page) base[i] = 1;
    const double t = now_s() - t0;
    const long kib = smaps_kib(base, "AnonHugePages:");
    c.huge_given = std::min(c.huge_given, kib < 0 ? 0 : static_cast<std::size_t>(kib) / (huge_page >> 10));
    return t;
  });
}

double gb_per_s(std::size_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

void print_text(const costs& c, const fs::path& dir, std::size_t bytes, int reps) {
  const double pages = static_cast<double>(bytes / small_page);
  const auto rate = [&](double s) {
    return fixed(gb_per_s(bytes, s), 1) + " GB/s (" + bench::fmt_time(s) + " for " + std::to_string(bytes >> 20) +
           " MiB)";
  };
  std::string vectors;
  for (const auto& v : c.vector_extensions) vectors += (vectors.empty() ? "" : " ") + v;
  std::printf("machine: ckpt_machine --mib=%zu --reps=%d, file in %s (%s), %.0f%% in the page cache; medians of %d\n",
              bytes >> 20, reps, dir.c_str(), c.filesystem.c_str(), c.cached_fraction * 100, reps);
  std::printf("cpu: %s\n", c.cpu.c_str());
  std::printf("cores: %u\n", c.cores);
  std::printf("hypervisor: %s\n",
              c.under_hypervisor ? ("yes" + (c.hypervisor.empty() ? "" : " (" + c.hypervisor + ")")).c_str() : "no");
  std::printf("vector extensions: %s\n", vectors.empty() ? "none found" : vectors.c_str());
  std::printf("kernel: %s %s\n", c.kernel.c_str(), c.arch.c_str());
  std::printf("memory: %.1f GiB\n", c.memory_gib);
  std::printf("thp enabled: %s\n", c.thp_enabled.c_str());
  std::printf("thp defrag: %s\n", c.thp_defrag.c_str());
  std::printf("thp sizes not never: %s\n", c.mthp.c_str());
  std::printf("load average: %s\n", c.load.c_str());
  std::printf("pread into touched memory: %s\n", rate(c.pread_s).c_str());
  std::printf("memcpy between touched buffers: %s\n", rate(c.memcpy_s).c_str());
  for (const placement where : mapping::placements) {
    const auto& r = c.mapped[static_cast<std::size_t>(where)];
    const char* how = where == placement::kernel ? "kernel's placement" : "4 KiB page-table entries only";
    std::printf("memcpy out of a fresh mapping (%s): %s, %.0f faults, %.0f MiB mapped by 2 MiB entries\n", how,
                rate(r.copy_s).c_str(), r.copy_faults, r.pmd_mapped_mib);
    if (r.populate_s) {
      std::printf("MADV_POPULATE_READ of a fresh mapping (%s): %s\n", how, bench::fmt_time(*r.populate_s).c_str());
      std::printf("memcpy out of a populated mapping (%s): %s\n", how, rate(*r.populated_copy_s).c_str());
    } else {
      std::printf("MADV_POPULATE_READ of a fresh mapping (%s): n/a\n", how);
      std::printf("memcpy out of a populated mapping (%s): n/a\n", how);
    }
    std::printf("file-mapping fault (%s): %.3f us per 4 KiB page touched "
                "(%.0f faults for %.0f pages: %.2f us a fault)\n",
                how, r.touch_s * 1e6 / pages, r.touch_faults, pages,
                r.touch_faults > 0 ? r.touch_s * 1e6 / r.touch_faults : 0.0);
  }
  std::printf("fresh 4 KiB page (anonymous, MADV_NOHUGEPAGE, first write): %.2f us per page (%.0f faults in %zu MiB)\n",
              c.anon_s * 1e6 / static_cast<double>(c.anon_bytes / small_page), c.anon_faults, c.anon_bytes >> 20);
  const double huge = c.huge_s * 1e6 / static_cast<double>(c.huge_regions);
  std::printf("fresh huge page (anonymous, MADV_HUGEPAGE, first write): %.1f us per 2 MiB page = %.3f us per 4 KiB; "
              "%zu of %zu huge pages given\n",
              huge, huge / 512, c.huge_given, c.huge_regions);
}

void print_json(const costs& c, const fs::path& dir, std::size_t bytes, int reps) {
  const double pages = static_cast<double>(bytes / small_page);
  boost::json::array vectors;
  for (const auto& v : c.vector_extensions) vectors.emplace_back(v);
  const auto maybe = [](const std::optional<double>& v, auto f) -> boost::json::value {
    return v ? boost::json::value(f(*v)) : boost::json::value(nullptr);
  };
  boost::json::object o{
      {"mib", bytes >> 20},
      {"reps", reps},
      {"dir", dir.string()},
      {"filesystem", c.filesystem},
      {"cached_fraction", c.cached_fraction},
      {"cpu", c.cpu},
      {"cores", c.cores},
      {"hypervisor", c.under_hypervisor},
      {"hypervisor_vendor", c.hypervisor},
      {"vector_extensions", std::move(vectors)},
      {"kernel", c.kernel},
      {"arch", c.arch},
      {"memory_gib", c.memory_gib},
      {"thp_enabled", c.thp_enabled},
      {"thp_defrag", c.thp_defrag},
      {"thp_sizes", c.mthp},
      {"load_average", c.load},
      {"pread_s", c.pread_s},
      {"pread_gb_per_s", gb_per_s(bytes, c.pread_s)},
      {"memcpy_s", c.memcpy_s},
      {"memcpy_gb_per_s", gb_per_s(bytes, c.memcpy_s)},
      {"anon_4k_us_per_page", c.anon_s * 1e6 / static_cast<double>(c.anon_bytes / small_page)},
      {"anon_4k_faults", c.anon_faults},
      {"anon_huge_us_per_page", c.huge_s * 1e6 / static_cast<double>(c.huge_regions)},
      {"anon_huge_us_per_4k", c.huge_s * 1e6 / static_cast<double>(c.huge_regions) / 512},
      {"anon_huge_pages", c.huge_regions},
      {"anon_huge_pages_given", c.huge_given},
  };
  for (const placement where : mapping::placements) {
    const auto& r = c.mapped[static_cast<std::size_t>(where)];
    o[where == placement::kernel ? "mapping_kernel_placement" : "mapping_4k_entries_only"] = boost::json::object{
        {"copy_fresh_s", r.copy_s},
        {"copy_fresh_gb_per_s", gb_per_s(bytes, r.copy_s)},
        {"copy_fresh_faults", r.copy_faults},
        {"pmd_mapped_mib", r.pmd_mapped_mib},
        {"populate_read_s", maybe(r.populate_s, [](double s) { return s; })},
        {"copy_populated_s", maybe(r.populated_copy_s, [](double s) { return s; })},
        {"copy_populated_gb_per_s", maybe(r.populated_copy_s, [&](double s) { return gb_per_s(bytes, s); })},
        {"fault_us_per_page", r.touch_s * 1e6 / pages},
        {"faults", r.touch_faults},
        {"fault_us_per_fault", r.touch_faults > 0 ? r.touch_s * 1e6 / r.touch_faults : 0.0},
    };
  }
  std::printf("%s\n", boost::json::serialize(o).c_str());
}

}  // namespace

void bench::print_machine(const fs::path& dir, std::size_t bytes, int reps, bool json) {
  costs c;
  describe_machine(c, dir);
  measure(c, dir, bytes, reps);
  if (json) print_json(c, dir, bytes, reps);
  else print_text(c, dir, bytes, reps);
}
