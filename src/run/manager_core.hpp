#pragma once
// The rules over a run's steps, one core for every manager (src/run/policy.hpp): the options
// checked, the list of steps with their keep-best metrics and states, the checks of a save, the
// retention decision, what counts as damage and what is done with a damaged step. Where a step
// lives is the run's layout (src/run/layout.hpp) in its store (src/run/store.hpp); who does the
// work is the manager's policy.

#include <ckpt/checkpoint.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/snapshot.hpp>

#include "store.hpp"

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

// Whether an error of loading a step says that the step's bytes are wrong (see "Damaged steps" in
// include/ckpt/manager.hpp): a format_error (a broken rule, a digest that does not match), or an
// io_error saying that the step's name leads to no file (ENOENT: a symlink to nowhere; ELOOP,
// ENOTDIR). Any other failure (a permission, a resource, a read error) is not.
[[nodiscard]] bool is_damage(const std::exception& e) noexcept;

// Now, in UTC, as ISO 8601 with milliseconds: the `wall_time` metadata of a manager's checkpoint.
[[nodiscard]] std::string wall_time_now();

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
  const step_status& set_aside(std::int64_t step, const store& run, const std::string& name, std::string reason);
  [[nodiscard]] const std::vector<step_status>& damaged() const noexcept { return damaged_; }
  // Deletes the damaged steps set aside in `run` (a name `step_set_aside` reads; a step whose
  // set-aside failed keeps its own name and is left alone), never through a link, and forgets
  // them. Returns those deleted.
  // \throws io_error naming one that cannot be deleted; those deleted before are forgotten.
  std::vector<step_status> remove_set_aside(const store& run);
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

// A manager of one process (a folder's or a bucket's): `metadata` with the step and this
// process's clock (`wall_time`), if `core` admits the save.
[[nodiscard]] std::optional<metadata_map> admit_here(const manager_core& core, std::int64_t step,
                                                     const metadata_map& metadata, bool force);

}  // namespace ckpt::detail
