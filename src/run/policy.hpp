#pragma once
// What a manager does its own way, behind ckpt::checkpoint_manager (src/run/manager.cpp, the one
// implementation of its members for every manager): where a step lives and who writes it. Two
// policies implement it: one process over a store (src/run/single_process.cpp: a folder or a
// bucket) and the ranks of an MPI job together (src/mpi/manager.cpp, with node-local tiers).

#include <ckpt/checkpoint.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/section.hpp>
#include <ckpt/snapshot.hpp>

#include "background.hpp"
#include "manager_core.hpp"

#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

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

// The policy of one process over the run at `where` (a folder, or `s3://bucket/prefix`), opened
// with `options` (src/run/single_process.cpp).
// \throws as the constructor of ckpt::checkpoint_manager.
[[nodiscard]] std::unique_ptr<manager_state> open_single_process(std::filesystem::path where, manager_options options);

}  // namespace ckpt::detail
