// The policy of ckpt::checkpoint_manager (src/run/policy.hpp): one process writes a file a step
// (`ckpt-<step, 10 digits>.safetensors`, src/run/layout.hpp) into its run's store, a folder held by
// its descriptor or a bucket's prefix (src/run/store.hpp). Read-only, it also reads the committed
// step folders of an MPI job's run.
#include "layout.hpp"
#include "policy.hpp"
#include "store.hpp"

#include <ckpt/error.hpp>

#include "format/save.hpp"
#include "structures/section.hpp"
#include "structures/snapshot.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace ckpt::detail {

namespace {

class single_process final : public manager_state {
 public:
  single_process(std::filesystem::path where, manager_options options)
      : manager_state("checkpoint_manager", where, std::move(options)),
        store_(open_store(where, /*create=*/!core.options().read_only)) {}
  ~single_process() override {
    static_cast<void>(background.join());  // settled by ~checkpoint_manager already
  }  // lock_ closes: releases the flock

  // Takes the run's lock (where the store has locks), lists the steps, removes what crashed saves
  // of our own steps left and applies the retention rules; or, read-only, lists the committed
  // steps of either layout and touches nothing.
  void open() {
    const bool writing = !core.options().read_only;
    if (writing) lock_ = store_->hold(layout::lock_name);
    std::vector<std::int64_t> steps;
    for (const layout::item& x : layout::describe(*store_)) {
      switch (x.kind) {
        case layout::what::step_file:
          steps.push_back(*x.step);
          break;
        case layout::what::step_folder:
          if (writing) break;  // an MPI job's step: read, never written or deleted here
          steps.push_back(*x.step);
          step_folders_.emplace(*x.step, x.name);
          break;
        case layout::what::set_aside:
          core.mark_damaged(*x.step, store_->path_of(x.name), "set aside as damaged by an earlier run");
          break;
        case layout::what::step_temporary:
          // We hold the lock, so no save of ours is writing it: debris of a crash. Failing to
          // remove it is harmless (it is not a step), so that is not an error.
          if (writing) {
            try {
              static_cast<void>(store_->remove(x.name));
            } catch (const error&) {
            }
          }
          break;
        default:
          break;
      }
    }
    if (writing) store_->abandon_writes([](std::string_view name) { return layout::step_of_file(name).has_value(); });
    // Keep-best needs each step's metric, from its header alone (verifying digests here would read
    // every checkpoint whole); a read-only manager applies no retention rule.
    const auto unreadable = core.add_existing(unique_steps(std::move(steps)), [this, writing](std::int64_t step) {
      return writing ? store_->metadata(name_of(step)) : metadata_map{};
    });
    for (const auto& [step, reason] : unreadable) static_cast<void>(set_aside(step, reason));
    // Finishes the retention of a save that a crash interrupted between its commit and its
    // deletions (or applies stricter options than the last run's), so that repeated crashes do
    // not pile up checkpoints: the run never holds more than one checkpoint beyond what the rules
    // keep, as the MPI manager's.
    if (writing) retain();
  }

  [[nodiscard]] std::filesystem::path path_of(std::int64_t step) const override {
    core.check_not_negative(step);
    return store_->path_of(name_of(step));
  }

  void settle() override {
    if (!background.pending()) return;
    if (const std::exception_ptr error = background.join()) std::rethrow_exception(error);
    commit(pending_step_, pending_metadata_);
  }

  std::optional<metadata_map> admit(std::int64_t step, const metadata_map& metadata, bool force) override {
    return admit_here(core, step, metadata, force);
  }

  void save_now(std::int64_t step, std::span<const section> sections, const metadata_map& metadata) override {
    static_cast<void>(release_pages_of_dropped(step, metadata));
    const std::string name = name_of(step);
    const std::unique_ptr<store::file> file = store_->create(name, store::existing::kept);
    save_sections(file->sink(), sections, metadata, options());
    commit_file(*file, name);
    commit(step, metadata);
  }

  void save_in_background(std::int64_t step, std::span<const section> sections,
                          const metadata_map& metadata) override {
    // The step files the retention rules will drop once this one is committed: the job deletes
    // them once the new step is durable, so that the next call, which commits, does not spend
    // the time of their deletion (a large file's unlink takes a tenth of a second) on the
    // caller's thread. What the job could not delete, the commit's retention deals with.
    std::vector<std::string> dropped = release_pages_of_dropped(step, metadata);
    pending_step_ = step;
    pending_metadata_ = metadata;
    // The job owns its snapshot; the state is only touched by settle(), on the caller's thread,
    // after the job is joined. With direct I/O (a folder), the snapshot is laid out as the file.
    background.start([this, name = name_of(step), dropped = std::move(dropped),
                      snapshot = std::make_shared<taken_snapshot>(take_snapshot(
                          arena, sections, metadata,
                          {.lazily = true, .as_file = store_->direct_io(), .digest = core.options().digest}))] {
      snapshot->finish();
      background.yield();
      const std::unique_ptr<store::file> file = store_->create(name, store::existing::kept, write_path::direct);
      save_checkpoint(file->sink(), snapshot->data(), options(), write_path::direct);
      commit_file(*file, name);
      // Step files only: a folder under a step's name is set aside by the commit's retention.
      for (const std::string& old : dropped) {
        try {
          if (store_->find(old) == store::kind::file) static_cast<void>(store_->remove(old));
        } catch (const error&) {
        }
      }
    });
  }

  // A step is what a manager writes: a safetensors file, or (read-only) an MPI step folder,
  // never another format under a step's name. Read through a link if the step is one (a forked
  // run's step may point at another's).
  checkpoint load_step(std::int64_t step, const load_options& options) override {
    const auto it = step_folders_.find(step);
    last_sources = {{name_of(step), checkpoint_manager::tier::folder, 0}};
    return store_->load(it != step_folders_.end() ? layout::index_of(step) : name_of(step), options);
  }

  std::vector<step_status> remove_damaged() override { return core.remove_set_aside(*store_); }

  // A step file: no entry under its name at all (a dangling link is there, and damaged). An MPI
  // step folder (read-only): no longer committed, as the MPI manager's retention leaves it while
  // it deletes the step, index first.
  bool gone(std::int64_t step) override {
    try {
      if (step_folders_.contains(step)) return !layout::committed_step_folder(*store_, name_of(step));
      return !store_->find(name_of(step)).has_value();
    } catch (const error&) {
      return false;
    }
  }

  step_status set_aside(std::int64_t step, const std::string& reason) override {
    return core.set_aside(step, *store_, name_of(step), reason);
  }

 private:
  // The name of `step` in the store: its file, or (read-only) the MPI step folder found for it.
  [[nodiscard]] std::string name_of(std::int64_t step) const {
    if (const auto it = step_folders_.find(step); it != step_folders_.end()) return it->second;
    return layout::step_file(step);
  }
  [[nodiscard]] save_options options() const { return {.digest = core.options().digest}; }

  // A step held both as a file and (read-only) as an MPI step folder is ambiguous: it is listed as
  // damaged, with a reason naming both. The others, once each, ascending.
  std::vector<std::int64_t> unique_steps(std::vector<std::int64_t> steps) {
    std::ranges::sort(steps);
    std::vector<std::int64_t> unique;
    for (std::size_t i = 0, j = 0; i < steps.size(); i = j) {
      while (j < steps.size() && steps[j] == steps[i]) ++j;
      if (j - i == 1) {
        unique.push_back(steps[i]);
        continue;
      }
      const std::string file = layout::step_file(steps[i]);
      core.mark_damaged(steps[i], store_->path_of(file),
                        "step " + std::to_string(steps[i]) + " is both the file '" + file + "' and the MPI step folder '" +
                            step_folders_.at(steps[i]) + "': remove or rename one of them");
      step_folders_.erase(steps[i]);
    }
    return unique;
  }

  // Commits the step file `name`, never over a file there: in a bucket, another writer of the run
  // may have committed the step since this manager listed it (see s3::upload::commit for how far a
  // server without conditional writes guarantees it); a folder is held by the lock.
  void commit_file(store::file& file, const std::string& name) const {
    if (!file.commit())
      throw io_error(store_->path_of(name),
                     "commit the step (another writer of the run committed it since this manager listed the run: a "
                     "step is never overwritten) at",
                     std::make_error_code(std::errc::file_exists));
  }

  // The checkpoints the retention will delete once `step` is saved give their cached pages back
  // before it is written, so that its file reuses them (store::drop_cache). They stay whole and
  // readable: only the cache is dropped. Returns their names.
  std::vector<std::string> release_pages_of_dropped(std::int64_t step, const metadata_map& metadata) const {
    std::vector<std::string> names;
    for (const std::int64_t old : core.to_drop_after(step, metadata)) {
      names.push_back(layout::step_file(old));
      store_->drop_cache(names.back());
    }
    return names;
  }

  // Records `step`'s new file and applies the retention rules.
  void commit(std::int64_t step, const metadata_map& metadata) {
    core.add(step, metadata);
    retain();
  }

  // Deletes what the rules drop, only once the new checkpoint is durable, so a crash leaves at
  // worst an old checkpoint too many (a deletion is not synced: if power loss undoes it, the next
  // manager lists the old file again and drops it). A folder under a step's name is not a
  // checkpoint: it is set aside as damaged. What cannot be deleted stays, reported by status()
  // (manager_core::retain).
  void retain() {
    core.retain([this](std::int64_t step) {
      const std::string name = layout::step_file(step);
      const std::optional<store::kind> kind = store_->find(name);
      if (!kind) return;
      if (*kind == store::kind::folder) {
        static_cast<void>(core.set_aside(step, *store_, name, "a folder, not a checkpoint file, under the step's name"));
        return;
      }
      static_cast<void>(store_->remove(name));
    });
  }

  std::unique_ptr<store> store_;
  std::optional<file_descriptor> lock_;
  // The steps a read-only manager found as MPI step folders, and their names.
  std::map<std::int64_t, std::string> step_folders_;
  // The step the background write is writing, and its metadata.
  std::int64_t pending_step_ = 0;
  metadata_map pending_metadata_;
};

}  // namespace

std::unique_ptr<manager_state> open_single_process(std::filesystem::path where, manager_options options) {
  auto state = std::make_unique<single_process>(std::move(where), std::move(options));
  state->open();
  return state;
}

}  // namespace ckpt::detail
