#pragma once
// The local tiers of ckpt::mpi::checkpoint_manager (ckpt::mpi::tiers, include/ckpt/mpi.hpp): the
// nodes of the job, each node's local folder, the partner copies sent over MPI, the drain's copy
// to the shared folder, and the restore of a step from the fastest intact copy of each shard.
//
// Each run keeps its tiers apart under its id (src/run/layout.hpp, which names every folder here): a
// node's local folder is `<local>/run-<id>/` (or `<local>/run-<id>/node-<k>/` for simulated
// nodes), and nothing of the manager reads, writes or deletes anything of the local root outside
// it. A node's local folder holds its own step folders, `step-<s>/` (the shards its ranks wrote,
// and shards other nodes sent it at a restore), and `partner/step-<s>/` (the copies of the
// previous node's shards). Each is committed by the step's index, written last by the node's first
// rank, as a shared step folder is; the index names every shard of the step, of which a node
// holds some. A step of slices is kept as the ranks' parts (layout::step_part, write_part) in
// place of shards; its index is the shared tier's (the one shard the parts make), which a restore
// writes from them (write_assembled) and a drain writes collectively (write_sliced). Both are folder stores (src/run/store.hpp), held by their descriptors: every file is
// written, renamed and removed relative to them; the shared tier is the manager's store, a folder
// or a bucket.

#include <ckpt/manager.hpp>
#include <ckpt/mpi.hpp>

#include "io/posix_file.hpp"
#include "step.hpp"

#include <mpi.h>

#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace ckpt::mpi::detail {

// The nodes of a job: which ranks share a node, and each rank's partner.
struct node_layout {
  // Collective over `comm`: a node is the ranks that share memory, or, with `ranks_per_node` > 0,
  // ranks [kN, (k + 1)N). Nodes are numbered by their lowest rank.
  node_layout(MPI_Comm comm, int ranks_per_node);
  ~node_layout();
  node_layout(const node_layout&) = delete;
  node_layout& operator=(const node_layout&) = delete;

  MPI_Comm node = MPI_COMM_NULL;  // the ranks of this rank's node
  int index = 0;                  // this rank's node
  bool leader = false;            // this rank is its node's first
  std::vector<int> node_of;       // each rank's node
  std::vector<std::vector<int>> ranks_of;  // each node's ranks, ascending

  [[nodiscard]] int count() const noexcept { return static_cast<int>(ranks_of.size()); }
  [[nodiscard]] int leader_of(int n) const { return ranks_of[static_cast<std::size_t>(n)].front(); }
  // The rank that keeps rank `r`'s partner copy: the rank of the same place on the next node
  // (modulo that node's ranks); -1 with one node.
  [[nodiscard]] int partner_of(int r) const;
};

class local_tiers {
 public:
  // Collective over `comm` (the manager's): finds the nodes; each node's first rank creates and
  // locks its folder of the run `run_id` (and partner/), and notes the run's shared folder
  // `shared` beside it; then the node's other ranks open it.
  // \throws collective_error on every rank if a node's folder cannot be created, opened or locked.
  local_tiers(MPI_Comm comm, const tiers& levels, const std::string& run_id, const std::filesystem::path& shared);

  [[nodiscard]] const tiers& levels() const noexcept { return levels_; }
  [[nodiscard]] const node_layout& nodes() const noexcept { return nodes_; }

  // Collective: the steps of which some node's local tier holds a committed step folder (own or
  // partner), each with whether the nodes hold every shard of it between them.
  [[nodiscard]] std::map<std::int64_t, bool> held_steps();
  // Collective: whether some node holds a committed copy of `step`.
  [[nodiscard]] bool holds(std::int64_t step);
  // Each node's first rank deletes its step folders (own and partner, committed or not) of the
  // steps not in `keep`, the index first. A failure leaves the folder (a cache: tried again at the
  // next call). Not collective.
  void keep_only(const std::set<std::int64_t>& keep) const noexcept;

  // Local: writes this rank's shard of `plan` into its node's step folder.
  // \throws io_error.
  void write_own(const step_plan& plan, std::span<const section> sections, const save_options& options,
                 ckpt::detail::write_path path) const;
  // Collective over `comm` (the manager's, or its background thread's own): sends this rank's
  // shard of `plan` to its partner, which writes it into its partner folder, every pair at once.
  // `error` is this rank's failure so far (its shard unwritten: nothing is sent, by any rank), and
  // gets a failure of the exchange.
  void send_partner_copies(const step_plan& plan, std::exception_ptr& error, MPI_Comm comm) const;
  // Collective: the partner copies (unless `copies_sent`: send_partner_copies was called), then,
  // once every rank's copies are durable, each node's first rank commits the step in both folders
  // with its index. `local_error` is this rank's failure to write its shard or its copies. If
  // anything failed on any rank, the step's local folders are removed on every node and every
  // rank throws.
  // \throws collective_error on every rank.
  void commit(const step_plan& plan, std::exception_ptr local_error, bool copies_sent);
  // Local, on the drain's thread: copies this rank's shard of `plan` (its step, planned for the
  // shared tier `plan.run`, a folder or a bucket) from its node's step folder there, atomically.
  // A step of slices: collective over `comm` (the drain thread's own communicator, or the
  // manager's on its caller's thread): the ranks write the one shard from their parts, as
  // write_sliced does from their slices (`options` are its), byte for byte ckpt::mpi::save's file.
  // \throws io_error, remote_error.
  void drain(const step_plan& plan, const save_options& options, MPI_Comm comm) const;

  // Collective: step `step` from the fastest intact copy of each shard: this node's own copy, its
  // partner copy, another node's copy (sent over MPI into this node's step folder), the shared
  // tier `shared` (a bucket's shard fetched once, by the rank that checks it, and sent to every
  // rank). `sources` gets where this rank read each shard. `damaged` is set on every rank to
  // whether the failure thrown is damage (a shard without an intact copy in any tier).
  // \throws std::invalid_argument on every rank if no tier holds the step; collective_error.
  [[nodiscard]] checkpoint load(const ckpt::detail::store& shared, std::int64_t step,
                                const load_options& options, std::vector<checkpoint_manager::source>& sources,
                                bool* damaged);

 private:
  MPI_Comm comm_;
  tiers levels_;
  std::filesystem::path run_;  // `<local>/run-<id>`, for messages
  node_layout nodes_;
  run_store own_;      // this node's folder
  run_store partner_;  // its partner/ folder
  std::optional<ckpt::detail::file_descriptor> lock_;  // the node's first rank
};

}  // namespace ckpt::mpi::detail
