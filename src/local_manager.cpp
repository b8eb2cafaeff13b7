// ckpt::checkpoint_manager: a file a step, written by this process, on the one manager core
// (src/manager_core.hpp). The API is ckpt/manager.hpp; ckpt::mpi::checkpoint_manager is its
// MPI sibling (src/mpi/manager.cpp).
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/snapshot.hpp>

#include "atomic_file.hpp"
#include "io_hooks.hpp"
#include "manager_core.hpp"
#include "posix_file.hpp"
#include "sharded.hpp"
#include "file.hpp"
#include "temporary_name.hpp"

#include <algorithm>
#include <map>
#include <cerrno>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <unistd.h>

namespace ckpt {

namespace {

constexpr std::string_view file_prefix = "ckpt-";
constexpr std::string_view file_suffix = ".safetensors";
constexpr std::string_view lock_name = ".ckpt-manager.lock";
constexpr std::string_view who = "checkpoint_manager";

std::optional<std::int64_t> step_of(std::string_view name) {
  return detail::step_in_name(name, file_prefix, file_suffix);
}

// A leftover of a crashed ckpt::save of one of our own files.
bool is_own_temporary(std::string_view name) {
  const auto target = detail::target_of_temporary(name);
  return target && step_of(*target).has_value();
}

// A file per step, written by this process.
class local_state final : public detail::manager_state {
 public:
  local_state(std::filesystem::path folder, checkpoint_manager::options opts)
      : manager_state(std::string(who), std::move(folder), std::move(opts)) {}
  ~local_state() override {
    static_cast<void>(background.join());  // settled by checkpoint_manager_base already
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  }

  // Takes the lock, lists our checkpoints and removes leftover temporaries of our own saves; or,
  // read-only, lists the committed steps of either layout and touches nothing.
  void open() {
    if (core.options().read_only) {
      open_read_only();
      return;
    }
    lock_fd_ = detail::lock_exclusively(core.folder(), lock_name);
    std::vector<std::int64_t> steps;
    std::vector<std::filesystem::path> leftovers;
    detail::for_each_in_folder(core.folder(), [&](const std::string& name, const std::filesystem::path& path) {
      if (const auto step = step_of(name)) steps.push_back(*step);
      else if (is_own_temporary(name)) leftovers.push_back(path);
      else note_set_aside(name, path);
    });
    // We hold the lock, so no save of ours is writing them: they are debris of a crash. Failing
    // to remove one is harmless (it is ignored when listing), so that is not an error.
    std::error_code ec;
    for (const auto& path : leftovers) std::filesystem::remove(path, ec);
    // Only the headers are needed: verifying digests here would read every checkpoint whole.
    const auto unreadable = core.add_existing(steps, [this](std::int64_t step) {
      return load_step(step, {.verify_digest = false}).metadata();
    });
    for (const auto& [step, reason] : unreadable) static_cast<void>(set_aside(step, reason));
  }

  [[nodiscard]] std::filesystem::path path_of(std::int64_t step) const override {
    core.check_not_negative(step);
    if (const auto it = step_folders_.find(step); it != step_folders_.end()) return it->second;
    return core.folder() / detail::step_name(file_prefix, step, file_suffix);
  }

  void settle() override {
    if (!background.pending()) return;
    if (const std::exception_ptr error = background.join()) std::rethrow_exception(error);
    commit(pending_step_, pending_metadata_);
  }

  std::optional<metadata_map> admit(std::int64_t step, const metadata_map& metadata, bool force) override {
    metadata_map merged = metadata;
    merged.insert_or_assign("step", std::to_string(step));
    merged.insert_or_assign("wall_time", detail::wall_time_now());
    if (!core.admit(step, merged, force)) return std::nullopt;
    // Finishes the retention of a save that a crash interrupted between its rename and its
    // deletions, before adding a file, so that repeated crashes do not pile up checkpoints: the
    // folder never holds more than one checkpoint beyond what the rules keep. It deletes only
    // what the retention after this save would delete too, so without such a crash (or stricter
    // options than the last run's) it deletes nothing.
    retain();
    return merged;
  }

  void save_now(std::int64_t step, std::span<const section> sections, const metadata_map& metadata) override {
    release_pages_of_dropped(step, metadata);
    ckpt::save(path_of(step), sections, metadata, save_options{.digest = core.options().digest});
    commit(step, metadata);
  }

  void save_in_background(std::int64_t step, std::span<const section> sections,
                          const metadata_map& metadata) override {
    release_pages_of_dropped(step, metadata);
    pending_step_ = step;
    pending_metadata_ = metadata;
    // The job owns its snapshot and its path; the state is only touched by settle(), on the
    // caller's thread, after the job is joined.
    background.start([path = path_of(step), snapshot = arena.snapshot(sections, metadata), digest = core.options().digest] {
      ckpt::save(path, snapshot, save_options{.digest = digest});
    });
  }

  // A step is what a manager writes: a safetensors file, or (read-only) an MPI step folder, never
  // another format under a step's name (ckpt::load would read a torch.save file by its content).
  checkpoint load_step(std::int64_t step, const load_options& options) override {
    const std::filesystem::path path = path_of(step);
    if (step_folders_.contains(step)) return detail::load_sharded(path, options);
    return detail::load_file(path, options);
  }

  detail::step_status set_aside(std::int64_t step, const std::string& reason) override {
    return core.set_aside(step, path_of(step), reason);
  }

 private:
  // The checkpoints the retention will delete once `step` is saved give their cached pages back
  // before it is written, so that its file reuses them (see detail::drop_cached_pages). They stay
  // whole and readable: only the cache is dropped.
  void release_pages_of_dropped(std::int64_t step, const metadata_map& metadata) const {
    for (const std::int64_t old : core.to_drop_after(step, metadata)) detail::drop_cached_pages(path_of(old));
  }

  // Records `step`'s new file and applies the retention rules.
  void commit(std::int64_t step, const metadata_map& metadata) {
    core.add(step, metadata);
    retain();
  }

  void retain() {
    for (const std::int64_t step : core.to_drop()) {
      // Only after the new checkpoint is durable (save fsyncs it and the folder), so a crash
      // leaves at worst an old checkpoint too many. The unlink is not fsynced: if power loss
      // undoes it, the next manager lists the old file again and the next save drops it.
      const std::filesystem::path path = path_of(step);
      if (detail::hooks().unlink(path.c_str()) != 0 && errno != ENOENT)
        throw io_error(path, "remove", detail::last_error());
      core.forget(step);
    }
  }

  // Read-only: a step file of ours, or a committed step folder of ckpt::mpi::checkpoint_manager
  // (one with its index), each found in the folder as it is now. A step held both ways is
  // ambiguous: it is listed as damaged, with a reason naming both.
  void open_read_only() {
    std::vector<std::int64_t> steps;
    std::error_code ignored;
    detail::for_each_in_folder(core.folder(), [&](const std::string& name, const std::filesystem::path& path) {
      if (const auto step = step_of(name)) {
        steps.push_back(*step);
      } else if (const auto mpi_step = detail::step_in_name(name, detail::mpi_step_prefix);
                 mpi_step && std::filesystem::exists(path / detail::mpi_step_index, ignored)) {
        steps.push_back(*mpi_step);
        step_folders_.emplace(*mpi_step, path);
      } else {
        note_set_aside(name, path);
      }
    });
    std::ranges::sort(steps);
    std::vector<std::int64_t> unique;
    for (std::size_t i = 0, j = 0; i < steps.size(); i = j) {
      while (j < steps.size() && steps[j] == steps[i]) ++j;
      if (j - i == 1) {
        unique.push_back(steps[i]);
        continue;
      }
      const std::filesystem::path file = core.folder() / detail::step_name(file_prefix, steps[i], file_suffix);
      core.mark_damaged(steps[i], file,
                        "step " + std::to_string(steps[i]) + " is both the file '" + file.filename().string() +
                            "' and the MPI step folder '" + step_folders_.at(steps[i]).filename().string() +
                            "': remove or rename one of them");
      step_folders_.erase(steps[i]);
    }
    static_cast<void>(core.add_existing(unique, [](std::int64_t) { return metadata_map{}; }));
  }

  // A step of either layout set aside as damaged by an earlier run: listed as damaged.
  void note_set_aside(const std::string& name, const std::filesystem::path& path) {
    std::optional<std::int64_t> step = detail::step_set_aside(name, file_prefix, file_suffix);
    if (!step) step = detail::step_set_aside(name, detail::mpi_step_prefix);
    if (step) core.mark_damaged(*step, path, "set aside as damaged by an earlier run");
  }

  int lock_fd_ = -1;
  // The steps a read-only manager found as MPI step folders.
  std::map<std::int64_t, std::filesystem::path> step_folders_;
  // The step the background write is writing, and its metadata.
  std::int64_t pending_step_ = 0;
  metadata_map pending_metadata_;
};

std::unique_ptr<local_state> opened(std::filesystem::path folder, checkpoint_manager::options opts) {
  auto state = std::make_unique<local_state>(std::move(folder), std::move(opts));
  state->open();
  return state;
}

}  // namespace

checkpoint_manager::checkpoint_manager(std::filesystem::path folder, checkpoint_manager::options opts)
    : detail::checkpoint_manager_base(opened(std::move(folder), std::move(opts))) {}

}  // namespace ckpt
