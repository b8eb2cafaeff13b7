// The data-parallel MLP trainer of examples/mlp_trainer_mpi, through the library, at 1, 2 and 4
// ranks. What is bit-identical, precisely (parameters, Adam's moments and step count, compared
// byte for byte as the snapshot of the training state, ckpt::training_state):
//
//  - with either reduction, a run stopped at step S (saved with ckpt::mpi::save by its P ranks)
//    and resumed on the same P ranks up to T equals the uninterrupted P-rank run up to T;
//  - with the ordered reduction, the run does not depend on the number of ranks at all: the
//    uninterrupted run up to T on any P in {1, 2, 4} (up to the job's size), and a run saved at S
//    by any such P and resumed by any other, all equal the uninterrupted run on the whole job.
//
// Sub-communicators of MPI_COMM_WORLD stand for jobs of fewer ranks.

#include "mpi_test.hpp"

#include "data_parallel.hpp"

#include <ckpt/adam.hpp>
#include <ckpt/mpi.hpp>
#include <ckpt/section.hpp>
#include <ckpt/snapshot.hpp>

namespace {

using namespace ckpt_mpi_test;
using namespace mlp_example;
namespace fs = std::filesystem;

constexpr std::uint64_t seed = 7;
constexpr int batch = 64;
constexpr int groups = 8;
constexpr std::int64_t stop_at = 25;
constexpr std::int64_t end_at = 60;
const ckpt::adam opt{.lr = 1e-2};

struct run {
  mlp params;
  ckpt::adam_state<mlp> state;
};

const dataset& data() {
  static const dataset d = two_spirals(seed, 200);
  return d;
}

run fresh() {
  run r{init_mlp(seed, 16), {}};
  r.state = opt.init(r.params);
  return r;
}

// Trains `r` on the ranks of `comm` up to step `to`.
void train(MPI_Comm comm, run& r, std::int64_t to, reduction how) {
  batch_order order(seed, static_cast<int>(data().x.cols()), batch);
  while (r.state.step < to) train_step_mpi(comm, data(), order, opt, r.params, r.state, groups, how);
}

// The training state (ckpt/adam.hpp) as a checkpoint in memory, to compare runs.
ckpt::checkpoint state_of(run& r) { return ckpt::snapshot_arena().snapshot(ckpt::training_state(r.params, r.state)); }

// The ranks [0, n) of the job as a communicator, or MPI_COMM_NULL on the others.
MPI_Comm first_ranks(int n) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank_of(MPI_COMM_WORLD) < n ? 0 : MPI_UNDEFINED, 0, &sub);
  return sub;
}

// Saved at `stop_at` by `from` ranks, resumed up to `end_at` by `to` ranks; the result on rank 0
// of the resuming group, or nothing elsewhere.
std::optional<ckpt::checkpoint> stop_and_resume(const fs::path& folder, int from, int to, reduction how) {
  const std::int64_t step = stop_at + 1000 * from + 10000 * to + (how == reduction::ordered ? 0 : 100000);
  if (MPI_Comm savers = first_ranks(from); savers != MPI_COMM_NULL) {
    run r = fresh();
    train(savers, r, stop_at, how);
    // Data parallelism: every rank offers the whole replicated state; it is written once.
    ckpt::mpi::save(savers, folder, step, ckpt::training_state(r.params, r.state));
    MPI_Comm_free(&savers);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  std::optional<ckpt::checkpoint> out;
  if (MPI_Comm resumers = first_ranks(to); resumers != MPI_COMM_NULL) {
    run r = fresh();  // the template for names and shapes; every value is replaced
    CHECK(ckpt::read_params(ckpt::mpi::load(resumers, folder, step), ckpt::training_state(r.params, r.state)).exact());
    CHECK_EQ(r.state.step, stop_at);
    train(resumers, r, end_at, how);
    if (rank_of(resumers) == 0) out = state_of(r);
    MPI_Comm_free(&resumers);
  }
  return out;
}

// The uninterrupted run on `n` ranks; the result on rank 0, nothing elsewhere.
std::optional<ckpt::checkpoint> uninterrupted(int n, reduction how) {
  std::optional<ckpt::checkpoint> out;
  if (MPI_Comm comm = first_ranks(n); comm != MPI_COMM_NULL) {
    run r = fresh();
    train(comm, r, end_at, how);
    if (rank_of(comm) == 0) out = state_of(r);
    MPI_Comm_free(&comm);
  }
  return out;
}

void a_run_resumed_on_the_same_ranks_ends_bit_identical_to_an_uninterrupted_one(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  for (const reduction how : {reduction::ordered, reduction::allreduce}) {
    const std::optional<ckpt::checkpoint> straight = uninterrupted(size, how);
    const std::optional<ckpt::checkpoint> resumed = stop_and_resume(folder, size, size, how);
    if (rank_of(MPI_COMM_WORLD) == 0) {
      CHECK(same(*straight, *resumed));
      // Not trivially: training moved the parameters away from where they started.
      run initial = fresh();
      CHECK(!same(*straight, state_of(initial)));
    }
  }
}

void ordered_reduction_is_independent_of_the_rank_count(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  const std::optional<ckpt::checkpoint> reference = uninterrupted(size, reduction::ordered);
  for (int n = 1; n <= size; ++n) {
    const std::optional<ckpt::checkpoint> other = uninterrupted(n, reduction::ordered);
    if (rank_of(MPI_COMM_WORLD) == 0) CHECK(same(*other, *reference));
  }
  // Every pair of rank counts, uneven splits of the 8 groups included (3 ranks: 2, 3 and 3).
  for (int from = 1; from <= size; ++from)
    for (int to = 1; to <= size; ++to) {
      const std::optional<ckpt::checkpoint> resumed = stop_and_resume(folder, from, to, reduction::ordered);
      if (rank_of(MPI_COMM_WORLD) == 0) CHECK(same(*resumed, *reference));
    }
}

}  // namespace

int main(int argc, char** argv) {
  return run_all(argc, argv, "test_mpi_trainer",
                 {{"a_run_resumed_on_the_same_ranks_ends_bit_identical_to_an_uninterrupted_one", a_run_resumed_on_the_same_ranks_ends_bit_identical_to_an_uninterrupted_one},
                  {"ordered_reduction_is_independent_of_the_rank_count",
                   ordered_reduction_is_independent_of_the_rank_count}});
}
