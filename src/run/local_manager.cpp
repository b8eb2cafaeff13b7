// ckpt::checkpoint_manager: a file a step, written by this process, on the one manager core
// (src/run/manager_core.hpp). The API is ckpt/manager.hpp; ckpt::mpi::checkpoint_manager is its
// MPI sibling (src/mpi/manager.cpp).
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>

#include "format/reader.hpp"
#include "format/remote.hpp"
#include "format/save.hpp"
#include "format/sharded.hpp"
#include "io/atomic_file.hpp"
#include "io/folder.hpp"
#include "io/io_hooks.hpp"
#include "io/posix_file.hpp"
#include "io/temporary_name.hpp"
#include "structures/section.hpp"
#include "structures/snapshot.hpp"
#include "manager_core.hpp"
#ifdef CKPT_HAVE_S3
#include "bucket_run.hpp"
#endif

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <string>
#include <vector>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <utility>

namespace ckpt {

namespace {

using detail::file_step_prefix;
using detail::file_step_suffix;
constexpr std::string_view who = "checkpoint_manager";

std::optional<std::int64_t> step_of(std::string_view name) {
  return detail::step_in_name(name, file_step_prefix, file_step_suffix);
}

// A leftover of a crashed ckpt::save of one of our own files.
bool is_own_temporary(std::string_view name) {
  const auto target = detail::target_of_temporary(name);
  return target && step_of(*target).has_value();
}

// A file per step, written by this process, in a folder held by its descriptor from open to close
// (src/io/folder.hpp): every listing, write, rename and deletion is relative to it.
class local_state final : public detail::manager_state {
 public:
  local_state(std::filesystem::path folder, checkpoint_manager::options opts)
      : manager_state(std::string(who), std::move(folder), std::move(opts)) {}
  ~local_state() override {
    static_cast<void>(background.join());  // settled by ~checkpoint_manager already
  }  // lock_ closes: releases the flock

  // Opens the folder and takes the lock, lists our checkpoints, removes leftover temporaries of
  // our own saves and applies the retention rules; or, read-only, lists the committed steps of
  // either layout and touches nothing.
  void open() {
    if (core.options().read_only) {
      folder_ = detail::folder_handle::open(core.folder());
      open_read_only();
      return;
    }
    folder_ = detail::folder_handle::open(core.folder(), /*create=*/true);
    lock_ = folder_.lock(detail::manager_lock_name);
    std::vector<std::int64_t> steps;
    std::vector<std::string> leftovers;
    for (std::string& name : folder_.names()) {
      if (const auto step = step_of(name)) steps.push_back(*step);
      else if (is_own_temporary(name)) leftovers.push_back(std::move(name));
      else note_set_aside(name);
    }
    // We hold the lock, so no save of ours is writing them: they are debris of a crash. Failing
    // to remove one is harmless (it is ignored when listing), so that is not an error; a folder of
    // that name is not ours.
    for (const std::string& name : leftovers) {
      try {
        if (const auto info = folder_.status(name); info && !S_ISDIR(info->st_mode)) static_cast<void>(folder_.remove(name));
      } catch (const io_error&) {
      }
    }
    // Only the headers are needed: verifying digests here would read every checkpoint whole.
    const auto unreadable = core.add_existing(steps, [this](std::int64_t step) {
      return load_step(step, {.verify_digest = false}).metadata();
    });
    for (const auto& [step, reason] : unreadable) static_cast<void>(set_aside(step, reason));
    // Finishes the retention of a save that a crash interrupted between its rename and its
    // deletions (or applies stricter options than the last run's), so that repeated crashes do
    // not pile up checkpoints: the folder never holds more than one checkpoint beyond what the
    // rules keep, as the MPI manager's.
    retain();
  }

  [[nodiscard]] std::filesystem::path path_of(std::int64_t step) const override {
    core.check_not_negative(step);
    if (const auto it = step_folders_.find(step); it != step_folders_.end()) return core.folder() / it->second;
    return core.folder() / name_of(step);
  }

  void settle() override {
    if (!background.pending()) return;
    if (const std::exception_ptr error = background.join()) std::rethrow_exception(error);
    commit(pending_step_, pending_metadata_);
  }

  std::optional<metadata_map> admit(std::int64_t step, const metadata_map& metadata, bool force) override {
    return detail::admit_here(core, step, metadata, force);
  }

  void save_now(std::int64_t step, std::span<const section> sections, const metadata_map& metadata) override {
    static_cast<void>(release_pages_of_dropped(step, metadata));
    detail::save_sections({folder_, name_of(step)}, sections, metadata, save_options{.digest = core.options().digest});
    commit(step, metadata);
  }

  void save_in_background(std::int64_t step, std::span<const section> sections,
                          const metadata_map& metadata) override {
    // The step files the retention rules will drop once this one is committed: the job deletes
    // them once the new step is durable, so that the next call, which commits, does not spend
    // the time of their unlink (a large file's takes a tenth of a second) on the caller's thread.
    // What the job could not delete, the commit's retention deals with as after a save.
    std::vector<std::string> dropped = release_pages_of_dropped(step, metadata);
    pending_step_ = step;
    pending_metadata_ = metadata;
    // The job owns its snapshot and its target (the folder held); the state is only touched by
    // settle(), on the caller's thread, after the job is joined.
    background.start([target = detail::file_at{folder_, name_of(step)},
                      snapshot = std::make_shared<detail::taken_snapshot>(detail::take_snapshot(
                          arena, sections, metadata, {.lazily = true, .as_file = true, .digest = core.options().digest})),
                      digest = core.options().digest, folder = folder_.fd(), dropped = std::move(dropped)] {
      snapshot->finish();
      detail::background_write::yield();
      // Direct I/O: the writer's CPU is the copy into its staging buffer and the hash, not the
      // kernel's copy into fresh page-cache pages, taken from a loop that uses every core.
      detail::save_checkpoint(target, snapshot->data(), save_options{.digest = digest}, detail::write_path::direct);
      // A step file only (a folder under a step's name fails here and is set aside by the commit).
      for (const std::string& name : dropped) static_cast<void>(detail::hooks().unlinkat(folder, name.c_str(), 0));
    });
  }

  // A step is what a manager writes: a safetensors file, or (read-only) an MPI step folder, never
  // another format under a step's name (ckpt::load would read a torch.save file by its content).
  // Read through a symbolic link if the step is one (a forked run's step may point at another's).
  checkpoint load_step(std::int64_t step, const load_options& options) override {
    const auto it = step_folders_.find(step);
    last_sources = {{it != step_folders_.end() ? it->second : name_of(step), checkpoint_manager::tier::folder, 0}};
    if (it != step_folders_.end())
      return detail::load_sharded(folder_.subfolder_to_read(it->second), detail::mpi_step_index, options);
    return detail::load_file({folder_, name_of(step)}, options);
  }

  std::vector<detail::step_status> remove_damaged() override { return core.remove_set_aside(folder_); }

  // A step file: no entry under its name at all (a dangling link is there, and damaged). An MPI
  // step folder (read-only): no longer committed, as the MPI manager's retention leaves it while
  // it deletes the step, index first.
  bool gone(std::int64_t step) override {
    if (const auto it = step_folders_.find(step); it != step_folders_.end()) return !is_committed_step_folder(it->second);
    try {
      return !folder_.status(name_of(step)).has_value();
    } catch (const io_error&) {
      return false;
    }
  }

  detail::step_status set_aside(std::int64_t step, const std::string& reason) override {
    const auto it = step_folders_.find(step);
    return core.set_aside(step, folder_, it != step_folders_.end() ? it->second : name_of(step), reason);
  }

 private:
  static std::string name_of(std::int64_t step) { return detail::step_name(file_step_prefix, step, file_step_suffix); }

  // The checkpoints the retention will delete once `step` is saved give their cached pages back
  // before it is written, so that its file reuses them (see detail::drop_cached_pages). They stay
  // whole and readable: only the cache is dropped. Returns their file names.
  std::vector<std::string> release_pages_of_dropped(std::int64_t step, const metadata_map& metadata) const {
    std::vector<std::string> names;
    for (const std::int64_t old : core.to_drop_after(step, metadata)) {
      names.push_back(name_of(old));
      detail::drop_cached_pages({folder_, names.back()});
    }
    return names;
  }

  // Records `step`'s new file and applies the retention rules.
  void commit(std::int64_t step, const metadata_map& metadata) {
    core.add(step, metadata);
    retain();
  }

  // Deletes what the rules drop, only after the new checkpoint is durable (save fsyncs it and the
  // folder), so a crash leaves at worst an old checkpoint too many. The unlink is not fsynced: if
  // power loss undoes it, the next manager lists the old file again and drops it. A step file
  // that is a folder is not a checkpoint: it is set aside as damaged. What cannot be deleted
  // stays, reported by status() (manager_core::retain).
  void retain() {
    core.retain([this](std::int64_t step) {
      const std::string name = name_of(step);
      const std::optional<struct stat> info = folder_.status(name);
      if (!info) return;
      if (S_ISDIR(info->st_mode)) {
        static_cast<void>(core.set_aside(step, folder_, name, "a folder, not a checkpoint file, under the step's name"));
        return;
      }
      if (detail::hooks().unlinkat(folder_.fd(), name.c_str(), 0) != 0 && errno != ENOENT)
        throw io_error(folder_.path_of(name), "remove", detail::last_error());
    });
  }

  // Read-only: a step file of ours, or a committed step folder of ckpt::mpi::checkpoint_manager
  // (one with its index), each found in the folder as it is now. A step held both ways is
  // ambiguous: it is listed as damaged, with a reason naming both.
  void open_read_only() {
    std::vector<std::int64_t> steps;
    for (std::string& name : folder_.names()) {
      if (const auto step = step_of(name)) {
        steps.push_back(*step);
      } else if (const auto mpi_step = detail::step_in_name(name, detail::mpi_step_prefix);
                 mpi_step && is_committed_step_folder(name)) {
        steps.push_back(*mpi_step);
        step_folders_.emplace(*mpi_step, std::move(name));
      } else {
        note_set_aside(name);
      }
    }
    std::ranges::sort(steps);
    std::vector<std::int64_t> unique;
    for (std::size_t i = 0, j = 0; i < steps.size(); i = j) {
      while (j < steps.size() && steps[j] == steps[i]) ++j;
      if (j - i == 1) {
        unique.push_back(steps[i]);
        continue;
      }
      const std::string file = name_of(steps[i]);
      core.mark_damaged(steps[i], core.folder() / file,
                        "step " + std::to_string(steps[i]) + " is both the file '" + file +
                            "' and the MPI step folder '" + step_folders_.at(steps[i]) + "': remove or rename one of them");
      step_folders_.erase(steps[i]);
    }
    static_cast<void>(core.add_existing(unique, [](std::int64_t) { return metadata_map{}; }));
  }

  // Whether the folder `name` holds its index, read through a link if it is one.
  [[nodiscard]] bool is_committed_step_folder(const std::string& name) const {
    struct stat info {};
    return ::fstatat(folder_.fd(), (name + "/" + std::string(detail::mpi_step_index)).c_str(), &info, 0) == 0 &&
           S_ISREG(info.st_mode);
  }

  // A step of either layout set aside as damaged by an earlier run: listed as damaged.
  void note_set_aside(const std::string& name) {
    std::optional<std::int64_t> step = detail::step_set_aside(name, file_step_prefix, file_step_suffix);
    if (!step) step = detail::step_set_aside(name, detail::mpi_step_prefix);
    if (step) core.mark_damaged(*step, folder_.path_of(name), "set aside as damaged by an earlier run");
  }

  detail::folder_handle folder_;
  detail::file_descriptor lock_{-1};
  // The steps a read-only manager found as MPI step folders, and their names.
  std::map<std::int64_t, std::string> step_folders_;
  // The step the background write is writing, and its metadata.
  std::int64_t pending_step_ = 0;
  metadata_map pending_metadata_;
};

std::unique_ptr<detail::manager_state> opened(std::filesystem::path folder, checkpoint_manager::options opts) {
  // A run in a bucket: the same manager, its files objects (src/run/bucket_run.hpp).
  if (detail::is_remote(folder)) {
#ifdef CKPT_HAVE_S3
    return detail::s3::open_run(std::move(folder), std::move(opts));
#else
    detail::refuse_without_s3(folder);
#endif
  }
  auto state = std::make_unique<local_state>(std::move(folder), std::move(opts));
  state->open();
  return state;
}

}  // namespace

checkpoint_manager::checkpoint_manager(std::filesystem::path folder, checkpoint_manager::options opts)
    : checkpoint_manager(opened(std::move(folder), std::move(opts))) {}

checkpoint_manager::checkpoint_manager(std::filesystem::path folder) : checkpoint_manager(std::move(folder), options{}) {}

}  // namespace ckpt
