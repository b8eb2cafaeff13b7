// A rank killed (SIGKILL) during the collective write of ckpt::mpi::save of slices: the job dies, and
// the folder must hold the earlier step intact and no committed trace of the step being written.
// Not a run_all program: trainer-style, driven by sliced_kill.cmake.
//   mpirun -np P test_mpi_sliced_kill save <folder>   saves step 1, then dies in step 2
//   test_mpi_sliced_kill check <folder>              (one process) checks the folder, then saves
//                                                    step 2 again over the debris

#include "mpi_test.hpp"

#include <ckpt/file.hpp>
#include <ckpt/leaf.hpp>
#include <ckpt/mpi.hpp>

#include "mpi/step.hpp"  // the step folders' layout (src/): step_folder, index_file_name

#include <Eigen/Core>

#include <csignal>
#include <iostream>

namespace {

using namespace ckpt_mpi_test;
namespace fs = std::filesystem;

// A vector leaf whose row writer kills the process when `kill` is set: the rank dies while it
// stages its piece for MPI_File_write_at_all, with the file open on every rank and the other ranks
// writing theirs.
struct fatal_vector {
  Eigen::VectorXf values;
  bool kill = false;
};

}  // namespace

template <>
struct ckpt::leaf_traits<fatal_vector> {
  static ckpt::dtype dtype(const fatal_vector&) { return ckpt::dtype::f32; }
  static ckpt::dims shape(const fatal_vector& x) { return {x.values.size()}; }
  static void write_rows(const fatal_vector& x, std::size_t first, std::size_t count, std::byte* out) {
    if (x.kill) std::raise(SIGKILL);
    std::memcpy(out, x.values.data() + first, count * sizeof(float));
  }
  static void read(fatal_vector& x, const ckpt::tensor& in) { std::memcpy(x.values.data(), in.bytes().data(), in.nbytes()); }
};

namespace {

constexpr Eigen::Index n = 1 << 16;

// The global tensor "v" of step `step`, and the part [first, end) of it.
Eigen::VectorXf values(std::int64_t step, Eigen::Index first, Eigen::Index end) {
  Eigen::VectorXf v(end - first);
  for (Eigen::Index k = first; k < end; ++k) v[k - first] = static_cast<float>(step * 1000000 + k);
  return v;
}

void save(MPI_Comm comm, const fs::path& folder, std::int64_t step, bool kill_last) {
  const int rank = rank_of(comm), size = size_of(comm);
  const Eigen::Index first = n * rank / size, end = n * (rank + 1) / size;
  const fatal_vector mine{values(step, first, end), kill_last && rank == size - 1};
  ckpt::mpi::save(comm, folder, step, {ckpt::mpi::sliced({ckpt::mpi::slice::flat("v", {n}, first, mine)})});
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const std::string mode = argc == 3 ? argv[1] : "";
  const fs::path folder = argc == 3 ? argv[2] : "";
  if (mode == "save") {
    save(MPI_COMM_WORLD, folder, 1, false);
    save(MPI_COMM_WORLD, folder, 2, true);
    fail(__FILE__, __LINE__, "the last rank was not killed");
  }
  CHECK_EQ(mode, std::string("check"));
  CHECK_EQ(size_of(MPI_COMM_WORLD), 1);
  // Step 1 is committed and intact; step 2 left a folder without an index, which is no step.
  CHECK_EQ(committed_steps(folder), std::vector<std::int64_t>{1});
  CHECK(fs::exists(ckpt::mpi::detail::step_folder(folder, 2)));
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 2) / ckpt::mpi::detail::index_file_name));
  const ckpt::checkpoint t = ckpt::load(ckpt::mpi::detail::step_folder(folder, 1), {.verify_digest = true});
  CHECK(std::ranges::equal(t.get("v").as<float>(), values(1, 0, n).reshaped()));
  // Saving step 2 again replaces the debris (the temporary file the killed job left).
  save(MPI_COMM_WORLD, folder, 2, false);
  CHECK_EQ(listing(ckpt::mpi::detail::step_folder(folder, 2)),
           (std::vector<std::string>{"model-00001-of-00001.safetensors", ckpt::mpi::detail::index_file_name.data()}));
  MPI_Finalize();
  std::cout << "test_mpi_sliced_kill: step 1 intact, step 2 not committed after the kill" << std::endl;
  return 0;
}
