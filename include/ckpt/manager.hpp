#pragma once
/// \file
/// `ckpt::checkpoint_manager`: numbered checkpoints in a folder for a training loop, with
/// retention rules, an advisory lock against a second writer, and background saves.
///
/// \code
/// ckpt::checkpoint_manager manager("runs/a", {.max_to_keep = 3, .save_interval_steps = 100});
/// if (auto latest = manager.load_latest()) ckpt::read_params(*latest, ckpt::training_state(params, state));
/// for (...) {
///   opt.update(params, grads, state);
///   if (manager.should_save(state.step))
///     manager.save_async(state.step, ckpt::training_state(params, state), {{"loss", "0.25"}});
/// }
/// manager.wait();
/// \endcode
///
/// Files: `<folder>/ckpt-<step, zero-padded to 10 digits>.safetensors`, written with `ckpt::save`
/// (atomic), and the lock file `<folder>/.ckpt-manager.lock`. Other files in the folder
/// are never touched; leftover temporaries of an interrupted save of its own checkpoints
/// (`.ckpt-<step>.safetensors.tmp-XXXXXX`) are ignored and removed when the manager opens. A step
/// found damaged is set aside as `<its name>.damaged` (`.damaged-2`, ... if taken), never deleted
/// (unless you ask: `remove_damaged`).
///
/// Every member and member type is declared and documented on `ckpt::checkpoint_manager`, which
/// `ckpt::mpi::checkpoint_manager` (ckpt/mpi.hpp) derives from: `options` (the constructor's),
/// `metric_mode` (of keep-best), `latest` (what `load_latest` returns), and `step_status` and
/// `step_state` (a row of `status()`) are the same types in both managers.

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>
#include <ckpt/file.hpp>
#include <ckpt/section.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt {

namespace detail {
class manager_state;  // src/run/manager_core.hpp
}  // namespace detail

/// Numbered steps of one training run in a folder, kept by the retention rules of `options`:
/// every member, member type and rule of both managers is declared and documented here.
/// `ckpt::checkpoint_manager` itself writes a file per step from this process;
/// `ckpt::mpi::checkpoint_manager` (ckpt/mpi.hpp), the manager of the ranks of an MPI job (a
/// folder of shards per step), is a `ckpt::checkpoint_manager` that adds only its collective
/// constructor: code written against `ckpt::checkpoint_manager&` works with either. In the MPI
/// manager, every member but `folder`, `should_save`, `path_of`, `steps` and `latest_step` is
/// collective: call it on every rank, in the same order, with the same step; its errors are
/// thrown on every rank alike.
///
/// **One writer.** Only one manager may write a folder at a time: the constructor takes an
/// advisory lock (`flock` on `<folder>/.ckpt-manager.lock`, the MPI manager's lock file too) held
/// until destruction, so a second manager on the same folder, of either kind, in another process
/// or in this one, is refused with `lock_error` instead of two writers deleting each other's files.
///
/// **The folder is held, not its path.** A manager opens its folder once, when it is constructed
/// (symbolic links in the path followed then), and from then on lists, writes, renames and
/// deletes only relative to the folder it opened: if the path comes to name another folder (a
/// link switched to another run, the folder moved away and a new run started at its path), the
/// manager goes on in the folder it locked and never touches the other. In its folder, a step
/// that is a symbolic link (a forked run's step pointing at another run's) is read through, but
/// only ever renamed or deleted as a link: nothing it points at is written or deleted, and the
/// lock file is never opened through a link.
///
/// **A run in a bucket.** `folder` may be `s3://bucket/prefix` (with S3 support: the guide's
/// "Checkpoints in object storage"): the steps are the objects
/// `<prefix>/ckpt-<step, 10 digits>.safetensors`, each written by a multipart upload that makes it
/// appear whole or not at all, under the same rules (retention, damaged steps set aside as
/// `<name>.damaged` by a server-side copy and a delete, `load_latest` past them; a network error
/// is an error, never damage). Opening a writing manager aborts the incomplete uploads of its own
/// step objects (a killed writer's). A bucket has no lock: only one writer may use a run's prefix,
/// which is the caller's to ensure; a step is still never overwritten, a save finding its step's
/// object there (another writer's) throwing `io_error` (`std::errc::file_exists`): the commit is
/// a conditional write (`If-None-Match: *`) where the store has them (AWS S3, MinIO, R2), a look
/// before the write, which a writer in between can race, where it has not (Swift's s3api).
/// `path_of` gives the step's `s3://` URL.
///
/// **Saving a step again.** A saved step is never rewritten: `save` and `save_async` refuse a
/// step that is not newer than `latest_step()`. So a reader (a tool listing the folder, another
/// process loading the latest checkpoint, a job restarting on another number of ranks) never
/// sees a step's contents change under it; and a step of an MPI job is several files committed
/// by an index, which could not be replaced atomically anyway. A resumed run saves the steps
/// after the one it loaded.
///
/// **Damaged steps.** A step whose bytes are wrong (a file cut short, a header or data that do not
/// match the digest, a file replaced by a folder or an empty file, a symlink to nowhere, a file
/// of another format under a step's name: a step is read as safetensors, never by its content as
/// `ckpt::load` reads a path) never blocks the run: `load_latest` skips it and returns the newest
/// step that loads, and opening a folder never fails because of one. A writing manager sets a
/// damaged step aside (renames it to `<name>.damaged`, never deletes it), so the step number can
/// be saved again; a read-only manager only stops listing it. `status()` lists damaged steps with
/// their reason, and so do `ckpt inspect` and `ckpt verify` for a run folder; `remove_damaged`
/// (or `ckpt prune --damaged`) deletes the set-aside ones once you have looked at them. Damage
/// means the bytes are wrong, nothing else: a `format_error` of the load (of a file or an index,
/// `integrity_error` included), or an `io_error` saying that the step's name leads to no file
/// (`ENOENT`, `ELOOP`, `ENOTDIR`); in the MPI manager, such a failure on any rank. Any other
/// failure (`EACCES`, `EPERM`, `EMFILE`, `ENFILE`, `ENOMEM`, `EIO`, `std::bad_alloc`; a rank that
/// failed for such a reason) is thrown as it is, naming the file and the cause, and every step
/// stays in place under its own name. Opening reads no checkpoint data: a step is checked when it
/// is loaded (the digest with it, by default), or, with keep-best, its header when the manager
/// opens.
///
/// **Retention never blocks a save.** The retention rules run when the folder opens (finishing
/// what a crash interrupted) and after each save. A step they drop that cannot be deleted (a
/// permission, a folder under a step file's name, which is set aside as damaged instead) stays,
/// listed by `steps()` and by `status()` as `undeletable` with the error; the new step is written
/// all the same, and deleting it is tried again after each save.
///
/// **Background saves.** `save` writes before returning; `save_async` copies and writes on a
/// background thread (in the MPI manager, each rank its own shard). At most one background write
/// is in flight. It is committed (listed by `steps()`, the retention rules applied; for the MPI
/// manager, the index written once every rank's write succeeded) by the next `save`,
/// `save_async`, `wait`, `load` or `load_latest`, which first waits for it and throws its error,
/// once: the failed step is then not committed. `steps()` and `latest_step()` only read the
/// committed steps and never wait. The destructor commits too; an error nobody collected is then
/// written to stderr, since a destructor cannot throw it.
///
/// **Moving.** A manager moves: its folder, lock and background save go along, and the one moved
/// from is left empty, fit only to be destroyed or assigned to. A manager is what it was opened
/// as, whichever object it is moved into: an MPI manager moved into a `ckpt::checkpoint_manager`
/// (`ckpt::checkpoint_manager m = std::move(mpi_manager);`) is still the MPI manager, with the same
/// folder of step folders, its members as collective as before, and its destructor too. So a
/// trainer that runs with or without MPI can hold either in one `ckpt::checkpoint_manager` (or a
/// `std::optional` of one). An MPI manager may also be deleted through a `ckpt::checkpoint_manager*`
/// (the destructor is virtual).
///
/// Not thread-safe: use one manager from one thread (its background write is its own business).
class checkpoint_manager {
 public:
  /// Whether a smaller or a larger metric is better for keep-best retention.
  enum class metric_mode {
    min,  ///< smaller is better (a loss)
    max,  ///< larger is better (an accuracy)
  };

  /// Options of a manager (`ckpt::checkpoint_manager::options`, the same type as
  /// `ckpt::mpi::checkpoint_manager::options`). A checkpoint is kept if any rule keeps it: it is among the
  /// newest `max_to_keep`, its step is a multiple of `keep_every_n_steps`, or it is among the
  /// `keep_best` best by `best_metric`. Everything else of the manager's own is deleted after each
  /// save. The newest checkpoint is always kept. Before a save writes, the checkpoints it will
  /// delete give their pages back to the kernel's cache (they stay whole until deleted), so that
  /// the new file reuses that memory instead of growing the page cache by a checkpoint.
  struct options {
    /// Keep the newest N checkpoints; 0 keeps every checkpoint (no deletion at all).
    std::size_t max_to_keep = 5;
    /// Also keep, forever, every checkpoint whose step is a multiple of N; 0 disables the rule.
    std::int64_t keep_every_n_steps = 0;
    /// `should_save(step)` is true when `step` is a multiple of this (must be at least 1), and
    /// `save`/`save_async` skip other steps unless forced.
    std::int64_t save_interval_steps = 1;
    /// Also keep the `keep_best` checkpoints with the best value of the metadata entry
    /// `best_metric` (parsed as a number; checkpoints without it do not compete); 0 disables.
    std::size_t keep_best = 0;
    /// The metadata key of the metric for `keep_best` (say "val_loss").
    std::string best_metric{};
    /// Whether smaller or larger metric values are better.
    metric_mode best_mode = metric_mode::min;
    /// Store the digest of each checkpoint file (`ckpt::save_options::digest`), which `load`
    /// and `load_latest` verify.
    bool digest = true;
    /// Open the folder for reading only, as an evaluation job opens a training run's folder: no
    /// lock is taken (a trainer may be writing into the folder, and the folder may belong to
    /// another user), the folder is not created, leftovers are not cleaned up and nothing is ever
    /// deleted; `save` and `save_async` throw. The steps are those committed when the manager was
    /// opened. A step deleted afterwards by the writer's retention rules is no longer listed once a
    /// load finds it gone (`load_latest` goes on to the step before; `load` of it throws the
    /// error naming its file): a step deleted is not a damaged step. A read-only `ckpt::checkpoint_manager` also reads the folder of an
    /// MPI job (`ckpt::mpi::checkpoint_manager`'s committed step folders), in a process without
    /// MPI. The retention options are not used.
    bool read_only = false;
  };

  /// What a manager knows of one step of its folder (see `status()`).
  enum class step_state {
    unchecked,    ///< listed, not loaded by this manager yet
    intact,       ///< loaded by this manager: the format's rules held, and the digest if it was checked
    damaged,      ///< its bytes are wrong (malformed, corrupted, missing); set aside, no longer a step
    undeletable,  ///< the retention rules drop it but deleting it failed (`reason` says why): still
                  ///< a step, deleting it is tried again after each save; it never blocks one
  };

  /// One step of a manager's folder and its state.
  struct step_status {
    /// The step.
    std::int64_t step = 0;
    /// Its state.
    step_state state = step_state::unchecked;
    /// Its checkpoint: the file (or MPI step folder) of a step, or, for a damaged step, where it is
    /// now (the name it was set aside under, if the manager set it aside).
    std::filesystem::path path;
    /// Why it is damaged: the message of the error that loading it gave; for a step set aside by an
    /// earlier run, a sentence saying so. Empty for the other states.
    std::string reason;
  };

  /// Where a file of a loaded step was read from (a row of `latest::sources`).
  enum class tier {
    folder,   ///< the manager's folder (for the MPI manager with a local tier: the shared tier)
    local,    ///< a node's local tier, the copy that node's ranks wrote (ckpt::mpi::tiers)
    partner,  ///< a node's local tier, the partner copy it keeps of the previous node's shard
  };

  /// One file of the loaded step and where this process read it from.
  struct source {
    /// The file's name in its step: the step file (`ckpt-<step>.safetensors`), or a shard of an
    /// MPI step (`model-00002-of-00004.safetensors`).
    std::string file;
    /// The tier whose copy was read.
    tier from = tier::folder;
    /// For `local` and `partner`: the node whose local folder held the copy (this rank's node,
    /// or another node that sent the bytes over MPI); 0 otherwise.
    int node = 0;
  };

  /// What `load_latest()` restored: the newest intact step's checkpoint, if
  /// there is one, and the newer steps it skipped because they were damaged. It reads like a
  /// `std::optional<checkpoint>` (`if (auto latest = manager.load_latest()) ... *latest ...`).
  struct latest {
    /// The checkpoint of `step`, or nothing if no step could be loaded.
    std::optional<checkpoint> data;
    /// The step loaded, or -1.
    std::int64_t step = -1;
    /// The steps newer than `step` that were found damaged and set aside, newest first, each with
    /// its reason. A caller that resumes should report them: the run goes on from an older step.
    std::vector<step_status> skipped;
    /// Where each file of `step` was read from, in file-name order: one row (`tier::folder`) for
    /// the single-process manager (the step file, or an MPI step folder's name when it reads one);
    /// one per shard for the MPI manager, as this rank read it (with
    /// `ckpt::mpi::tiers`, from its node's local tier, another node's, or the shared folder).
    std::vector<source> sources;

    /// True if a step was loaded.
    /// \throws nothing
    [[nodiscard]] bool has_value() const noexcept { return data.has_value(); }
    /// \copydoc has_value
    explicit operator bool() const noexcept { return data.has_value(); }
    /// The checkpoint.
    /// \throws std::bad_optional_access if no step was loaded.
    [[nodiscard]] const checkpoint& operator*() const { return data.value(); }
    /// \copydoc operator*
    [[nodiscard]] const checkpoint* operator->() const { return &data.value(); }
  };

  /// Opens (creating it and its parents if needed) `folder` for writing, takes its lock, lists
  /// the checkpoints already there, removes leftover temporaries of interrupted saves and applies
  /// the retention rules (a crash may have left a step they drop); or, with `read_only`, opens it
  /// to read (see `options::read_only`).
  /// \throws std::invalid_argument if an option is out of range (`save_interval_steps` < 1,
  /// `keep_every_n_steps` < 0, `keep_best` > 0 with an empty `best_metric`), or `folder` is an
  /// `s3://` URL and no credentials are set, or ckpt was built without S3 support.
  /// \throws remote_error if a run in a bucket cannot be listed (naming the URL).
  /// \throws lock_error if another manager holds the folder.
  /// \throws io_error if the folder or lock file cannot be created or listed (`ELOOP`: the lock
  /// file is a symbolic link), or, with keep-best, a checkpoint's header cannot be read for
  /// another reason than damage. A checkpoint whose header is damaged when keep-best needs its
  /// metric is set aside (see "Damaged steps"), not an error.
  explicit checkpoint_manager(std::filesystem::path folder, options opts);
  /// Opens `folder` with the default `options` (a separate overload, not a default argument: a
  /// default member initializer of `options` cannot be used inside its own enclosing class).
  /// \throws as the constructor above.
  explicit checkpoint_manager(std::filesystem::path folder);
  /// Commits a background save (an error is written to stderr) and releases the folder (the MPI
  /// manager's: collectively, see ckpt/mpi.hpp). Virtual, so that an MPI manager may be deleted
  /// through a `ckpt::checkpoint_manager*`.
  /// \throws nothing
  virtual ~checkpoint_manager();
  checkpoint_manager(const checkpoint_manager&) = delete;
  checkpoint_manager& operator=(const checkpoint_manager&) = delete;
  /// Takes over `other`'s folder, lock and background save (an MPI manager's too: see "Moving");
  /// `other` is left empty.
  /// \throws nothing
  checkpoint_manager(checkpoint_manager&& other) noexcept;
  /// Commits this manager's background save (reporting an error to stderr), releases its folder,
  /// and takes over `other`'s (an MPI manager's too: see "Moving").
  /// \throws nothing
  checkpoint_manager& operator=(checkpoint_manager&& other) noexcept;

  /// The folder.
  /// \throws nothing
  [[nodiscard]] const std::filesystem::path& folder() const noexcept;
  /// Where `step` is saved: `<folder>/ckpt-<step, 10 digits>.safetensors` for
  /// `ckpt::checkpoint_manager`, the folder `<folder>/step-<step, 10 digits>` for
  /// `ckpt::mpi::checkpoint_manager`.
  /// \throws std::invalid_argument if `step` is negative.
  [[nodiscard]] std::filesystem::path path_of(std::int64_t step) const;
  /// True if `step` is a multiple of `save_interval_steps`.
  /// \throws nothing
  [[nodiscard]] bool should_save(std::int64_t step) const noexcept;

  /// Saves the sections as step `step`, straight from where the leaves live (as `ckpt::save` of
  /// sections does: no snapshot, so the trainer needs no memory beyond its parameters), with
  /// `__metadata__` made as `ckpt::save` of sections makes it (rank 0's in the MPI manager): the
  /// metadata of the checkpoint sections (a checkpoint is a section too, its entries and its
  /// metadata), then `metadata` over them, then the manager's `step` (decimal) and `wall_time`
  /// (UTC, ISO 8601 with milliseconds) entries over both, and the file's digest
  /// (`ckpt.xxh3_64_file`) unless the `digest` option is off. The sections are a braced list, or
  /// any contiguous range of them built at run time (a `std::vector<section>`):
  /// \code
  /// manager.save(state.step, ckpt::training_state(params, state), {{"loss", "0.25"}});  // ckpt/adam.hpp
  /// manager.save(step, {{params, "model"}, {ema, "ema"}});
  /// \endcode
  /// In the MPI manager, each rank passes what it holds, and an entry held by several ranks is
  /// written once (see `ckpt::mpi::save`). The leaves must not change during the call.
  ///
  /// Then applies the retention rules: old steps are deleted only once the new one is durable;
  /// the deletions are not fsynced, so after a power loss an old step may reappear, to be deleted
  /// by the next save. A step that cannot be deleted does not fail the save (see "Retention never
  /// blocks a save"). Skips (returning false) a step that is not `should_save` unless `force` is
  /// true.
  /// \return true if the step was written.
  /// \throws std::invalid_argument if `step` is negative, not newer than `latest_step()` or (MPI)
  /// differs between ranks, if the keep-best metric in `metadata` is not a number, if a leaf
  /// name is empty, `__metadata__` or appears twice, or if two checkpoint sections give one
  /// metadata key different values (naming the key and both values) (MPI: `collective_error`
  /// naming the rank).
  /// \throws io_error (MPI: `collective_error`) if writing fails (the new step is then absent); also
  /// a pending error of an earlier `save_async`.
  bool save(std::int64_t step, std::span<const section> sections, const metadata_map& metadata = {},
            bool force = false);
  /// \copydoc save(std::int64_t, std::span<const section>, const metadata_map&, bool)
  bool save(std::int64_t step, std::initializer_list<section> sections, const metadata_map& metadata = {},
            bool force = false) {
    return save(step, std::span<const section>(sections.begin(), sections.size()), metadata, force);
  }

  /// As `save`, but returns once the leaves are copied and writes on a background thread; the
  /// step is committed by the next call (see the class notes), where an error of this write
  /// surfaces, or at `wait`. The arguments are checked first, so a skipped or refused step costs
  /// nothing. The copy goes into memory the manager keeps and reuses (a `snapshot_arena`): after
  /// the first save, the call costs a copy of the parameters into memory already in place, not a
  /// fresh allocation, and the caller may change its leaves as soon as it returns. The price: the
  /// manager keeps the size of one snapshot allocated between saves. (In the MPI manager, a rank
  /// whose entries are all written by a lower rank copies nothing.) The exception is
  /// `ckpt::training_state(params, state)`: its trained leaves and moments are copied after the
  /// call returns, by the background thread and by `adam::update` before it changes each (see
  /// there), so the call costs a copy of the other leaves only. In `ckpt::checkpoint_manager`,
  /// the step files the retention rules drop are deleted by the background write once the new
  /// step is durable (the next call commits it and lists them as gone); in the MPI manager, the
  /// commit deletes a dropped step's index (the step is then gone) and the next background save's
  /// thread its shards. So their unlink is not spent on the caller's thread either.
  /// \return true if a write was started.
  /// \throws as `save` for the argument checks and the previous write's error.
  bool save_async(std::int64_t step, std::span<const section> sections, const metadata_map& metadata = {},
                  bool force = false);
  /// \copydoc save_async(std::int64_t, std::span<const section>, const metadata_map&, bool)
  bool save_async(std::int64_t step, std::initializer_list<section> sections, const metadata_map& metadata = {},
                  bool force = false) {
    return save_async(step, std::span<const section>(sections.begin(), sections.size()), metadata, force);
  }

  /// Blocks until a background write, if any, is on disk, and commits it.
  /// \throws the background write's error (io_error, std::bad_alloc...; MPI: `collective_error`),
  /// once.
  void wait();

  /// The committed steps, ascending (a background save is listed once committed).
  /// \throws std::bad_alloc
  [[nodiscard]] std::vector<std::int64_t> steps() const;
  /// The newest committed step, or nothing if there is none.
  /// \throws nothing
  [[nodiscard]] std::optional<std::int64_t> latest_step() const noexcept;
  /// Every step the manager knows, ascending: the committed ones (`unchecked`, or `intact` once
  /// loaded), and the damaged ones (found by a load, or set aside by an earlier run), each with
  /// its path and, if damaged, its reason. A damaged step and a newer save of the same number
  /// are two rows. Reads nothing.
  /// \throws std::bad_alloc
  [[nodiscard]] std::vector<step_status> status() const;
  /// `step`'s checkpoint (its metadata include `step` and `wall_time`), its digest verified if
  /// it has one and `opts.verify_digest` is set. If the step is damaged (see the class notes),
  /// it is set aside as `load_latest` does, and the error is thrown.
  /// \throws std::invalid_argument if there is no checkpoint for `step`.
  /// \throws io_error, format_error, integrity_error as `ckpt::load` (MPI: `collective_error` as
  /// `ckpt::mpi::load`); io_error if a damaged step cannot be renamed; a pending background error.
  [[nodiscard]] checkpoint load(std::int64_t step, const load_options& opts = {});
  /// The newest step that loads (its digest verified as `opts` says), and the newer steps that
  /// did not, set aside (see the class notes): a damaged step never blocks a resume. Empty if no
  /// step loads (`skipped` then lists every step tried).
  /// \code
  /// if (auto latest = manager.load_latest()) {
  ///   for (const ckpt::checkpoint_manager::step_status& s : latest.skipped) log("skipped step", s.step, s.reason);
  ///   ckpt::read_params(*latest, ckpt::training_state(params, state));
  /// }
  /// \endcode
  /// \throws io_error if a damaged step cannot be renamed, or a step could not be read for another
  /// reason than damage (a permission, a resource, a read error: see the class notes; MPI:
  /// `collective_error`); std::bad_alloc; a pending background error.
  [[nodiscard]] latest load_latest(const load_options& opts = {});

  /// Deletes the steps set aside as damaged (the `damaged` rows of `status()` whose checkpoint is
  /// a set-aside `<name>.damaged`, by this manager or an earlier run's), once you have looked at
  /// them: the managers never delete them otherwise. A set-aside MPI step folder goes with what it
  /// holds; a symbolic link is deleted, never what it points at. `ckpt prune --damaged RUN` calls
  /// this. Returns the rows deleted (they leave `status()`).
  /// \throws std::invalid_argument if the folder was opened read-only.
  /// \throws io_error (MPI: `collective_error`) if one cannot be deleted (those before it are).
  std::vector<step_status> remove_damaged();

 protected:
  /// For `ckpt::mpi::checkpoint_manager`'s constructor: a manager over `state` (opened already),
  /// which does each member its own way.
  /// \throws nothing
  explicit checkpoint_manager(std::unique_ptr<detail::manager_state> state) noexcept;

 private:
  std::unique_ptr<detail::manager_state> state_;
};

/// The name of a tier: "folder", "local" or "partner" (for a trainer's report of `latest::sources`).
/// \throws nothing
[[nodiscard]] std::string_view to_string(checkpoint_manager::tier t) noexcept;

}  // namespace ckpt
