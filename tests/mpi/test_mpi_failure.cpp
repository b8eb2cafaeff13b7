// A rank that fails in the middle of ckpt::mpi::save, or of the background write of
// ckpt::mpi::checkpoint_manager::save_async: the disk fills up while it writes its shard, or rank 0
// cannot put the index in place. Every rank must then throw the same error (for save_async, at the
// next call), no index may exist, the shards already written must be gone, and the previous step
// must load intact.
// The faults come through the I/O seam of the single-process writer (src/io/io_hooks.hpp),
// installed on the failing rank only.

#include "mpi_test.hpp"

#include <ckpt/file.hpp>
#include <ckpt/mpi.hpp>

#include "io/io_hooks.hpp"     // the build's private seam (src/)
#include "mpi/step.hpp"     // the step folders' layout (src/): step_folder, index_file_name

#include <optional>

#include <sys/stat.h>
#include <unistd.h>

namespace {

using namespace ckpt_mpi_test;
namespace fs = std::filesystem;

ckpt::tensor f32(ckpt::dims shape, float first) {
  std::vector<float> values(static_cast<std::size_t>(ckpt::detail::numel_of(shape)));
  for (std::size_t k = 0; k < values.size(); ++k) values[k] = first + static_cast<float>(k);
  return ckpt::tensor::copy_of(ckpt::dtype::f32, std::move(shape), std::as_bytes(std::span(values)));
}

// What rank `rank` holds at `step`: an entry of its own (so that every rank writes a shard) and
// a replicated one.
ckpt::checkpoint state_of(int rank, std::int64_t step) {
  return ckpt::concat({ckpt::of_tensor("part." + std::to_string(rank), f32({64, 16}, static_cast<float>(step * 10 + rank))),
                       ckpt::of_tensor("shared", f32({8}, static_cast<float>(step)))});
}

ckpt::checkpoint whole_state(int size, std::int64_t step) {
  std::vector<ckpt::checkpoint> parts{ckpt::of_tensor("shared", f32({8}, static_cast<float>(step)))};
  for (int r = 0; r < size; ++r)
    parts.push_back(ckpt::of_tensor("part." + std::to_string(r), f32({64, 16}, static_cast<float>(step * 10 + r))));
  return ckpt::concat(parts);
}

std::string shard(int k, int count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k, count);
  return name;
}

// The disk fills up after the first 16 bytes of a file: a short write, then ENOSPC.
int writes = 0;
ssize_t disk_full_writev(int fd, const iovec* pieces, int count) {
  if (count == 0) return 0;
  if (writes++ == 0) return ::write(fd, pieces[0].iov_base, std::min<std::size_t>(pieces[0].iov_len, 16));
  errno = ENOSPC;
  return -1;
}

bool is_index(const char* path) { return std::string_view(path).ends_with(ckpt::mpi::detail::index_file_name); }

int failing_rename(int from_folder, const char* from, int to_folder, const char* to) {
  if (is_index(to)) {
    errno = EIO;
    return -1;
  }
  return ::renameat(from_folder, from, to_folder, to);
}

// The index is renamed into place, then the folder's fsync fails: the commit is not durable.
bool index_renamed = false;
int rename_noting_index(int from_folder, const char* from, int to_folder, const char* to) {
  const int result = ::renameat(from_folder, from, to_folder, to);
  if (result == 0 && is_index(to)) index_renamed = true;
  return result;
}
int failing_folder_fsync(int fd) {
  struct stat info {};
  if (index_renamed && ::fstat(fd, &info) == 0 && S_ISDIR(info.st_mode)) {
    errno = EIO;
    return -1;
  }
  return ::fsync(fd);
}

// Runs `call` with `hooks` installed on rank `failing` only. It must throw, on every rank, the
// collective_error "ckpt: mpi::<operation> in '<folder>' failed on rank <failing> of <n>: <cause>",
// with the original io_error nested on the failing rank.
template <class F>
void check_failure(const fs::path& folder, int failing, const ckpt::detail::io_hooks& hooks, F&& call,
                   const std::string& operation, const std::string& cause) {
  const int rank = rank_of(MPI_COMM_WORLD);
  std::optional<ckpt::detail::io_hooks_guard> guard;
  if (rank == failing) guard.emplace(hooks);
  try {
    call();
    fail(__FILE__, __LINE__, "no exception was thrown");
  } catch (const ckpt::mpi::collective_error& e) {
    CHECK_EQ(e.rank(), failing);
    CHECK_EQ(std::string(e.what()), "ckpt: mpi::" + operation + " in '" + folder.string() + "' failed on rank " +
                                        std::to_string(failing) + " of " + std::to_string(size_of(MPI_COMM_WORLD)) +
                                        ": " + cause);
    bool nested_io_error = false;
    try {
      std::rethrow_if_nested(e);
    } catch (const ckpt::io_error&) {
      nested_io_error = true;
    }
    CHECK_EQ(nested_io_error, rank == failing);
  }
}

// Saves step 1, then makes step 2 fail on rank `failing` with `hooks`; checks every rank's error
// (the failing rank's message is `cause`), that nothing of step 2 remains, and that step 1 is
// intact.
void check_failed_save(const fs::path& folder, int failing, const ckpt::detail::io_hooks& hooks, const std::string& cause) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  ckpt::mpi::save(comm, folder, 1, {state_of(rank, 1)});

  check_failure(folder, failing, hooks, [&] { ckpt::mpi::save(comm, folder, 2, {state_of(rank, 2)}); }, "save of step 2",
                cause);
  // Step 2 does not exist, not even as a folder; step 1 is as it was.
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 2)));
  CHECK_EQ(committed_steps(folder), std::vector<std::int64_t>{1});
  CHECK(same(ckpt::mpi::load(comm, folder, 1), whole_state(size, 1)));
  // And the next save goes through.
  ckpt::mpi::save(comm, folder, 2, {state_of(rank, 2)});
  CHECK(same(ckpt::mpi::load(comm, folder, 2), whole_state(size, 2)));
}

void a_full_disk_on_the_last_rank_fails_the_save_on_every_rank_leaving_step_1_alone(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  const int failing = size - 1;
  writes = 0;
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.writev = disk_full_writev;
  const fs::path shard_file = ckpt::mpi::detail::step_folder(folder, 2) / shard(size, size);
  check_failed_save(folder, failing, hooks, "ckpt: cannot write '" + shard_file.string() + "': No space left on device");
}

void a_full_disk_on_rank_0_fails_the_save_on_every_rank_leaving_step_1_alone(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  writes = 0;
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.writev = disk_full_writev;
  const fs::path shard_file = ckpt::mpi::detail::step_folder(folder, 2) / shard(1, size);
  check_failed_save(folder, 0, hooks, "ckpt: cannot write '" + shard_file.string() + "': No space left on device");
}

void a_failed_index_rename_fails_the_save_on_every_rank_leaving_step_1_alone(const fs::path& folder) {
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.renameat = failing_rename;
  const fs::path index = ckpt::mpi::detail::step_folder(folder, 2) / ckpt::mpi::detail::index_file_name;
  check_failed_save(folder, 0, hooks,
                    "ckpt: cannot rename a temporary file over '" + index.string() + "': Input/output error");
}

void an_index_not_made_durable_is_removed_and_fails_the_save_on_every_rank(const fs::path& folder) {
  index_renamed = false;
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.renameat = rename_noting_index;
  hooks.fsync = failing_folder_fsync;
  // The index was in place for a moment: it must be gone again, before the shards it names.
  check_failed_save(folder, 0, hooks,
                    "ckpt: cannot fsync folder '" + ckpt::mpi::detail::step_folder(folder, 2).string() + "': Input/output error");
}

// As check_failed_save, through ckpt::mpi::checkpoint_manager::save_async: the failing rank's
// background write (or rank 0's commit) fails; every rank sees the error at the next call (wait(),
// or the next save if `at_next_save`), once, and step 2 is not committed.
void check_failed_background_save(const fs::path& folder, int failing, const ckpt::detail::io_hooks& hooks,
                                  const std::string& cause, bool at_next_save) {
  const MPI_Comm comm = MPI_COMM_WORLD;
  const int rank = rank_of(comm);
  const int size = size_of(comm);
  ckpt::mpi::checkpoint_manager manager(comm, folder, {.max_to_keep = 1});
  CHECK(manager.save_async(1, {state_of(rank, 1)}));
  manager.wait();  // before the faults: the seam is global

  check_failure(
      folder, failing, hooks,
      [&] {
        CHECK(manager.save_async(2, {state_of(rank, 2)}));
        if (at_next_save) manager.save(3, {state_of(rank, 3)});
        else manager.wait();
      },
      "checkpoint_manager::save_async of step 2", cause);
  manager.wait();  // reported once
  // Step 2 is not committed, not even as a folder; step 1 is as it was, and still kept.
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 2)));
  CHECK(!fs::exists(ckpt::mpi::detail::step_folder(folder, 3)));
  CHECK_EQ(manager.steps(), std::vector<std::int64_t>{1});
  CHECK_EQ(committed_steps(folder), std::vector<std::int64_t>{1});
  CHECK(same(*manager.load_latest(), whole_state(size, 1)));
  // And the next save goes through.
  CHECK(manager.save_async(2, {state_of(rank, 2)}));
  manager.wait();
  CHECK_EQ(manager.steps(), std::vector<std::int64_t>{2});
  CHECK(same(manager.load(2), whole_state(size, 2)));
}

void a_background_save_failing_on_the_last_rank_is_reported_once_at_wait_on_every_rank(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  writes = 0;
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.writev = disk_full_writev;
  const fs::path shard_file = ckpt::mpi::detail::step_folder(folder, 2) / shard(size, size);
  check_failed_background_save(folder, size - 1, hooks,
                               "ckpt: cannot write '" + shard_file.string() + "': No space left on device", false);
}

void a_background_save_failing_on_rank_0_is_reported_at_the_next_save_on_every_rank(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  writes = 0;
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.writev = disk_full_writev;
  const fs::path shard_file = ckpt::mpi::detail::step_folder(folder, 2) / shard(1, size);
  check_failed_background_save(folder, 0, hooks,
                               "ckpt: cannot write '" + shard_file.string() + "': No space left on device", true);
}

void a_background_index_rename_failure_is_reported_at_wait_and_step_2_not_committed(const fs::path& folder) {
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.renameat = failing_rename;
  const fs::path index = ckpt::mpi::detail::step_folder(folder, 2) / ckpt::mpi::detail::index_file_name;
  check_failed_background_save(folder, 0, hooks,
                               "ckpt: cannot rename a temporary file over '" + index.string() + "': Input/output error",
                               false);
}

void a_background_index_not_made_durable_is_reported_at_the_next_save_uncommitted(const fs::path& folder) {
  index_renamed = false;
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.renameat = rename_noting_index;
  hooks.fsync = failing_folder_fsync;
  check_failed_background_save(
      folder, 0, hooks, "ckpt: cannot fsync folder '" + ckpt::mpi::detail::step_folder(folder, 2).string() + "': Input/output error",
      true);
}

}  // namespace

int main(int argc, char** argv) {
  return run_all(argc, argv, "test_mpi_failure",
                 {{"a_full_disk_on_the_last_rank_fails_the_save_on_every_rank_leaving_step_1_alone", a_full_disk_on_the_last_rank_fails_the_save_on_every_rank_leaving_step_1_alone},
                  {"a_full_disk_on_rank_0_fails_the_save_on_every_rank_leaving_step_1_alone", a_full_disk_on_rank_0_fails_the_save_on_every_rank_leaving_step_1_alone},
                  {"a_failed_index_rename_fails_the_save_on_every_rank_leaving_step_1_alone", a_failed_index_rename_fails_the_save_on_every_rank_leaving_step_1_alone},
                  {"an_index_not_made_durable_is_removed_and_fails_the_save_on_every_rank", an_index_not_made_durable_is_removed_and_fails_the_save_on_every_rank},
                  {"a_background_save_failing_on_the_last_rank_is_reported_once_at_wait_on_every_rank", a_background_save_failing_on_the_last_rank_is_reported_once_at_wait_on_every_rank},
                  {"a_background_save_failing_on_rank_0_is_reported_at_the_next_save_on_every_rank", a_background_save_failing_on_rank_0_is_reported_at_the_next_save_on_every_rank},
                  {"a_background_index_rename_failure_is_reported_at_wait_and_step_2_not_committed", a_background_index_rename_failure_is_reported_at_wait_and_step_2_not_committed},
                  {"a_background_index_not_made_durable_is_reported_at_the_next_save_uncommitted", a_background_index_not_made_durable_is_reported_at_the_next_save_uncommitted}});
}
