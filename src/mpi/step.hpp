#pragma once
// The three phases of saving a step of an MPI job, shared by ckpt::mpi::save and
// ckpt::mpi::checkpoint_manager (whose save_async runs the second phase on a background thread):
//   1. plan_step (collective): who writes which entry into which shard;
//   2. write_shard (local): this rank writes its shard;
//   3. commit_step (collective): once every rank's shard is durable, rank 0 writes the index.

#include <ckpt/mpi.hpp>
#include <ckpt/section.hpp>

#include "../manager_core.hpp"

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

// A step folder's name: this prefix and the step, through the managers' one step codec
// (ckpt::detail::step_name / step_in_name, src/manager_core.hpp, which a read-only
// ckpt::checkpoint_manager uses to read these folders too).
inline constexpr std::string_view step_prefix = ckpt::detail::mpi_step_prefix;

// The index file of a step folder, whose presence commits the step (named in
// src/manager_core.hpp, which a read-only ckpt::checkpoint_manager reads too).
inline constexpr std::string_view index_file_name = ckpt::detail::mpi_step_index;

// The folder of `step` in `folder`: `<folder>/step-<step, zero-padded to 10 digits>` (what
// `ckpt::mpi::save` returns and `ckpt::mpi::checkpoint_manager::path_of` gives).
// \throws std::invalid_argument if `step` is negative.
[[nodiscard]] std::filesystem::path step_folder(const std::filesystem::path& folder, std::int64_t step);

// A step being saved, the same on every rank but for `shard` and `mine`.
struct step_plan {
  std::filesystem::path folder;  // the checkpoint folder
  std::int64_t step = 0;
  std::filesystem::path dir;  // the step folder
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
};

// Collective: exchanges the names, dtypes and shapes every rank holds in `sections`, checks them
// and assigns each entry to its writer. `metadata` counts on rank 0. `function` names the caller
// in messages ("save" for ckpt::mpi::save).
// \throws std::invalid_argument on every rank if the step is negative or differs between ranks,
// is committed already, or ranks hold an entry with different dtypes or shapes.
// \throws collective_error on every rank if a rank could not describe its entries.
[[nodiscard]] step_plan plan_step(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step,
                                  std::span<const section> sections, const metadata_map& metadata,
                                  std::string_view function);

// Local: writes this rank's shard (the entries of `sections` it writes), atomically; nothing if
// it writes none. `sections` must hold the entries `plan_step` saw (the live ones or a snapshot).
// \throws io_error, std::bad_alloc...
void write_shard(const step_plan& plan, std::span<const section> sections, const save_options& options);

// Collective: agrees that every rank's shard is durable (`local_error` is this rank's failure to
// write it), then rank 0 writes the index, which commits the step. If anything failed on any
// rank, every rank removes its shard and throws, and the step does not exist.
// \throws collective_error on every rank, naming the lowest failing rank.
void commit_step(MPI_Comm comm, const step_plan& plan, const std::exception_ptr& local_error);

// The committed steps of `folder` (step folders holding an index), oldest first; none if the
// folder does not exist. Not collective: it only lists the folder.
// \throws io_error if the folder exists but cannot be listed.
[[nodiscard]] std::vector<std::int64_t> committed_steps(const std::filesystem::path& folder);

}  // namespace ckpt::mpi::detail
