#pragma once
// The one core of ckpt::checkpoint_manager (src/run/local_manager.cpp) and ckpt::mpi::checkpoint_manager
// (src/mpi/manager.cpp): option validation, the step-name codec, listing a folder, the list of
// steps with their keep-best metrics, the checks of a save's arguments, the retention decision,
// the wall_time stamp, and the background write whose outcome is collected once. What differs
// between the two managers is only where a step lives (a file, or a folder committed by its
// index) and who does the work (the process, or the ranks together).

#include <ckpt/checkpoint.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/snapshot.hpp>

#include "io/folder.hpp"

#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <span>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace ckpt::detail {

// The managers' member types (ckpt/manager.hpp), as the core names them.
using manager_options = checkpoint_manager::options;
using step_status = checkpoint_manager::step_status;
using step_state = checkpoint_manager::step_state;
using metric_mode = checkpoint_manager::metric_mode;

// The step codec: `<prefix><step, zero-padded to 10 digits><suffix>` ("ckpt-0000000042.safetensors",
// "step-0000000042").
[[nodiscard]] std::string step_name(std::string_view prefix, std::int64_t step, std::string_view suffix = {});

// The step of a name `step_name(prefix, step, suffix)` gives, or nothing for any other name: only
// the exact spelling counts, so that a user's "ckpt-7.safetensors" or "step-7" is never ours.
[[nodiscard]] std::optional<std::int64_t> step_in_name(std::string_view name, std::string_view prefix,
                                                       std::string_view suffix = {});

// The lock file of both managers: one name, so that neither writes a folder the other holds.
inline constexpr std::string_view manager_lock_name = ".ckpt-manager.lock";

// The names of the step files of ckpt::checkpoint_manager ("ckpt-0000000042.safetensors").
inline constexpr std::string_view file_step_prefix = "ckpt-";
inline constexpr std::string_view file_step_suffix = ".safetensors";

// The names of the step folders of ckpt::mpi::checkpoint_manager ("step-0000000042"), which a
// read-only ckpt::checkpoint_manager also reads.
inline constexpr std::string_view mpi_step_prefix = "step-";
// The index that commits such a folder (ckpt::mpi::detail::index_file_name, src/mpi/step.hpp).
inline constexpr std::string_view mpi_step_index = "model.safetensors.index.json";

// A run of ckpt::mpi::checkpoint_manager has an id (docs/distributed.md, "Runs and their ids"),
// made once by the first manager that opens the run's folder for writing and kept in the folder's
// file `.ckpt-run-id`; the run's node-local tiers live under `<tiers::local>/run-<id>/`, so that
// runs sharing a local root never see each other's steps. Each node's first rank notes the run's
// shared folder in `run-<id>/.ckpt-shared-folder`, for ckpt inspect of a local root.
inline constexpr std::string_view run_id_file_name = ".ckpt-run-id";
inline constexpr std::string_view run_folder_prefix = "run-";
inline constexpr std::string_view run_shared_folder_name = ".ckpt-shared-folder";
// A run id: this many letters and digits (random_suffix()es, src/io/atomic_file.hpp).
inline constexpr std::size_t run_id_length = 24;

// Whether `text` is a run id.
[[nodiscard]] bool is_run_id(std::string_view text) noexcept;
// The bytes of the small file `name` of `folder` (a link followed: reading changes nothing), or
// nothing if there is no such name.
// \throws error naming the file if it is longer than `limit` bytes; io_error naming it.
[[nodiscard]] std::optional<std::string> read_small_file(const folder_handle& folder, std::string_view name,
                                                         std::size_t limit);
// The run id kept in `folder` (its run_id_file_name, one line), or nothing if it has none.
// \throws error naming the file if it holds anything else; io_error naming it.
[[nodiscard]] std::optional<std::string> read_run_id(const folder_handle& folder);

// Damaged steps are set aside under `<name>.damaged`, or `<name>.damaged-K` (K = 2, 3, ...) when
// that is taken (manager_core::set_aside). The step of a name so given for `step_name(prefix, step, suffix)`, or nothing.
[[nodiscard]] std::optional<std::int64_t> step_set_aside(std::string_view name, std::string_view prefix,
                                                         std::string_view suffix = {});

// Whether an error of loading a step says that the step's bytes are wrong (see "Damaged steps" in
// include/ckpt/manager.hpp): a format_error (a broken rule, a digest that does not match), or an
// io_error saying that the step's name leads to no file (ENOENT: a symlink to nowhere; ELOOP,
// ENOTDIR). Any other failure (a permission, a resource, a read error) is not.
[[nodiscard]] bool is_damage(const std::exception& e) noexcept;

// Now, in UTC, as ISO 8601 with milliseconds: the `wall_time` metadata of a manager's checkpoint.
[[nodiscard]] std::string wall_time_now();

// What the set-aside and the removal of damaged steps need of where a run's files live: a folder
// held by its descriptor (run_files_of), or a bucket's prefix (src/run/bucket_run.cpp).
struct run_files {
  // Renames `from` to `to` unless `to` is taken (then false). \throws io_error, with ENOENT if
  // `from` is gone.
  std::function<bool(const std::string& from, const std::string& to)> rename_unless_taken;
  // Deletes `name`. \throws io_error naming it.
  std::function<void(const std::string& name)> remove;
  // Where `name` is, for messages and statuses.
  std::function<std::filesystem::path(const std::string& name)> path_of;
};

// The steps of one manager's folder and the rules over them.
class manager_core {
 public:
  // Every step with its keep-best metric (nothing if keep-best is off or the step has none).
  using step_map = std::map<std::int64_t, std::optional<double>>;

  // `who` names the manager in messages ("checkpoint_manager", "mpi::checkpoint_manager").
  // \throws std::invalid_argument if an option is out of range.
  manager_core(std::string who, std::filesystem::path folder, manager_options options);

  [[nodiscard]] const std::string& who() const noexcept { return who_; }
  [[nodiscard]] const std::filesystem::path& folder() const noexcept { return folder_; }
  [[nodiscard]] const manager_options& options() const noexcept { return options_; }
  [[nodiscard]] bool should_save(std::int64_t step) const noexcept { return step % options_.save_interval_steps == 0; }

  [[nodiscard]] std::vector<std::int64_t> steps() const;
  [[nodiscard]] std::optional<std::int64_t> latest_step() const noexcept;
  // \throws std::invalid_argument if there is no checkpoint for `step`.
  void require(std::int64_t step) const;
  // \throws std::invalid_argument if `step` is negative.
  void check_not_negative(std::int64_t step) const;

  // Checks a save of `step` with the file's `metadata` (the metric among them) and says whether
  // it is due: false for a step that is not `should_save` unless `force`.
  // \throws std::invalid_argument if `step` is negative or not newer than the latest step, or the
  // keep-best metric is not a number.
  [[nodiscard]] bool admit(std::int64_t step, const metadata_map& metadata, bool force) const;

  // The keep-best metric of a checkpoint with `metadata`.
  [[nodiscard]] std::optional<double> metric_of(const metadata_map& metadata) const;

  // Records `step`, whose file has `metadata`.
  void add(std::int64_t step, const metadata_map& metadata);
  // Records the steps found in the folder; if keep-best is on, `metadata_of(step)` gives each
  // one's metadata (read from its header) for its metric. Returns the steps whose header could
  // not be read (is_damage), with the error's message, unrecorded: the caller sets them aside.
  [[nodiscard]] std::vector<std::pair<std::int64_t, std::string>> add_existing(
      const std::vector<std::int64_t>& steps, const std::function<metadata_map(std::int64_t step)>& metadata_of);

  // The states of the steps (see ckpt::checkpoint_manager::step_status).
  void mark_intact(std::int64_t step) { intact_.insert(step); }
  // `step` is damaged: no longer a committed step; `path` is where it is now.
  void mark_damaged(std::int64_t step, std::filesystem::path path, std::string reason);
  // Committed `step`, whose checkpoint is `name` in `run`, is damaged: a writing manager renames
  // it aside (`<name>.damaged`, or `.damaged-K` if that is taken; a missing `name` is only
  // recorded), then it is marked damaged. Returns its status.
  // \throws io_error (or the run's own error) if the rename fails.
  const step_status& set_aside(std::int64_t step, const run_files& run, const std::string& name, std::string reason);
  const step_status& set_aside(std::int64_t step, const folder_handle& folder, const std::string& name,
                               std::string reason);
  [[nodiscard]] const std::vector<step_status>& damaged() const noexcept { return damaged_; }
  // Deletes the damaged steps set aside in `run` (a name `step_set_aside` reads; a step whose
  // set-aside failed keeps its own name and is left alone), never through a link, and forgets
  // them. Returns those deleted.
  // \throws io_error naming one that cannot be deleted; those deleted before are forgotten.
  std::vector<step_status> remove_set_aside(const run_files& run);
  std::vector<step_status> remove_set_aside(const folder_handle& folder);
  void replace_damaged(std::vector<step_status> damaged) { damaged_ = std::move(damaged); }
  // Every step with its state, ascending; `path_of` gives a committed step's path.
  [[nodiscard]] std::vector<step_status> status(const std::function<std::filesystem::path(std::int64_t)>& path_of) const;

  // The retention decision: the steps no rule keeps, oldest first.
  [[nodiscard]] std::vector<std::int64_t> to_drop() const;
  // Applies it: `remove(step)` deletes each step to_drop() names (returning once the step is no
  // longer committed), which is then forgotten. A step whose removal throws a ckpt::error (an
  // io_error, a bucket's remote_error) stays a step, marked undeletable with the error's message (status()), and the others are still
  // removed: a step that cannot be deleted never blocks a save (include/ckpt/manager.hpp).
  void retain(const std::function<void(std::int64_t step)>& remove);
  // The steps the retention rules drop but could not delete, with why.
  [[nodiscard]] const std::map<std::int64_t, std::string>& undeletable() const noexcept { return undeletable_; }
  void replace_undeletable(std::map<std::int64_t, std::string> undeletable) { undeletable_ = std::move(undeletable); }
  // What to_drop() would answer once `step` is added with `metadata`.
  [[nodiscard]] std::vector<std::int64_t> to_drop_after(std::int64_t step, const metadata_map& metadata) const;
  void forget(std::int64_t step) {
    steps_.erase(step);
    intact_.erase(step);
    undeletable_.erase(step);
  }

  [[nodiscard]] const step_map& all() const noexcept { return steps_; }
  void replace_all(step_map steps) { steps_ = std::move(steps); }

  // "ckpt: <who>: <what>", the message of the manager's misuse errors.
  [[nodiscard]] std::string message(const std::string& what) const;

 private:
  std::string who_;
  std::filesystem::path folder_;
  manager_options options_;
  step_map steps_;
  std::set<std::int64_t> intact_;     // committed steps this manager loaded
  std::vector<step_status> damaged_;  // in the order they were found
  std::map<std::int64_t, std::string> undeletable_;  // committed steps retention failed to delete
};

// At most one write on a background thread, whose error is handed over once.
class background_write {
 public:
  background_write() = default;
  background_write(const background_write&) = delete;
  background_write& operator=(const background_write&) = delete;
  // Waits for the write (its error is the owner's to collect first: see `join`).
  ~background_write();

  // Runs `job` on a new thread. There must be no write in flight.
  // \throws std::system_error if the thread cannot be started.
  void start(std::function<void()> job);
  // Records a write that ended at once, with `error` (null: nothing to write), for `join`.
  void finish(std::exception_ptr error) noexcept;
  // True between `start` (or `finish`) and `join`.
  [[nodiscard]] bool pending() const noexcept { return pending_; }
  // Waits for the write; its error, or null. The write is no longer pending afterwards.
  std::exception_ptr join() noexcept;
  // Called by a job on its thread once what the loop may wait for is done (its snapshot's
  // copies): the rest of the write runs at the lowest priority (tuning::writer_nice), in the time
  // the training threads leave idle. Where the system refuses, the job goes on as it was.
  static void yield() noexcept;

 private:
  std::thread worker_;
  std::exception_ptr error_;
  bool pending_ = false;
};

// Writes "ckpt: <who>: a background save to '<folder>' failed and nobody called wait(): <what>"
// to stderr: what a destructor does with an error it cannot throw.
void report_uncollected(std::string_view who, const std::filesystem::path& folder, const std::exception_ptr& error) noexcept;

// A manager of one process (a folder's or a bucket's): `metadata` with the step and this
// process's clock (`wall_time`), if `core` admits the save.
[[nodiscard]] std::optional<metadata_map> admit_here(const manager_core& core, std::int64_t step,
                                                     const metadata_map& metadata, bool force);

// The state behind a ckpt::checkpoint_manager: the core, the background write and the arena of its
// snapshots, and what each manager does its own way (local_state, src/run/local_manager.cpp; mpi_state,
// src/mpi/manager.cpp; remote_run, src/run/bucket_run.cpp). checkpoint_manager's members (in
// manager_core.cpp) are the one implementation of the rules over these, for every manager: an MPI
// manager is a checkpoint_manager over an mpi_state, and stays one when moved into a plain
// checkpoint_manager.
class manager_state {
 public:
  manager_state(std::string who, std::filesystem::path folder, manager_options options)
      : core(std::move(who), std::move(folder), std::move(options)) {}
  manager_state(const manager_state&) = delete;
  manager_state& operator=(const manager_state&) = delete;
  virtual ~manager_state() = default;

  manager_core core;
  background_write background;
  // Buffers of the snapshots of save_async, reused from save to save.
  snapshot_arena arena;

  [[nodiscard]] virtual std::filesystem::path path_of(std::int64_t step) const = 0;
  // Waits for the background write, and commits its step or throws its error, once.
  virtual void settle() = 0;
  // settle(), and whatever else runs in the background too (the MPI manager's drain to its shared
  // tier): what wait() and the destructor do.
  virtual void settle_all() { settle(); }
  // The metadata a save of `sections` brings, before the manager's own keys: those of its
  // checkpoint sections with `metadata` over them (detail::merged_metadata, a conflict refused
  // naming the manager and `operation`, save or save_async, before anything is written).
  // Collective in the MPI manager.
  [[nodiscard]] virtual metadata_map given_metadata(std::span<const section> sections, const metadata_map& metadata,
                                                    std::string_view operation);
  // After settle(): checks a save of `step`; the metadata of its files, or nothing to skip it.
  virtual std::optional<metadata_map> admit(std::int64_t step, const metadata_map& metadata, bool force) = 0;
  // Writes and commits `step`.
  virtual void save_now(std::int64_t step, std::span<const section> sections, const metadata_map& metadata) = 0;
  // Starts the background write of `step`, committed by the next settle().
  virtual void save_in_background(std::int64_t step, std::span<const section> sections,
                                  const metadata_map& metadata) = 0;
  // After settle(): reads committed `step`, and sets `last_sources` to where its files came from.
  [[nodiscard]] virtual checkpoint load_step(std::int64_t step, const load_options& options) = 0;
  // What the last load_step read, for latest::sources.
  std::vector<checkpoint_manager::source> last_sources;
  // Committed `step` was found damaged (`reason`): sets it aside (a writing manager renames it)
  // and records it in the core as damaged. Returns its status.
  virtual step_status set_aside(std::int64_t step, const std::string& reason) = 0;
  // Deletes the damaged steps set aside (manager_core::remove_set_aside); returns those deleted.
  virtual std::vector<step_status> remove_damaged() = 0;
  // Whether `e`, thrown by load_step, says the step is damaged (is_damage; the MPI manager's
  // load agrees on it across the ranks).
  [[nodiscard]] virtual bool damaged_by(const std::exception& e) const { return is_damage(e); }
  // After a load of committed `step` failed: whether the step is simply gone, deleted since it was
  // listed (by a writer's retention, while this manager reads), rather than damaged or unreadable.
  // Collective in the MPI manager.
  [[nodiscard]] virtual bool gone(std::int64_t step) = 0;

  // settle_all(), its error written to stderr: what a destructor does.
  void settle_quietly() noexcept;
};

}  // namespace ckpt::detail
