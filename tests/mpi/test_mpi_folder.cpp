// ckpt::mpi at 1, 2 and 4 ranks touches its own run folder and nothing else (issue 35;
// tests/RELIABILITY.md, "The run folder"): a step folder that is a symbolic link is never written
// into or emptied (by ckpt::mpi::save, or by a manager when the link appears while it is open), a
// forked run's linked step is read through and only the link is deleted, a job keeps to the
// folder it opened when its path is switched to another run, steps of many shards load under a
// descriptor limit, a rank's resource failure is an error and not damage, and a step whose index
// cannot be deleted never blocks a save.

#include "mpi_test.hpp"

#include <ckpt/manager.hpp>
#include <ckpt/mpi.hpp>
#include <ckpt/sharded.hpp>

#include "io/io_hooks.hpp"  // the test seam (src/): a failing unlink
#include "mpi/step.hpp"  // the step folders' layout (src/): step_folder, index_file_name

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <thread>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CKPT_MPI_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CKPT_MPI_SANITIZED 1
#endif
#endif

namespace {

using namespace ckpt_mpi_test;
namespace fs = std::filesystem;

// What rank `rank` holds at `step`: a part of its own and a replicated counter.
ckpt::checkpoint state_of(int rank, std::int64_t step) {
  return ckpt::concat({ckpt::of_int("part." + std::to_string(rank), static_cast<int>(step * 10 + rank)),
                       ckpt::of_int("step", static_cast<int>(step))});
}

// Every rank checks the parts of every rank at `step`.
void check_step(const ckpt::checkpoint& t, std::int64_t step) {
  CHECK_EQ(ckpt::to_int("step", t), step);
  for (int r = 0; r < size_of(MPI_COMM_WORLD); ++r)
    CHECK_EQ(ckpt::to_int("part." + std::to_string(r), t), step * 10 + r);
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// The bytes of every file under `folder` (links not followed), by relative path.
std::map<std::string, std::string> tree_of(const fs::path& folder) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(folder)) {
    const std::string name = fs::relative(e.path(), folder).string();
    if (e.is_symlink()) out.emplace(name, "-> " + fs::read_symlink(e.path()).string());
    else if (e.is_regular_file()) out.emplace(name, std::string(std::istreambuf_iterator<char>(std::ifstream(e.path(), std::ios::binary).rdbuf()), {}));
    else out.emplace(name, "(folder)");
  }
  return out;
}

// A folder of the user's: what a step folder that is a link must never touch.
fs::path make_home_like(const fs::path& folder) {
  const fs::path home = folder / "home_like";
  fs::create_directories(home / ".ssh");
  write_text(home / "thesis.tex", "\\documentclass{book}");
  write_text(home / ".ssh" / "id_ed25519", "secret");
  return home;
}

// Finding 1: `run/step-0000000003 -> ../home_like`: ckpt::mpi::save of step 3 wrote its shards
// there and its commit's tidy-up removed everything else in that folder, recursively; the
// manager did the same when the link appeared while it was open.
void a_step_folder_that_is_a_link_is_never_written_into_or_emptied(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const fs::path run = folder / "run";
  if (rank == 0) {
    fs::create_directories(run);
    make_home_like(folder);
    fs::create_directory_symlink("../home_like", ckpt::mpi::detail::step_folder(run, 3));
  }
  MPI_Barrier(comm);
  const std::map<std::string, std::string> home = tree_of(folder / "home_like");
  const std::string refused = MESSAGE_OF(ckpt::mpi::collective_error, ckpt::mpi::save(comm, run, 3, {state_of(rank, 3)}));
  CHECK(refused.find("ckpt: cannot open as a folder (never through a symbolic link) '" +
                     ckpt::mpi::detail::step_folder(run, 3).string() + "': Too many levels of symbolic links") !=
        std::string::npos);
  MPI_Barrier(comm);
  CHECK_EQ(tree_of(folder / "home_like"), home);
  CHECK(fs::is_symlink(ckpt::mpi::detail::step_folder(run, 3)));  // left as it was

  // A manager open on the folder, the link made meanwhile.
  MPI_Barrier(comm);
  {
    ckpt::mpi::checkpoint_manager manager(comm, folder / "run2", {.max_to_keep = 0});
    CHECK(manager.save(1, {state_of(rank, 1)}));
    MPI_Barrier(comm);
    if (rank == 0) fs::create_directory_symlink("../home_like", ckpt::mpi::detail::step_folder(folder / "run2", 2));
    MPI_Barrier(comm);
    CHECK(MESSAGE_OF(ckpt::mpi::collective_error, manager.save(2, {state_of(rank, 2)}))
              .find("Too many levels of symbolic links") != std::string::npos);
    CHECK_EQ(tree_of(folder / "home_like"), home);
    CHECK_EQ(manager.steps(), std::vector<std::int64_t>{1});
    CHECK(manager.save(3, {state_of(rank, 3)}));  // the run goes on
    check_step(manager.load(3), 3);
  }
  // The next manager removes the link (an uncommitted step's name), never what it points at.
  ckpt::mpi::checkpoint_manager next(comm, folder / "run2", {.max_to_keep = 0});
  CHECK_EQ(next.steps(), (std::vector<std::int64_t>{1, 3}));
  CHECK(!fs::exists(fs::symlink_status(ckpt::mpi::detail::step_folder(folder / "run2", 2))));
  CHECK_EQ(tree_of(folder / "home_like"), home);
  MPI_Barrier(comm);
}

// Finding 1: `runB/step-0000001000 -> ../runA/step-0000001000`: runB's retention deleted the
// index inside runA's step through the link, and runA's next manager deleted the step whole.
void a_forked_runs_linked_step_is_read_through_and_only_the_link_is_deleted(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const fs::path run_a = folder / "runA", run_b = folder / "runB";
  {
    ckpt::mpi::checkpoint_manager a(comm, run_a, {.max_to_keep = 0});
    CHECK(a.save(1000, {state_of(rank, 1000)}));
  }
  MPI_Barrier(comm);
  const std::map<std::string, std::string> a_before = tree_of(run_a);
  if (rank == 0) {
    fs::create_directories(run_b);
    fs::create_directory_symlink("../runA/step-0000001000", ckpt::mpi::detail::step_folder(run_b, 1000));
  }
  MPI_Barrier(comm);
  {
    ckpt::mpi::checkpoint_manager b(comm, run_b, {.max_to_keep = 1});
    const ckpt::mpi::checkpoint_manager::latest latest = b.load_latest();
    CHECK_EQ(latest.step, 1000);
    check_step(*latest, 1000);
    CHECK(b.save(1001, {state_of(rank, 1001)}));
    CHECK_EQ(b.steps(), std::vector<std::int64_t>{1001});
  }
  MPI_Barrier(comm);
  CHECK_EQ(listing(run_b), (std::vector<std::string>{".ckpt-manager.lock", ".ckpt-run-id", "step-0000001001"}));
  CHECK_EQ(tree_of(run_a), a_before);
  ckpt::mpi::checkpoint_manager a(comm, run_a, {.max_to_keep = 0});
  CHECK_EQ(a.steps(), std::vector<std::int64_t>{1000});
  check_step(a.load(1000), 1000);
  MPI_Barrier(comm);
}

// Finding 2: a job opened on `current -> runA`, then `ln -sfn runB current`: the job wrote into
// runB and deleted runB's steps, bypassing runB's lock.
void a_job_keeps_to_the_folder_it_opened_when_its_path_is_switched(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const fs::path run_a = folder / "runA", run_b = folder / "runB", current = folder / "current";
  for (const auto& [run, steps] : {std::pair{run_a, std::vector<std::int64_t>{1, 2}},
                                   std::pair{run_b, std::vector<std::int64_t>{10, 11, 12}}}) {
    ckpt::mpi::checkpoint_manager m(comm, run, {.max_to_keep = 0});
    for (const std::int64_t step : steps) CHECK(m.save(step, {state_of(rank, step)}));
  }
  MPI_Barrier(comm);
  if (rank == 0) fs::create_directory_symlink("runA", current);
  MPI_Barrier(comm);
  const std::map<std::string, std::string> b_before = tree_of(run_b);
  ckpt::mpi::checkpoint_manager job(comm, current, {.max_to_keep = 2});
  MPI_Barrier(comm);
  if (rank == 0) {
    fs::create_directory_symlink("runB", folder / "current.next");
    fs::rename(folder / "current.next", current);
  }
  MPI_Barrier(comm);
  CHECK(job.save(13, {state_of(rank, 13)}));
  MPI_Barrier(comm);
  CHECK_EQ(listing(run_a), (std::vector<std::string>{".ckpt-manager.lock", ".ckpt-run-id", "step-0000000002", "step-0000000013"}));
  CHECK_EQ(tree_of(run_b), b_before);
  check_step(job.load(13), 13);
  MPI_Barrier(comm);
}

void set_descriptor_limit(rlim_t value) {
  rlimit limit{};
  ::getrlimit(RLIMIT_NOFILE, &limit);
  limit.rlim_cur = value;
  CHECK_EQ(::setrlimit(RLIMIT_NOFILE, &limit), 0);
}

// The descriptors this process has open (the listing's own not counted).
rlim_t open_descriptors() {
  rlim_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n - 1;
}

// Finding 4: three good steps of 200 shards, loaded on 2 ranks under `ulimit -n 150`, were all
// set aside as damaged ("Too many open files": each rank kept a descriptor per shard).
void steps_of_many_shards_load_under_a_descriptor_limit_and_a_resource_failure_is_not_damage(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  [[maybe_unused]] const int last = size_of(comm) - 1;
  // Steps 1 to 3 of 200 shards each, in the layout of a manager's step (the index names them).
  const auto step_contents = [](std::int64_t step) {
    std::vector<ckpt::checkpoint> parts;
    for (int i = 0; i < 200; ++i) parts.push_back(ckpt::of_int("w." + std::to_string(1000 + i), static_cast<int>(step * 1000 + i)));
    parts.push_back(ckpt::of_int("step", static_cast<int>(step)));
    return ckpt::concat(parts);
  };
  if (rank == 0)
    for (std::int64_t step = 1; step <= 3; ++step)
      CHECK_EQ(ckpt::save_sharded(ckpt::mpi::detail::step_folder(folder, step), step_contents(step), 4,
                                  {.save = {.digest = true}})
                   .shards.size(),
               201u);
  MPI_Barrier(comm);
  ckpt::mpi::checkpoint_manager manager(comm, folder, {.max_to_keep = 0});
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{1, 2, 3}));
  rlimit original{};
  ::getrlimit(RLIMIT_NOFILE, &original);
  const rlim_t open = open_descriptors();
  set_descriptor_limit(open + 60);
  {
    const ckpt::mpi::checkpoint_manager::latest latest = manager.load_latest();
    CHECK_EQ(latest.step, 3);
    CHECK(latest.skipped.empty());
    CHECK(same(*latest, step_contents(3)));
    for (const auto& [name, x] : *latest) CHECK_EQ(ckpt::to_int(name, *latest), ckpt::to_int(name, step_contents(3)));
  }
#ifndef CKPT_MPI_SANITIZED
  // The last rank has one descriptor left (for the step folder, not its index): every rank
  // throws, naming it, and no step is set aside. (Not under UBSan: its check of a member call on
  // an object of a type it has not met needs a descriptor, and reports a false error without.)
  if (rank == last) set_descriptor_limit(open_descriptors() + 1);
  const std::string failed = MESSAGE_OF(ckpt::mpi::collective_error, static_cast<void>(manager.load(2)));
  set_descriptor_limit(original.rlim_cur);
  CHECK(failed.find("failed on rank " + std::to_string(last)) != std::string::npos);
  CHECK(failed.find("Too many open files") != std::string::npos);
#else
  set_descriptor_limit(original.rlim_cur);
#endif
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{1, 2, 3}));
  CHECK_EQ(manager.status().size(), 3u);
  CHECK(fs::exists(ckpt::mpi::detail::step_folder(folder, 2) / ckpt::mpi::detail::index_file_name));
  CHECK(same(manager.load(2), step_contents(2)));
  MPI_Barrier(comm);
}

// A removal of the index that fails (rank 0's retention), through the test seam.
int failing_index_unlink(int folder, const char* name, int flags) {
  if (std::string_view(name) == ckpt::mpi::detail::index_file_name) {
    errno = EACCES;
    return -1;
  }
  return ::unlinkat(folder, name, flags);
}

// Finding 3, in the MPI manager: a step the retention cannot delete is reported by status() on
// every rank, the save goes on, and later saves try again.
void a_step_whose_index_cannot_be_deleted_never_blocks_a_save(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  ckpt::mpi::checkpoint_manager manager(comm, folder, {.max_to_keep = 1});
  CHECK(manager.save(1, {state_of(rank, 1)}));
  {
    ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
    hooks.unlinkat = failing_index_unlink;
    const ckpt::detail::io_hooks_guard guard(hooks);
    CHECK(manager.save(2, {state_of(rank, 2)}));
  }
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{1, 2}));
  const std::vector<ckpt::mpi::checkpoint_manager::step_status> status = manager.status();
  CHECK_EQ(status.size(), 2u);
  CHECK(status.at(0).state == ckpt::mpi::checkpoint_manager::step_state::undeletable);
  CHECK_EQ(status.at(0).reason, "the retention rules drop it, but it could not be deleted: ckpt: cannot remove '" +
                                    (ckpt::mpi::detail::step_folder(folder, 1) / ckpt::mpi::detail::index_file_name).string() +
                                    "': Permission denied");
  CHECK(manager.save(3, {state_of(rank, 3)}));
  CHECK_EQ(manager.steps(), std::vector<std::int64_t>{3});
  CHECK_EQ(listing(folder), (std::vector<std::string>{".ckpt-manager.lock", ".ckpt-run-id", "step-0000000003"}));
  MPI_Barrier(comm);
}

// The shard files the retention unlinks, and whether each went on the main thread.
std::thread::id main_thread;                                    // NOLINT: set by the case
std::vector<std::pair<std::string, bool>> shard_unlinks;        // NOLINT: rank 0's, read after wait()
int recording_unlink(int folder, const char* name, int flags) {
  if (std::string_view(name).starts_with("model-")) shard_unlinks.emplace_back(name, std::this_thread::get_id() == main_thread);
  return ::unlinkat(folder, name, flags);
}

// The commit of a background save deletes the dropped step's index at once (the step is gone);
// its shards are unlinked by the next background save's thread, not the caller's; wait() leaves
// the folder tidy.
void a_background_commit_leaves_the_dropped_shards_to_the_next_background_save(const fs::path& folder) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  ckpt::mpi::checkpoint_manager manager(comm, folder, {.max_to_keep = 1});
  main_thread = std::this_thread::get_id();
  shard_unlinks.clear();
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.unlinkat = recording_unlink;
  const ckpt::detail::io_hooks_guard guard(hooks);
  CHECK(manager.save_async(1, {state_of(rank, 1)}));
  CHECK(manager.save_async(2, {state_of(rank, 2)}));  // commits 1
  CHECK(manager.save_async(3, {state_of(rank, 3)}));  // commits 2, drops 1
  CHECK_EQ(manager.steps(), std::vector<std::int64_t>{2});
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 1) / ckpt::mpi::detail::index_file_name));
  manager.wait();  // commits 3, drops 2
  CHECK_EQ(listing(folder), (std::vector<std::string>{".ckpt-manager.lock", ".ckpt-run-id", "step-0000000003"}));
  if (rank == 0) {
    // Step 1's shards (one a rank) went on save_async(3)'s thread; step 2's, dropped by wait(), on
    // the caller's, since no background save follows.
    const auto off_main = std::ranges::count_if(shard_unlinks, [](const auto& u) { return !u.second; });
    CHECK_EQ(static_cast<int>(off_main), size_of(comm));
    CHECK_EQ(shard_unlinks.size(), 2 * static_cast<std::size_t>(size_of(comm)));
  }
  MPI_Barrier(comm);
}

}  // namespace

int main(int argc, char** argv) {
  return run_all(
      argc, argv, "test_mpi_folder",
      {{"a_step_folder_that_is_a_link_is_never_written_into_or_emptied",
        a_step_folder_that_is_a_link_is_never_written_into_or_emptied},
       {"a_forked_runs_linked_step_is_read_through_and_only_the_link_is_deleted",
        a_forked_runs_linked_step_is_read_through_and_only_the_link_is_deleted},
       {"a_job_keeps_to_the_folder_it_opened_when_its_path_is_switched",
        a_job_keeps_to_the_folder_it_opened_when_its_path_is_switched},
       {"steps_of_many_shards_load_under_a_descriptor_limit_and_a_resource_failure_is_not_damage",
        steps_of_many_shards_load_under_a_descriptor_limit_and_a_resource_failure_is_not_damage},
       {"a_step_whose_index_cannot_be_deleted_never_blocks_a_save", a_step_whose_index_cannot_be_deleted_never_blocks_a_save},
       {"a_background_commit_leaves_the_dropped_shards_to_the_next_background_save",
        a_background_commit_leaves_the_dropped_shards_to_the_next_background_save}});
}
