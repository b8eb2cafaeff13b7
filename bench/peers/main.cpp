// ckpt_peers: one training state saved (including fsync) and loaded into preallocated matrices by
// ckpt and by its C++ peers, side by side. bench/peers/run.sh drives it.
//
//   ckpt_peers time --case=col|row|small [--count=64 --rows=2048 --cols=2048] [--reps=5] [--dir=D]
//       [--churn=GiB] (allocate and free that much, in blocks of many sizes, before every save)
//       [--fragment=GiB] (hold that much memory with every other 4 KiB page given back, for the run)
//       [--machine=0] (without the machine's costs, bench/machine.hpp, printed first)
//       every peer's save and load, --reps rounds in a rotating order; prints one RESULT line a
//       peer: median save and load seconds, the ratios to the raw floor, the file size; each
//       sample on stderr
//   ckpt_peers rss --case=... --peer=NAME --op=save|load [sizes] [--dir=D]
//       one operation in this fresh process; prints the peak RSS (VmHWM) and the data size
//
// `col` is Eigen's default column-major MatrixXf, `row` the row-major matrix of the same shape,
// `small` --count vectors of --cols floats (100,000 x 16 by default).
#include "peers.hpp"

#include "../common.hpp"
#include "../machine.hpp"

#include <ckpt/ckpt.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

namespace peers {

void fsync_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) throw std::runtime_error("fsync " + path.string());
  ::close(fd);
}

namespace raw {

// The floor: every matrix's storage bytes, one after the other, write + fsync; pread back.
template <class M>
void save(const model<M>& m, const fs::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("open " + path.string());
  for (const auto& x : m.layers) bench::write_all(fd, x.data(), static_cast<std::size_t>(x.size()) * sizeof(float));
  if (::fsync(fd) != 0) throw std::runtime_error("fsync");
  ::close(fd);
}

template <class M>
void load(model<M>& m, const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("open " + path.string());
  std::uint64_t offset = 0;
  for (auto& x : m.layers) {
    const auto n = static_cast<std::size_t>(x.size()) * sizeof(float);
    bench::pread_all(fd, x.data(), n, offset);
    offset += n;
  }
  ::close(fd);
}

}  // namespace raw

namespace ckpt_fast {  // the live-structure save and the in-place extraction

template <class M>
void save(const model<M>& m, const fs::path& path) { ckpt::save(path, {{m, "model"}}); }
template <class M>
void load(model<M>& m, const fs::path& path) { ckpt::read_params(ckpt::load(path), m, {.prefix = "model"}); }

}  // namespace ckpt_fast

namespace ckpt_kaun {  // Raven's Kaun.Checkpoint calls: save(of_params), to_params

template <class M>
void save(const model<M>& m, const fs::path& path) { ckpt::save(path, ckpt::of_params(m, "model")); }
template <class M>
void load(model<M>& m, const fs::path& path) { m = ckpt::to_params(ckpt::load(path), m, {.prefix = "model"}); }

}  // namespace ckpt_kaun

namespace {

template <class M>
struct peer {
  traits about;
  std::function<void(const model<M>&, const fs::path&)> save;
  std::function<void(model<M>&, const fs::path&)> load;
};

template <class M>
std::vector<peer<M>> all_peers() {
  return {
      {{"raw write/pread (floor)", false, false, false}, raw::save<M>, raw::load<M>},
      {{"ckpt save(sections) / read_params", true, true, true}, ckpt_fast::save<M>, ckpt_fast::load<M>},
      {{"ckpt save(of_params) / to_params (Kaun)", true, true, true}, ckpt_kaun::save<M>, ckpt_kaun::load<M>},
      {{"HDF5 C API", false, true, false}, hdf5::save<M>, hdf5::load<M>},
      {{"cereal binary", false, false, false}, cereal_binary::save<M>, cereal_binary::load<M>},
      {{"Boost.Serialization binary", false, false, false}, boost_binary::save<M>, boost_binary::load<M>},
      {{"libtorch torch::save/load", false, true, false}, libtorch::save<M>, libtorch::load<M>},
  };
}

template <class M>
model<M> make_model(long count, long rows, long cols) {
  model<M> m;
  for (long i = 0; i < count; ++i) {
    if constexpr (M::ColsAtCompileTime == 1) m.layers.emplace_back(cols);
    else m.layers.emplace_back(rows, cols);
    bench::fill(m.layers.back().data(), static_cast<std::size_t>(m.layers.back().size()), static_cast<std::uint32_t>(i));
  }
  return m;
}

std::string slug(const std::string& name) {
  std::string out;
  for (const char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

// The worst case for huge pages: physical memory cut into 4 KiB holes. Maps
// `gib` GiB with 4 KiB pages, writes every page, then gives every other page back and holds the
// rest until the run ends: each freed page's buddy stays in use, so the kernel has no free 2 MiB
// block in that memory until it compacts (migrates the pages still held). Prints the free blocks
// of 2 MiB and more (/proc/buddyinfo, orders 9 and 10) before and after.
class fragmenter {
 public:
  explicit fragmenter(double gib) {
    constexpr std::size_t page = 4096;
    if (gib <= 0) return;
    std::fprintf(stderr, "fragment: free blocks of 2 MiB and more before: %ld\n", huge_blocks());
    size_ = static_cast<std::size_t>(gib * (1 << 30)) / page * page;
    void* address = ::mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (address == MAP_FAILED) throw std::runtime_error("fragment: mmap failed");
    base_ = static_cast<char*>(address);
    static_cast<void>(::madvise(base_, size_, MADV_NOHUGEPAGE));
    for (std::size_t at = 0; at < size_; at += page) base_[at] = 1;
    for (std::size_t at = page; at < size_; at += 2 * page) static_cast<void>(::madvise(base_ + at, page, MADV_DONTNEED));
    std::fprintf(stderr, "fragment: %.1f GiB held in every other 4 KiB page; free blocks of 2 MiB and more after: %ld\n",
                 gib / 2, huge_blocks());
  }
  fragmenter(const fragmenter&) = delete;
  fragmenter& operator=(const fragmenter&) = delete;
  ~fragmenter() {
    if (base_ != nullptr) ::munmap(base_, size_);
  }

 private:
  // Free blocks of order 9 and 10 (2 and 4 MiB) in every zone, a 4 MiB block counted as two.
  static long huge_blocks() {
    std::FILE* f = std::fopen("/proc/buddyinfo", "r");
    if (f == nullptr) return -1;
    long total = 0;
    char line[512];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      std::vector<long> counts;
      const char* p = std::strstr(line, "zone");
      if (p == nullptr) continue;
      p += 4;
      while (*p == ' ') ++p;
      while (*p != '\0' && *p != ' ') ++p;  // the zone's name
      for (char* end = nullptr;; p = end) {
        const long n = std::strtol(p, &end, 10);
        if (end == p) break;
        counts.push_back(n);
      }
      if (counts.size() > 9) total += counts[9];
      if (counts.size() > 10) total += 2 * counts[10];
    }
    std::fclose(f);
    return total;
  }
  char* base_ = nullptr;
  std::size_t size_ = 0;
};

template <class M>
int run(const bench::args& a, long count, long rows, long cols) {
  const fs::path dir = a.str("dir", "/tmp/ckpt-peers");
  fs::create_directories(dir);
  const double data_mib = static_cast<double>(count) * static_cast<double>(make_model<M>(1, rows, cols).layers[0].size()) *
                         4.0 / (1 << 20);
  const auto peers_list = all_peers<M>();
  if (a.positional.at(0) == "rss") {
    // The libraries (libtorch's above all) take ~150 MiB before anything runs: the figure is the
    // peak above the resident size at this point, so that it is what the state and the operation
    // cost. Only one model is ever built.
    const long base_kib = bench::read_status().rss_kib;
    const std::string name = a.str("peer", "");
    for (const auto& p : peers_list) {
      if (slug(p.about.name).rfind(name, 0) != 0) continue;
      const fs::path file = dir / slug(p.about.name);
      model<M> state = make_model<M>(count, rows, cols);
      if (a.str("op", "load") == "save") p.save(state, file);
      else p.load(state, file);
      const double peak_mib = static_cast<double>(bench::read_status().hwm_kib - base_kib) / 1024;
      std::printf("RESULT rss %s | %s | %.0f MiB above start for %.0f MiB of data (%.2fx)\n", a.str("op", "load").c_str(),
                  p.about.name.c_str(), peak_mib, data_mib, peak_mib / data_mib);
      return 0;
    }
    std::fprintf(stderr, "ckpt_peers: no peer named '%s'\n", name.c_str());
    return 2;
  }
  if (a.num("machine", 1) != 0) bench::print_machine(dir, std::size_t{256} << 20, 5, false);
  model<M> m = make_model<M>(count, rows, cols);
  model<M> target = make_model<M>(count, rows, cols);  // preallocated, overwritten by each load
  const long reps = a.num("reps", 5);
  const double churn_gib = a.real("churn", 0);  // before every save: see bench::churn
  const fragmenter held(a.real("fragment", 0));   // for the whole run
  std::mt19937_64 random(26);
  std::vector<std::vector<double>> saves(peers_list.size()), loads(peers_list.size());
  for (long rep = 0; rep < reps; ++rep) {
    for (std::size_t k = 0; k < peers_list.size(); ++k) {  // rotating order
      const std::size_t i = (k + static_cast<std::size_t>(rep)) % peers_list.size();
      const auto& p = peers_list[i];
      bench::churn(churn_gib, random);
      const fs::path file = dir / slug(p.about.name);
      double start = bench::now_s();
      p.save(m, file);
      saves[i].push_back(bench::now_s() - start);
      start = bench::now_s();
      p.load(target, file);
      loads[i].push_back(bench::now_s() - start);
      std::fprintf(stderr, "sample %ld | %s | save %.3f s | load %.3f s\n", rep, p.about.name.c_str(), saves[i].back(),
                   loads[i].back());
      if (!(target.layers.back().isApprox(m.layers.back()) && target.layers.front() == m.layers.front()))
        throw std::runtime_error(p.about.name + " loaded other values");
      for (auto& x : target.layers) x.setZero();
    }
  }
  const double save_floor = bench::median(saves[0]), load_floor = bench::median(loads[0]);
  for (std::size_t i = 0; i < peers_list.size(); ++i) {
    const auto& p = peers_list[i];
    const double s = bench::median(saves[i]), l = bench::median(loads[i]);
    std::printf("RESULT %s | %s | save %.3f s (%.2fx) | load %.3f s (%.2fx) | %.1f MiB | atomic %s | checks %s | C order %s\n",
                a.str("case", "col").c_str(), p.about.name.c_str(), s, s / save_floor, l, l / load_floor,
                static_cast<double>(fs::file_size(dir / slug(p.about.name))) / (1 << 20), p.about.atomic ? "yes" : "no",
                p.about.checks ? "yes" : "no", p.about.c_order ? "yes" : "no");
    fs::remove(dir / slug(p.about.name));
  }
  return 0;
}

}  // namespace
}  // namespace peers

int main(int argc, char** argv) try {
  const bench::args a(argc, argv);
  if (a.positional.empty() || (a.positional[0] != "time" && a.positional[0] != "rss")) {
    std::fprintf(stderr, "usage: ckpt_peers time|rss --case=col|row|small [options]\n");
    return 2;
  }
  const std::string c = a.str("case", "col");
  if (c == "small") return peers::run<Eigen::VectorXf>(a, a.num("count", 100000), 1, a.num("cols", 16));
  const long count = a.num("count", 64), rows = a.num("rows", 2048), cols = a.num("cols", 2048);
  if (c == "row") return peers::run<peers::row_matrix>(a, count, rows, cols);
  return peers::run<peers::col_matrix>(a, count, rows, cols);
} catch (const std::exception& e) {
  std::fprintf(stderr, "ckpt_peers: %s\n", e.what());
  return 1;
}
