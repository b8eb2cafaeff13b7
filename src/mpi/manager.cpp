#include <ckpt/mpi.hpp>
#include <ckpt/snapshot.hpp>

#include "../atomic_file.hpp"
#include "../manager_core.hpp"
#include "../posix_file.hpp"
#include "../sharded.hpp"
#include "common.hpp"
#include "step.hpp"

#include <unistd.h>

#include <optional>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace ckpt::mpi {
namespace {

constexpr std::string_view lock_name = ".ckpt-mpi-manager.lock";
constexpr std::string_view who = "mpi::checkpoint_manager";

using step_map = ckpt::detail::manager_core::step_map;

// The core's steps and damaged steps, as rank 0 shares them.
struct shared_steps {
  step_map steps;
  std::vector<ckpt::detail::step_status> damaged;
};

// A folder of shards per step, committed by its index, written by the ranks together.
class mpi_state final : public ckpt::detail::manager_state {
 public:
  mpi_state(MPI_Comm comm, std::filesystem::path folder, checkpoint_manager::options opts)
      : manager_state(std::string(who), std::move(folder), std::move(opts)) {
    MPI_Comm_dup(comm, &comm_);
  }
  ~mpi_state() override {
    static_cast<void>(background.join());  // settled by checkpoint_manager_base, unless MPI is gone
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
    if (!finalized()) MPI_Comm_free(&comm_);
  }

  // Collective: rank 0 opens the folder, every rank learns its steps.
  void open() {
    on_rank_0_then_share([this] { open_on_rank_0(); }, "checkpoint_manager");
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
      background.start([plan = &pending_, snapshot = arena.snapshot(sections), digest = core.options().digest] {
        const section whole(snapshot);
        detail::write_shard(*plan, {&whole, 1}, {.digest = digest});
      });
    } catch (...) {
      background.finish(std::current_exception());
    }
  }

  // Collective.
  checkpoint load_step(std::int64_t step, const load_options& options) override {
    return mpi::load(comm_, core.folder(), step, options);
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
      note_set_aside();
      static_cast<void>(core.add_existing(detail::committed_steps(core.folder()), [](std::int64_t) { return metadata_map{}; }));
      return;
    }
    lock_fd_ = ckpt::detail::lock_exclusively(core.folder(), lock_name);
    std::vector<std::filesystem::path> debris;
    ckpt::detail::for_each_in_folder(core.folder(), [&](const std::string& name, const std::filesystem::path& path) {
      std::error_code ignored;
      if (ckpt::detail::step_in_name(name, detail::step_prefix) && std::filesystem::is_directory(path, ignored) &&
          !std::filesystem::exists(path / detail::index_file_name, ignored))
        debris.push_back(path);
    });
    std::error_code ec;
    for (const auto& path : debris) std::filesystem::remove_all(path, ec);
    note_set_aside();
    // Only the headers are needed for the metrics.
    const auto unreadable = core.add_existing(detail::committed_steps(core.folder()), [this](std::int64_t step) {
      return ckpt::detail::load_sharded(path_of(step) / detail::index_file_name, {.verify_digest = false}).metadata();
    });
    for (const auto& [step, reason] : unreadable) set_aside_on_rank_0(step, reason);
    // Finishes the retention of a job that died between a commit and its deletions, so that
    // crashes do not pile up steps the rules drop (as the single-process manager does).
    retain();
  }

  // Rank 0: step folders set aside as damaged by an earlier run, listed as damaged.
  void note_set_aside() {
    ckpt::detail::for_each_in_folder(core.folder(), [&](const std::string& name, const std::filesystem::path& path) {
      if (const auto step = ckpt::detail::step_set_aside(name, detail::step_prefix))
        core.mark_damaged(*step, path, "set aside as damaged by an earlier run");
    });
  }

  // Rank 0: sets a damaged step's folder aside.
  void set_aside_on_rank_0(std::int64_t step, const std::string& reason) {
    static_cast<void>(core.set_aside(step, path_of(step), reason));
  }

  // Rank 0: deletes what the rules drop, the index first, so that a step is either committed and
  // whole or not there at all, even if this stops half-way.
  void retain() {
    for (const std::int64_t step : core.to_drop()) {
      const std::filesystem::path dir = path_of(step);
      const std::filesystem::path index = dir / detail::index_file_name;
      std::error_code ec;
      if (!std::filesystem::remove(index, ec) && ec) throw io_error(index, "remove", ec);
      core.forget(step);
      std::filesystem::remove_all(dir, ec);
      if (ec) throw io_error(dir, "remove", ec);
    }
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
    std::string bytes = rank() == 0 ? detail::encode(shared_steps{core.all(), core.damaged()}) : std::string();
    detail::broadcast(comm_, bytes, 0);
    if (rank() != 0) {
      shared_steps shared = detail::decode<shared_steps>(bytes);
      core.replace_all(std::move(shared.steps));
      core.replace_damaged(std::move(shared.damaged));
    }
    detail::settle(comm_, local_error, core.folder(), operation);
  }

  // This rank's shards of the steps the retention will delete once `plan`'s step is committed give
  // their cached pages back before the new shard is written, as in the single-process manager
  // (each rank's pages are in its own node's cache). A shard named otherwise (another rank
  // count) is left alone: advice only.
  void release_pages_of_dropped(const detail::step_plan& plan) const {
    if (plan.shard.empty()) return;
    for (const std::int64_t old : core.to_drop_after(plan.step, plan.metadata))
      ckpt::detail::drop_cached_pages(path_of(old) / plan.shard);
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
    return detail::plan_step(comm_, core.folder(), step, sections, metadata, "checkpoint_manager::" + std::string(member));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int lock_fd_ = -1;  // rank 0 only
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
    : ckpt::detail::checkpoint_manager_base(opened(comm, std::move(folder), std::move(opts))) {}

}  // namespace ckpt::mpi
