#pragma once
/// \file
/// `ckpt::mpi`: checkpoints of a training job that runs as MPI ranks, saved in parallel (each
/// rank writes its own shard), committed by one small index written last, and restorable on any
/// number of ranks. Link `ckpt::mpi` (built when CMake finds MPI); not part of `<ckpt/ckpt.hpp>`,
/// so code without MPI never sees `mpi.h`.
///
/// \code
/// // data parallel: every rank holds the whole (replicated) state; each entry is written once
/// ckpt::mpi::save(MPI_COMM_WORLD, "runs/a", state.step, ckpt::training_state(params, state));
/// // any number of ranks later (or a ckpt::mpi::checkpoint_manager, which finds the steps):
/// const ckpt::checkpoint t = ckpt::mpi::load(MPI_COMM_WORLD, "runs/a", step);
/// ckpt::read_params(t, ckpt::training_state(params, state));   // or to_params(t, like, {.prefix = ...})
/// \endcode
///
/// **Layout.** Step `s` of `folder` is the folder `<folder>/step-<s, 10 digits>/` holding the
/// shards `model-<k>-of-<K>.safetensors` (k = 1..K, five digits, as Hugging Face names shards)
/// and the index `model.safetensors.index.json` (Hugging Face's layout: `metadata.total_size` and
/// a `weight_map` from entry name to shard file). The index is the commit: a step folder without
/// it does not exist for the managers (their `steps()`) or for `load`. Shard `k` is written by the
/// k-th rank (in rank order) that writes any entry, so K is at most the number of ranks and
/// nothing in the files depends on the rank count: a step saved by 4 ranks loads on 2, on 7, or
/// in one process with `ckpt::load(<step folder>)`.
///
/// **Collective calls.** Every function taking an `MPI_Comm` is collective: every rank of the
/// communicator must call it, with the same `folder` and `step`. Each rank gets the same outcome:
/// either every rank returns, or every rank throws (a failure on one rank is reported on all,
/// naming that rank). Communication errors follow the communicator's MPI error handler (by
/// default they abort the job). The folder must be one file system seen by every rank (a local
/// disk for ranks of one machine, or a shared/parallel file system); see docs/distributed.md.
///
/// **In a bucket.** `folder` may be `s3://bucket/prefix` (a build with S3 support; credentials
/// and endpoint from the standard AWS environment, as for `ckpt::save`): the same layout, a step
/// folder being the objects under `<prefix>/step-<s>/`. Each rank uploads its shard (past 8 MiB,
/// a multipart upload of its own); rank 0 writes the index last, once every upload completed,
/// never over an index there (a conditional write); a step of slices is one object, uploaded in
/// parts by the ranks. A load fetches each shard once in the whole job, by the rank that verifies
/// it, which sends the bytes to the other ranks over MPI (every rank then holds the step in
/// memory). A bucket has no lock: one job writes a run at a time (docs/guide.md, "Checkpoints in
/// object storage"). A node-local tier (`tiers::local`) is a folder, never a bucket. See
/// docs/distributed.md, "A run in a bucket".

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/live_source.hpp>
#include <ckpt/detail/slice_reads.hpp>
#include <ckpt/error.hpp>
#include <ckpt/leaf.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/section.hpp>

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::mpi {

class slice;

namespace detail {
struct slice_access;  // src/mpi/sliced.cpp: the way into a slice's leaf, for `sliced`
}  // namespace detail

/// A collective operation failed on some rank; every rank of the communicator throws this, with
/// the same message: `ckpt: mpi::<operation> of step <s> in '<folder>' failed on rank <r> of
/// <n>: <that rank's error message>` (the lowest failing rank if several failed). On the rank
/// that failed, the original exception is attached as a nested exception
/// (`std::rethrow_if_nested`).
class collective_error : public error {
 public:
  /// \param folder the checkpoint folder; \param what the full message; \param rank the rank
  /// whose failure is reported; \param cause that rank's own error message.
  collective_error(std::filesystem::path folder, const std::string& what, int rank, std::string cause)
      : error(std::move(folder), what), rank_(rank), cause_(std::move(cause)) {}
  /// The rank whose failure is reported.
  /// \throws nothing
  [[nodiscard]] int rank() const noexcept { return rank_; }
  /// That rank's error message.
  /// \throws nothing
  [[nodiscard]] const std::string& cause() const noexcept { return cause_; }

 private:
  int rank_;
  std::string cause_;
};

/// Saves step `step` collectively: `local` is what this rank holds, as the sections of
/// `ckpt::save(path, {sections})` (its model-parallel part, or the whole replicated state in data
/// parallelism, or a mix): a braced list, or any contiguous range of sections built at run time.
/// The leaves must not change during the call. A rank may also hold pieces of global tensors (a
/// section of slices, `sliced`: ZeRO, tensor parallelism): the step is then written as `sliced`
/// describes, one shard by all ranks together, instead of as below.
///
/// 1. The ranks exchange the names, dtypes and shapes of their entries (one `MPI_Allgatherv` of
///    a few bytes per entry; no tensor data crosses the network). An entry held by several ranks
///    is written once, by the lowest rank holding it, after checking that every holder has the
///    same dtype and shape (the values are not compared: replicas are the caller's business).
/// 2. Each rank that writes anything writes its shard with `ckpt::save` (temporary file, fsync,
///    rename, folder fsync), all ranks in parallel.
/// 3. One `MPI_Allreduce` confirms that every shard is durable. Then rank 0 writes the index the
///    same atomic way, never over an index that another job committed meanwhile (the save then
///    fails, and that step is left as it is), and that commits the step; a second
///    `MPI_Allreduce` tells the ranks.
///
/// Every shard's `__metadata__` is rank 0's, as `ckpt::save` of sections makes them: the
/// metadata of its checkpoint sections, then `metadata`, then `step` (decimal); `load` gives
/// them back. `options` are `ckpt::save`'s, for each rank's shard: `digest` (on by default)
/// stores each shard's digest (which `load` verifies), `progress` reports that rank's shard; they
/// may come without metadata (`save(comm, folder, step, {...}, {.digest = false})`).
///
/// If anything fails on any rank (disk full, an exception), every rank throws, each rank removes
/// the shard it wrote, and no index is written: the step does not exist, and earlier steps are
/// untouched. Leftover files of a step that was never committed (a crashed job) are replaced or
/// removed when the step is saved again. Each rank opens `folder` once for the call and works
/// relative to it; the step folder is created, written and tidied without following a symbolic
/// link: a link (or a file) under the step folder's name fails the save on that rank, and
/// nothing is written or deleted where it points.
/// \returns the step folder.
/// \throws std::invalid_argument on every rank if `step` is negative or differs between ranks,
///   if the step is already committed (a committed step is never rewritten in place, so that
///   readers never see it change), or if ranks hold an entry with different dtypes or shapes
///   (the message names the entry and both ranks' dtype and shape).
/// \throws collective_error on every rank if a rank failed (an I/O error, an exception; a leaf
///   name of `local` that is empty, `__metadata__` or given twice; two checkpoint sections of
///   `local` that give one metadata key different values).
std::filesystem::path save(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step,
                           std::span<const section> local, const metadata_map& metadata = {},
                           const ckpt::save_options& options = {});
/// \copydoc save(MPI_Comm, const std::filesystem::path&, std::int64_t, std::span<const section>, const metadata_map&, const ckpt::save_options&)
inline std::filesystem::path save(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step,
                                  std::initializer_list<section> local, const metadata_map& metadata = {},
                                  const ckpt::save_options& options = {}) {
  return save(comm, folder, step, std::span<const section>(local.begin(), local.size()), metadata, options);
}
/// \copydoc save(MPI_Comm, const std::filesystem::path&, std::int64_t, std::span<const section>, const metadata_map&, const ckpt::save_options&)
inline std::filesystem::path save(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step,
                                  std::span<const section> local, const ckpt::save_options& options) {
  return save(comm, folder, step, local, metadata_map{}, options);
}
/// \copydoc save(MPI_Comm, const std::filesystem::path&, std::int64_t, std::span<const section>, const metadata_map&, const ckpt::save_options&)
inline std::filesystem::path save(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step,
                                  std::initializer_list<section> local, const ckpt::save_options& options) {
  return save(comm, folder, step, std::span<const section>(local.begin(), local.size()), metadata_map{}, options);
}

/// A piece of one global tensor that this rank holds (ZeRO/FSDP's flat partition, or a
/// tensor-parallel block of rows), saved through a section of them (`sliced`): elements
/// [first(), first() + count()) of the global tensor flattened in C order. The rank's leaf is
/// referred to, not copied: it must outlive the slice and not change until the save returns (a
/// manager's `save_async`: until it returns). Its bytes need not stand in C order (a column-major
/// `Eigen::MatrixXf` block is reordered a band of rows at a time).
class slice {
 public:
  /// `local` holds elements [first, first + numel(local)) of the global tensor `name` of shape
  /// `global_shape`, flattened in C order (any shape of `local` will do: its C-order elements
  /// are taken in order). ZeRO/FSDP: rank r of P holds a contiguous part of each tensor.
  /// \throws std::invalid_argument if the range is outside the global tensor (naming it).
  template <leaf L>
  [[nodiscard]] static slice flat(std::string name, dims global_shape, std::int64_t first, const L& local) {
    return slice(std::move(name), std::move(global_shape), first,
                 ckpt::detail::live_source(std::string(), local, "mpi::slice::flat"), false);
  }
  /// `local`, of shape [r, global_shape[1], ...], holds rows [first_row, first_row + r) of the
  /// global tensor `name` of shape `global_shape` (its first dimension). Tensor parallelism: a
  /// weight matrix split by rows; a block held column-major is handled.
  /// \throws std::invalid_argument if `global_shape` is a scalar's, if `local`'s shape is not a
  /// block of its rows, or if the rows are outside it (naming the tensor and both shapes).
  template <leaf L>
  [[nodiscard]] static slice rows(std::string name, dims global_shape, std::int64_t first_row, const L& local) {
    return slice(std::move(name), std::move(global_shape), first_row,
                 ckpt::detail::live_source(std::string(), local, "mpi::slice::rows"), true);
  }

  /// The global tensor's name.
  /// \throws nothing
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// The global tensor's dtype (the local leaf's).
  /// \throws nothing
  [[nodiscard]] ckpt::dtype dtype() const noexcept { return local_.dtype; }
  /// The global tensor's shape.
  /// \throws nothing
  [[nodiscard]] const dims& global_shape() const noexcept { return global_shape_; }
  /// The first element held, in the flattened global tensor.
  /// \throws nothing
  [[nodiscard]] std::int64_t first() const noexcept { return first_; }
  /// The number of elements held.
  /// \throws nothing
  [[nodiscard]] std::int64_t count() const noexcept { return ckpt::detail::numel_of(local_.shape); }

 private:
  friend struct detail::slice_access;
  slice(std::string name, dims global_shape, std::int64_t first, ckpt::detail::entry_source local, bool rows);
  std::string name_;
  dims global_shape_;
  std::int64_t first_ = 0;
  ckpt::detail::entry_source local_;
};

/// A section of the pieces of global tensors this rank holds, to save with `ckpt::mpi::save` or
/// an MPI `checkpoint_manager`'s `save`/`save_async` beside the sections of whole entries (ZeRO:
/// each rank's slices of the parameters and moments, and the step whole):
/// \code
/// std::vector<ckpt::mpi::slice> mine{ckpt::mpi::slice::flat("model.l1.w", {512, 256}, first, part)};
/// manager.save_async(step, {ckpt::mpi::sliced(mine), ckpt::of_int("step", step)});
/// \endcode
/// A step in which any rank holds slices is one file of whole tensors written by all ranks at
/// once (below); a whole entry held by several ranks is written once, by the lowest rank holding
/// it. The step folder holds one shard, `model-00001-of-00001.safetensors`, and the index, so it
/// loads as any step (`load`, the single-process `ckpt::load`, the `ckpt` tool): the shard is byte
/// for byte the file `ckpt::save` writes of the same whole tensors and metadata.
///
/// 1. The ranks exchange the names, dtypes, global shapes and ranges of their pieces (no tensor
///    data crosses the network) and every rank checks them and lays the file out (the header,
///    from the same builder as `ckpt::save`'s).
/// 2. The ranks open a temporary file with MPI-IO and write their pieces at their offsets with
///    collective writes (`MPI_File_write_at_all`, in rounds of at most 64 MiB a rank, straight
///    from a leaf that stands in C order, else reordered through a staging buffer), rank 0 the
///    header too, then `MPI_File_sync`.
/// 3. With `options.digest` (the default), each rank reads back a share of the data's 1 MiB
///    chunks (the page cache) and hashes them; rank 0 gathers the hashes and writes the digest
///    into the header.
///    Rank 0 renames the file into place, and the index commits the step, as for any step.
///
/// In a bucket the file is one multipart upload: part 1 is the header and the first 8 MiB of the
/// data (more past 78 GiB: at most 10,000 parts), each next part the next as many bytes;
/// part k is uploaded by rank (k - 1) mod n, which receives its bytes from the ranks that hold
/// them (`MPI_Alltoallv`, a round of at most n parts and 1 GiB at a time) and hashes its chunks;
/// rank 0 writes the digest into part 1, uploads it last and completes the upload: the object is
/// byte for byte the file, and appears whole.
///
/// Of the save's options, `progress` is not used for such a step (the writes are collective). A
/// manager's `save_async` snapshots the slices and writes them on its background thread if every
/// rank's MPI was initialized with `MPI_THREAD_MULTIPLE` (the writes are MPI-IO calls, on a
/// communicator of the manager's own); otherwise it writes them before returning, as `save` does.
/// A manager with node-local tiers keeps each rank's part of the step there instead, and writes
/// this file when it drains the step (see "Steps of slices" in `tiers`).
/// The slices' leaves are referred to, not copied: they must outlive the section.
/// \throws std::invalid_argument (by the save, on every rank, before anything is written) for
///   what `save` refuses, and if the pieces of a tensor overlap or leave a gap, or disagree on its
///   dtype or global shape, or a tensor is held whole and in slices (each message names the
///   tensor, the ranks and their ranges, dtypes or shapes). A single-process save (`ckpt::save`,
///   `ckpt::checkpoint_manager`, a `snapshot_arena`) refuses a section of slices, naming the entry.
/// \throws std::bad_alloc
[[nodiscard]] section sliced(std::span<const slice> slices);
/// \copydoc sliced(std::span<const slice>)
[[nodiscard]] inline section sliced(std::initializer_list<slice> slices) {
  return sliced(std::span<const slice>(slices.begin(), slices.size()));
}

/// Reads elements [first, first + numel(local)) of the flattened entry `name` of `t` (a step
/// from `load`, or any checkpoint) into `local`, whatever the ranks that wrote it held: only
/// those bytes are read (a range of the file), never the whole tensor. Not collective.
/// \throws std::invalid_argument if `t` has no entry `name`, if its dtype is not `local`'s, or if
///   the range is outside it.
/// \throws io_error, format_error if the file cannot be read.
template <leaf L>
void read_flat(const checkpoint& t, std::string_view name, std::int64_t first, L& local) {
  using traits = ckpt::detail::leaf_hooks<L>;
  traits::read(local, detail::part_of(t, name, first, traits::dtype(local), traits::shape(local), "read_flat"));
}

/// Reads rows [first_row, first_row + r) of entry `name` of `t` into `local`, of shape
/// [r, shape[1], ...] (a column-major matrix is filled from the rows). Not collective.
/// \throws std::invalid_argument as `read_flat`, or if `local`'s shape is not a block of rows of
///   the entry's.
/// \throws io_error, format_error if the file cannot be read.
template <leaf L>
void read_rows(const checkpoint& t, std::string_view name, std::int64_t first_row, L& local) {
  using traits = ckpt::detail::leaf_hooks<L>;
  const dims shape = traits::shape(local);
  traits::read(local, detail::part_of(t, name, detail::first_of_rows(t, name, first_row, shape),
                                      traits::dtype(local), shape, "read_rows"));
}

/// Loads step `step` collectively: every rank gets a lazily mapped view of the whole step (every
/// shard is mapped, only headers are read), from which it extracts what it needs (`to_params`
/// with a prefix, `read_params` of `training_state`...). Works on any number of ranks.
///
/// If `options.verify_digest` is set, the shards' digests are checked, each shard by one rank
/// (shard k by rank k mod n), so the step is read once in all, not once per rank. From a bucket,
/// shard k is fetched whole by rank k mod n (and verified there), which sends its bytes to every
/// rank: the step crosses the network from the bucket once.
/// Each rank's copies out of the result are then checked against the hashes the verifying rank
/// computed (see "Verified bytes" in the guide): a shard rewritten in place afterwards is an
/// `integrity_error`, never bytes that do not match its digest. A rank holds a bounded number of
/// the shards' descriptors at once (a quarter of its descriptor limit, at most 1024), not one
/// each.
/// \throws collective_error on every rank if the step is not committed, or a rank failed to map
///   or verify it (the cause is then an `io_error`, a `format_error` of a shard or the index, or an
///   `integrity_error` message naming the file).
[[nodiscard]] checkpoint load(MPI_Comm comm, const std::filesystem::path& folder, std::int64_t step,
                              const load_options& options = {});

/// The tiers of a `checkpoint_manager` beyond its folder: SCR's and Orbax's multi-level scheme on plain
/// safetensors step folders. Left empty (`local` empty), the manager writes every step to its
/// folder, as without tiers.
///
/// **Saving.** Each rank writes its shard into its node's local folder (tmpfs or a local SSD),
/// then sends it over MPI to its partner, the rank of the same place on the next node (node
/// k's shards are kept on node (k + 1) mod K), which writes the copy into its own local folder.
/// The step is committed (listed by `steps()`) once every copy is durable and each node's
/// leader has written the step's index beside its copies. A step whose number is a multiple of
/// `drain_every` is then copied from the local tier to `folder` (a folder, or a bucket: uploaded)
/// on a background thread, each rank its own shard, and committed there by the index, written
/// last, at the first member call after every rank's copy is done (`wait` and the destructor wait
/// for it): a step is never committed but incomplete in `folder`, whatever is killed when.
/// `save_async` writes the local shard on a background thread.
/// If every rank's MPI was initialized with `MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)`, that
/// thread also sends and receives the partner copies (on a communicator of its own); otherwise the
/// call that commits the step (the next `save`, `save_async`, `wait`, `load` or `load_latest`)
/// does, since MPI may then be used from the caller's thread only.
///
/// **Keeping.** The retention rules of `options` apply to the steps of all tiers (a step is kept
/// while any tier holds it): `folder` deletes what they drop. A node's local tier is a cache: it
/// keeps the newest `local_max_to_keep` steps (and a step until its drain is committed), and a
/// save first deletes the oldest of them, so that the new step's files take its memory (fresh
/// tmpfs pages cost a fault each): while a step is written, the tier holds one step fewer.
///
/// **Restoring** (`load`, `load_latest`): a step is listed if `folder` holds it or the nodes'
/// local tiers hold every shard of it between them. Each node verifies (by digest) the copies
/// it holds of the step, its ranks sharing the work; then each shard is read from the fastest
/// intact copy: this node's own copy, its partner copy, another node's copy (sent over MPI by
/// that node and written into this node's local folder), and last `folder`. A damaged copy is
/// skipped for the next; a step with a shard that has no intact copy in any tier is damaged
/// (`load_latest` goes on to the step before). `latest::sources` says which tier served each
/// shard. A job restarted on another number of ranks or nodes restores the same way: every
/// node that holds a copy offers it. `path_of` and `status()` name a step's folder in `folder`,
/// where it is, or would be once drained.
///
/// **Steps of slices** (`sliced`: ZeRO, FSDP, tensor parallelism). Each rank that writes anything
/// keeps its part of the step in its node's local folder (and its partner's), a safetensors file
/// `part-<k>-of-<K>.safetensors` of its slices (each under its tensor's name, with its local shape,
/// its place in the global tensor noted in the metadata) and of the whole entries it writes; the
/// step's index is the shared tier's. The part is written by its rank alone (on `save_async`'s
/// thread whatever MPI's thread level). A drain writes the one file of `sliced` from the parts,
/// collectively (on a communicator of the drain thread's own with `MPI_THREAD_MULTIPLE`, otherwise
/// in the call that commits the step): byte for byte what `save` writes, so every tool and rank
/// count reads it. A restore finds, verifies and moves the parts as it does shards; each node's
/// first rank then writes the step's one file from them into its local folder, which every rank of
/// the node maps (the file is unlinked at once; the mapping keeps it): every rank gets the whole
/// step, on any number of ranks, as long as the nodes that hold the parts are in the job. A step
/// of which some part has no intact copy on any node comes from `folder` if it was drained there,
/// and is damaged otherwise. A rank holds at most one slice of each tensor in a tiered step (the
/// save fails with `collective_error` on every rank otherwise).
///
/// **Runs.** The local tiers of a run are its own: `local` is a root that any number of runs may
/// share, each run's steps and partner copies in a folder `<local>/run-<id>/` named by the run's
/// id. The id is made once, by the first manager that opens `folder` for writing (a new run, or a
/// folder an earlier version made), and kept in `<folder>/.ckpt-run-id`, which every later
/// manager of the run reads; a read-only manager writes none. A run lists, restores, keeps and
/// deletes only the steps of its own folder: another run's are never listed, restored, counted
/// as steps the run holds, or deleted, whether that run ran before or runs at once. A run whose
/// `folder` was deleted and made again is a new run (a new id); a copy of `folder` with its
/// `.ckpt-run-id` is the same run (delete the copy's file to make it a new one). The folders of
/// runs gone stay until deleted by hand: `ckpt inspect <local>` lists each run's nodes and steps,
/// and says which runs' folders no manager will use again.
struct tiers {
  /// The node-local root, as every rank of a node sees it (created if needed). Node k's folder of
  /// the run is `<local>/run-<id>/` (the node's first rank locks it as the manager locks `folder`);
  /// with `ranks_per_node`, `<local>/run-<id>/node-<k>/`, so that simulated nodes on one machine
  /// do not share one.
  std::filesystem::path local{};
  /// 0: a node is the ranks that share memory (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`).
  /// N > 0: ranks [kN, (k + 1)N) form node k, simulated nodes for tests and benchmarks on one
  /// machine.
  int ranks_per_node = 0;
  /// Keep a partner copy of each node's shards on the next node (ignored with one node).
  bool partner = true;
  /// Drain the steps whose number is a multiple of this to `folder`; 0 never drains.
  std::int64_t drain_every = 1;
  /// How many steps a node's local tier keeps (at least 1).
  std::size_t local_max_to_keep = 2;
};

/// Numbered steps of one MPI training job in a folder, each step saved in `ckpt::mpi::save`'s
/// layout: a `ckpt::checkpoint_manager` (ckpt/manager.hpp, where every member, member type and
/// rule is documented: the same `options`, `latest`, `step_status`, retention decision and
/// checks) that adds only its collective constructor, so code written against
/// `ckpt::checkpoint_manager&` works with it. Every member but `folder`, `should_save`, `path_of`,
/// `steps` and `latest_step` is collective: call it on every rank, in the same order, with the
/// same step (the rest only reads the state every rank keeps alike). Moved into a
/// `ckpt::checkpoint_manager`, it stays this manager, collective members and destructor included
/// ("Moving" in ckpt/manager.hpp).
///
/// Rank 0 takes the advisory lock `<folder>/.ckpt-manager.lock` (a folder's: a bucket has none),
/// the single-process manager's lock file too (refusing a second manager of either kind with
/// `lock_error`), reads the run's id from `<folder>/.ckpt-run-id` (making it, atomically, at the
/// folder's first writing open: see "Runs" in `tiers`), lists the folder, removes the step
/// folders left uncommitted by a crashed job (in a bucket, also aborts the uploads it left open
/// under step folders), and applies the retention rules, then again after each commit: it deletes
/// what the rules drop, index first, so a step never appears half-deleted. Every rank then opens
/// the folder once and checks that it is the one rank 0 locked (a token rank 0 writes into the
/// lock file; a bucket's prefix has no lock to check);
/// from then on every rank works relative to the folder it opened, as the single-process manager
/// does ("The folder is held, not its path" in ckpt/manager.hpp): a step folder that is a link is
/// read through but only ever renamed or unlinked, never written into or emptied.
///
/// **Saving a step again** is refused, as in the single-process manager: a step is several files
/// committed by an index, which cannot be replaced atomically, and readers (other jobs, tools, a
/// restart on another rank count) must never see a committed step change.
///
/// **Background saves.** `save_async` checks the arguments and plans the step with the other
/// ranks; a rank that writes a shard copies its sections into memory the manager reuses (a
/// `snapshot_arena`; a rank whose entries are all written by a lower rank copies nothing), and
/// writes the shard on a background thread, all ranks in parallel. The step is committed
/// collectively by the next `save`, `save_async`, `wait`, `load` or `load_latest`: once every
/// rank's write has succeeded, rank 0 writes the index. If a rank's write failed, that call
/// throws `collective_error` on every rank (once), every rank removes its shard, and the step is
/// not committed (not listed, no index). The destructor commits too (collectively, reporting an
/// error to stderr), then frees the manager's duplicated communicator (`MPI_Comm_free`,
/// collective); after `MPI_Finalize` it does neither, and a background step stays uncommitted
/// (the next manager removes it).
///
/// **Steps of slices** (ZeRO, tensor parallelism): `save` and `save_async` take sections of
/// slices (`sliced`) beside whole entries; such a step is one file all ranks write together (see
/// `sliced`, also for when `save_async` writes in the background).
///
/// **Multi-level checkpoints** (`ckpt::mpi::tiers`, docs/distributed.md): with a node-local
/// folder, every step goes to the nodes' local tiers, and only every `drain_every`-th step to
/// `folder`, which becomes the shared tier. See `tiers` for what each tier holds and how a step is
/// restored, steps of slices included.
class checkpoint_manager : public ckpt::checkpoint_manager {
 public:

  /// Opens `folder` (created if needed; or `s3://bucket/prefix`, see "In a bucket" above) for the
  /// ranks of `comm` (duplicated, so the manager's messages never mix with the caller's), and,
  /// with `levels.local`, each node's local folder.
  /// Collective.
  /// \throws std::invalid_argument on every rank if an option is out of range (as the
  ///   single-process manager; `ranks_per_node` or `drain_every` negative, `local_max_to_keep` 0, a
  ///   local tier with `read_only`, `local` an `s3://` path).
  /// \throws collective_error on every rank if rank 0 cannot create, lock or list the folder, or
  ///   read or write its run id (the cause, a `ckpt::error`, names `.ckpt-run-id` if it holds
  ///   anything but an id), or a node's first rank its local folder (the cause names the lock file
  ///   if another manager holds it).
  checkpoint_manager(MPI_Comm comm, std::filesystem::path folder, options opts = {}, tiers levels = {});
};

}  // namespace ckpt::mpi
