// A rank SIGKILLed while a multi-level step is written (ckpt::mpi::tiers) by save_async's thread:
// during its local write, during the write of a partner copy it receives (MPI_THREAD_MULTIPLE: the
// thread sends and receives them), or during the drain to the shared folder. The
// next job must restore the newest step that was committed, bit-exact, list no step that is not
// whole in some tier, and save the step again. Not a run_all program: driven by tiers_kill.cmake.
//   mpirun -np 4 test_mpi_tiers_kill save <folder> local|partner|drain   saves steps 1, 2; dies in 3
//   mpirun -np 4 test_mpi_tiers_kill check <folder> local|partner|drain  checks, then saves step 3

#include "mpi_test.hpp"

#include <ckpt/mpi.hpp>

#include "io/io_hooks.hpp"  // the writes, where the last rank kills itself (src/)

#include <Eigen/Core>

#include <unistd.h>

#include <csignal>
#include <iostream>

namespace {

using namespace ckpt_mpi_test;
namespace fs = std::filesystem;

Eigen::VectorXf part_of(int rank, std::int64_t step) {
  Eigen::VectorXf v(1 << 16);
  for (Eigen::Index i = 0; i < v.size(); ++i) v[i] = static_cast<float>(step * 1000 + rank) + static_cast<float>(i);
  return v;
}

ckpt::checkpoint state_of(int rank, std::int64_t step) {
  return ckpt::concat({ckpt::of_params(part_of(rank, step), "part." + std::to_string(rank)),
                       ckpt::of_int("step", static_cast<int>(step))});
}

ckpt::mpi::checkpoint_manager open(const fs::path& folder) {
  return {MPI_COMM_WORLD, folder / "shared", {}, {.local = folder / "local", .ranks_per_node = 2, .drain_every = 1}};
}

// The path of a file this process has open, as /proc says it.
std::string path_of_fd(int fd) {
  char path[4096];
  const ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), path, sizeof path);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : std::string();
}

// Where the last rank dies: a write into a file whose path holds this.
std::string kill_marker;  // NOLINT: set once before the save, read by the hook

ssize_t killing_writev(int fd, const iovec* pieces, int count) {
  if (!kill_marker.empty() && path_of_fd(fd).find(kill_marker) != std::string::npos) std::raise(SIGKILL);
  return ckpt::detail::system_hooks().writev(fd, pieces, count);
}

}  // namespace

int main(int argc, char** argv) {
  // With threads, save_async's thread sends the partner copies (test_mpi_tiers covers the other way).
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  CHECK_EQ(provided, MPI_THREAD_MULTIPLE);
  const std::string mode = argc == 4 ? argv[1] : "";
  const fs::path folder = argc == 4 ? argv[2] : "";
  const std::string where = argc == 4 ? argv[3] : "";
  CHECK(where == "local" || where == "partner" || where == "drain");
  CHECK_EQ(size_of(MPI_COMM_WORLD), 4);
  const int rank = rank_of(MPI_COMM_WORLD);
  if (mode == "save") {
    ckpt::mpi::checkpoint_manager manager = open(folder);
    for (std::int64_t step = 1; step <= 2; ++step) manager.save(step, {state_of(rank, step)});
    manager.wait();
    // Rank 3 (node 1) writes its own shard, and keeps rank 1's partner copy.
    if (rank == 3) {
      kill_marker = where == "local"     ? "/node-1/step-0000000003/"
                    : where == "partner" ? "/node-1/partner/step-0000000003/"
                                         : "/shared/step-0000000003/";
      ckpt::detail::hooks().writev = killing_writev;
    }
    manager.save_async(3, {state_of(rank, 3)});
    manager.wait();
    fail(__FILE__, __LINE__, "the last rank was not killed");
  }
  CHECK_EQ(mode, std::string("check"));
  {
    ckpt::mpi::checkpoint_manager manager = open(folder);
    // Killed in the drain, step 3 was committed in the local tiers, not in the shared folder.
    const bool drained = where != "drain";
    const std::int64_t newest = drained ? 2 : 3;
    CHECK_EQ(manager.steps(), (drained ? std::vector<std::int64_t>{1, 2} : std::vector<std::int64_t>{1, 2, 3}));
    CHECK_EQ(committed_steps(folder / "shared"), (std::vector<std::int64_t>{1, 2}));
    const auto latest = manager.load_latest();
    CHECK_EQ(latest.step, newest);
    CHECK(latest.skipped.empty());
    for (int r = 0; r < 4; ++r) {
      const Eigen::VectorXf expected = part_of(r, newest);
      CHECK(std::ranges::equal(latest->get("part." + std::to_string(r)).as<float>(), expected.reshaped()));
    }
    for (const auto& s : latest.sources) CHECK(s.from != ckpt::checkpoint_manager::tier::folder);
    // Debris of the killed step is gone from every tier that did not commit it.
    if (drained) {
      const fs::path node1 = run_tier(folder / "local", folder / "shared") / "node-1";
      CHECK(!fs::exists(node1 / "step-0000000003"));
      CHECK(!fs::exists(node1 / "partner" / "step-0000000003"));
    }
    CHECK(!fs::exists(folder / "shared" / "step-0000000003"));
    // The run goes on: step 4 (after a restored 3) or step 3 again.
    manager.save(newest + 1, {state_of(rank, newest + 1)});
    manager.wait();
    CHECK_EQ(committed_steps(folder / "shared").back(), newest + 1);
  }
  MPI_Finalize();
  if (rank == 0) std::cout << "test_mpi_tiers_kill: killed in the " << where << " write, step " << (where == "drain" ? 3 : 2) << " restored" << std::endl;
  return 0;
}
