#include <ckpt/mpi.hpp>

#include "io/atomic_file.hpp"
#include "io/folder.hpp"
#include "io/posix_file.hpp"
#include "io/remote_path.hpp"
#include "run/layout.hpp"
#include "run/policy.hpp"
#include "run/store.hpp"
#include "structures/snapshot.hpp"
#include "common.hpp"
#include "step.hpp"
#include "tiers.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace ckpt::mpi {
namespace {

using ckpt::detail::layout::lock_name;
constexpr std::string_view who = "mpi::checkpoint_manager";

using step_map = ckpt::detail::manager_core::step_map;

// The core's steps, damaged steps and undeletable ones, as rank 0 shares them.
struct shared_steps {
  step_map steps;
  std::vector<ckpt::detail::step_status> damaged;
  std::map<std::int64_t, std::string> undeletable;
};

// What rank 0 tells the other ranks of the folder it opened: the token it wrote into the lock
// file, and the run's id.
struct opened_folder {
  std::string token;
  std::string run_id;
};

// The collective policy over a run's store (src/run/store.hpp, src/run/layout.hpp): a folder of
// shards per step, committed by its index, written by the ranks together. Every rank holds the
// run's store from open to close: a folder by its descriptor (src/io/folder.hpp), rank 0 checking
// that they all hold the folder it locked; or a bucket's prefix, which has no lock. With a local
// tier (ckpt::mpi::tiers, src/mpi/tiers.hpp), every step goes to the nodes' local folders and
// every drain_every-th one is drained to the run's store, the shared tier, on a second background
// thread.
class mpi_state final : public ckpt::detail::manager_state {
 public:
  mpi_state(MPI_Comm comm, std::filesystem::path folder, checkpoint_manager::options opts, tiers levels)
      : manager_state(std::string(who), std::move(folder), std::move(opts)), levels_(std::move(levels)) {
    MPI_Comm_dup(comm, &comm_);
  }
  ~mpi_state() override {
    static_cast<void>(background.join());  // settled by ~checkpoint_manager, unless MPI is gone
    static_cast<void>(drain_.join());
    tiers_.reset();  // frees its node communicator while MPI is there
    lock_.reset();   // releases the flock
    if (finalized()) return;
    if (background_comm_ != MPI_COMM_NULL) MPI_Comm_free(&background_comm_);
    if (drain_comm_ != MPI_COMM_NULL) MPI_Comm_free(&drain_comm_);
    MPI_Comm_free(&comm_);
  }

  // Collective: rank 0 opens and locks the run's store (a folder; a bucket has no lock) and reads or
  // makes the run's id, then every rank opens it, checks that it is the one rank 0 locked, and
  // learns its steps and the run's id; then the run's local tier, if there is one.
  void open() {
    check_tiers();
    open_shared();
    // With MPI_THREAD_MULTIPLE on every rank, save_async's thread writes a step of slices and
    // sends the partner copies, on a communicator of its own.
    int level = MPI_THREAD_SINGLE;
    MPI_Query_thread(&level);
    MPI_Allreduce(MPI_IN_PLACE, &level, 1, MPI_INT, MPI_MIN, comm_);
    if (level == MPI_THREAD_MULTIPLE) MPI_Comm_dup(comm_, &background_comm_);
    if (levels_.local.empty()) return;
    // The drain of a step of slices writes collectively too: on a communicator of its thread's own.
    if (level == MPI_THREAD_MULTIPLE) MPI_Comm_dup(comm_, &drain_comm_);
    tiers_ = std::make_unique<detail::local_tiers>(comm_, levels_, run_id_, core.folder());
    for (const auto& [step, metric] : core.all()) drained_.insert(step);
    // A step is listed while any tier holds it whole (the local tiers know no keep-best metric);
    // the local copies of a listed step are kept even if some node's are gone (the shared folder
    // serves the rest), the others are debris.
    const std::map<std::int64_t, bool> held = tiers_->held_steps();
    for (const auto& [step, whole] : held)
      if (whole && !core.all().contains(step)) core.add(step, {});
    for (const auto& [step, whole] : held)
      if (core.all().contains(step)) local_steps_.insert(step);
    on_rank_0_then_share([this] { retain(/*defer=*/false); }, "checkpoint_manager");
    keep_local(levels_.local_max_to_keep);
  }

  // The shared folder: see open().
  void open_shared() {
    on_rank_0_then_share([this] { open_on_rank_0(); }, "checkpoint_manager");
    std::exception_ptr local_error;
    std::string bytes = rank() == 0 ? detail::encode(opened_folder{token_, run_id_}) : std::string();
    detail::broadcast(comm_, bytes, 0);
    const auto [token, run_id] = detail::decode<opened_folder>(bytes);
    run_id_ = run_id;
    if (rank() != 0) {
      try {
        store_ = ckpt::detail::open_store(core.folder(), /*create=*/false);
        if (!token.empty() && read_token() != token)
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

  // Collective: waits for this rank's background write and commits the step on every rank; then
  // commits a drain that every rank has finished.
  void settle() override {
    if (background.pending()) {
      const std::exception_ptr local_error = background.join();
      // Without MPI, the ranks cannot agree: the step stays uncommitted (removed by the next manager).
      if (finalized()) return;
      commit(std::exchange(pending_, {}), local_error, /*copies_sent=*/background_comm_ != MPI_COMM_NULL,
             /*defer_deletions=*/true);
    }
    finish_drain(false);
  }

  // Collective: settle(), then waits for the drain and commits it; the dropped steps' folders are
  // deleted before it returns.
  void settle_all() override {
    settle();
    if (finalized()) return;
    finish_drain(true);
    clear_debris(*store_, std::exchange(debris_, {}));
    MPI_Barrier(comm_);  // the folder is tidy on every rank's return
  }

  // Collective: a conflict on any rank fails the save on every rank (one MPI_Allreduce).
  [[nodiscard]] metadata_map given_metadata(std::span<const section> sections, const metadata_map& metadata,
                                            std::string_view operation) override {
    metadata_map merged;
    std::exception_ptr local_error;
    try {
      merged = manager_state::given_metadata(sections, metadata, operation);
    } catch (...) {
      local_error = std::current_exception();
    }
    detail::settle(comm_, local_error, core.folder(), "checkpoint_manager::" + std::string(operation));
    return merged;
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
    if (tiers_) {
      tiers_->keep_only(make_room_in_local(plan));
      MPI_Barrier(comm_);  // the memory is free before any rank writes
    }
    std::exception_ptr local_error;
    write_step(comm_, plan, sections, local_error);
    commit(plan, local_error, /*copies_sent=*/false, /*defer_deletions=*/false);
  }

  // Collective (the plan); the write is this rank's own.
  void save_in_background(std::int64_t step, std::span<const section> sections,
                          const metadata_map& metadata) override {
    pending_ = plan_of(step, sections, metadata, "save_async");
    release_pages_of_dropped(pending_);
    const bool sliced = !pending_.sliced.empty();
    // The writes of a step of slices are collective MPI-IO calls: without a communicator for the
    // background thread, they are made here, and the next call commits the step as usual (with a
    // local tier, each rank writes its part on its own: in the background).
    if (sliced && !tiers_ && background_comm_ == MPI_COMM_NULL) {
      clear_debris(*store_, std::exchange(debris_, {}));
      std::exception_ptr error;
      write_step(comm_, pending_, sections, error);
      background.finish(error);
      return;
    }
    // The deletions are the background thread's (its first work), not the caller's.
    const std::set<std::int64_t> room = tiers_ ? make_room_in_local(pending_) : std::set<std::int64_t>{};
    // With partner copies or a step of slices written in the background, every rank's thread
    // takes part in the exchange.
    const bool exchange = background_comm_ != MPI_COMM_NULL && (tiers_ || sliced);
    if (pending_.mine.empty() && !exchange) {
      // Nothing of this rank's is written (another rank writes its entries): only the commit.
      clear_debris(*store_, std::exchange(debris_, {}));
      background.finish(nullptr);
      return;
    }
    // A failure to copy is this rank's failure of the write, reported at the commit on every rank.
    std::shared_ptr<ckpt::detail::taken_snapshot> snapshot;
    std::exception_ptr failed;
    slice_places slices;
    try {
      if (!pending_.mine.empty())
        snapshot = std::make_shared<ckpt::detail::taken_snapshot>(
            ckpt::detail::take_snapshot(arena, sliced ? without_slices(sections, slices) : sections, pending_.metadata,
                                        {.lazily = true, .as_file = !sliced && store_->direct_io(),
                                         .digest = core.options().digest}));
    } catch (...) {
      failed = std::current_exception();
    }
    const auto job = [this, plan = &pending_, snapshot, failed, room, slices = std::move(slices),
                      debris = std::exchange(debris_, {})] {
      clear_debris(*store_, debris);
      if (tiers_) tiers_->keep_only(room);
      std::exception_ptr error = failed;
      std::vector<section> copy;  // the snapshot's entries (a step of slices: as slices again)
      if (!error && snapshot) {
        try {
          snapshot->finish();
          background.yield();
          copy.push_back(slices.empty() ? section(snapshot->data()) : with_slices(snapshot->data(), slices));
        } catch (...) {
          error = std::current_exception();
        }
      }
      if (!plan->sliced.empty()) {
        write_step(background_comm_, *plan, copy, error);
      } else if (!error && snapshot) {
        write_step(MPI_COMM_NULL, *plan, copy, error, ckpt::detail::write_path::direct);
      }
      if (tiers_ && background_comm_ != MPI_COMM_NULL) tiers_->send_partner_copies(*plan, error, background_comm_);
      if (error) std::rethrow_exception(error);
    };
    try {
      background.start(job);
    } catch (...) {
      // No thread: the job runs here (its exchange must happen: the other ranks' threads wait for it).
      std::exception_ptr error;
      try {
        job();
      } catch (...) {
        error = std::current_exception();
      }
      background.finish(error);
    }
  }

  // Collective.
  checkpoint load_step(std::int64_t step, const load_options& options) override {
    last_load_damaged_ = false;
    if (tiers_) return tiers_->load(*store_, step, options, last_sources, &last_load_damaged_);
    return detail::load_step(comm_, *store_, step, options, &last_load_damaged_, &last_sources);
  }

  // Collective: rank 0 looks; a step folder no longer committed (its index deleted, as the
  // writer's retention does first) is gone, unless a local tier holds the step.
  bool gone(std::int64_t step) override {
    int answer = 0;
    if (rank() == 0) {
      try {
        answer = ckpt::detail::layout::committed_step_folder(*store_, detail::step_folder_name(step)) ? 0 : 1;
      } catch (const error&) {  // cannot say: not gone
      }
    }
    MPI_Bcast(&answer, 1, MPI_INT, 0, comm_);
    return answer != 0 && !(tiers_ && tiers_->holds(step));
  }

  // What every rank agreed on in load_step: some rank found the step's bytes wrong.
  [[nodiscard]] bool damaged_by(const std::exception& e) const override {
    return dynamic_cast<const collective_error*>(&e) != nullptr && last_load_damaged_;
  }

  // Collective: rank 0 deletes them, every rank learns what is left.
  std::vector<ckpt::detail::step_status> remove_damaged() override {
    const std::vector<ckpt::detail::step_status> before = core.damaged();
    on_rank_0_then_share([this] { static_cast<void>(core.remove_set_aside(*store_)); }, "remove_damaged");
    std::vector<ckpt::detail::step_status> removed;
    for (const ckpt::detail::step_status& s : before)
      if (std::ranges::none_of(core.damaged(), [&](const auto& d) { return d.path == s.path; })) removed.push_back(s);
    return removed;
  }

  // Collective: rank 0 sets the step folder aside, every rank learns of it.
  // The local tiers' copies of the step, a cache, are then deleted (keep_local).
  ckpt::detail::step_status set_aside(std::int64_t step, const std::string& reason) override {
    on_rank_0_then_share([&] { set_aside_on_rank_0(step, reason); }, "load");
    if (tiers_) keep_local(levels_.local_max_to_keep);
    return core.damaged().back();
  }

 private:
  [[nodiscard]] int rank() const { return detail::rank_of(comm_); }

  // The option checks of the tiers, alike on every rank.
  void check_tiers() const {
    if (levels_.local.empty()) return;
    const auto refuse = [this](const std::string& what) { throw std::invalid_argument(core.message(what)); };
    if (core.options().read_only) refuse("a local tier ('" + levels_.local.string() + "') cannot be read-only");
    if (ckpt::detail::is_remote(levels_.local))
      refuse("tiers::local ('" + levels_.local.string() + "') is in object storage: a node-local tier is a folder of "
             "the node's (the manager's folder, the shared tier, may be a bucket)");
    if (levels_.ranks_per_node < 0) refuse("tiers::ranks_per_node is negative (" + std::to_string(levels_.ranks_per_node) + ")");
    if (levels_.drain_every < 0) refuse("tiers::drain_every is negative (" + std::to_string(levels_.drain_every) + ")");
    if (levels_.local_max_to_keep == 0) refuse("tiers::local_max_to_keep is 0 (a local tier keeps at least one step)");
  }

  // Writes this rank's part of `plan`'s step (keeping a failure in `error`): its shard, to its
  // node's local tier if there is one, else to the folder, by `path` (direct I/O for a background
  // save, as ckpt::checkpoint_manager's); a step of slices collectively, on `comm` (the manager's
  // ranks), with MPI-IO, or with a local tier each rank its part (detail::write_part).
  void write_step(MPI_Comm comm, const detail::step_plan& plan, std::span<const section> sections,
                  std::exception_ptr& error,
                  ckpt::detail::write_path path = ckpt::detail::write_path::page_cache) const {
    const save_options options{.digest = core.options().digest};
    if (!plan.sliced.empty() && !tiers_) return detail::write_sliced(comm, plan, sections, options, error);
    try {
      if (tiers_) tiers_->write_own(plan, sections, options, path);
      else detail::write_shard(plan, sections, options, path);
    } catch (...) {
      error = std::current_exception();
    }
  }

  // A slice as a snapshot holds it: the entry `key` (not a name of the step's: see without_slices)
  // is the slice `name`'s bytes.
  struct slice_place {
    std::string name;
    dims global_shape;
    std::int64_t first;
  };
  using slice_places = std::map<std::string, slice_place, std::less<>>;

  // A copy of `sections` whose slices are plain entries (for a snapshot, which takes no slices),
  // each renamed to a key of its own (a rank may hold several slices of one tensor): the name, a
  // NUL, and its number, recorded in `slices`.
  static std::vector<section> without_slices(std::span<const section> sections, slice_places& slices) {
    std::vector<section> out(sections.begin(), sections.end());
    for (section& s : out)
      for (ckpt::detail::entry_source& e : ckpt::detail::section_access::entries(s))
        if (e.first >= 0) {
          std::string key = e.name + '\0' + std::to_string(slices.size());
          slices.emplace(key, slice_place{std::exchange(e.name, key), std::exchange(e.global_shape, {}),
                                          std::exchange(e.first, -1)});
        }
    return out;
  }

  // The section of the snapshot `t` of without_slices' sections: its entries, the slices again.
  static section with_slices(const checkpoint& t, const slice_places& slices) {
    std::vector<ckpt::detail::entry_source> entries;
    for (const auto& [key, x] : t) {
      const auto it = slices.find(key);
      ckpt::detail::entry_source& e =
          entries.emplace_back(ckpt::detail::tensor_source(it == slices.end() ? key : it->second.name, x));
      if (it != slices.end()) {
        e.global_shape = it->second.global_shape;
        e.first = it->second.first;
      }
    }
    return ckpt::detail::section_access::of_entries(std::move(entries));
  }

  [[nodiscard]] static bool finalized() {
    int done = 0;
    MPI_Finalized(&done);
    return done != 0;
  }

  // Rank 0, holding the lock (a folder's; a bucket has none): the committed steps, and the
  // uncommitted step folders of a crashed job removed (no save of ours runs, and a step without its
  // index does not exist). Everything through the run's store and its layout.
  void open_on_rank_0() {
    namespace layout = ckpt::detail::layout;
    const bool writing = !core.options().read_only;
    store_ = ckpt::detail::open_store(core.folder(), /*create=*/writing);
    if (writing) {
      lock_ = store_->hold(lock_name);
      if (lock_) write_token();
      run_id_ = run_id_on_rank_0();
    }
    std::vector<std::int64_t> steps;
    for (const layout::item& x : layout::describe(*store_)) {
      if (x.kind == layout::what::step_folder) {
        steps.push_back(*x.step);
      } else if (x.kind == layout::what::set_aside) {
        core.mark_damaged(*x.step, store_->path_of(x.name), "set aside as damaged by an earlier run");
      } else if (x.kind == layout::what::uncommitted_step_folder && writing) {
        // Debris (a link so named is only unlinked, never followed); debris left is only wasted space.
        try {
          static_cast<void>(store_->remove(x.name));
        } catch (const error&) {
        }
      }
    }
    if (!writing) {
      // No lock, no clean-up, no run id: the committed steps as they are now.
      static_cast<void>(core.add_existing(steps, [](std::int64_t) { return metadata_map{}; }));
      return;
    }
    // The uploads that killed writers of our steps left in a bucket.
    store_->abandon_writes([](std::string_view name) {
      return layout::step_of_folder(name.substr(0, name.find('/'))).has_value();
    });
    // Only the headers are needed for the metrics: those of the step's first shard.
    const auto unreadable = core.add_existing(steps, [this](std::int64_t step) {
      const auto map = detail::read_step_index(*store_, detail::step_folder_name(step));
      if (!map || map->empty()) return metadata_map{};
      return store_->metadata(detail::step_folder_name(step) + "/" + map->begin()->first);
    });
    for (const auto& [step, reason] : unreadable) set_aside_on_rank_0(step, reason);
    // Finishes the retention of a job that died between a commit and its deletions, so that
    // crashes do not pile up steps the rules drop (as the single-process manager does).
    retain(/*defer=*/false);
  }

  // Rank 0: sets a damaged step's folder aside (a link is renamed as a link; in a bucket, copied
  // and deleted).
  void set_aside_on_rank_0(std::int64_t step, const std::string& reason) {
    static_cast<void>(core.set_aside(step, *store_, detail::step_folder_name(step), reason));
  }

  // Rank 0: deletes what the rules drop, the index first, so that a step is either committed and
  // whole or not there at all, even if this stops half-way. A step that is a link (a forked
  // run's) is unlinked: nothing it points at is touched. A step whose index cannot be deleted
  // stays, reported by status() (manager_core::retain); the folder of a step whose index is gone
  // is debris, removed as far as it can be (`defer`: later, see below), and by the next manager if
  // not.
  void retain(bool defer) {
    core.retain([this, defer](std::int64_t step) {
      const std::string name = detail::step_folder_name(step);
      const std::optional<ckpt::detail::store::kind> kind = store_->find(name);
      if (!kind) return;
      if (*kind != ckpt::detail::store::kind::folder) {
        static_cast<void>(store_->remove(name));
        return;
      }
      static_cast<void>(store_->remove(ckpt::detail::layout::index_of(step)));
      // The step is gone. With `defer`, its shards are deleted off the caller's thread by the next
      // background save (their unlink is the costly part: 0.1 s a GiB here), or by `wait`.
      if (defer) {
        debris_.push_back(name);
        return;
      }
      try {
        static_cast<void>(store_->remove(name));
      } catch (const error&) {
      }
    });
  }

  // Rank 0: deletes the folders of the steps the retention dropped (debris left is only wasted
  // space: the next manager removes it when it opens).
  static void clear_debris(const ckpt::detail::store& run, std::vector<std::string> debris) noexcept {
    for (const std::string& name : debris) {
      try {
        static_cast<void>(run.remove(name));
      } catch (const std::exception&) {
      }
    }
  }

  // Rank 0, holding the lock: writes a random token into the lock file, which every other rank
  // reads through the folder it opened, to prove it is the one rank 0 locked.
  void write_token() {
    token_ = ckpt::detail::random_suffix() + ckpt::detail::random_suffix() + " " + std::to_string(::getpid());
    if (::ftruncate(lock_->get(), 0) != 0 ||
        ::pwrite(lock_->get(), token_.data(), token_.size(), 0) != static_cast<ssize_t>(token_.size()))
      throw io_error(store_->path_of(lock_name), "write the lock file", ckpt::detail::last_error());
  }

  // Rank 0, holding the run (a folder's lock; a bucket's writer is the only one, as documented):
  // the run's id (docs/distributed.md, "Runs and their ids"); a run without one (a new run, or one
  // an earlier version created) gets one now, written whole, never over another's: the id is made
  // once, and every later manager of the run reads it.
  [[nodiscard]] std::string run_id_on_rank_0() const {
    namespace layout = ckpt::detail::layout;
    for (;;) {
      if (std::optional<std::string> id = layout::read_run_id(*store_)) return std::move(*id);
      std::string id;
      while (id.size() < layout::run_id_length) id += ckpt::detail::random_suffix();
      id.resize(layout::run_id_length);
      if (store_->write(layout::run_id_name, id + "\n", ckpt::detail::store::existing::kept)) return id;
    }
  }

  // Another rank: the token in the lock file of the folder it opened (only a folder has a lock),
  // the file opened without following a link.
  [[nodiscard]] std::string read_token() const {
    const ckpt::detail::folder_handle& folder = *store_->local();
    const ckpt::detail::file_descriptor fd(
        ::openat(folder.fd(), std::string(lock_name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) throw io_error(folder.path_of(lock_name), "open the lock file", ckpt::detail::last_error());
    std::string text(64, '\0');
    text.resize(ckpt::detail::read_fully(fd.get(), reinterpret_cast<std::byte*>(text.data()), text.size(), 0,
                                         folder.path_of(lock_name)));
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

  // With a local tier: before `plan`'s step is written, the local tiers drop the oldest step they
  // will not keep, so that the new files take the memory of the old ones (tmpfs) instead of fresh
  // pages, which cost a fault each (and, on a virtual machine, the host's too). Returns the steps
  // kept, the new one among them, for a background save's thread to delete the others before it
  // writes.
  std::set<std::int64_t> make_room_in_local(const detail::step_plan& plan) {
    std::set<std::int64_t> keep = local_steps_after(levels_.local_max_to_keep - 1);
    keep.insert(plan.step);
    return keep;
  }

  // This rank's shards of the steps the retention will delete once `plan`'s step is committed give
  // their cached pages back before the new shard is written, as in the single-process manager
  // (each rank's pages are in its own node's cache). A shard named otherwise (another rank
  // count) is left alone: advice only.
  void release_pages_of_dropped(const detail::step_plan& plan) const {
    if (plan.shard.empty() || tiers_) return;
    for (const std::int64_t old : core.to_drop_after(plan.step, plan.metadata)) {
      store_->drop_cache(detail::step_folder_name(old) + "/" + plan.shard);
    }
  }

  // Collective: commits `plan`'s step once every rank's shard is written (`local_error` is this
  // rank's failure), then applies the retention rules.
  // With a local tier: commits the step there (its partner copies first, unless the background
  // thread has sent them: `copies_sent`), and starts its drain if it is due.
  // `defer_deletions`: the dropped steps' shards are deleted later, off the caller's thread (see
  // retain).
  void commit(const detail::step_plan& plan, const std::exception_ptr& local_error, bool copies_sent,
              bool defer_deletions) {
    if (!tiers_) {
      detail::commit_step(comm_, plan, local_error);
      core.add(plan.step, plan.metadata);
      on_rank_0_then_share([this, defer_deletions] { retain(defer_deletions); }, plan.operation);
      return;
    }
    tiers_->commit(plan, local_error, copies_sent);
    core.add(plan.step, plan.metadata);
    local_steps_.insert(plan.step);
    if (levels_.drain_every > 0 && plan.step % levels_.drain_every == 0) start_drain(plan);
    on_rank_0_then_share([this, defer_deletions] { retain(defer_deletions); }, plan.operation);
    keep_local(levels_.local_max_to_keep);
  }

  // Collective: drains `plan`'s step from the local tier to the folder on the drain's thread, once
  // an earlier drain is committed. A step of slices, whose drain is collective, without a
  // communicator for the drain's thread (no MPI_THREAD_MULTIPLE): here, on the caller's thread.
  void start_drain(const detail::step_plan& plan) {
    finish_drain(true);
    drain_plan_ = plan;
    drain_done_ = false;
    const save_options options{.digest = core.options().digest};
    if (!plan.sliced.empty() && drain_comm_ == MPI_COMM_NULL) {
      std::exception_ptr error;
      try {
        tiers_->drain(drain_plan_, options, comm_);
      } catch (...) {
        error = std::current_exception();
      }
      drain_.finish(error);
      drain_done_ = true;
      return;
    }
    try {
      drain_.start([this, options] {
        struct done_guard {
          std::atomic<bool>& done;
          ~done_guard() { done = true; }
        } guard{drain_done_};
        tiers_->drain(drain_plan_, options, drain_comm_);
      });
    } catch (...) {
      drain_.finish(std::current_exception());
      drain_done_ = true;
    }
  }

  // Collective: if a drain is in flight and every rank's copy is done (or `wait`: once it is),
  // commits it in the folder (rank 0 writes the index) and applies the retention rules. The step
  // stays listed if the drain failed: its local tier holds it.
  void finish_drain(bool wait) {
    if (!tiers_ || !drain_.pending() || finalized()) return;
    int done = wait || drain_done_ ? 1 : 0;
    MPI_Allreduce(MPI_IN_PLACE, &done, 1, MPI_INT, MPI_MIN, comm_);
    if (done == 0) return;
    const std::exception_ptr local_error = drain_.join();
    const detail::step_plan plan = std::exchange(drain_plan_, {});
    detail::commit_step(comm_, plan, local_error);
    drained_.insert(plan.step);
    // Retention may have dropped the step while it drained: it is then deleted from the folder too.
    if (!core.all().contains(plan.step)) core.add(plan.step, plan.metadata);
    on_rank_0_then_share([this] { retain(/*defer=*/true); }, plan.operation + " (its drain)");
    keep_local(levels_.local_max_to_keep);
  }

  // The local tiers keep the newest `count` (local_max_to_keep) of their steps that are still
  // listed, and the step being drained; a step that leaves them and is not in the folder is no
  // longer listed.
  void keep_local(std::size_t count) { tiers_->keep_only(local_steps_after(count)); }

  // keep_local's decision, recorded: the steps the local tiers keep (the caller deletes the rest).
  [[nodiscard]] std::set<std::int64_t> local_steps_after(std::size_t count) {
    std::erase_if(drained_, [this](std::int64_t step) { return !core.all().contains(step); });
    std::set<std::int64_t> keep;
    for (auto it = local_steps_.rbegin(); it != local_steps_.rend() && keep.size() < count; ++it)
      if (core.all().contains(*it)) keep.insert(*it);
    if (drain_.pending()) keep.insert(drain_plan_.step);
    for (const std::int64_t step : local_steps_)
      if (!keep.contains(step) && !drained_.contains(step)) core.forget(step);
    local_steps_ = keep;
    return keep;
  }

  // The step's plan, named after the calling member.
  detail::step_plan plan_of(std::int64_t step, std::span<const section> sections, const metadata_map& metadata,
                            std::string_view member) {
    detail::step_plan plan = detail::plan_step(comm_, core.folder(), store_, step, sections, metadata,
                                               "checkpoint_manager::" + std::string(member));
    return plan;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  detail::run_store store_;  // every rank's own: a folder held by its descriptor, or a bucket's prefix
  std::optional<ckpt::detail::file_descriptor> lock_;  // rank 0's, of a folder
  std::string token_;                        // rank 0: what it wrote into the lock file
  std::string run_id_;                       // the run's id (a writing manager's; read-only: none)
  bool last_load_damaged_ = false;
  // The step this rank's background write belongs to.
  detail::step_plan pending_;
  tiers levels_;
  std::unique_ptr<detail::local_tiers> tiers_;  // with a local tier
  std::set<std::int64_t> local_steps_;          // the steps the local tiers hold whole
  std::set<std::int64_t> drained_;              // the steps committed in the folder
  // Rank 0: the folders of steps the retention dropped (their index deleted), to delete.
  std::vector<std::string> debris_;
  // save_async's thread's own communicator, with MPI_THREAD_MULTIPLE: it sends the partner copies.
  MPI_Comm background_comm_ = MPI_COMM_NULL;
  // The drain's thread's own communicator, with MPI_THREAD_MULTIPLE and a local tier: it drains a
  // step of slices (collective MPI-IO).
  MPI_Comm drain_comm_ = MPI_COMM_NULL;
  // The drain to the folder: its thread, its step's plan, and whether this rank's copy is done.
  ckpt::detail::background_write drain_;
  detail::step_plan drain_plan_;
  std::atomic<bool> drain_done_ = true;
};

std::unique_ptr<mpi_state> opened(MPI_Comm comm, std::filesystem::path folder, checkpoint_manager::options opts,
                                  tiers levels) {
  auto state = std::make_unique<mpi_state>(comm, std::move(folder), std::move(opts), std::move(levels));
  state->open();
  return state;
}

}  // namespace

checkpoint_manager::checkpoint_manager(MPI_Comm comm, std::filesystem::path folder, checkpoint_manager::options opts,
                                       tiers levels)
    : ckpt::checkpoint_manager(opened(comm, std::move(folder), std::move(opts), std::move(levels))) {}

}  // namespace ckpt::mpi
