// ckpt_mpi_tiers_bench: what do multi-level checkpoints (ckpt::mpi::tiers) cost and save, against
// the shared-only manager, for one job run as simulated nodes? Run by bench/mpi_tiers_run.sh
// (4 ranks as 2 nodes of 2, 256 MiB a rank: a 1 GiB step; the local tier on tmpfs, the shared
// folder on disk).
//
//   mpirun -np 4 ckpt_mpi_tiers_bench --mib-per-rank=256 --ranks-per-node=2 --reps=3
//          --shared=DIR --local=/dev/shm/DIR [--work-ms=2000] [--work=compute|sleep]
//
// Each rank holds --mib-per-rank MiB of F32 tensors of its own (every rank writes a shard). Each
// figure is the slowest rank's time, the median of --reps:
//   save, shared only      ckpt::mpi::checkpoint_manager::save into --shared, as today;
//   save, tiered           the same manager with the local tier: local write, partner copy over
//                          MPI, the local commit (never drained);
//   save, tiered + drain   every step drained: the save while the previous step's drain runs;
//   wait for the drain     wait() after the last of those saves;
//   save_async, shared only / tiered: the call's blocking after --work-ms of work (the previous
//                          background write done), which commits the previous step;
//   step, no save / shared only / tiered + drain: the time of one --work-ms step of work
//                          (--work=compute: matrix products on one thread a rank, CPU training;
//                          --work=sleep: a GPU job's idle host) with a save_async before it;
//   restore, local         a new manager, load_latest, each rank copying its own part out;
//   restore, node lost     the same after node 1's local folder is removed (partner copies);
//   restore, shared cold   the local folders removed and the shared step's pages dropped
//                          (posix_fadvise DONTNEED), as a parallel file system is cold.
// Output: RESULT lines (what, median s, GiB/s of the whole step); the tmpfs bytes a node holds.

#include <ckpt/file.hpp>
#include <ckpt/mpi.hpp>

#include <mpi.h>

#include "common.hpp"
#include "mpi_common.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <Eigen/Core>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using bench::timed;

// `count` tensors of `bytes` in all, named `<prefix>.<i>`.
ckpt::checkpoint part(const std::string& prefix, long count, std::size_t bytes, std::uint32_t seed) {
  std::vector<ckpt::checkpoint::entry> entries;
  const std::size_t floats = bytes / sizeof(float) / static_cast<std::size_t>(count);
  std::vector<float> values(floats);
  for (long i = 0; i < count; ++i) {
    bench::fill(values.data(), floats, seed + static_cast<std::uint32_t>(i));
    entries.emplace_back(prefix + "." + std::to_string(i),
                         ckpt::tensor::copy_of(ckpt::dtype::f32, {static_cast<std::int64_t>(floats)},
                                               std::as_bytes(std::span(values))));
  }
  return ckpt::checkpoint(std::move(entries));
}

// A step of work of about `ms` milliseconds: products of 256 x 256 matrices on this thread (CPU
// training, every core busy when ranks fill the machine), or a sleep (a GPU job, whose host cores
// are idle while the device computes).
struct work {
  work(double ms, bool compute)
      : a(Eigen::MatrixXf::Random(256, 256)), b(Eigen::MatrixXf::Random(256, 256)), c(256, 256), sleep_ms(compute ? 0 : ms) {
    const double start = bench::now_s();
    run(4);
    reps = std::max(1L, static_cast<long>(ms / 1000.0 / ((bench::now_s() - start) / 4)));
  }
  void run(long n) {
    for (long i = 0; i < n; ++i) c.noalias() = a * b;
  }
  void operator()() {
    if (sleep_ms > 0) ::usleep(static_cast<useconds_t>(sleep_ms * 1000));
    else run(reps);
  }
  Eigen::MatrixXf a, b, c;
  double sleep_ms;
  long reps = 1;
};

// Drops the cached pages of every file under `folder` (rank 0), so that the next read is cold.
void drop_pages(const fs::path& folder) {
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(folder)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

std::uintmax_t bytes_under(const fs::path& folder) {
  std::uintmax_t n = 0;
  if (fs::exists(folder))
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(folder))
      if (e.is_regular_file()) n += e.file_size();
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  // save_async's thread sends the partner copies itself when MPI allows threads (see ckpt::mpi::tiers).
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = bench::rank_of(comm);
  const int ranks = bench::size_of(comm);
  const bench::args flags(argc, argv);
  const long mib = flags.num("mib-per-rank", 256);
  const long reps = std::max(1L, flags.num("reps", 3));
  const int per_node = static_cast<int>(flags.num("ranks-per-node", 2));
  const fs::path shared = flags.str("shared", "mpi-tiers-bench-shared");
  const fs::path local = flags.str("local", "/dev/shm/ckpt-mpi-tiers-bench");
  const bool compute = flags.str("work", "compute") == "compute";
  work step_work(static_cast<double>(flags.num("work-ms", 2000)), compute);
  const double gib = static_cast<double>(mib) * ranks / 1024.0;

  const ckpt::checkpoint mine = part("rank" + std::to_string(rank), 16, static_cast<std::size_t>(mib) << 20,
                                     static_cast<std::uint32_t>(rank) * 1000);
  const auto fresh = [&] {
    MPI_Barrier(comm);
    if (rank == 0) {
      fs::remove_all(shared);
      fs::remove_all(local);
    }
    MPI_Barrier(comm);
  };
  const ckpt::mpi::tiers no_drain{.local = local, .ranks_per_node = per_node, .drain_every = 0};
  const ckpt::mpi::tiers every_step{.local = local, .ranks_per_node = per_node, .drain_every = 1};
  std::map<std::string, std::vector<double>> samples;
  const auto restore = [&](const ckpt::mpi::tiers& levels) {
    ckpt::mpi::checkpoint_manager manager(comm, shared, {}, levels);
    const auto latest = manager.load_latest();
    std::vector<std::byte> buffer;
    for (int i = 0; i < 16; ++i) {
      const ckpt::tensor& x = latest->get("rank" + std::to_string(rank) + "." + std::to_string(i));
      buffer.assign(x.bytes().begin(), x.bytes().end());
    }
  };

  // Blocking saves, then the three restores of the last one.
  fresh();
  {
    ckpt::mpi::checkpoint_manager manager(comm, shared, {.max_to_keep = 2});
    for (long r = 0; r < reps; ++r)
      samples["save, shared only"].push_back(timed(comm, [&] { manager.save(r + 1, {mine}); }));
  }
  fresh();
  {
    ckpt::mpi::checkpoint_manager manager(comm, shared, {.max_to_keep = 2}, no_drain);
    for (long r = 0; r < reps; ++r)
      samples["save, tiered"].push_back(timed(comm, [&] { manager.save(r + 1, {mine}); }));
  }
  fresh();
  std::uintmax_t node_bytes = 0;
  // The run's node folders in the local root: <local>/run-<id>/node-<k>, the id in <shared>/.ckpt-run-id.
  const auto run_folder = [&] {
    std::string id;
    std::getline(std::ifstream(shared / ".ckpt-run-id"), id);
    return local / ("run-" + id);
  };
  {
    ckpt::mpi::checkpoint_manager manager(comm, shared, {.max_to_keep = 2}, every_step);
    for (long r = 0; r < reps + 1; ++r) {
      const double s = timed(comm, [&] { manager.save(r + 1, {mine}); });
      if (r > 0) samples["save, tiered + drain"].push_back(s);  // the first has no drain before it
    }
    samples["wait for the drain"].push_back(timed(comm, [&] { manager.wait(); }));
    if (rank == 0) node_bytes = bytes_under(run_folder() / "node-0");
  }
  // Node 1's folder as the save left it, put back before each restore from intact nodes (a restore
  // after its loss writes into it what it receives).
  const fs::path node1 = run_folder() / "node-1";
  const fs::path kept(local.string() + "-node-1");
  if (rank == 0) fs::copy(node1, kept, fs::copy_options::recursive);
  for (long r = 0; r < reps; ++r) {
    if (rank == 0) {
      fs::remove_all(node1);
      fs::copy(kept, node1, fs::copy_options::recursive);
    }
    samples["restore, local"].push_back(timed(comm, [&] { restore(every_step); }));
    if (rank == 0) fs::remove_all(node1);
    samples["restore, node lost"].push_back(timed(comm, [&] { restore(every_step); }));
  }
  if (rank == 0) fs::remove_all(kept);
  if (rank == 0) fs::rename(local, fs::path(local.string() + "-aside"));
  for (long r = 0; r < reps; ++r) {
    if (rank == 0) drop_pages(shared);
    samples["restore, shared cold"].push_back(timed(comm, [&] { restore(every_step); }));
  }
  if (rank == 0) fs::remove_all(fs::path(local.string() + "-aside"));

  // A loop of steps of work with a save_async before each: the call's blocking, and the step's time.
  for (const auto& [name, levels] : {std::pair<std::string, ckpt::mpi::tiers>{"shared only", {}},
                                     std::pair<std::string, ckpt::mpi::tiers>{"tiered + drain", every_step}}) {
    fresh();
    ckpt::mpi::checkpoint_manager manager(comm, shared, {.max_to_keep = 2}, levels);
    for (long r = 0; r < reps + 1; ++r) {
      const double call = timed(comm, [&] { manager.save_async(r + 1, {mine}); });
      const double step = timed(comm, [&] { step_work(); });
      if (r == 0) continue;  // the first call commits nothing
      samples["save_async, " + name].push_back(call);
      samples["step, " + name].push_back(step);
    }
    manager.wait();
  }
  for (long r = 0; r < reps; ++r) samples["step, no save"].push_back(timed(comm, [&] { step_work(); }));
  fresh();

  if (rank == 0) {
    std::printf("# %d ranks as nodes of %d, %ld MiB a rank (%.2f GiB a step), median of %ld; local tier %s, shared %s; "
                "steps of %s; MPI_THREAD_MULTIPLE: %s\n",
                ranks, per_node, mib, gib, reps, local.c_str(), shared.c_str(), compute ? "computing" : "sleeping",
                provided == MPI_THREAD_MULTIPLE ? "yes (partner copies sent by save_async's thread)" : "no");
    std::printf("# node 0's local tier after a drained save: %.0f MiB (own copies and partner copies, 2 steps)\n",
                static_cast<double>(node_bytes) / 1048576.0);
    for (const char* name : {"save, shared only", "save, tiered", "save, tiered + drain", "wait for the drain",
                             "save_async, shared only", "save_async, tiered + drain", "restore, local",
                             "restore, node lost", "restore, shared cold", "step, no save", "step, shared only",
                             "step, tiered + drain"}) {
      const double s = bench::median(samples[name]);
      std::printf("RESULT | %s | %.3f | %.2f |\n", name, s, std::string_view(name).starts_with("step") ? 0.0 : gib / s);
    }
  }
  MPI_Finalize();
  return 0;
}
