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
#include "run/layout.hpp"
#include "run/policy.hpp"
#include "run/store.hpp"
#include "tensor/entry_head.hpp"

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <filesystem>
#include <memory>
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

// The run's store as a rank holds it (src/run/store.hpp): a folder, held by its descriptor, or a
// bucket's prefix.
using run_store = std::shared_ptr<const ckpt::detail::store>;

// A step being saved, the same on every rank but for `shard` and `mine`.
struct step_plan {
  std::filesystem::path folder;  // the checkpoint folder, for messages
  // The run as this rank holds it: every file of the step is written, renamed and removed through
  // it (in a folder, relative to its descriptor, the step folder opened without following a link).
  run_store run;
  std::int64_t step = 0;
  std::filesystem::path dir;  // the step folder, for messages
  std::string dir_name;       // its name in `run`
  // `<dir_name>/<file>`: a file of the step in `run`.
  [[nodiscard]] std::string name_of(std::string_view file) const { return dir_name + "/" + std::string(file); }
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
  struct global_tensor : ckpt::detail::entry_head {
    std::uint64_t offset = 0;
    int whole_writer = -1;
  };
  std::vector<global_tensor> sliced;
  // A step of slices in the node-local tiers (src/mpi/tiers.hpp): each rank that writes anything
  // keeps what it writes (`mine`) as a file of its own there, its part (layout::step_part): every
  // rank's part name ("" for a rank that writes nothing), and this rank's.
  std::vector<std::string> parts;
  std::string part;
};

// Collective: exchanges the names, dtypes and shapes every rank holds in `sections`, checks them
// and assigns each entry to its writer. `held` is the run `folder` as this rank holds it (a
// manager's), or null: each rank then opens `folder` (a folder, created if need be, or a bucket's
// prefix) once the step is agreed. `metadata` counts on rank 0. `function` names the caller in messages ("save" for
// ckpt::mpi::save).
// \throws std::invalid_argument on every rank if the step is negative or differs between ranks,
// is committed already, or ranks hold an entry with different dtypes or shapes.
// \throws collective_error on every rank if a rank could not describe its entries.
[[nodiscard]] step_plan plan_step(MPI_Comm comm, const std::filesystem::path& folder, const run_store& held,
                                  std::int64_t step,
                                  std::span<const section> sections, const metadata_map& metadata,
                                  std::string_view function);

// Collective: writes the one shard of a step of slices (`plan.sliced` not empty) from every rank's
// `sections` (the entries plan_step saw, live or a snapshot), on `comm` (the plan's ranks, in the
// same order); the digest, with `options.digest`. In a folder, with MPI-IO into a temporary file
// that rank 0 renames into place; in a bucket, as one multipart upload whose parts the ranks
// upload, each part's bytes sent to the rank that uploads it, and rank 0 completes. A failure on
// any rank ends it on every rank: `error` then holds this rank's failure (null on the others), for
// commit_step to report on every rank.
void write_sliced(MPI_Comm comm, const step_plan& plan, std::span<const section> sections, const save_options& options,
                  std::exception_ptr& error);

// Local: writes this rank's part of a step of slices (`plan.part`: its slices and the whole
// entries it writes, from `sections`) into the step folder of `run` (a node's local tier),
// atomically: a safetensors file of those entries under their names, each slice with the shape it
// has on the rank, its place in the global tensor noted in the metadata (part_as_slices reads it);
// nothing if the rank writes nothing. The metadata is the step's but for those notes.
// \throws io_error; std::invalid_argument if the rank holds two slices of one tensor.
void write_part(const step_plan& plan, const run_store& run, std::span<const section> sections,
                const save_options& options, ckpt::detail::write_path path);
// The entries of the part file `file` (write_part), loaded, as the slices and whole entries the
// rank wrote.
// \throws format_error if a note of the part is malformed.
[[nodiscard]] section part_as_slices(const checkpoint& part, const std::filesystem::path& file);
// Local: writes the one shard of a step of slices from all its parts (loaded), into the step folder
// `dir_name` of `run` (a folder), atomically: byte for byte the file the ranks wrote together (or
// would have) with ckpt::mpi::save, its digest if the parts have one.
// \throws std::invalid_argument, format_error if the parts do not make a step; io_error.
void write_assembled(const run_store& run, const std::string& dir_name, std::span<const checkpoint> parts,
                     const std::string& operation);

// Local: writes this rank's shard (the entries of `sections` it writes) into `plan.run`,
// atomically (a file renamed into place, or an upload); nothing if it writes none. `sections` must
// hold the entries `plan_step` saw (the live ones or a snapshot). `path` as
// ckpt::detail::write_file's (direct I/O for a background save into a folder).
// \throws io_error, std::bad_alloc...
void write_shard(const step_plan& plan, std::span<const section> sections, const save_options& options,
                 ckpt::detail::write_path path = ckpt::detail::write_path::page_cache);

// Collective: agrees that every shard is durable (`local_error` is this rank's failure to
// write it), then rank 0 writes the index, which commits the step, and removes what else the
// step folder holds (debris of a crashed attempt; nothing is followed through a link). The index
// never replaces one there (in a bucket, a conditional write): if another writer committed the
// step meanwhile, the save fails and its step is left as it is. If anything else failed on any
// rank, every rank removes its shard and throws, and the step does not exist.
// \throws collective_error on every rank, naming the lowest failing rank.
void commit_step(MPI_Comm comm, const step_plan& plan, const std::exception_ptr& local_error);

// Local: the committed step folder `dir_name` of `run` (by the layout), or nothing if it holds no
// index; the index's weight_map (read through a link: a forked run's step may be a link).
// \throws index_error, io_error, remote_error.
[[nodiscard]] std::optional<std::map<std::string, std::vector<std::string>, std::less<>>> read_step_index(
    const ckpt::detail::store& run, const std::string& dir_name);

// A shard of a step in a bucket as one rank fetched it whole (its digest verified if `options` ask)
// to hand to the other ranks: the bytes, and the checkpoint they make on this rank.
struct fetched_shard {
  std::shared_ptr<std::byte[]> bytes;
  std::size_t size = 0;
  checkpoint parsed;
};
// Local: fetches the file `name` of `run` (a bucket) and parses it as `options` say.
// \throws as store::fetch, and as ckpt::load for the bytes (format_error, integrity_error).
[[nodiscard]] fetched_shard fetch_shard(const ckpt::detail::store& run, const std::string& name,
                                        const load_options& options);
// Collective: rank `root`'s fetched shard `mine` (the other ranks' are empty) on every rank, sent
// over MPI and parsed there (its bytes were checked where they were fetched); the checkpoint
// `shown` names in messages. A rank that fails keeps its failure in `error` (unless one is there)
// and takes part to the end; if a rank has no room for the bytes, none receives them.
[[nodiscard]] checkpoint share_shard(MPI_Comm comm, fetched_shard& mine, int root, const std::filesystem::path& shown,
                                     std::exception_ptr& error);

// Whether the failure `e` (null: none) says a step's bytes are wrong (ckpt::detail::is_damage),
// which the ranks prefer to report when they agree on a failed load.
[[nodiscard]] bool is_damage(const std::exception_ptr& e) noexcept;

// The committed steps of `run` (step folders holding their index: layout::describe), oldest
// first. Not collective: it only lists the run.
// \throws io_error, remote_error if the run cannot be listed.
[[nodiscard]] std::vector<std::int64_t> committed_steps(const ckpt::detail::store& run);

// Collective: step `step` of `run` (as this rank holds it). In a folder, every shard mapped on
// every rank, each shard's digest verified by one rank (shard k by rank k mod n) if `options` ask
// for it and its hashes shared, so that every rank's reads are checked against them
// (mapped_file::verified). In a bucket, shard k fetched once, by rank k mod n (its digest verified
// there), and its bytes sent to every rank over MPI: the step crosses the network from the bucket
// once, not once per rank. `damaged`, if given, is set on every rank to whether the failure (if
// one is thrown) is damage on some rank (manager_core's is_damage): the bytes are wrong, rather
// than a rank being short of a resource or a permission.
// \throws collective_error on every rank, naming the failing rank (one that found damage first).
// `sources`, if given, gets a row per shard (tier::folder).
[[nodiscard]] checkpoint load_step(MPI_Comm comm, const ckpt::detail::store& run, std::int64_t step,
                                   const load_options& options, bool* damaged,
                                   std::vector<checkpoint_manager::source>* sources = nullptr);

}  // namespace ckpt::mpi::detail
