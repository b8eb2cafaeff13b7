// ckpt::mpi::save and load, run by mpirun at 1, 2 and 4 ranks: the collective save and load, the
// files and index it writes, deduplication of replicated entries, refusals that every rank
// raises alike, restores on another number of ranks than the save's, the files read back by the
// single-process ckpt::load, and digests verified once per shard.

#include "mpi_test.hpp"

#include <ckpt/file.hpp>
#include <ckpt/mpi.hpp>
#include <ckpt/params.hpp>
#include <ckpt/sharded.hpp>

#include "mpi/step.hpp"  // the step folders' layout (src/): step_folder, index_file_name

#include <Eigen/Core>

#include <fstream>
#include <set>

namespace {

using namespace ckpt_mpi_test;
namespace fs = std::filesystem;

struct layer {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};

constexpr int layer_count = 8;

// Layer i's values, which any rank can compute: shapes and contents differ from layer to layer.
layer make_layer(int i) {
  layer l{Eigen::MatrixXf(3 + i % 2, 4), Eigen::VectorXf(3 + i % 2)};
  for (Eigen::Index k = 0; k < l.w.size(); ++k) l.w.data()[k] = static_cast<float>(100 * i) + static_cast<float>(k) * 0.5f;
  for (Eigen::Index k = 0; k < l.b.size(); ++k) l.b.data()[k] = -static_cast<float>(i) - static_cast<float>(k);
  return l;
}

layer zeros_like_layer(int i) {
  return {Eigen::MatrixXf::Zero(3 + i % 2, 4), Eigen::VectorXf::Zero(3 + i % 2)};
}

std::string layer_prefix(int i) { return "layers." + std::to_string(i); }

// The layers that rank `rank` of `size` owns: i with i mod size == rank (model parallelism).
ckpt::checkpoint owned_layers(int rank, int size) {
  std::vector<ckpt::checkpoint> parts;
  for (int i = rank; i < layer_count; i += size) parts.push_back(ckpt::of_params(make_layer(i), layer_prefix(i)));
  return ckpt::concat(parts);
}

// Checks that `t` holds the layers `rank` of `size` owns, extracted as a trainer would.
void check_owned_layers(const ckpt::checkpoint& t, int rank, int size) {
  for (int i = rank; i < layer_count; i += size) {
    const layer got = ckpt::to_params(t, zeros_like_layer(i), {.prefix = layer_prefix(i)});
    const layer want = make_layer(i);
    CHECK(got.w == want.w);
    CHECK(got.b == want.b);
  }
}

std::string shard(int k, int count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k, count);
  return name;
}

ckpt::tensor f32(ckpt::dims shape, float first) {
  std::vector<float> values(static_cast<std::size_t>(ckpt::detail::numel_of(shape)));
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = first + static_cast<float>(k);
  return ckpt::tensor::copy_of(ckpt::dtype::f32, std::move(shape), std::as_bytes(std::span(values)));
}

void each_rank_writes_its_own_shard_and_every_rank_loads_the_whole_step(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  // What this rank holds, as sections built at run time: its layers, written from where they live,
  // and a counter every rank holds.
  std::vector<layer> layers;
  for (int i = 0; i < layer_count; ++i) layers.push_back(make_layer(i));
  std::vector<ckpt::section> local;
  for (int i = rank; i < layer_count; i += size) local.emplace_back(layers[static_cast<std::size_t>(i)], layer_prefix(i));
  local.emplace_back(ckpt::of_int("epoch", 7));
  const fs::path dir = ckpt::mpi::save(comm, folder, 10, local, {{"who", "rank " + std::to_string(rank)}, {"run", "a"}},
                                       {.digest = true});
  CHECK_EQ(dir, folder / "step-0000000010");
  CHECK_EQ(ckpt::mpi::detail::step_folder(folder, 10), dir);

  // One shard per rank (each owns layers), the index, nothing else (no temporaries).
  std::vector<std::string> expected{std::string(ckpt::mpi::detail::index_file_name)};
  for (int k = 1; k <= size; ++k) expected.push_back(shard(k, size));
  std::ranges::sort(expected);
  CHECK_EQ(listing(dir), expected);
  CHECK_EQ(committed_steps(folder), std::vector<std::int64_t>{10});

  // Shard k holds exactly what rank k-1 wrote; `epoch`, held by all, only in rank 0's shard.
  for (int k = 1; k <= size; ++k) {
    const ckpt::checkpoint part = ckpt::load(dir / shard(k, size));
    const ckpt::checkpoint want = k == 1 ? ckpt::concat({owned_layers(0, size), ckpt::of_int("epoch", 7)})
                                         : owned_layers(k - 1, size);
    CHECK(same(part, want));
    // Every shard carries rank 0's metadata (its own, then the options', then the step) and its digest.
    CHECK_EQ(part.metadata().at("who"), std::string("rank 0"));
    CHECK_EQ(part.metadata().at("run"), std::string("a"));
    CHECK_EQ(part.metadata().at("step"), std::string("10"));
    CHECK(part.metadata().contains("ckpt.xxh3_64_file"));
    CHECK_EQ(part.metadata().at("format"), std::string("pt"));  // what every save writes
  }

  // Every rank sees the whole step and takes what it owns; the metadata come back, the per-file
  // digest does not (it describes one shard, not the step).
  const ckpt::checkpoint t = ckpt::mpi::load(comm, folder, 10);
  check_owned_layers(t, rank, size);
  CHECK_EQ(ckpt::to_int("epoch", t), 7);
  CHECK_EQ(t.size(), static_cast<std::size_t>(2 * layer_count + 1));
  CHECK((t.metadata() == ckpt::metadata_map{{"who", "rank 0"}, {"run", "a"}, {"step", "10"}, {"format", "pt"}}));

  // The single-process reader of sharded checkpoints reads the same, by index or by folder.
  CHECK(same(ckpt::load(dir / ckpt::mpi::detail::index_file_name), t));
  CHECK(same(ckpt::load(dir), t));
  const ckpt::checkpoint all_layers = ckpt::concat({owned_layers(0, 1), ckpt::of_int("epoch", 7)});
  CHECK(same(t, all_layers));
}

void replicated_entries_written_once(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  // Data parallelism: everyone holds the same model; each rank also has a counter of its own.
  const ckpt::checkpoint replicated = ckpt::concat({ckpt::of_tensor("model.w", f32({2, 3}, 1)),
                                                    ckpt::of_tensor("model.b", f32({3}, 10)), ckpt::of_int("step", 5)});
  ckpt::mpi::save(comm, folder, 1, {replicated});
  CHECK_EQ(listing(ckpt::mpi::detail::step_folder(folder, 1)),
           (std::vector<std::string>{"model-00001-of-00001.safetensors", std::string(ckpt::mpi::detail::index_file_name)}));
  CHECK(same(ckpt::load(ckpt::mpi::detail::step_folder(folder, 1) / shard(1, 1)), replicated));

  const ckpt::checkpoint mixed =
      ckpt::concat({replicated, ckpt::of_int("own." + std::to_string(rank), rank)});
  ckpt::mpi::save(comm, folder, 2, {mixed});
  const fs::path dir = ckpt::mpi::detail::step_folder(folder, 2);
  for (int k = 1; k <= size; ++k) {
    const ckpt::checkpoint part = ckpt::load(dir / shard(k, size));
    const ckpt::checkpoint own = ckpt::of_int("own." + std::to_string(k - 1), k - 1);
    CHECK(same(part, k == 1 ? ckpt::concat({replicated, own}) : own));
  }
  const ckpt::checkpoint t = ckpt::mpi::load(comm, folder, 2);
  CHECK_EQ(t.size(), static_cast<std::size_t>(3 + size));
  for (int r = 0; r < size; ++r) CHECK_EQ(ckpt::to_int("own." + std::to_string(r), t), r);
}

void disagreeing_ranks_or_a_negative_step_are_refused_on_every_rank_writing_nothing(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  const int last = size - 1;

  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::save(comm, folder, -1, {ckpt::of_int("x", 1)})),
           std::string("ckpt: mpi: negative step -1"));
  CHECK(!fs::exists(folder));

  // One rank cannot disagree with itself.
  if (size == 1) return;
  // The last rank disagrees on the shape, then on the dtype, of a replicated entry.
  const bool odd = rank == last;
  const ckpt::checkpoint shaped = ckpt::of_tensor("model.w", odd ? f32({3, 2}, 0) : f32({2, 3}, 0));
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::save(comm, folder, 3, {shaped})),
           "ckpt: mpi::save of step 3: the entry 'model.w' is F32 [2, 3] on rank 0 but F32 [3, 2] on rank " +
               std::to_string(last));
  const std::vector<int> ones(6, 1);
  const ckpt::tensor i32 = ckpt::tensor::copy_of(ckpt::dtype::i32, {2, 3}, std::as_bytes(std::span(ones)));
  const ckpt::checkpoint typed = ckpt::of_tensor("model.w", odd ? i32 : f32({2, 3}, 0));
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::save(comm, folder, 3, {typed})),
           "ckpt: mpi::save of step 3: the entry 'model.w' is F32 [2, 3] on rank 0 but I32 [2, 3] on rank " +
               std::to_string(last));
  // Nothing was written, not even the step's folder.
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 3)));
  // The ranks disagree on the step.
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::save(comm, folder, rank == last ? 4 : 3, {ckpt::of_int("x", 1)})),
           "ckpt: mpi::save: the ranks disagree on the step: rank 0 saves step 3, rank " + std::to_string(last) +
               " step 4");
  CHECK(committed_steps(folder).empty());
}

void committed_steps_are_never_rewritten(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const ckpt::checkpoint first = ckpt::of_tensor("w", f32({4}, 1));
  ckpt::mpi::save(comm, folder, 3, {first});
  const fs::path index = ckpt::mpi::detail::step_folder(folder, 3) / ckpt::mpi::detail::index_file_name;
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::save(comm, folder, 3, {ckpt::of_tensor("w", f32({4}, 2))})),
           "ckpt: mpi::save: step 3 is already committed in '" + folder.string() + "' ('" + index.string() +
               "' exists); a committed step is never rewritten");
  CHECK(same(ckpt::mpi::load(comm, folder, 3), first));
}

void steps_without_index_do_not_exist(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int size = size_of(comm);
  ckpt::mpi::save(comm, folder, 4, {ckpt::of_int("x", 4)});
  // Debris of a job that crashed before its commit: shards of step 9, no index.
  const fs::path debris = ckpt::mpi::detail::step_folder(folder, 9);
  MPI_Barrier(comm);
  if (rank_of(comm) == 0) {
    fs::create_directories(debris);
    ckpt::save(debris / shard(1, 3), ckpt::of_int("x", 9));
    ckpt::save(debris / shard(3, 3), ckpt::of_int("stale", 9));
  }
  MPI_Barrier(comm);
  CHECK_EQ(committed_steps(folder), std::vector<std::int64_t>{4});
  const fs::path index = debris / ckpt::mpi::detail::index_file_name;
  const std::string cause = "ckpt: mpi::load: step 9 is not committed in '" + folder.string() + "' (there is no '" +
                            index.string() + "')";
  const std::string message = MESSAGE_OF(ckpt::mpi::collective_error, static_cast<void>(ckpt::mpi::load(comm, folder, 9)));
  CHECK_EQ(message, "ckpt: mpi::load of step 9 in '" + folder.string() + "' failed on rank 0 of " +
                        std::to_string(size) + ": " + cause);

  // Saving the step again replaces the debris: the stale shard the new index does not name goes.
  ckpt::mpi::save(comm, folder, 9, {ckpt::of_int("x", 90)});
  std::vector<std::string> expected{std::string(ckpt::mpi::detail::index_file_name), shard(1, 1)};
  std::ranges::sort(expected);
  CHECK_EQ(listing(debris), expected);
  CHECK_EQ(ckpt::to_int("x", ckpt::mpi::load(comm, folder, 9)), 90);
}

// Saved on `from` ranks, loaded on `to` ranks: every rank of the loading group finds its new part.
void reshard(const fs::path& folder, int from, int to) {
  const int rank = rank_of(MPI_COMM_WORLD);
  MPI_Comm savers = MPI_COMM_NULL;
  MPI_Comm loaders = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < from ? 0 : MPI_UNDEFINED, rank, &savers);
  MPI_Comm_split(MPI_COMM_WORLD, rank < to ? 0 : MPI_UNDEFINED, rank, &loaders);
  const std::int64_t step = 100 * from + to;
  if (savers != MPI_COMM_NULL) {
    ckpt::mpi::save(savers, folder, step, {owned_layers(rank, from)});
    MPI_Comm_free(&savers);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (loaders != MPI_COMM_NULL) {
    const ckpt::checkpoint t = ckpt::mpi::load(loaders, folder, step);
    check_owned_layers(t, rank, to);
    MPI_Comm_free(&loaders);
  }
}

void a_step_saved_on_some_ranks_loads_on_any_other_number_of_ranks(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  for (int from = 1; from <= size; from *= 2)
    for (int to = 1; to <= size; to *= 2) reshard(folder, from, to);
}

void digests_checked_once_per_shard(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  ckpt::mpi::save(comm, folder, 5, {owned_layers(rank, size)}, {}, {.digest = true});
  // Flip one byte of the last shard's data: the rank that verifies that shard reports it.
  const fs::path last = ckpt::mpi::detail::step_folder(folder, 5) / shard(size, size);
  MPI_Barrier(comm);
  if (rank == 0) {
    std::fstream file(last, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-1, std::ios::end);
    const char byte = static_cast<char>(file.get() ^ 0x40);
    file.seekp(-1, std::ios::end);
    file.put(byte);
  }
  MPI_Barrier(comm);
  const int verifier = (size - 1) % size;
  std::string message;
  try {
    static_cast<void>(ckpt::mpi::load(comm, folder, 5));
    fail(__FILE__, __LINE__, "no exception was thrown");
  } catch (const ckpt::mpi::collective_error& e) {
    message = e.what();
    CHECK_EQ(e.rank(), verifier);
    // Where the failure happened, the original exception is nested.
    bool nested_integrity_error = false;
    try {
      std::rethrow_if_nested(e);
    } catch (const ckpt::integrity_error&) {
      nested_integrity_error = true;
    }
    CHECK_EQ(nested_integrity_error, rank == verifier);
  }
  const std::string head = "ckpt: mpi::load of step 5 in '" + folder.string() + "' failed on rank " +
                           std::to_string(verifier) + " of " + std::to_string(size) + ": ckpt: '" + last.string() +
                           "' is corrupted: its bytes hash to ";
  CHECK_EQ(message.substr(0, head.size()), head);
  // Without verification the step maps, and the other shards' entries are intact.
  const ckpt::checkpoint t = ckpt::mpi::load(comm, folder, 5, {.verify_digest = false});
  if (rank != size - 1) check_owned_layers(t, rank, size);
}

void checkpoint_sections_bring_their_metadata(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  // Rank 0's metadata are the step's, made as ckpt::save of sections makes them: its checkpoint
  // sections', the call's over them, then the step over both.
  const ckpt::checkpoint mine = ckpt::of_int("own." + std::to_string(rank), rank)
                                    .with_metadata({{"lr", "0.1"}, {"rank", std::to_string(rank)}, {"step", "99"}});
  ckpt::mpi::save(comm, folder, 1, {mine}, {{"lr", "0.2"}});
  const ckpt::checkpoint t = ckpt::mpi::load(comm, folder, 1);
  CHECK_EQ(t.metadata().at("lr"), std::string("0.2"));
  CHECK_EQ(t.metadata().at("rank"), std::string("0"));
  CHECK_EQ(t.metadata().at("step"), std::string("1"));
  // The digest by default; the options alone, as ckpt::save of sections takes them.
  const fs::path first = ckpt::mpi::detail::step_folder(folder, 1) / shard(rank + 1, size);
  CHECK(ckpt::load(first).metadata().contains("ckpt.xxh3_64_file"));
  ckpt::mpi::save(comm, folder, 2, {mine}, {.digest = false});
  const fs::path second = ckpt::mpi::detail::step_folder(folder, 2) / shard(rank + 1, size);
  CHECK(!ckpt::load(second).metadata().contains("ckpt.xxh3_64_file"));
  CHECK_EQ(ckpt::load(second).metadata().at("lr"), std::string("0.1"));
  // Two checkpoint sections that disagree on the last rank only: every rank throws, naming it,
  // and nothing is written.
  const ckpt::checkpoint other =
      ckpt::of_int("other." + std::to_string(rank), 1).with_metadata({{"lr", rank == size - 1 ? "0.3" : "0.1"}});
  try {
    ckpt::mpi::save(comm, folder, 3, {mine, other});
    CHECK(false);
  } catch (const ckpt::mpi::collective_error& e) {
    CHECK_EQ(e.rank(), size - 1);
    CHECK_EQ(e.cause(), std::string("ckpt: mpi::save: metadata key 'lr' has two different values ('0.1' and '0.3') in "
                                    "the checkpoint sections"));
  }
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 3)));
}

}  // namespace

int main(int argc, char** argv) {
  return run_all(argc, argv, "test_mpi_save",
                 {{"each_rank_writes_its_own_shard_and_every_rank_loads_the_whole_step", each_rank_writes_its_own_shard_and_every_rank_loads_the_whole_step},
                  {"replicated_entries_written_once", replicated_entries_written_once},
                  {"disagreeing_ranks_or_a_negative_step_are_refused_on_every_rank_writing_nothing", disagreeing_ranks_or_a_negative_step_are_refused_on_every_rank_writing_nothing},
                  {"committed_steps_are_never_rewritten", committed_steps_are_never_rewritten},
                  {"steps_without_index_do_not_exist", steps_without_index_do_not_exist},
                  {"a_step_saved_on_some_ranks_loads_on_any_other_number_of_ranks", a_step_saved_on_some_ranks_loads_on_any_other_number_of_ranks},
                  {"digests_checked_once_per_shard", digests_checked_once_per_shard},
                  {"checkpoint_sections_bring_their_metadata", checkpoint_sections_bring_their_metadata}});
}
