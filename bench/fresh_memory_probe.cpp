// fresh_memory_probe: what fresh memory costs on this machine, and what it does to the saves of a
// training loop (CHANGELOG.md, "Performance history", library change 11).
//
//   fresh_memory_probe touch MIB PAUSE
//       maps MIB MiB, writes every page, unmaps; four times, PAUSE seconds apart. On a VM that
//       hands memory left free for a few seconds back to its host, the pause makes every page
//       fresh again.
//   fresh_memory_probe manager DIR PAUSE
//       a checkpoint_manager keeping 2 checkpoints of 256 MiB (64 row-major 1024 x 1024 float
//       matrices) in DIR (emptied first), saved 8 times, PAUSE seconds of "training" apart; prints
//       each save's seconds.
//   fresh_memory_probe of_params MIB LEAVES REPS CHURN_GIB PAUSE [FILE]
//       LEAVES float matrices of MIB MiB each; REPS times: bench::churn(CHURN_GIB), PAUSE seconds
//       of "training", then of_params of the matrices, timed, with FILE: the checkpoint saved to
//       FILE (the Kaun path's save), timed, then the checkpoint dropped, timed; prints each
//       call's seconds with the huge pages the process holds (AnonHugePages) and the medians.
//       What the Kaun path's allocation costs after memory churn.

#include "common.hpp"

#include <ckpt/ckpt.hpp>

#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int touch(std::size_t mib, int pause) {
  const std::size_t bytes = mib << 20;
  for (int round = 0; round < 4; ++round) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 1;
    const double start = now_s();
    std::memset(p, 1, bytes);
    const double seconds = now_s() - start;
    ::munmap(p, bytes);
    std::printf("touch %zu MiB: %.3f s (%.1f us a 4 KiB page)\n", mib, seconds, seconds * 1e6 / static_cast<double>(bytes / 4096));
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(pause));
  }
  return 0;
}

int manager(const std::string& dir, int pause) {
  struct model {
    std::vector<Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> layers;
  } m;
  for (int i = 0; i < 64; ++i) m.layers.push_back(Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>::Random(1024, 1024));
  std::filesystem::remove_all(dir);
  ckpt::checkpoint_manager saves(dir, {.max_to_keep = 2});
  for (int step = 1; step <= 8; ++step) {
    std::this_thread::sleep_for(std::chrono::seconds(pause));
    const double start = now_s();
    saves.save(step, {{m, "model"}});
    std::printf("%.3f ", now_s() - start);
    std::fflush(stdout);
  }
  std::printf("\n");
  return 0;
}

// AnonHugePages of /proc/self/smaps_rollup, in MiB (-1 if it cannot be read).
long anon_huge_mib() {
  std::ifstream in("/proc/self/smaps_rollup");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("AnonHugePages:", 0) == 0) return std::stol(line.substr(14)) / 1024;
  return -1;
}

int of_params(long mib, long leaves, long reps, double churn_gib, double pause, const std::string& file) {
  const auto side = static_cast<Eigen::Index>(std::sqrt(static_cast<double>(mib << 20) / sizeof(float)));
  // Each matrix allocated on its own, as a model's are (copies of one made in a single
  // constructor call leave glibc's heap in another state).
  std::vector<Eigen::MatrixXf> layers;
  for (long i = 0; i < leaves; ++i) layers.push_back(Eigen::MatrixXf::Random(side, side));
  std::mt19937_64 random(26);
  // Reserved: a vector that grew between of_params and the drop would sit above the checkpoint's
  // memory in glibc's heap and decide whether the drop hands that memory back to the kernel.
  std::vector<double> seconds, saves, drops;
  for (auto* v : {&seconds, &saves, &drops}) v->reserve(static_cast<std::size_t>(reps));
  for (long rep = 0; rep < reps; ++rep) {
    bench::churn(churn_gib, random);
    std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    const double start = now_s();
    std::optional<ckpt::checkpoint> copy = ckpt::of_params(layers, "model");
    seconds.push_back(now_s() - start);
    std::printf("of_params %ld x %ldx%ld floats: %.3f s, AnonHugePages %ld MiB", leaves, static_cast<long>(side),
                static_cast<long>(side), seconds.back(), anon_huge_mib());
    if (!file.empty()) {
      const double saving = now_s();
      ckpt::save(file, *copy);
      const double dropping = now_s();
      copy.reset();
      saves.push_back(dropping - saving);
      drops.push_back(now_s() - dropping);
      std::printf("; save %.3f s; drop %.3f s", saves.back(), drops.back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf("median of %ld: %.3f s", reps, bench::median(seconds));
  if (!file.empty()) std::printf("; save %.3f s; drop %.3f s", bench::median(saves), bench::median(drops));
  std::printf("\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string mode = argc == 4 ? argv[1] : "";
  if (mode == "touch") return touch(std::strtoul(argv[2], nullptr, 10), std::atoi(argv[3]));
  if (mode == "manager") return manager(argv[2], std::atoi(argv[3]));
  if ((argc == 7 || argc == 8) && std::string(argv[1]) == "of_params")
    return of_params(std::atol(argv[2]), std::atol(argv[3]), std::atol(argv[4]), std::atof(argv[5]), std::atof(argv[6]),
                     argc == 8 ? argv[7] : "");
  std::fprintf(stderr,
               "usage: fresh_memory_probe touch MIB PAUSE | manager DIR PAUSE | of_params MIB LEAVES REPS CHURN_GIB PAUSE [FILE]\n");
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "fresh_memory_probe: %s\n", e.what());
  return 1;
}
