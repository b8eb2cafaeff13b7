#pragma once
/// \file
/// `ckpt::checkpoint_manager`: numbered checkpoints in a folder for a training loop, with
/// retention rules, an advisory lock against a second writer, and background saves.
///
/// \code
/// ckpt::checkpoint_manager manager("runs/a", {.max_to_keep = 3, .save_interval_steps = 100});
/// if (auto latest = manager.load_latest()) ckpt::restore_training_state(*latest, params, state);
/// for (...) {
///   opt.update(params, grads, state);
///   if (manager.should_save(state.step))
///     manager.save_async(state.step, ckpt::training_state(params, state), {{"loss", "0.25"}});
/// }
/// manager.wait();
/// \endcode
///
/// Files: `<folder>/ckpt-<step, zero-padded to 10 digits>.safetensors`, written with `ckpt::save`
/// (atomic replace), and the lock file `<folder>/.ckpt-manager.lock`. Other files in the folder
/// are never touched; leftover temporaries of an interrupted save of its own checkpoints
/// (`.ckpt-<step>.safetensors.tmp-XXXXXX`) are ignored and removed when the manager opens.

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
#include <string>
#include <vector>

namespace ckpt {

/// Whether a smaller or a larger metric is better for keep-best retention.
enum class metric_mode {
  min,  ///< smaller is better (a loss)
  max,  ///< larger is better (an accuracy)
};

/// Options of `checkpoint_manager`. A checkpoint is kept if any rule keeps it: it is among the
/// newest `max_to_keep`, its step is a multiple of `keep_every_n_steps`, or it is among the
/// `keep_best` best by `best_metric`. Everything else of the manager's own is deleted after each
/// save. The newest checkpoint is always kept.
struct checkpoint_manager_options {
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
  /// Store the digest of each checkpoint's data (`ckpt::save_options::digest`), which `load`
  /// and `load_latest` verify.
  bool digest = true;
};

/// Numbered checkpoints of one training run in a folder.
///
/// Only one manager may write a folder at a time: the constructor takes an advisory lock
/// (`flock` on `<folder>/.ckpt-manager.lock`) held until destruction, so a second manager on
/// the same folder, in another process or in this one, is refused with `lock_error` instead of
/// two writers deleting each other's files.
///
/// Saves are synchronous (`save`) or in the background (`save_async`). At most one background
/// write is in flight: every member function except `should_save`, `path_of`, `folder` and
/// `options` first waits for it, and an error it raised is thrown from that call (or from
/// `wait`), once. The destructor waits too; an error nobody collected is then written to
/// stderr, since a destructor cannot throw it.
///
/// Not thread-safe: use one manager from one thread (its background write is its own business).
class checkpoint_manager {
 public:
  /// Opens (creating it and its parents if needed) `folder` for writing, takes its lock, lists
  /// the checkpoints already there and removes leftover temporaries of interrupted saves.
  /// \throws std::invalid_argument if an option is out of range (`save_interval_steps` < 1,
  /// `keep_every_n_steps` < 0, `keep_best` > 0 with an empty `best_metric`).
  /// \throws lock_error if another manager holds the folder.
  /// \throws io_error if the folder or lock file cannot be created or listed.
  /// \throws format_error if keep-best is enabled and an existing checkpoint's header cannot be
  /// read (its metric is needed to rank it).
  explicit checkpoint_manager(std::filesystem::path folder, checkpoint_manager_options options = {});
  /// Waits for a background save and releases the lock.
  /// \throws nothing (an uncollected background error is written to stderr).
  ~checkpoint_manager();
  checkpoint_manager(const checkpoint_manager&) = delete;
  checkpoint_manager& operator=(const checkpoint_manager&) = delete;
  /// Takes over `other`'s folder, lock and background save; `other` is left empty.
  /// \throws nothing
  checkpoint_manager(checkpoint_manager&& other) noexcept;
  /// Waits for this manager's background save (reporting an error to stderr), releases its
  /// lock, and takes over `other`'s.
  /// \throws nothing
  checkpoint_manager& operator=(checkpoint_manager&& other) noexcept;

  /// The folder.
  /// \throws nothing
  [[nodiscard]] const std::filesystem::path& folder() const noexcept;
  /// The options.
  /// \throws nothing
  [[nodiscard]] const checkpoint_manager_options& options() const noexcept;
  /// The file of `step`'s checkpoint: `<folder>/ckpt-<step, 10 digits>.safetensors`.
  /// \throws std::invalid_argument if `step` is negative.
  [[nodiscard]] std::filesystem::path path_of(std::int64_t step) const;

  /// True if `step` is a multiple of `save_interval_steps`.
  /// \throws nothing
  [[nodiscard]] bool should_save(std::int64_t step) const noexcept;

  /// Writes `t` as `step`'s checkpoint, atomically, with `__metadata__` made of `t`'s metadata,
  /// then `metadata`, then the manager's `step` (decimal) and `wall_time` (UTC, ISO 8601 with
  /// milliseconds) entries, later ones winning on equal keys, and the data's digest
  /// (`ckpt::digest_key`) unless the `digest` option is off. Then applies the retention rules:
  /// old checkpoints are deleted only once the new one is durable (see `ckpt::save`); the
  /// deletions are not fsynced, so after a power loss an old checkpoint may reappear, to be
  /// deleted by the next save. Before writing, it also deletes what the retention rules drop
  /// among the checkpoints already there (a crash between a save and its deletions leaves one
  /// too many), so the folder never holds more than one checkpoint beyond what the rules keep.
  /// Saving the latest step again replaces it. Skips (returning false) a step that is not `should_save`
  /// unless `force` is true.
  /// \return true if the checkpoint was written.
  /// \throws std::invalid_argument if `step` is negative or older than `latest_step()`.
  /// \throws io_error if writing the file or deleting an old one fails (the new file is either
  /// fully written or absent); also a pending error of an earlier `save_async`.
  bool save(std::int64_t step, const checkpoint& t, const metadata_map& metadata = {},
            bool force = false);

  /// As `save`, but the write happens on a background thread and this returns at once (after
  /// waiting for the previous background write, and throwing its error if it failed). The
  /// arguments are checked here; `t` is an immutable snapshot, so the caller may change its
  /// live parameters immediately. An error of this write surfaces at the next call or `wait`.
  /// \return true if a write was started.
  /// \throws as `save` for the argument checks and the previous write's error.
  bool save_async(std::int64_t step, const checkpoint& t, const metadata_map& metadata = {},
                  bool force = false);

  /// As `save`, but writes the leaves of live structures straight from where they live, without a
  /// snapshot, as `save(path, {sections})` does: the trainer needs no memory beyond its
  /// parameters to save.
  /// `manager.save(step, {{params, "model"}, {state.mu, "optim.mu"}, {ckpt::of_int("optim.step", state.step)}})`.
  /// The leaves must not change during the call. The file's metadata are `metadata`, then `step`
  /// and `wall_time`.
  /// \return true if the checkpoint was written.
  /// \throws std::invalid_argument as `save`, and if a leaf name is empty, `__metadata__` or appears
  /// twice.
  /// \throws io_error as `save`.
  bool save(std::int64_t step, std::initializer_list<section> sections, const metadata_map& metadata = {},
            bool force = false);

  /// As `save_async`, snapshotting the leaves of live structures into memory the manager keeps
  /// and reuses (a `snapshot_arena`): after the first save, the call costs a copy of the
  /// parameters into memory already in place, not a fresh allocation, and the caller may change
  /// its leaves as soon as it returns. The price: the manager keeps the size of one snapshot
  /// allocated between saves.
  /// \return true if a write was started.
  /// \throws as `save_async`, and std::invalid_argument if a leaf name is empty, `__metadata__` or
  /// appears twice.
  bool save_async(std::int64_t step, std::initializer_list<section> sections, const metadata_map& metadata = {},
                  bool force = false);

  /// Blocks until a background write, if any, is on disk.
  /// \throws the background write's error (io_error, or std::bad_alloc...), once.
  void wait();

  /// The steps of the checkpoints in the folder, ascending.
  /// \throws a pending background error (see `wait`).
  [[nodiscard]] std::vector<std::int64_t> steps();
  /// The newest step, or nothing if the folder has no checkpoint.
  /// \throws a pending background error (see `wait`).
  [[nodiscard]] std::optional<std::int64_t> latest_step();
  /// `step`'s checkpoint (its metadata include `step` and `wall_time`), its digest verified if
  /// it has one and `options.verify_digest` is set.
  /// \throws std::invalid_argument if there is no checkpoint for `step`.
  /// \throws io_error, format_error, integrity_error as `ckpt::load`; a pending background error.
  [[nodiscard]] checkpoint load(std::int64_t step, const load_options& options = {});
  /// The newest checkpoint, or nothing if there is none.
  /// \throws io_error, format_error, integrity_error as `ckpt::load`; a pending background error.
  [[nodiscard]] std::optional<checkpoint> load_latest(const load_options& options = {});

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// The steps of the checkpoints a `checkpoint_manager` wrote in `folder`, ascending: the files
/// named exactly as `checkpoint_manager::path_of` names them. Read-only and lock-free, so that a
/// tool may list a folder while a manager trains into it (a step the manager is deleting at that
/// moment may still be listed). Other files, and temporaries of interrupted saves, are ignored.
/// \throws io_error if `folder` cannot be listed (the message names it), a missing folder included.
[[nodiscard]] std::vector<std::int64_t> list_steps(const std::filesystem::path& folder);

/// The file of `step`'s checkpoint in `folder`, `<folder>/ckpt-<step, 10 digits>.safetensors`, as
/// `checkpoint_manager::path_of` names it, without opening a manager (nor taking its lock).
/// \throws std::invalid_argument if `step` is negative.
[[nodiscard]] std::filesystem::path checkpoint_path(const std::filesystem::path& folder, std::int64_t step);

}  // namespace ckpt
