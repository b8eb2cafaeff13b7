// ckpt::mpi::save of sections of slices (ckpt::mpi::sliced) and the reads of slices, run by mpirun at 1, 2, 3 and 4 ranks: global
// tensors held in pieces (ZeRO's flat ranges, tensor-parallel row blocks held column-major, empty
// pieces, replicated whole entries in the same save) written collectively into one file that is
// byte for byte ckpt::save's of the whole tensors, with the digest the spec defines; the step
// read whole by the single-process ckpt::load and as other slices on 3, 2 and 1 ranks
// (sub-communicators of the saving job); and the refusals every rank raises alike before
// anything is written.

#include "mpi_test.hpp"
#include "sliced_state.hpp"

#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/mpi.hpp>
#include <ckpt/params.hpp>
#include <ckpt/sharded.hpp>

#include "mpi/step.hpp"  // the step folders' layout (src/): step_folder, index_file_name

#include <Eigen/Core>

#include <xxhash.h>

#include <cstdio>
#include <fstream>
#include <iterator>

namespace {

using namespace ckpt_mpi_test;
namespace fs = std::filesystem;

// A slice's leaf is not part of the API: `sliced` reaches it through a detail access struct.
template <class S>
concept exposes_its_leaf = requires(const S& s) { s.local(); };
static_assert(!exposes_its_leaf<ckpt::mpi::slice>);

// The digest as its spec defines it, computed here from the file alone: XXH3-64 of the
// little-endian [H, C_1..C_n], H the hash of the header with its 16 digits as '0', C_i the hash
// of the i-th 1 MiB chunk of the data.
std::string spec_digest(std::string file) {
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const std::string key = "\"ckpt.xxh3_64_file\":\"";
  const std::size_t at = file.find(key) + key.size();
  CHECK(at < 8 + n);
  const std::string recorded = file.substr(at, 16);
  file.replace(at, 16, std::string(16, '0'));
  std::vector<std::uint64_t> values{XXH3_64bits(file.data(), 8 + n)};
  constexpr std::size_t chunk = std::size_t{1} << 20;
  for (std::size_t first = 8 + n; first < file.size(); first += chunk)
    values.push_back(XXH3_64bits(file.data() + first, std::min(chunk, file.size() - first)));
  // The test runs on little-endian machines: the values' bytes are their little-endian encoding.
  const std::uint64_t digest = XXH3_64bits(values.data(), values.size() * 8);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(digest));
  CHECK_EQ(recorded, std::string(hex));
  return recorded;
}

void saved_file_is_saves_file(const fs::path& folder) {
  const int rank = rank_of(MPI_COMM_WORLD), size = size_of(MPI_COMM_WORLD);
  const rank_state s = pieces_of(rank, size);
  const std::vector<ckpt::mpi::slice> slices = slices_of(s);
  ckpt::mpi::save(MPI_COMM_WORLD, folder, 1, {ckpt::mpi::sliced(slices), ckpt::of_params(s.b, "b")}, {{"run", "a"}},
                  {.digest = false});
  ckpt::mpi::save(MPI_COMM_WORLD, folder, 2, {ckpt::mpi::sliced(slices), ckpt::of_params(s.b, "b")}, {{"run", "a"}},
                  {.digest = true});
  if (rank == 0) {
    CHECK_EQ(listing(ckpt::mpi::detail::step_folder(folder, 1)),
             (std::vector<std::string>{"model-00001-of-00001.safetensors", "model.safetensors.index.json"}));
    const fs::path reference = folder / "reference.safetensors";
    ckpt::save(reference, whole_tensors().with_metadata({{"run", "a"}, {"step", "1"}}), {.digest = false});
    CHECK(file_bytes(shard_of(folder, 1)) == file_bytes(reference));
    // With the digest: the same tensors and the digest of the spec.
    const std::string digest = spec_digest(file_bytes(shard_of(folder, 2)));
    const ckpt::checkpoint t = ckpt::load(ckpt::mpi::detail::step_folder(folder, 2), {.verify_digest = true});
    CHECK(same(t, whole_tensors()));
    CHECK_EQ(t.metadata().at("run"), std::string("a"));
    // A sharded load keeps the metadata the shards share; each shard's digest stays in its file.
    CHECK(!t.metadata().contains("ckpt.xxh3_64_file"));
    const ckpt::checkpoint shard = ckpt::load(shard_of(folder, 2), {.verify_digest = true});
    CHECK_EQ(shard.metadata().at("ckpt.xxh3_64_file"), digest);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Reads this rank's part of a split over `comm` out of the step saved by the whole job, and
// checks the values.
void check_resliced(MPI_Comm comm, const fs::path& folder, std::int64_t step) {
  const int rank = rank_of(comm), size = size_of(comm);
  const ckpt::checkpoint t = ckpt::mpi::load(comm, folder, step, {.verify_digest = true});
  const Eigen::Index w_first = part_begin(w_rows, rank, size);
  Eigen::MatrixXf w(part_begin(w_rows, rank + 1, size) - w_first, w_cols);
  ckpt::mpi::read_rows(t, "w", w_first, w);
  for (Eigen::Index i = 0; i < w.rows(); ++i)
    for (Eigen::Index j = 0; j < w_cols; ++j) CHECK_EQ(w(i, j), w_at(w_first + i, j));
  // "big" as rows of its only dimension, "mu" flat into a matrix's C-order elements.
  const Eigen::Index big_first = part_begin(big_size, rank, size);
  Eigen::VectorXf big(part_begin(big_size, rank + 1, size) - big_first);
  ckpt::mpi::read_rows(t, "big", big_first, big);
  for (Eigen::Index k = 0; k < big.size(); ++k) CHECK_EQ(big[k], big_at(big_first + k));
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> mu(5, 20);
  const Eigen::Index mu_first = 100 * (rank + 1);
  ckpt::mpi::read_flat(t, "mu", mu_first, mu);
  for (Eigen::Index k = 0; k < mu.size(); ++k) CHECK_EQ(mu.data()[k], mu_at(mu_first + k));
  Eigen::VectorXd b(5);
  ckpt::mpi::read_flat(t, "b", 0, b);
  CHECK(b == Eigen::VectorXd::LinSpaced(5, 1.0, 5.0));
}

void loads_as_other_slices(const fs::path& folder) {
  const int rank = rank_of(MPI_COMM_WORLD), size = size_of(MPI_COMM_WORLD);
  const rank_state s = pieces_of(rank, size);
  ckpt::mpi::save(MPI_COMM_WORLD, folder, 7, {ckpt::mpi::sliced(slices_of(s)), ckpt::of_params(s.b, "b")});
  // The job's first 3, 2 and 1 ranks read the step as their own splits.
  for (const int ranks : {3, 2, 1}) {
    MPI_Comm sub = MPI_COMM_NULL;
    MPI_Comm_split(MPI_COMM_WORLD, rank < ranks ? 0 : MPI_UNDEFINED, rank, &sub);
    if (sub != MPI_COMM_NULL) {
      check_resliced(sub, folder, 7);
      MPI_Comm_free(&sub);
    }
  }
  // Out-of-range and mismatched reads are refused.
  const ckpt::checkpoint t = ckpt::load(ckpt::mpi::detail::step_folder(folder, 7));
  Eigen::VectorXf ten(10);
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::read_flat(t, "mu", 995, ten)),
           std::string("ckpt: mpi::read_flat: elements [995, 1005) of 'mu' are outside its 1000 elements"));
  Eigen::VectorXd ten_doubles(10);
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::read_flat(t, "mu", 0, ten_doubles)),
           std::string("ckpt: mpi::read_flat: the entry 'mu' is F32 [1000], not F64"));
  Eigen::MatrixXf wrong(2, 6);
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::read_rows(t, "w", 0, wrong)),
           std::string("ckpt: mpi::read_rows: a block of rows of 'w' [13, 7] cannot have the shape [2, 6]"));
}

// Each refusal is the same std::invalid_argument on every rank, and nothing is written.
void refuses(const fs::path& folder, const std::vector<ckpt::mpi::slice>& slices, const std::string& message) {
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::save(MPI_COMM_WORLD, folder, 3, {ckpt::mpi::sliced(slices)})), message);
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 3)));
}

void overlapping_gapped_or_disagreeing_slices_are_refused_on_every_rank_writing_nothing(const fs::path& folder) {
  const int rank = rank_of(MPI_COMM_WORLD), size = size_of(MPI_COMM_WORLD);
  const int last = size - 1;
  const std::string prefix = "ckpt: mpi::save of step 3: ";
  Eigen::VectorXf ten = Eigen::VectorXf::Zero(10);
  Eigen::VectorXd ten_doubles = Eigen::VectorXd::Zero(10);
  // Every rank holds elements [10 r, 10 r + 10) of v [10 P], but the last rank starts 2 early
  // (at 1 rank, two pieces of rank 0 overlap).
  if (size == 1)
    refuses(folder, {ckpt::mpi::slice::flat("v", {18}, 0, ten), ckpt::mpi::slice::flat("v", {18}, 8, ten)},
            prefix + "the slices of 'v' overlap: rank 0 holds elements [0, 10) and rank 0 [8, 18)");
  else
    refuses(folder, {ckpt::mpi::slice::flat("v", {10 * size}, rank == last ? 10 * rank - 2 : 10 * rank, ten)},
            prefix + "the slices of 'v' overlap: rank " + std::to_string(last - 1) + " holds elements [" +
                std::to_string(10 * last - 10) + ", " + std::to_string(10 * last) + ") and rank " +
                std::to_string(last) + " [" + std::to_string(10 * last - 2) + ", " + std::to_string(10 * last + 8) + ")");
  // The global tensor is one element longer than the pieces.
  refuses(folder, {ckpt::mpi::slice::flat("v", {10 * size + 1}, 10 * rank, ten)},
          prefix + "the slices of 'v' leave elements [" + std::to_string(10 * size) + ", " + std::to_string(10 * size + 1) +
              ") out, after rank " + std::to_string(last) + "'s [" + std::to_string(10 * last) + ", " +
              std::to_string(10 * size) + ")");
  // A gap in front of rank 0's piece; and at 1 rank, between two pieces of one rank.
  if (size == 1)
    refuses(folder, {ckpt::mpi::slice::flat("v", {30}, 0, ten), ckpt::mpi::slice::flat("v", {30}, 20, ten)},
            prefix + "the slices of 'v' leave elements [10, 20) out, between rank 0's [0, 10) and rank 0's [20, 30)");
  refuses(folder, {ckpt::mpi::slice::flat("v", {10 * size + 3}, 10 * rank + 3, ten)},
          prefix + "the slices of 'v' leave elements [0, 3) out, before rank 0's [3, 13)");
  if (size > 1) {
    // The last rank's piece is F64, or declares another global shape.
    std::vector<ckpt::mpi::slice> mixed;
    if (rank == last) mixed.push_back(ckpt::mpi::slice::flat("v", {10 * size}, 10 * rank, ten_doubles));
    else mixed.push_back(ckpt::mpi::slice::flat("v", {10 * size}, 10 * rank, ten));
    refuses(folder, mixed,
            prefix + "the entry 'v' is F32 [" + std::to_string(10 * size) + "] on rank 0 but F64 [" +
                std::to_string(10 * size) + "] on rank " + std::to_string(last));
    const std::int64_t other = rank == last ? 10 * size + 10 : 10 * size;
    refuses(folder, {ckpt::mpi::slice::flat("v", {other}, 10 * rank, ten)},
            prefix + "the entry 'v' is F32 [" + std::to_string(10 * size) + "] on rank 0 but F32 [" +
                std::to_string(10 * size + 10) + "] on rank " + std::to_string(last));
    // Held whole by rank 0 and in part by the others.
    std::vector<ckpt::mpi::slice> parts;
    if (rank != 0) parts.push_back(ckpt::mpi::slice::flat("v", {10}, 0, ten));
    const ckpt::checkpoint whole = rank == 0 ? ckpt::of_params(ten, "v") : ckpt::checkpoint();
    CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::save(MPI_COMM_WORLD, folder, 3, {ckpt::mpi::sliced(parts), whole})),
             prefix + "the entry 'v' is held whole by rank 0 and in part by rank 1 (elements [0, 10))");
  }
  // Local misuse, refused when the slice is made.
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, static_cast<void>(ckpt::mpi::slice::flat("v", {5}, 0, ten))),
           std::string("ckpt: mpi::slice::flat: elements [0, 10) of 'v' are outside its 5 elements"));
  Eigen::MatrixXf block(2, 3);
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, static_cast<void>(ckpt::mpi::slice::rows("m", {4, 4}, 0, block))),
           std::string("ckpt: mpi::slice::rows: a block of rows of 'm' [4, 4] cannot have the shape [2, 3]"));
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, static_cast<void>(ckpt::mpi::slice::rows("m", {4, 3}, 3, block))),
           std::string("ckpt: mpi::slice::rows: rows [3, 5) of 'm' are outside its 4 rows"));
}

// Steps of slices through the MPI checkpoint manager: save_async copies the slices before it
// returns (the leaves change right after each call), also when a rank holds two slices of one
// tensor; the retention rules apply; each step loads as the whole tensors of its call; a
// synchronous save too. (Run with MPI_THREAD_MULTIPLE, the manager's thread writes the slices;
// without, save_async writes them before returning.)
void manager_saves_slices(const fs::path& folder) {
  const int rank = rank_of(MPI_COMM_WORLD), size = size_of(MPI_COMM_WORLD);
  rank_state s = pieces_of(rank, size);
  // This rank's range of "big" as two slices.
  const Eigen::Index half = s.big.size() / 2;
  Eigen::VectorXf big_head = s.big.head(half), big_tail = s.big.tail(s.big.size() - half);
  const std::vector<ckpt::mpi::slice> slices{
      ckpt::mpi::slice::rows("w", {w_rows, w_cols}, s.w_first, s.w),
      ckpt::mpi::slice::flat("mu", {mu_size}, s.mu_first, s.mu),
      ckpt::mpi::slice::flat("big", {big_size}, s.big_first, big_head),
      ckpt::mpi::slice::flat("big", {big_size}, s.big_first + half, big_tail)};
  const fs::path run = folder / "run";
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, run, {.max_to_keep = 2});
    for (std::int64_t step = 1; step <= 3; ++step) {
      CHECK(manager.save_async(step, {ckpt::mpi::sliced(slices), ckpt::of_params(s.b, "b")}, {{"run", "a"}}));
      // Step k holds the values plus k - 1, whatever the leaves hold by the time it is written.
      for (Eigen::VectorXf* v : {&s.mu, &big_head, &big_tail}) v->array() += 1.0f;
      s.w.array() += 1.0f;
    }
    CHECK(manager.save(4, {ckpt::mpi::sliced(slices), ckpt::of_params(s.b, "b")}));
    CHECK(manager.steps() == (std::vector<std::int64_t>{3, 4}));
    CHECK(same(manager.load(3), whole_tensors(2.0f)));
  }
  ckpt::mpi::checkpoint_manager reopened(MPI_COMM_WORLD, run, {.max_to_keep = 2});
  CHECK(reopened.steps() == (std::vector<std::int64_t>{3, 4}));
  const ckpt::mpi::checkpoint_manager::latest latest = reopened.load_latest();
  CHECK(latest && latest.step == 4);
  CHECK(same(*latest, whole_tensors(3.0f)));
  CHECK_EQ(latest->metadata().at("step"), std::string("4"));
  if (rank == 0) {
    CHECK(!fs::exists(ckpt::mpi::detail::step_folder(run, 2)));
    CHECK_EQ(listing(ckpt::mpi::detail::step_folder(run, 3)),
             (std::vector<std::string>{"model-00001-of-00001.safetensors", "model.safetensors.index.json"}));
    CHECK(same(ckpt::load(ckpt::mpi::detail::step_folder(run, 3), {.verify_digest = true}), whole_tensors(2.0f)));
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Slices go where every rank writes together: every single-process save refuses them (naming
// the entry); nothing is written.
void slices_are_refused_where_they_cannot_go(const fs::path& folder) {
  const int rank = rank_of(MPI_COMM_WORLD), size = size_of(MPI_COMM_WORLD);
  const rank_state s = pieces_of(rank, size);
  const std::vector<ckpt::mpi::slice> slices = slices_of(s);
  const std::string refusal = "' is a slice of a global tensor (ckpt::mpi::sliced); slices are saved by all the ranks "
                              "together, with ckpt::mpi::save or a ckpt::mpi::checkpoint_manager";
  const fs::path own = folder / ("rank-" + std::to_string(rank));
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::save(own / "one.safetensors", {ckpt::mpi::sliced(slices)})),
           "ckpt: save: 'w" + refusal);
  ckpt::checkpoint_manager alone(own / "run");
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, alone.save(1, {ckpt::mpi::sliced(slices)})), "ckpt: save: 'w" + refusal);
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, alone.save_async(1, {ckpt::mpi::sliced(slices)})),
           "ckpt: snapshot: 'w" + refusal);
  alone.wait();
  CHECK(alone.steps().empty());
  CHECK(!fs::exists(own / "one.safetensors"));
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  return run_all(argc, argv, "test_mpi_sliced",
                 {{"saved_file_is_saves_file", saved_file_is_saves_file},
                  {"loads_as_other_slices", loads_as_other_slices},
                  {"overlapping_gapped_or_disagreeing_slices_are_refused_on_every_rank_writing_nothing", overlapping_gapped_or_disagreeing_slices_are_refused_on_every_rank_writing_nothing},
                  {"manager_saves_slices", manager_saves_slices},
                  {"slices_are_refused_where_they_cannot_go", slices_are_refused_where_they_cannot_go}});
}
