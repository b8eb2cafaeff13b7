#include <ckpt/mpi.hpp>

#include "../atomic_file.hpp"
#include "../folder.hpp"
#include "../io_hooks.hpp"
#include "../manager_core.hpp"
#include "../posix_file.hpp"
#include "../sharded.hpp"
#include "../snapshot.hpp"
#include "common.hpp"
#include "step.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <memory>

#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace ckpt::mpi {
namespace {

using ckpt::detail::manager_lock_name;
constexpr std::string_view who = "mpi::checkpoint_manager";

using step_map = ckpt::detail::manager_core::step_map;

// The core's steps, damaged steps and undeletable ones, as rank 0 shares them.
struct shared_steps {
  step_map steps;
  std::vector<ckpt::detail::step_status> damaged;
  std::map<std::int64_t, std::string> undeletable;
};

// A folder of shards per step, committed by its index, written by the ranks together. Every rank
// holds the folder by its descriptor from open to close (src/folder.hpp); rank 0 checks that
// they all hold the folder it locked.
class mpi_state final : public ckpt::detail::manager_state {
 public:
  mpi_state(MPI_Comm comm, std::filesystem::path folder, checkpoint_manager::options opts)
      : manager_state(std::string(who), std::move(folder), std::move(opts)) {
    MPI_Comm_dup(comm, &comm_);
  }
  ~mpi_state() override {
    static_cast<void>(background.join());  // settled by ~checkpoint_manager, unless MPI is gone
    lock_ = ckpt::detail::file_descriptor(-1);  // releases the flock
    if (!finalized()) MPI_Comm_free(&comm_);
  }

  // Collective: rank 0 opens and locks the folder, then every rank opens it, checks that it is
  // the one rank 0 locked, and learns its steps.
  void open() {
    on_rank_0_then_share([this] { open_on_rank_0(); }, "checkpoint_manager");
    std::exception_ptr local_error;
    std::string token = rank() == 0 ? token_ : std::string();
    detail::broadcast(comm_, token, 0);
    if (rank() != 0) {
      try {
        folder_ = ckpt::detail::folder_handle::open(core.folder());
        if (!core.options().read_only && read_token() != token)
          throw std::runtime_error("ckpt: mpi::checkpoint_manager: the folder '" + core.folder().string() +
                                   "' is another folder on this rank than the one rank 0 opened and locked");
      } catch (...) {
        local_error = std::current_exception();
      }
    }
    detail::settle(comm_, local_error, core.folder(), "checkpoint_manager");
  }

  [[nodiscard]] std::filesystem::path path_of(std::int64_t step) const override {
    core.check_not_negative(step);
    return detail::step_folder(core.folder(), step);
  }

  // Collective: waits for this rank's background write and commits the step on every rank.
  void settle() override {
    if (!background.pending()) return;
    const std::exception_ptr local_error = background.join();
    // Without MPI, the ranks cannot agree: the step stays uncommitted (removed by the next manager).
    if (finalized()) return;
    commit(std::exchange(pending_, {}), local_error);
  }

  // Collective.
  std::optional<metadata_map> admit(std::int64_t step, const metadata_map& metadata, bool force) override {
    // The ranks must agree on the step before anything depends on it (a skip on some ranks only
    // would leave the others waiting in a collective). One reduction gives the largest and (as
    // ~max(~step)) the smallest step; ~ cannot overflow.
    std::int64_t bounds[2] = {step, ~step};
    MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_INT64_T, MPI_MAX, comm_);
    if (bounds[0] != ~bounds[1])
      throw std::invalid_argument(core.message("the ranks disagree on the step (from " + std::to_string(~bounds[1]) +
                                               " to " + std::to_string(bounds[0]) + ")"));
    // Rank 0's metadata and clock, so that every rank checks and records the same metric.
    std::string bytes;
    if (rank() == 0) {
      metadata_map merged = metadata;
      merged.insert_or_assign("step", std::to_string(step));
      merged.insert_or_assign("wall_time", ckpt::detail::wall_time_now());
      bytes = detail::encode(merged);
    }
    detail::broadcast(comm_, bytes, 0);
    metadata_map merged = detail::decode<metadata_map>(bytes);
    if (!core.admit(step, merged, force)) return std::nullopt;
    return merged;
  }

  // Collective.
  void save_now(std::int64_t step, std::span<const section> sections, const metadata_map& metadata) override {
    const detail::step_plan plan = plan_of(step, sections, metadata, "save");
    release_pages_of_dropped(plan);
    std::exception_ptr local_error;
    try {
      detail::write_shard(plan, sections, {.digest = core.options().digest});
    } catch (...) {
      local_error = std::current_exception();
    }
    commit(plan, local_error);
  }

  // Collective (the plan); the write is this rank's own.
  void save_in_background(std::int64_t step, std::span<const section> sections,
                          const metadata_map& metadata) override {
    pending_ = plan_of(step, sections, metadata, "save_async");
    release_pages_of_dropped(pending_);
    if (pending_.shard.empty()) {
      // Nothing of this rank's is written (another rank writes its entries): only the commit.
      background.finish(nullptr);
      return;
    }
    // A failure to copy is this rank's failure of the write, reported at the commit on every rank.
    try {
      background.start([plan = &pending_,
                        snapshot = std::make_shared<ckpt::detail::taken_snapshot>(ckpt::detail::take_snapshot(arena, sections, {}, true)),
                        digest = core.options().digest] {
        snapshot->finish();
        const section whole(snapshot->data());
        detail::write_shard(*plan, {&whole, 1}, {.digest = digest});
      });
    } catch (...) {
      background.finish(std::current_exception());
    }
  }

  // Collective.
  checkpoint load_step(std::int64_t step, const load_options& options) override {
    last_load_damaged_ = false;
    return detail::load_step(comm_, folder_, step, options, &last_load_damaged_);
  }

  // Collective: rank 0 looks; a step folder no longer committed (its index deleted, as the
  // writer's retention does first) is gone.
  bool gone(std::int64_t step) override {
    int answer = rank() == 0 && !detail::is_committed(folder_, detail::step_folder_name(step)) ? 1 : 0;
    MPI_Bcast(&answer, 1, MPI_INT, 0, comm_);
    return answer != 0;
  }

  // What every rank agreed on in load_step: some rank found the step's bytes wrong.
  [[nodiscard]] bool damaged_by(const std::exception& e) const override {
    return dynamic_cast<const collective_error*>(&e) != nullptr && last_load_damaged_;
  }

  // Collective: rank 0 deletes them, every rank learns what is left.
  std::vector<ckpt::detail::step_status> remove_damaged() override {
    const std::vector<ckpt::detail::step_status> before = core.damaged();
    on_rank_0_then_share([this] { static_cast<void>(core.remove_set_aside(folder_)); }, "remove_damaged");
    std::vector<ckpt::detail::step_status> removed;
    for (const ckpt::detail::step_status& s : before)
      if (std::ranges::none_of(core.damaged(), [&](const auto& d) { return d.path == s.path; })) removed.push_back(s);
    return removed;
  }

  // Collective: rank 0 sets the step folder aside, every rank learns of it.
  ckpt::detail::step_status set_aside(std::int64_t step, const std::string& reason) override {
    on_rank_0_then_share([&] { set_aside_on_rank_0(step, reason); }, "load");
    return core.damaged().back();
  }

 private:
  [[nodiscard]] int rank() const { return detail::rank_of(comm_); }

  [[nodiscard]] static bool finalized() {
    int done = 0;
    MPI_Finalized(&done);
    return done != 0;
  }

  // Rank 0, holding the lock: the committed steps, and the uncommitted step folders of a crashed
  // job removed (no save of ours runs, and a step without its index does not exist).
  void open_on_rank_0() {
    if (core.options().read_only) {
      // No lock, no clean-up: the committed steps as they are now.
      folder_ = ckpt::detail::folder_handle::open(core.folder());
      note_set_aside();
      static_cast<void>(core.add_existing(detail::committed_steps(folder_), [](std::int64_t) { return metadata_map{}; }));
      return;
    }
    folder_ = ckpt::detail::folder_handle::open(core.folder(), /*create=*/true);
    lock_ = folder_.lock(manager_lock_name);
    write_token();
    // Debris: a step folder without its index (a link so named is only unlinked, never followed).
    for (const std::string& name : folder_.names()) {
      if (!ckpt::detail::step_in_name(name, detail::step_prefix) || detail::is_committed(folder_, name)) continue;
      try {
        if (const auto info = folder_.status(name); info && (S_ISDIR(info->st_mode) || S_ISLNK(info->st_mode)))
          static_cast<void>(folder_.remove(name));
      } catch (const io_error&) {  // debris left is only wasted space
      }
    }
    note_set_aside();
    // Only the headers are needed for the metrics.
    const auto unreadable = core.add_existing(detail::committed_steps(folder_), [this](std::int64_t step) {
      return ckpt::detail::load_sharded(folder_.subfolder_to_read(detail::step_folder_name(step)), detail::index_file_name,
                                        {.verify_digest = false})
          .metadata();
    });
    for (const auto& [step, reason] : unreadable) set_aside_on_rank_0(step, reason);
    // Finishes the retention of a job that died between a commit and its deletions, so that
    // crashes do not pile up steps the rules drop (as the single-process manager does).
    retain();
  }

  // Rank 0: step folders set aside as damaged by an earlier run, listed as damaged.
  void note_set_aside() {
    for (const std::string& name : folder_.names())
      if (const auto step = ckpt::detail::step_set_aside(name, detail::step_prefix))
        core.mark_damaged(*step, folder_.path_of(name), "set aside as damaged by an earlier run");
  }

  // Rank 0: sets a damaged step's folder aside (a link is renamed as a link).
  void set_aside_on_rank_0(std::int64_t step, const std::string& reason) {
    static_cast<void>(core.set_aside(step, folder_, detail::step_folder_name(step), reason));
  }

  // Rank 0: deletes what the rules drop, the index first, so that a step is either committed and
  // whole or not there at all, even if this stops half-way. A step that is a link (a forked
  // run's) is unlinked: nothing it points at is touched. A step whose index cannot be deleted
  // stays, reported by status() (manager_core::retain); the folder of a step whose index is gone
  // is debris, removed as far as it can be (and by the next manager if not).
  void retain() {
    core.retain([this](std::int64_t step) {
      const std::string name = detail::step_folder_name(step);
      const std::optional<struct stat> info = folder_.status(name);
      if (!info) return;
      if (!S_ISDIR(info->st_mode)) {
        if (ckpt::detail::hooks().unlinkat(folder_.fd(), name.c_str(), 0) != 0 && errno != ENOENT)
          throw io_error(folder_.path_of(name), "remove", ckpt::detail::last_error());
        return;
      }
      const ckpt::detail::folder_handle dir = folder_.subfolder(name);
      const std::string index(detail::index_file_name);
      if (ckpt::detail::hooks().unlinkat(dir.fd(), index.c_str(), 0) != 0 && errno != ENOENT)
        throw io_error(dir.path_of(index), "remove", ckpt::detail::last_error());
      try {
        static_cast<void>(folder_.remove(name));
      } catch (const io_error&) {
      }
    });
  }

  // Rank 0, holding the lock: writes a random token into the lock file, which every other rank
  // reads through the folder it opened, to prove it is the one rank 0 locked.
  void write_token() {
    token_ = ckpt::detail::random_suffix() + ckpt::detail::random_suffix() + " " + std::to_string(::getpid());
    if (::ftruncate(lock_.get(), 0) != 0 ||
        ::pwrite(lock_.get(), token_.data(), token_.size(), 0) != static_cast<ssize_t>(token_.size()))
      throw io_error(folder_.path_of(manager_lock_name), "write the lock file", ckpt::detail::last_error());
  }

  // Another rank: the token in the lock file of the folder it opened.
  [[nodiscard]] std::string read_token() const {
    const ckpt::detail::file_descriptor fd(
        ::openat(folder_.fd(), std::string(manager_lock_name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) throw io_error(folder_.path_of(manager_lock_name), "open the lock file", ckpt::detail::last_error());
    std::string text(64, '\0');
    text.resize(ckpt::detail::read_fully(fd.get(), reinterpret_cast<std::byte*>(text.data()), text.size(), 0,
                                         folder_.path_of(manager_lock_name)));
    return text;
  }

  // Collective: rank 0 runs `work`, then every rank gets rank 0's list of steps, and every rank
  // throws if `work` failed.
  template <class F>
  void on_rank_0_then_share(F&& work, const std::string& operation) {
    std::exception_ptr local_error;
    if (rank() == 0) {
      try {
        work();
      } catch (...) {
        local_error = std::current_exception();
      }
    }
    std::string bytes =
        rank() == 0 ? detail::encode(shared_steps{core.all(), core.damaged(), core.undeletable()}) : std::string();
    detail::broadcast(comm_, bytes, 0);
    if (rank() != 0) {
      shared_steps shared = detail::decode<shared_steps>(bytes);
      core.replace_all(std::move(shared.steps));
      core.replace_damaged(std::move(shared.damaged));
      core.replace_undeletable(std::move(shared.undeletable));
    }
    detail::settle(comm_, local_error, core.folder(), operation);
  }

  // This rank's shards of the steps the retention will delete once `plan`'s step is committed give
  // their cached pages back before the new shard is written, as in the single-process manager
  // (each rank's pages are in its own node's cache). A shard named otherwise (another rank
  // count) is left alone: advice only.
  void release_pages_of_dropped(const detail::step_plan& plan) const {
    if (plan.shard.empty()) return;
    for (const std::int64_t old : core.to_drop_after(plan.step, plan.metadata)) {
      try {
        ckpt::detail::drop_cached_pages({folder_.subfolder(detail::step_folder_name(old)), plan.shard});
      } catch (const io_error&) {  // a step that is a link (not ours to advise on), or gone
      }
    }
  }

  // Collective: commits `plan`'s step once every rank's shard is written (`local_error` is this
  // rank's failure), then applies the retention rules.
  void commit(const detail::step_plan& plan, const std::exception_ptr& local_error) {
    detail::commit_step(comm_, plan, local_error);
    core.add(plan.step, plan.metadata);
    on_rank_0_then_share([this] { retain(); }, plan.operation);
  }

  // The step's plan, named after the calling member.
  detail::step_plan plan_of(std::int64_t step, std::span<const section> sections, const metadata_map& metadata,
                            std::string_view member) {
    return detail::plan_step(comm_, core.folder(), &folder_, step, sections, metadata,
                             "checkpoint_manager::" + std::string(member));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  ckpt::detail::folder_handle folder_;  // every rank's own descriptor of the folder
  ckpt::detail::file_descriptor lock_{-1};  // rank 0 only
  std::string token_;                        // rank 0: what it wrote into the lock file
  bool last_load_damaged_ = false;
  // The step this rank's background write belongs to.
  detail::step_plan pending_;
};

std::unique_ptr<mpi_state> opened(MPI_Comm comm, std::filesystem::path folder, checkpoint_manager::options opts) {
  auto state = std::make_unique<mpi_state>(comm, std::move(folder), std::move(opts));
  state->open();
  return state;
}

}  // namespace

checkpoint_manager::checkpoint_manager(MPI_Comm comm, std::filesystem::path folder, checkpoint_manager::options opts)
    : ckpt::checkpoint_manager(opened(comm, std::move(folder), std::move(opts))) {}

}  // namespace ckpt::mpi
