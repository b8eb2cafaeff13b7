// ckpt::mpi::checkpoint_manager at 1, 2 and 4 ranks: the retention rules keep exactly what the
// single-process manager keeps for the same saves, keep-best uses rank 0's metric and survives a
// reopen, arguments are refused on every rank alike, opening removes uncommitted step folders
// and finishes an interrupted retention, a second manager on the folder is refused, and
// save_async (one background write per rank) commits at the next call under the rules of save;
// read-only managers, MPI and single-process, open a folder being written; an MPI manager moved
// into a ckpt::checkpoint_manager stays collective.

#include "mpi_test.hpp"

#include <ckpt/manager.hpp>
#include <ckpt/mpi.hpp>

#include "../direct_writes.hpp"  // the writes of a background save, seen
#include "mpi/step.hpp"  // the step folders' layout (src/): step_folder, index_file_name

#include <Eigen/Core>

#include <cstdint>
#include <memory>
#include <type_traits>

namespace {

// Both managers have the same members, member types and rules: the MPI manager is a
// ckpt::checkpoint_manager, which declares them all, and adds only its constructor. Moving one
// into a ckpt::checkpoint_manager is allowed (it stays the MPI manager: a_moved_mpi_manager_stays_collective),
// and so is deleting one through a ckpt::checkpoint_manager*.
static_assert(std::is_base_of_v<ckpt::checkpoint_manager, ckpt::mpi::checkpoint_manager>);
static_assert(std::is_convertible_v<ckpt::mpi::checkpoint_manager*, ckpt::checkpoint_manager*>);  // publicly
static_assert(sizeof(ckpt::mpi::checkpoint_manager) == sizeof(ckpt::checkpoint_manager));  // no state of its own
static_assert(std::has_virtual_destructor_v<ckpt::checkpoint_manager>);
static_assert(std::is_nothrow_constructible_v<ckpt::checkpoint_manager, ckpt::mpi::checkpoint_manager&&>);
static_assert(std::is_nothrow_assignable_v<ckpt::checkpoint_manager&, ckpt::mpi::checkpoint_manager&&>);
static_assert(std::is_nothrow_move_constructible_v<ckpt::mpi::checkpoint_manager>);
static_assert(!std::is_copy_constructible_v<ckpt::mpi::checkpoint_manager>);
static_assert(std::is_same_v<ckpt::mpi::checkpoint_manager::options, ckpt::checkpoint_manager::options>);
static_assert(std::is_same_v<ckpt::mpi::checkpoint_manager::latest, ckpt::checkpoint_manager::latest>);
static_assert(std::is_same_v<ckpt::mpi::checkpoint_manager::step_status, ckpt::checkpoint_manager::step_status>);
static_assert(std::is_same_v<ckpt::mpi::checkpoint_manager::step_state, ckpt::checkpoint_manager::step_state>);
static_assert(std::is_same_v<ckpt::mpi::checkpoint_manager::metric_mode, ckpt::checkpoint_manager::metric_mode>);

using namespace ckpt_mpi_test;
namespace fs = std::filesystem;

// What rank `rank` holds at `step`: a part of its own and a replicated counter.
ckpt::checkpoint state_of(int rank, std::int64_t step) {
  return ckpt::concat({ckpt::of_int("part." + std::to_string(rank), static_cast<int>(step * 10 + rank)),
                       ckpt::of_int("step", static_cast<int>(step))});
}

// The steps the single-process manager keeps for the same saves (rank 0 runs it in a folder of
// its own): the reference the MPI manager must match.
std::vector<std::int64_t> single_process_steps(const fs::path& folder, const ckpt::checkpoint_manager::options& options,
                                               const std::vector<std::pair<std::int64_t, ckpt::metadata_map>>& saves) {
  ckpt::checkpoint_manager reference(folder, options);
  for (const auto& [step, metadata] : saves) reference.save(step, {ckpt::of_int("step", static_cast<int>(step))}, metadata);
  return reference.steps();
}

std::vector<std::string> step_folders(const std::vector<std::int64_t>& steps) {
  std::vector<std::string> names;
  for (std::int64_t step : steps) names.push_back(ckpt::mpi::detail::step_folder("", step).filename().string());
  return names;
}

void retention_matches_the_single_process_manager(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const ckpt::mpi::checkpoint_manager::options options{.max_to_keep = 2, .keep_every_n_steps = 4};
  std::vector<std::pair<std::int64_t, ckpt::metadata_map>> saves;
  {
    ckpt::mpi::checkpoint_manager manager(comm, folder / "mpi", options);
    CHECK(manager.steps().empty());
    CHECK(!manager.latest_step());
    CHECK(!manager.load_latest());
    for (std::int64_t step = 1; step <= 9; ++step) {
      CHECK(manager.save(step, {state_of(rank, step)}));
      saves.emplace_back(step, ckpt::metadata_map{});
    }
    CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{4, 8, 9}));
    CHECK_EQ(manager.steps(), committed_steps(folder / "mpi"));
    std::vector<std::string> expected = step_folders(manager.steps());
    expected.push_back(".ckpt-manager.lock");
    expected.push_back(".ckpt-run-id");  // the run's id, made by its first writing open
    std::ranges::sort(expected);
    CHECK_EQ(listing(folder / "mpi"), expected);
    CHECK_EQ(manager.latest_step(), std::optional<std::int64_t>(9));
    const ckpt::mpi::checkpoint_manager::latest latest = manager.load_latest();
    CHECK(latest.has_value());
    CHECK_EQ(ckpt::to_int("part." + std::to_string(rank), *latest), 90 + rank);
    CHECK_EQ(latest->metadata().at("step"), std::string("9"));
    // Without tiers, every shard is read from the folder: one row each, in name order.
    const int size = size_of(comm);
    CHECK_EQ(latest.sources.size(), static_cast<std::size_t>(size));
    for (std::size_t k = 0; k < latest.sources.size(); ++k) {
      char shard[64];
      std::snprintf(shard, sizeof shard, "model-%05zu-of-%05d.safetensors", k + 1, size);
      CHECK_EQ(latest.sources[k].file, std::string(shard));
      CHECK(latest.sources[k].from == ckpt::checkpoint_manager::tier::folder);
    }
    CHECK(latest->metadata().contains("wall_time"));
    CHECK_EQ(ckpt::to_int("step", manager.load(4)), 4);
  }
  if (rank == 0) CHECK_EQ(committed_steps(folder / "mpi"), single_process_steps(folder / "single", options, saves));
}

void keep_best_uses_rank_0s_metric(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const ckpt::mpi::checkpoint_manager::options options{.max_to_keep = 1, .keep_best = 1, .best_metric = "val_loss"};
  const std::vector<std::string> losses{"0.5", "0.2", "0.9", "0.7", "0.8"};
  std::vector<std::pair<std::int64_t, ckpt::metadata_map>> saves;
  // Other ranks pass another value: rank 0's is the step's.
  auto metadata_of = [&](std::int64_t step) {
    return ckpt::metadata_map{{"val_loss", rank == 0 ? losses[static_cast<std::size_t>(step - 1)] : "0.0"}};
  };
  {
    ckpt::mpi::checkpoint_manager manager(comm, folder / "mpi", options);
    for (std::int64_t step = 1; step <= 4; ++step) {
      manager.save(step, {state_of(rank, step)}, metadata_of(step));
      saves.emplace_back(step, ckpt::metadata_map{{"val_loss", losses[static_cast<std::size_t>(step - 1)]}});
    }
    CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2, 4}));
    CHECK_EQ(manager.load(2).metadata().at("val_loss"), std::string("0.2"));
    // A metric that is not a number is refused on every rank, before anything is written.
    const ckpt::metadata_map bad{{"val_loss", rank == 0 ? "abc" : "0.1"}};
    CHECK_EQ(MESSAGE_OF(std::invalid_argument, manager.save(5, {state_of(rank, 5)}, bad)),
             std::string("ckpt: mpi::checkpoint_manager: the metric 'val_loss' = 'abc' is not a number"));
    CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder / "mpi", 5)));
  }
  {
    // Reopened, the manager reads the metrics back from the steps' headers: step 2 stays best.
    ckpt::mpi::checkpoint_manager manager(comm, folder / "mpi", options);
    manager.save(5, {state_of(rank, 5)}, metadata_of(5));
    saves.emplace_back(5, ckpt::metadata_map{{"val_loss", losses[4]}});
    CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2, 5}));
  }
  if (rank == 0) CHECK_EQ(committed_steps(folder / "mpi"), single_process_steps(folder / "single", options, saves));
}

void arguments_refused_on_every_rank(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, ckpt::mpi::checkpoint_manager(comm, folder, {.save_interval_steps = 0})),
           std::string("ckpt: mpi::checkpoint_manager: save_interval_steps must be at least 1, not 0"));
  ckpt::mpi::checkpoint_manager manager(comm, folder, {.save_interval_steps = 2});
  CHECK(!manager.save(3, {state_of(rank, 3)}));  // not a multiple of 2: skipped everywhere
  CHECK(manager.steps().empty());
  CHECK(manager.save(3, {state_of(rank, 3)}, {}, /*force=*/true));
  CHECK(manager.save(4, {state_of(rank, 4)}));
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, manager.save(4, {state_of(rank, 4)})),
           "ckpt: mpi::checkpoint_manager: step 4 is not newer than the latest step in '" + folder.string() + "' (step 4)");
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, manager.save(-2, {state_of(rank, 4)})),
           std::string("ckpt: mpi::checkpoint_manager: negative step -2"));
  if (size > 1) {
    CHECK_EQ(MESSAGE_OF(std::invalid_argument, manager.save(rank == size - 1 ? 8 : 6, {state_of(rank, 6)})),
             std::string("ckpt: mpi::checkpoint_manager: the ranks disagree on the step (from 6 to 8)"));
  }
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, static_cast<void>(manager.load(5))),
           "ckpt: mpi::checkpoint_manager: no checkpoint for step 5 in '" + folder.string() + "'");
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{3, 4}));
}

void opening_removes_uncommitted_steps(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  ckpt::mpi::save(comm, folder, 3, {state_of(rank, 3)});
  MPI_Barrier(comm);
  if (rank == 0) {
    // A crashed job's step 7 (shards, no index), and a folder of the user's that only looks alike.
    fs::create_directories(ckpt::mpi::detail::step_folder(folder, 7));
    ckpt::save(ckpt::mpi::detail::step_folder(folder, 7) / "model-00001-of-00002.safetensors", state_of(0, 7));
    fs::create_directories(folder / "step-7");
  }
  MPI_Barrier(comm);
  ckpt::mpi::checkpoint_manager manager(comm, folder, {});
  CHECK_EQ(manager.steps(), std::vector<std::int64_t>{3});
  std::vector<std::string> expected{".ckpt-manager.lock", ".ckpt-run-id", "step-0000000003", "step-7"};
  CHECK_EQ(listing(folder), expected);

  // A second manager on the folder is refused while the first holds it, on every rank.
  const fs::path lock = folder / ".ckpt-manager.lock";
  CHECK_EQ(MESSAGE_OF(ckpt::mpi::collective_error, ckpt::mpi::checkpoint_manager(comm, folder, {})),
           "ckpt: mpi::checkpoint_manager in '" + folder.string() + "' failed on rank 0 of " + std::to_string(size) +
               ": ckpt: the checkpoint folder '" + folder.string() +
               "' is in use by another checkpoint_manager (lock file '" + lock.string() + "')");
  // The refused one did not disturb the first.
  CHECK(manager.save(8, {state_of(rank, 8)}));
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{3, 8}));
}

void opening_finishes_retention(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  // A job that died after its commits and before its deletions left four steps.
  for (std::int64_t step = 1; step <= 4; ++step) ckpt::mpi::save(comm, folder, step, {state_of(rank, step)});
  ckpt::mpi::checkpoint_manager manager(comm, folder, {.max_to_keep = 2});
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{3, 4}));
  CHECK_EQ(listing(folder), (std::vector<std::string>{".ckpt-manager.lock", ".ckpt-run-id", "step-0000000003", "step-0000000004"}));
}

void save_async_commits_at_the_next_call(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const ckpt::mpi::checkpoint_manager::options options{.max_to_keep = 2, .keep_every_n_steps = 4};
  const fs::path index_of_3 = ckpt::mpi::detail::step_folder(folder / "mpi", 3) / ckpt::mpi::detail::index_file_name;
  std::vector<std::pair<std::int64_t, ckpt::metadata_map>> saves;
  {
    ckpt::mpi::checkpoint_manager manager(comm, folder / "mpi", options);
    // A live leaf of each rank's, changed as soon as save_async returns: the step holds the copy.
    Eigen::VectorXf live(64);
    for (std::int64_t step = 1; step <= 5; ++step) {
      live.setConstant(static_cast<float>(step * 10 + rank));
      CHECK(manager.save_async(step, {{live, "live." + std::to_string(rank)}, {state_of(rank, step)}}));
      live.setConstant(-1.0f);
      saves.emplace_back(step, ckpt::metadata_map{});
      // Not committed yet: not listed, and no index (rank 0 writes it at the next call).
      CHECK_EQ(manager.latest_step(), step == 1 ? std::optional<std::int64_t>() : std::optional<std::int64_t>(step - 1));
      if (step == 3) {
        CHECK(!fs::exists(index_of_3));
        manager.wait();
        CHECK(fs::exists(index_of_3));
        CHECK_EQ(manager.latest_step(), std::optional<std::int64_t>(3));
      }
    }
    const ckpt::mpi::checkpoint_manager::latest latest = manager.load_latest();  // commits step 5
    CHECK(latest.has_value());
    CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{4, 5}));
    for (int r = 0; r < size_of(comm); ++r) {
      CHECK_EQ(latest->get("live." + std::to_string(r)).as<float>()[63], static_cast<float>(50 + r));
      CHECK_EQ(ckpt::to_int("part." + std::to_string(r), *latest), 50 + r);
    }
    CHECK_EQ(latest->metadata().at("step"), std::string("5"));
    CHECK(manager.save_async(8, {state_of(rank, 8)}));
    saves.emplace_back(8, ckpt::metadata_map{});
  }  // the destructor commits step 8
  CHECK_EQ(committed_steps(folder / "mpi"), (std::vector<std::int64_t>{4, 5, 8}));
  if (rank == 0) CHECK_EQ(committed_steps(folder / "mpi"), single_process_steps(folder / "single", options, saves));
}

void save_async_follows_the_rules_of_save(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  ckpt::mpi::checkpoint_manager manager(comm, folder, {.save_interval_steps = 2});
  CHECK(!manager.save_async(3, {state_of(rank, 3)}));  // skipped everywhere
  CHECK(manager.save_async(4, {state_of(rank, 4)}));
  // The latest step again is refused, the pending one included, on every rank.
  const std::string again =
      "ckpt: mpi::checkpoint_manager: step 4 is not newer than the latest step in '" + folder.string() + "' (step 4)";
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, manager.save_async(4, {state_of(rank, 4)})), again);
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, manager.save(4, {state_of(rank, 4)})), again);
  if (size > 1) {
    CHECK_EQ(MESSAGE_OF(std::invalid_argument, manager.save_async(rank == size - 1 ? 8 : 6, {state_of(rank, 6)})),
             std::string("ckpt: mpi::checkpoint_manager: the ranks disagree on the step (from 6 to 8)"));
  }
  // A leaf name twice on one rank is refused on every rank, before anything is copied or written.
  const ckpt::checkpoint twice = ckpt::of_int("dup", 1);
  const ckpt::checkpoint mine = rank == size - 1 ? twice : ckpt::checkpoint{};
  CHECK_EQ(MESSAGE_OF(ckpt::mpi::collective_error, manager.save_async(6, {{state_of(rank, 6)}, {mine}, {mine}})),
           "ckpt: mpi::checkpoint_manager::save_async of step 6 in '" + folder.string() + "' failed on rank " +
               std::to_string(size - 1) + " of " + std::to_string(size) +
               ": ckpt: mpi::checkpoint_manager::save_async: two leaves are named 'dup'");
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 6)));
  // Two checkpoint sections that disagree on a metadata key on one rank: refused on every rank.
  const ckpt::checkpoint lr = ckpt::of_int("lr.a." + std::to_string(rank), 1).with_metadata({{"lr", "0.1"}});
  const ckpt::checkpoint lr_too =
      ckpt::of_int("lr.b." + std::to_string(rank), 1).with_metadata({{"lr", rank == size - 1 ? "0.2" : "0.1"}});
  CHECK_EQ(MESSAGE_OF(ckpt::mpi::collective_error, manager.save(6, {lr, lr_too})),
           "ckpt: mpi::checkpoint_manager::save in '" + folder.string() + "' failed on rank " +
               std::to_string(size - 1) + " of " + std::to_string(size) +
               ": ckpt: mpi::checkpoint_manager: save: metadata key 'lr' has two different values ('0.1' and '0.2') "
               "in the checkpoint sections");
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 6)));
  // Data parallel: every rank offers the same replicated state and only rank 0 writes it.
  CHECK(manager.save_async(6, {ckpt::of_int("step", 6)}));
  manager.wait();
  CHECK_EQ(listing(ckpt::mpi::detail::step_folder(folder, 6)),
           (std::vector<std::string>{"model-00001-of-00001.safetensors", std::string(ckpt::mpi::detail::index_file_name)}));
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{4, 6}));
  CHECK_EQ(manager.path_of(6), ckpt::mpi::detail::step_folder(folder, 6));
  // A checkpoint section brings its metadata (rank 0's), under the manager's step.
  CHECK(manager.save(8, {ckpt::of_int("step", 8).with_metadata({{"lr", "0.1"}, {"step", "99"}})}));
  const ckpt::checkpoint eighth = manager.load(8);
  CHECK_EQ(eighth.metadata().at("lr"), std::string("0.1"));
  CHECK_EQ(eighth.metadata().at("step"), std::string("8"));
}

}  // namespace

// Read-only: while a writer holds the folder, a read-only MPI manager opens it on every rank (no
// lock, no clean-up), and so does a read-only ckpt::checkpoint_manager in one process, without
// MPI; neither saves.
void read_only_managers_open_a_folder_being_written(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  ckpt::mpi::checkpoint_manager writer(comm, folder, {.max_to_keep = 0});
  CHECK(writer.save(5, {state_of(rank, 5)}));
  CHECK(writer.save(6, {state_of(rank, 6)}));
  if (rank == 0) fs::create_directories(ckpt::mpi::detail::step_folder(folder, 9));  // a save in progress
  MPI_Barrier(comm);
  ckpt::mpi::checkpoint_manager reader(comm, folder, {.read_only = true});
  CHECK_EQ(reader.steps(), (std::vector<std::int64_t>{5, 6}));
  CHECK_EQ(ckpt::to_int("part." + std::to_string(rank), *reader.load_latest()), 60 + rank);
  CHECK_EQ(MESSAGE_OF(std::invalid_argument, reader.save(7, {state_of(rank, 7)})),
           "ckpt: mpi::checkpoint_manager: save: the folder '" + folder.string() + "' was opened read-only");
  CHECK(fs::exists(ckpt::mpi::detail::step_folder(folder, 9)));  // not cleaned up: it may be a live save
  if (rank == 0) {
    const ckpt::checkpoint_manager single(folder, {.read_only = true});
    CHECK_EQ(single.steps(), (std::vector<std::int64_t>{5, 6}));
    CHECK_EQ(single.path_of(6), ckpt::mpi::detail::step_folder(folder, 6));
  }
  MPI_Barrier(comm);
  if (rank == 0) {
    ckpt::checkpoint_manager single(folder, {.read_only = true});
    CHECK_EQ(ckpt::to_int("step", single.load(5)), 5);
  }
  MPI_Barrier(comm);
}

// A damaged newest step (a shard cut short) is set aside on rank 0 and every rank resumes from
// the step before it, alike; the step number is saved again; remove_damaged deletes it.
void a_damaged_step_is_set_aside_on_every_rank(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  {
    ckpt::mpi::checkpoint_manager writer(comm, folder, {.max_to_keep = 0});
    CHECK(writer.save(1, {state_of(rank, 1)}));
    CHECK(writer.save(2, {state_of(rank, 2)}));
  }
  if (rank == 0) {
    for (const auto& e : fs::directory_iterator(ckpt::mpi::detail::step_folder(folder, 2)))
      if (e.path().extension() == ".safetensors") fs::resize_file(e.path(), 10);
  }
  MPI_Barrier(comm);
  ckpt::mpi::checkpoint_manager manager(comm, folder, {.max_to_keep = 0});
  const ckpt::mpi::checkpoint_manager::latest latest = manager.load_latest();
  CHECK_EQ(latest.step, 1);
  CHECK_EQ(ckpt::to_int("step", *latest), 1);
  CHECK_EQ(latest.skipped.size(), 1u);
  CHECK_EQ(latest.skipped.at(0).step, 2);
  CHECK_EQ(latest.skipped.at(0).path, fs::path(ckpt::mpi::detail::step_folder(folder, 2).string() + ".damaged"));
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{1}));
  CHECK_EQ(manager.status().size(), 2u);
  CHECK(manager.save(2, {state_of(rank, 2)}));
  CHECK_EQ(ckpt::to_int("step", manager.load(2)), 2);
  // Once looked at, the set-aside step is deleted on request, on every rank alike.
  const std::vector<ckpt::mpi::checkpoint_manager::step_status> removed = manager.remove_damaged();
  CHECK_EQ(removed.size(), 1u);
  CHECK_EQ(removed.at(0).step, 2);
  CHECK_EQ(manager.status().size(), 2u);  // steps 1 and 2, nothing damaged
  MPI_Barrier(comm);
  CHECK(!fs::exists(fs::symlink_status(fs::path(ckpt::mpi::detail::step_folder(folder, 2).string() + ".damaged"))));
  MPI_Barrier(comm);
}

// Code written against a ckpt::checkpoint_manager&, used below with the MPI manager.
std::vector<std::int64_t> save_and_list(ckpt::checkpoint_manager& manager, int rank, std::int64_t step) {
  CHECK(manager.save(step, {state_of(rank, step)}));
  return manager.steps();
}

// An MPI manager is a ckpt::checkpoint_manager: used through a reference to one, moved into one,
// move-assigned over a single-process one or deleted through a pointer to one, it stays the MPI
// manager: step folders, every rank's part saved, collective errors, a background save committed
// collectively by the destructor.
void a_moved_mpi_manager_stays_collective(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  {
    ckpt::mpi::checkpoint_manager mpi_manager(comm, folder / "a", {.max_to_keep = 0});
    CHECK_EQ(save_and_list(mpi_manager, rank, 1), (std::vector<std::int64_t>{1}));
    ckpt::checkpoint_manager moved = std::move(mpi_manager);
    CHECK_EQ(moved.path_of(2), ckpt::mpi::detail::step_folder(folder / "a", 2));
    CHECK_EQ(save_and_list(moved, rank, 2), (std::vector<std::int64_t>{1, 2}));
    CHECK(fs::exists(ckpt::mpi::detail::step_folder(folder / "a", 2) / ckpt::mpi::detail::index_file_name));
    const ckpt::checkpoint_manager::latest latest = moved.load_latest();
    CHECK_EQ(latest.step, 2);
    for (int r = 0; r < size; ++r) CHECK_EQ(ckpt::to_int("part." + std::to_string(r), *latest), 20 + r);
    CHECK_EQ(MESSAGE_OF(std::invalid_argument, moved.save(2, {state_of(rank, 2)})),
             "ckpt: mpi::checkpoint_manager: step 2 is not newer than the latest step in '" + (folder / "a").string() +
                 "' (step 2)");
    if (size > 1) {
      CHECK_EQ(MESSAGE_OF(std::invalid_argument, moved.save(rank == size - 1 ? 5 : 3, {state_of(rank, 3)})),
               std::string("ckpt: mpi::checkpoint_manager: the ranks disagree on the step (from 3 to 5)"));
    }
    CHECK(moved.save_async(3, {state_of(rank, 3)}));
  }  // `moved` commits step 3 collectively and frees its communicator; the moved-from one does nothing
  CHECK_EQ(committed_steps(folder / "a"), (std::vector<std::int64_t>{1, 2, 3}));

  // Assigned over a single-process manager (each rank's own folder): that one's background save is
  // committed and its folder released first.
  const fs::path own = folder / ("single-" + std::to_string(rank));
  {
    ckpt::checkpoint_manager manager(own);
    CHECK(manager.save_async(1, {state_of(rank, 1)}));
    manager = ckpt::mpi::checkpoint_manager(comm, folder / "b");
    CHECK_EQ(ckpt::checkpoint_manager(own).steps(), (std::vector<std::int64_t>{1}));  // committed, and unlocked
    CHECK_EQ(save_and_list(manager, rank, 4), (std::vector<std::int64_t>{4}));
    CHECK_EQ(manager.path_of(4), ckpt::mpi::detail::step_folder(folder / "b", 4));
  }
  CHECK_EQ(committed_steps(folder / "b"), (std::vector<std::int64_t>{4}));

  // Deleted through a pointer to a ckpt::checkpoint_manager: the MPI manager's destructor, collective.
  {
    std::unique_ptr<ckpt::checkpoint_manager> manager = std::make_unique<ckpt::mpi::checkpoint_manager>(comm, folder / "c");
    CHECK(manager->save_async(7, {state_of(rank, 7)}));
    manager.reset();
  }
  CHECK_EQ(committed_steps(folder / "c"), (std::vector<std::int64_t>{7}));
  // Every manager is gone: the folders are free for a new writer.
  ckpt::mpi::checkpoint_manager again(comm, folder / "a");
  CHECK_EQ(again.steps(), (std::vector<std::int64_t>{1, 2, 3}));
}

// As ckpt::checkpoint_manager's, a background save writes its shard with direct I/O from its
// snapshot, laid out as the shard's data section: only the blocks where the header or a small
// entry meets the next go through the staging buffer (the address of the first direct write,
// which holds the header). The step loads back as saved.
void a_background_save_writes_its_shard_in_place_with_direct_io(const fs::path& folder) {
  const ckpt_test::direct_writes writes;
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const std::string mine = "w." + std::to_string(rank);
  // Entries of this rank's only (each writes all of its snapshot), of some 9 MiB.
  Eigen::MatrixXf weights = Eigen::MatrixXf::Constant(1500, 1500, static_cast<float>(rank + 1));
  const Eigen::Vector3f small(1, 2, static_cast<float>(rank));
  {
    ckpt::mpi::checkpoint_manager manager(comm, folder / "mpi");
    CHECK(manager.save_async(1, {{weights, mine}, {small, "v." + std::to_string(rank)}}));
    weights.setConstant(-1);  // the step holds the copy
  }  // committed
  ckpt::mpi::checkpoint_manager manager(comm, folder / "mpi");
  const ckpt::checkpoint back = manager.load(1);
  CHECK_EQ(back.get(mine).as<float>()[1500 * 1500 - 1], static_cast<float>(rank + 1));
  const ckpt_test::direct_writes::totals seen = writes.seen();
  if (seen.written == 0) return;  // a file system that refuses direct I/O: nothing to check
  CHECK(seen.written >= std::size_t{1500 * 1500 * 4});
  CHECK(seen.staged <= 4 * std::size_t{4096});
}

int main(int argc, char** argv) {
  return run_all(argc, argv, "test_mpi_manager",
                 {{"retention_matches_the_single_process_manager", retention_matches_the_single_process_manager},
                  {"keep_best_uses_rank_0s_metric", keep_best_uses_rank_0s_metric},
                  {"arguments_refused_on_every_rank", arguments_refused_on_every_rank},
                  {"opening_removes_uncommitted_steps", opening_removes_uncommitted_steps},
                  {"opening_finishes_retention", opening_finishes_retention},
                  {"save_async_commits_at_the_next_call", save_async_commits_at_the_next_call},
                  {"save_async_follows_the_rules_of_save", save_async_follows_the_rules_of_save},
                  {"read_only_managers_open_a_folder_being_written", read_only_managers_open_a_folder_being_written},
                  {"a_damaged_step_is_set_aside_on_every_rank", a_damaged_step_is_set_aside_on_every_rank},
                  {"a_moved_mpi_manager_stays_collective", a_moved_mpi_manager_stays_collective},
                  {"a_background_save_writes_its_shard_in_place_with_direct_io",
                   a_background_save_writes_its_shard_in_place_with_direct_io}});
}
