// ckpt_mpi_sliced_bench: the cost of ckpt::mpi::save of slices (ckpt::mpi::sliced: one file, written collectively with
// MPI-IO) at the number of ranks it is run with, for a state held as 1/P slices (ZeRO/FSDP), against
// the same bytes written without coordination and through the whole-entry ckpt::mpi::save. Run by
// bench/mpi_sliced_run.sh at 1, 2 and 4 ranks, one process per row so that each row's peak RSS is
// its own.
//
//   mpirun -np 4 ckpt_mpi_sliced_bench --what=sliced --mib=1024 --tensors=16 --reps=3 --dir=DIR
//
// The state: --tensors F32 vectors of --mib MiB in all; rank r of P holds elements
// [n·r/P, n·(r+1)/P) of each (a VectorXf per tensor, 1/P of the state). --what:
//
//  - independent: every rank ckpt::save's its slices, as entries of their own, to a file of its
//    own (digest on): no exchange, no agreement, no index; the floor;
//  - sliced:      ckpt::mpi::save of ckpt::mpi::sliced(slices), digest on (ranks read their share of the chunks back);
//  - sliced-nodigest: the same without the digest;
//  - pieces:      today's whole-entry ckpt::mpi::save, each slice an entry of its own
//                 (`t.<i>.part<r>`), one shard per rank;
//  - load:        ckpt::mpi::load of a sliced step (headers only) and read_flat of each rank's
//                 slices (pread of its ranges);
//  - manager:     a ckpt::mpi::checkpoint_manager's save of the slices (digest on, keeps 2 steps);
//  - manager-async: the time its save_async call blocks (MPI_THREAD_MULTIPLE: the manager's thread
//                 writes), each step waited for (untimed) before the next.
//
// Every sample is timed between barriers, as the slowest rank sees it; the median of --reps is
// printed as a RESULT line: what, ranks, MiB in all, median s, MiB/s in all, the largest peak
// RSS of the ranks (MiB), and the state each rank holds (MiB).

#include <ckpt/file.hpp>
#include <ckpt/mpi.hpp>

#include <mpi.h>

#include "mpi_common.hpp"

#include <Eigen/Core>

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::string flag(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i < argc; ++i)
    if (std::string a = argv[i]; a.rfind("--" + name + "=", 0) == 0) return a.substr(name.size() + 3);
  return fallback;
}

using bench::timed;

}  // namespace

int main(int argc, char** argv) {
  const std::string what = flag(argc, argv, "what", "sliced");
  const bool managed = what == "manager" || what == "manager-async";
  int provided = 0;
  if (managed) MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  else MPI_Init(&argc, &argv);
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = bench::rank_of(comm);
  const int ranks = bench::size_of(comm);
  const long mib = std::atol(flag(argc, argv, "mib", "1024").c_str());
  const long tensors = std::atol(flag(argc, argv, "tensors", "16").c_str());
  const long reps = std::max(1L, std::atol(flag(argc, argv, "reps", "3").c_str()));
  const fs::path dir = flag(argc, argv, "dir", "mpi-sliced-bench-work");

  const Eigen::Index n = static_cast<Eigen::Index>((static_cast<std::size_t>(mib) << 20) / sizeof(float) /
                                                   static_cast<std::size_t>(tensors));
  const Eigen::Index first = n * rank / ranks, end = n * (rank + 1) / ranks;
  std::vector<Eigen::VectorXf> state;
  for (long i = 0; i < tensors; ++i) {
    Eigen::VectorXf v(end - first);
    for (Eigen::Index k = 0; k < v.size(); ++k) v[k] = static_cast<float>(i) + static_cast<float>((first + k) % 1000) * 1e-3f;
    state.push_back(std::move(v));
  }
  std::vector<ckpt::mpi::slice> slices;
  for (long i = 0; i < tensors; ++i) slices.push_back(ckpt::mpi::slice::flat("t." + std::to_string(i), {n}, first, state[static_cast<std::size_t>(i)]));
  // The slices as entries of their own, viewing the vectors (no copy).
  std::vector<ckpt::checkpoint::entry> entries;
  for (long i = 0; i < tensors; ++i) {
    const Eigen::VectorXf& v = state[static_cast<std::size_t>(i)];
    entries.emplace_back("t." + std::to_string(i) + ".part" + std::to_string(rank),
                         ckpt::tensor::view_of(ckpt::dtype::f32, {v.size()},
                                               std::as_bytes(std::span(v.data(), static_cast<std::size_t>(v.size()))),
                                               std::shared_ptr<const void>(std::shared_ptr<void>(), v.data())));
  }
  const ckpt::checkpoint pieces(std::move(entries));
  if (rank == 0) fs::create_directories(dir);
  MPI_Barrier(comm);

  std::optional<ckpt::mpi::checkpoint_manager> manager;
  if (managed) manager.emplace(comm, dir / "run", ckpt::checkpoint_manager::options{.max_to_keep = 2, .digest = true});
  std::vector<double> samples;
  for (long rep = 0; rep < reps; ++rep) {
    const std::int64_t step = rep + 1;
    fs::path written;  // the step folder a save returns
    if (what == "independent") {
      const fs::path own = dir / ("independent-" + std::to_string(rank) + ".safetensors");
      samples.push_back(timed(comm, [&] { ckpt::save(own, pieces, {.digest = true}); }));
      fs::remove(own);
    } else if (what == "sliced" || what == "sliced-nodigest") {
      samples.push_back(timed(comm, [&] {
        written = ckpt::mpi::save(comm, dir / "steps", step, {ckpt::mpi::sliced(slices)}, {}, {.digest = what == "sliced"});
      }));
    } else if (what == "pieces") {
      samples.push_back(
          timed(comm, [&] { written = ckpt::mpi::save(comm, dir / "steps", step, {pieces}, {}, {.digest = true}); }));
    } else if (what == "load") {
      if (rep == 0) ckpt::mpi::save(comm, dir / "steps", 1, {ckpt::mpi::sliced(slices)}, {}, {.digest = false});
      std::vector<Eigen::VectorXf> back(state.size(), Eigen::VectorXf(end - first));
      samples.push_back(timed(comm, [&] {
        const ckpt::checkpoint t = ckpt::mpi::load(comm, dir / "steps", 1, {.verify_digest = false});
        for (long i = 0; i < tensors; ++i) ckpt::mpi::read_flat(t, "t." + std::to_string(i), first, back[static_cast<std::size_t>(i)]);
      }));
      if (rep == 0 && back != state) {
        std::fprintf(stderr, "rank %d: the slices read back differ\n", rank);
        MPI_Abort(comm, 1);
      }
    } else if (what == "manager") {
      samples.push_back(timed(comm, [&] { manager->save(step, {ckpt::mpi::sliced(slices)}); }));
    } else if (what == "manager-async") {
      samples.push_back(timed(comm, [&] { manager->save_async(step, {ckpt::mpi::sliced(slices)}); }));
      manager->wait();
    } else {
      if (rank == 0) std::fprintf(stderr, "unknown --what=%s\n", what.c_str());
      MPI_Abort(comm, 2);
    }
    MPI_Barrier(comm);
    if (rank == 0 && !written.empty()) fs::remove_all(written);
    MPI_Barrier(comm);
  }
  manager.reset();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  long peak_kib = usage.ru_maxrss, largest = 0;
  MPI_Reduce(&peak_kib, &largest, 1, MPI_LONG, MPI_MAX, 0, comm);
  if (rank == 0) {
    std::ranges::sort(samples);
    const double s = samples[samples.size() / 2];
    std::printf("RESULT | %s | %d | %ld | %.3f | %.0f | %ld | %.0f |\n", what.c_str(), ranks, mib, s,
                static_cast<double>(mib) / s, largest / 1024, static_cast<double>(mib) / ranks);
    fs::remove_all(dir);
  }
  MPI_Finalize();
  return 0;
}
