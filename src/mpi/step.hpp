#pragma once
// The three phases of saving a step of an MPI job, shared by ckpt::mpi::save and
// ckpt::mpi::checkpoint_manager (whose save_async runs the second phase on a background thread):
//   1. plan_step (collective): who writes which entry into which shard;
//   2. write_shard (local): this rank writes its shard; or, for a step of slices,
//      write_sliced (collective): the ranks write the one shard together;
//   3. commit_step (collective): once every rank's shard is durable, rank 0 writes the index.

#include <ckpt/mpi.hpp>
#include <ckpt/section.hpp>

#include "io/atomic_file.hpp"
#include "io/folder.hpp"
#include "run/layout.hpp"
#include "run/policy.hpp"

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <span>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt::mpi::detail {

// The index file of a step folder, whose presence commits the step (src/run/layout.hpp, which a
// read-only ckpt::checkpoint_manager reads too).
inline constexpr std::string_view index_file_name = ckpt::detail::layout::step_index;

// The folder of `step` in `folder`: `<folder>/step-<step, zero-padded to 10 digits>` (what
// `ckpt::mpi::save` returns and `ckpt::mpi::checkpoint_manager::path_of` gives).
// \throws std::invalid_argument if `step` is negative.
[[nodiscard]] std::filesystem::path step_folder(const std::filesystem::path& folder, std::int64_t step);

// The name of `step`'s folder: `step-<step, zero-padded to 10 digits>`.
// \throws std::invalid_argument if `step` is negative.
[[nodiscard]] std::string step_folder_name(std::int64_t step);

// A step being saved, the same on every rank but for `shard` and `mine`.
struct step_plan {
  std::filesystem::path folder;  // the checkpoint folder, for messages
  // The checkpoint folder as this rank holds it: every file of the step is written, renamed and
  // removed relative to it (its step folder opened without following a link).
  ckpt::detail::folder_handle run;
  std::int64_t step = 0;
  std::filesystem::path dir;  // the step folder, for messages
  std::string dir_name;       // its name in `run`
  // "<function> of step <s>", for collective_error.
  std::string operation;
  // The shard of each rank ("" for a rank that writes nothing).
  std::vector<std::string> shards;
  // This rank's shard, "" if it writes nothing, and the entries it writes there.
  std::string shard;
  std::set<std::string, std::less<>> mine;
  // Every shard's `__metadata__` (rank 0's, with `step`).
  metadata_map metadata;
  // The index: each entry's shard, in name order, and the bytes of all the data.
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::uint64_t total_size = 0;
  // A step in which some rank holds slices (ckpt::mpi::sliced): its one shard (shards[0], rank
  // 0's) holds every global tensor, in name order, each at `offset` in the data; a whole entry is
  // written by `whole_writer` (-1: the tensor is in slices, each written by its rank). `mine`
  // names what this rank writes: its slices and the whole entries it writes.
  struct global_tensor {
    std::string name;
    ckpt::dtype type = ckpt::dtype::f32;
    dims shape;
    std::uint64_t offset = 0;
    int whole_writer = -1;
  };
  std::vector<global_tensor> sliced;
};

// Collective: exchanges the names, dtypes and shapes every rank holds in `sections`, checks them
// and assigns each entry to its writer. `held` is the checkpoint folder `folder` as this rank
// holds it (a manager's), or null: each rank then opens `folder` (creating it) once the step is
// agreed. `metadata` counts on rank 0. `function` names the caller in messages ("save" for
// ckpt::mpi::save).
// \throws std::invalid_argument on every rank if the step is negative or differs between ranks,
// is committed already, or ranks hold an entry with different dtypes or shapes.
// \throws collective_error on every rank if a rank could not describe its entries.
[[nodiscard]] step_plan plan_step(MPI_Comm comm, const std::filesystem::path& folder,
                                  const ckpt::detail::folder_handle* held, std::int64_t step,
                                  std::span<const section> sections, const metadata_map& metadata,
                                  std::string_view function);

// Collective: writes the one shard of a step of slices (`plan.sliced` not empty) from every rank's
// `sections` (the entries plan_step saw, live or a snapshot) with MPI-IO, on `comm` (the plan's
// ranks, in the same order), and rank 0 renames it into place; the digest, with
// `options.digest`. A failure on any rank ends it on every rank: `error` then holds this rank's
// failure (null on the others), for commit_step to report on every rank.
void write_sliced(MPI_Comm comm, const step_plan& plan, std::span<const section> sections, const save_options& options,
                  std::exception_ptr& error);

// The step folder of `plan` on this rank, created if absent, never through a symbolic link: a
// link or a file under the step folder's name is refused (an io_error naming it).
// \throws io_error.
[[nodiscard]] ckpt::detail::folder_handle open_step_folder(const step_plan& plan);

// Local: writes this rank's shard (the entries of `sections` it writes), atomically; nothing if
// it writes none. `sections` must hold the entries `plan_step` saw (the live ones or a snapshot).
// `path` as ckpt::detail::write_file's (direct I/O for a background save).
// \throws io_error, std::bad_alloc...
void write_shard(const step_plan& plan, std::span<const section> sections, const save_options& options,
                 ckpt::detail::write_path path = ckpt::detail::write_path::page_cache);

// Collective: agrees that every shard is durable (`local_error` is this rank's failure to
// write it), then rank 0 writes the index, which commits the step, and removes what else the
// step folder holds (debris of a crashed attempt; nothing is followed through a link). If
// anything failed on any rank, every rank removes its shard and throws, and the step does not
// exist.
// \throws collective_error on every rank, naming the lowest failing rank.
void commit_step(MPI_Comm comm, const step_plan& plan, const std::exception_ptr& local_error);

// Whether the failure `e` (null: none) says a step's bytes are wrong (ckpt::detail::is_damage),
// which the ranks prefer to report when they agree on a failed load.
[[nodiscard]] bool is_damage(const std::exception_ptr& e) noexcept;

// Whether `name` in `run` is a committed step folder: one holding its index (read through a
// symbolic link: a forked run's step may be a link to another run's).
[[nodiscard]] bool is_committed(const ckpt::detail::folder_handle& run, const std::string& name);

// The committed steps of the folder `run` (step folders holding an index), oldest first. Not
// collective: it only lists the folder.
// \throws io_error if the folder cannot be listed.
[[nodiscard]] std::vector<std::int64_t> committed_steps(const ckpt::detail::folder_handle& run);
// The same, of the folder at `folder`; none if it does not exist.
// \throws io_error if the folder exists but cannot be listed.
[[nodiscard]] std::vector<std::int64_t> committed_steps(const std::filesystem::path& folder);

// Collective: step `step` of the folder `run` (as this rank holds it), every shard mapped on
// every rank, each shard's digest verified by one rank (shard k by rank k mod n) if `options`
// ask for it and its hashes shared, so that every rank's reads are checked against them
// (mapped_file::verified). `damaged`, if given, is set on every rank to whether the failure (if
// one is thrown) is damage on some rank (manager_core's is_damage): the bytes are wrong, rather
// than a rank being short of a resource or a permission.
// \throws collective_error on every rank, naming the failing rank (one that found damage first).
// `sources`, if given, gets a row per shard (tier::folder).
[[nodiscard]] checkpoint load_step(MPI_Comm comm, const ckpt::detail::folder_handle& run, std::int64_t step,
                                   const load_options& options, bool* damaged,
                                   std::vector<checkpoint_manager::source>* sources = nullptr);

}  // namespace ckpt::mpi::detail
