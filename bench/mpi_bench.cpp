// ckpt_mpi_bench: the cost of ckpt::mpi::save and load at the number of ranks it is run with,
// against the same bytes written without coordination. Run by bench/mpi_run.sh at 1, 2 and 4 ranks.
//
//   mpirun -np 4 ckpt_mpi_bench --mib-per-rank=64 --tensors-per-rank=16 --reps=5 --dir=DIR
//
// Each rank holds --mib-per-rank MiB of F32 tensors of its own (model parallelism: nothing
// replicated, so every rank writes a shard). Every sample is timed between barriers, as the
// slowest rank sees it (MPI_MAX of the per-rank times), and the median of --reps is printed:
//
//  - independent: every rank ckpt::save's its part to a new file of its own (digest on), no
//    exchange, no agreement, no index: the floor of the collective save;
//  - mpi::save:   the collective save (exchange, shards, agreement, index), digest on;
//  - mpi::save, replicated: every rank offers the same --mib-per-rank MiB; rank 0 writes it all;
//  - mpi::load:   the collective load (headers only, digests not verified) and each rank reading
//    its own part (to_params-like copy), the restore a trainer does;
//  - mpi::load, verified: the same with the shards' digests checked, each by one rank.
//
// Output: RESULT lines (name, ranks, MiB per rank, median seconds, MiB/s per writing rank, MiB/s
// total); a replicated save has one writing rank.

#include <ckpt/file.hpp>
#include <ckpt/mpi.hpp>

#include <mpi.h>

#include "mpi_common.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

long flag(int argc, char** argv, const std::string& name, long fallback) {
  for (int i = 1; i < argc; ++i)
    if (std::string a = argv[i]; a.rfind("--" + name + "=", 0) == 0) return std::atol(a.c_str() + name.size() + 3);
  return fallback;
}

std::string flag_text(int argc, char** argv, const std::string& name, const std::string& fallback) {
  for (int i = 1; i < argc; ++i)
    if (std::string a = argv[i]; a.rfind("--" + name + "=", 0) == 0) return a.substr(name.size() + 3);
  return fallback;
}

// `count` tensors of `bytes` bytes in all, named `<prefix>.<i>`, with values of their own.
ckpt::checkpoint part(const std::string& prefix, long count, std::size_t bytes, float seed) {
  std::vector<ckpt::checkpoint::entry> entries;
  const std::size_t floats = bytes / sizeof(float) / static_cast<std::size_t>(count);
  for (long i = 0; i < count; ++i) {
    std::vector<float> values(floats);
    for (std::size_t k = 0; k < floats; ++k) values[k] = seed + static_cast<float>(i) + static_cast<float>(k % 1000) * 1e-3f;
    entries.emplace_back(prefix + "." + std::to_string(i),
                         ckpt::tensor::copy_of(ckpt::dtype::f32, {static_cast<std::int64_t>(floats)},
                                               std::as_bytes(std::span(values))));
  }
  return ckpt::checkpoint(std::move(entries));
}

using bench::timed;

double median(std::vector<double> v) {
  std::ranges::sort(v);
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = bench::rank_of(comm);
  const int ranks = bench::size_of(comm);
  const long mib = flag(argc, argv, "mib-per-rank", 64);
  const long tensors = flag(argc, argv, "tensors-per-rank", 16);
  const long reps = std::max(1L, flag(argc, argv, "reps", 5));
  const fs::path dir = flag_text(argc, argv, "dir", "mpi-bench-work");
  const std::size_t bytes = static_cast<std::size_t>(mib) << 20;
  const double mib_d = static_cast<double>(mib);

  const ckpt::checkpoint mine = part("rank" + std::to_string(rank), tensors, bytes, static_cast<float>(rank));
  const ckpt::checkpoint replicated = part("shared", tensors, bytes, 0.5f);
  if (rank == 0) fs::create_directories(dir);
  MPI_Barrier(comm);

  std::map<std::string, std::vector<double>> samples;
  std::int64_t step = 0;
  for (long rep = 0; rep < reps; ++rep) {
    // A new file each time, as each step of the collective save is a new folder.
    const fs::path own = dir / ("independent-" + std::to_string(rep) + "-" + std::to_string(rank) + ".safetensors");
    samples["independent"].push_back(timed(comm, [&] { ckpt::save(own, mine, {.digest = true}); }));
    const std::int64_t saved = ++step;
    fs::path saved_folder, replicated_folder;  // the step folders mpi::save returns
    samples["mpi::save"].push_back(
        timed(comm, [&] { saved_folder = ckpt::mpi::save(comm, dir / "steps", saved, {mine}, {}, {.digest = true}); }));
    samples["mpi::save, replicated"].push_back(timed(comm, [&] {
      replicated_folder = ckpt::mpi::save(comm, dir / "replicated", saved, {replicated}, {}, {.digest = true});
    }));
    auto restore = [&](const ckpt::load_options& options) {
      const ckpt::checkpoint t = ckpt::mpi::load(comm, dir / "steps", saved, options);
      // Each rank takes its own part out of the mapped step, as to_params would.
      std::vector<std::byte> buffer;
      for (long i = 0; i < tensors; ++i) {
        const ckpt::tensor& x = t.get("rank" + std::to_string(rank) + "." + std::to_string(i));
        buffer.assign(x.bytes().begin(), x.bytes().end());
      }
    };
    samples["mpi::load"].push_back(timed(comm, [&] { restore({.verify_digest = false}); }));
    samples["mpi::load, verified"].push_back(timed(comm, [&] { restore({.verify_digest = true}); }));
    fs::remove(own);
    MPI_Barrier(comm);
    if (rank == 0) {
      fs::remove_all(saved_folder);
      fs::remove_all(replicated_folder);
    }
  }
  if (rank == 0) {
    std::printf("# %d ranks, %ld MiB in %ld tensors per rank, median of %ld\n", ranks, mib, tensors, reps);
    for (const char* name : {"independent", "mpi::save", "mpi::save, replicated", "mpi::load", "mpi::load, verified"}) {
      const double s = median(samples[name]);
      // A replicated save writes one rank's worth of bytes in all, by one rank.
      const bool one_writer = std::string_view(name) == "mpi::save, replicated";
      const double total = one_writer ? mib_d : mib_d * ranks;
      const double per_writer = mib_d;  // every writer writes one rank's worth
      std::printf("RESULT | %s | %d | %ld | %.3f | %.0f | %.0f |\n", name, ranks, mib, s, per_writer / s, total / s);
    }
    fs::remove_all(dir);
  }
  MPI_Finalize();
  return 0;
}
