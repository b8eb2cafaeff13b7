#pragma once
// The one description of a run (docs/guide.md, "The manager and resuming"; docs/distributed.md):
// what the managers write into a run's store and how they find it again. ckpt::checkpoint_manager
// writes a file a step, ckpt::mpi::checkpoint_manager a folder a step committed by its index, the
// node-local tiers the same folders under the run's id; each leaves temporaries while it writes
// and sets damaged steps aside. Every manager lists a run through `describe`, and the tool `ckpt`
// shows what it answers: no other file spells a step's name or decides what a leftover is.

#include "store.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail::layout {

// The lock file that a writing manager holds (one name for both managers, so that neither writes
// a run the other holds).
inline constexpr std::string_view lock_name = ".ckpt-manager.lock";

// A step of ckpt::checkpoint_manager: the file `ckpt-<step, 10 digits>.safetensors`.
[[nodiscard]] std::string step_file(std::int64_t step);
// A step of ckpt::mpi::checkpoint_manager (which a read-only ckpt::checkpoint_manager reads too):
// the folder `step-<step, 10 digits>`, committed once it holds its index, a regular file.
[[nodiscard]] std::string step_folder(std::int64_t step);
inline constexpr std::string_view step_index = "model.safetensors.index.json";
// `<step folder>/<step_index>`: where a step folder's index is in its store.
[[nodiscard]] std::string index_of(std::int64_t step);
// Shard `number` of `count` of a step folder: `model-<number>-of-<count>.safetensors` (five
// digits each, as Hugging Face names shards: src/format/sharded.hpp).
[[nodiscard]] std::string step_shard(std::size_t number, std::size_t count);
// The shard count K of a name step_shard(k, K) gives (only the exact spelling counts), or nothing.
[[nodiscard]] std::optional<std::size_t> shard_count_of(std::string_view name);
// Part `number` of `count` of a step of slices in a node-local tier: `part-<number>-of-<count>.safetensors`
// (five digits each), the pieces and whole entries one rank writes of the step's one shard; the
// k-th rank (in rank order) that writes anything writes part k.
[[nodiscard]] std::string step_part(std::size_t number, std::size_t count);
// The part count K of a name step_part(k, K) gives (only the exact spelling counts), or nothing.
[[nodiscard]] std::optional<std::size_t> part_count_of(std::string_view name);

// The step of a step file's or step folder's name, or nothing for any other name: only the exact
// spelling counts, so that a user's "ckpt-7.safetensors" or "step-7" is never a step.
[[nodiscard]] std::optional<std::int64_t> step_of_file(std::string_view name);
[[nodiscard]] std::optional<std::int64_t> step_of_folder(std::string_view name);

// A damaged step is set aside under `<name>.damaged`, or `<name>.damaged-K` (K = 2, 3, ...) when
// that is taken: the K-th name to try (K = 1, 2, ...).
[[nodiscard]] std::string set_aside_name(std::string_view name, int k);
// The step of a set-aside step file or folder, or nothing.
[[nodiscard]] std::optional<std::int64_t> step_set_aside(std::string_view name);

// A run of ckpt::mpi::checkpoint_manager has an id, made once by the first manager that opens
// the run for writing and kept in the run's file `.ckpt-run-id`: `run_id_length` letters and
// digits, then a newline. Its node-local tiers live under `<tiers::local>/run-<id>/` (and
// `node-<k>/` below it with simulated nodes), where each node's first rank notes the run's shared
// tier (a folder's absolute path, or an `s3://` URL) in `.ckpt-shared-folder`. A node's folder
// holds its own step folders and, in `partner/`, the step folders of the previous node's shards.
inline constexpr std::string_view run_id_name = ".ckpt-run-id";
inline constexpr std::size_t run_id_length = 24;
inline constexpr std::string_view tier_run_prefix = "run-";
inline constexpr std::string_view tier_shared_folder_name = ".ckpt-shared-folder";
inline constexpr std::string_view tier_partner_folder = "partner";
[[nodiscard]] bool is_run_id(std::string_view text) noexcept;
// `run-<id>`: the folder of the run `id` in a node-local root.
[[nodiscard]] std::string tier_run_folder(std::string_view id);
// The run id of a name tier_run_folder gives, or nothing for another name.
[[nodiscard]] std::optional<std::string> run_id_of_tier_folder(std::string_view name);
// `node-<k>`: simulated node k's folder in a run's folder of a node-local root.
[[nodiscard]] std::string tier_node_folder(int node);
// The node of a name tier_node_folder gives (only the exact spelling counts), or nothing.
[[nodiscard]] std::optional<int> node_of_tier_folder(std::string_view name);
// The run id `s` keeps, or nothing if it keeps none.
// \throws error naming the file if it holds anything else; as the store for the read.
[[nodiscard]] std::optional<std::string> read_run_id(const store& s);

// What a name in a run is.
enum class what {
  step_file,                ///< a committed step of ckpt::checkpoint_manager
  step_folder,              ///< a committed step of ckpt::mpi::checkpoint_manager (its index is there)
  uncommitted_step_folder,  ///< a step folder without its index: a save that did not finish
  set_aside,                ///< a damaged step set aside by a manager
  step_temporary,           ///< the temporary of a step file a save did not finish
  temporary,                ///< the temporary of another file (ckpt::save, an index, a run id)
  staging_folder,           ///< the staging folder of a ckpt::save_sharded that did not finish
  lock,                     ///< the managers' lock file
  run_id,                   ///< the run's id
  other,                    ///< not the managers': never touched by them
};

struct item {
  std::string name;
  what kind = what::other;
  std::optional<std::int64_t> step;  // for the steps, set aside or not
  store::kind entry = store::kind::file;
};

// Every name directly in `s` and what it is, sorted by name. A step folder is looked into for its
// index (through a link: a forked run's step may point at another run's).
// \throws as the store's listing.
[[nodiscard]] std::vector<item> describe(const store& s);

// `name` of `s` is a committed step folder.
// \throws as the store.
[[nodiscard]] bool committed_step_folder(const store& s, std::string_view name);

}  // namespace ckpt::detail::layout

// ---------------------------------------------------------------------------------------------
// The node-local tier root (ckpt::mpi::tiers::local), described for the tool `ckpt`
// (describe_tier_root): each run's folder `run-<id>/` and its nodes' folders (`node-<k>/` with
// simulated nodes, else the run's folder itself), what each node holds of each step (the shards
// of its own ranks, and in its partner folder the copies of the previous node's), what became of
// the run's shared folder, and which steps a run's tiers can restore. The MPI manager writes this
// layout (src/mpi/tiers.hpp); the tool only formats what these answer.
// ---------------------------------------------------------------------------------------------

namespace ckpt::detail::layout {

// A committed step folder of a node: of its own shards, or its partner copies. Its index names
// every shard of the step; the node holds some of them. A step of slices (ckpt::mpi::sliced) is
// kept in the tiers as the ranks' parts (step_part), each a file of its own with its digest: its
// `shards` are then the parts.
struct tier_step {
  std::int64_t step = 0;
  bool partner = false;             // the copies of the previous node's shards
  bool parts = false;               // a step of slices: `shards` and `held` name its parts
  std::string folder;               // the step folder, relative to the tier root
  std::vector<std::string> shards;  // every shard its index names (every part), sorted
  std::vector<std::string> held;    // those of them in the folder, sorted
  std::string problem;              // why the index cannot be read ("" if it was)
};

// A node's folder of a run.
struct tier_node {
  std::optional<int> node;                 // k of a simulated node's folder; nothing: a real node's
  std::string folder;                      // relative to the tier root
  std::vector<tier_step> steps;            // by step, its own before its partner copy
  std::vector<std::string> uncommitted;    // step folders without their index, relative to `folder`
  std::vector<std::string> step_folders;   // the folders that hold its steps (own, partner), relative to the root
};

// What became of a run's shared folder, as the run's folder notes it.
enum class shared_state { this_run, another_run, no_run_id, gone, not_noted, unreadable };

struct tier_run {
  std::string id;
  std::string folder;                           // relative to the tier root
  std::optional<std::filesystem::path> shared;  // the shared folder, as noted
  shared_state state = shared_state::not_noted;
  std::string detail;  // the other run's id (another_run), or why the shared folder cannot be read
  std::vector<tier_node> nodes;                 // by node
  // No manager uses the run's folder again: its shared folder is gone, or holds another run now.
  [[nodiscard]] bool left_over() const noexcept {
    return state == shared_state::another_run || state == shared_state::no_run_id || state == shared_state::gone;
  }
};

struct tier_root {
  std::vector<tier_run> runs;         // by id
  std::vector<std::string> earlier;   // folders right under the root in an earlier version's layout (no run id)
};

// What the node-local tier root `root` (a local folder) holds; nothing for a bucket.
// \throws io_error if a folder cannot be listed.
[[nodiscard]] tier_root describe_tier_root(const store& root);

// Where `path` lies in a node-local tier root, by its name and its parent's: a run's folder
// (`<root>/run-<id>`) or a simulated node's folder in it (`<root>/run-<id>/node-<k>`).
struct tier_place {
  std::filesystem::path root;
  std::string run;     // the run's id
  std::string folder;  // `path` relative to the root: the run's folder, or a node's
};
[[nodiscard]] std::optional<tier_place> tier_place_of(const std::filesystem::path& path);

// The part of the step copy `copy` its node holds, read from the tier root `root`: each shard it
// holds (or only `shard`) loaded with `options` (its digest checked as they say), with the
// entries the index gives it, checked as a sharded load checks its shards. A part of a step of
// slices is a file of its own: `shard` names it.
// \throws as ckpt::load; std::invalid_argument for the parts of a step of slices without `shard`.
[[nodiscard]] checkpoint load_held(const store& root, const tier_step& copy, const load_options& options,
                                   std::string_view shard = {});

// Whether the node-local copies of `step` in `run` that `intact` accepts (a copy, and a shard it
// holds) make the whole step, as the MPI manager restores a step from its nodes: from their own
// shards alone, or with the partner copies; and the shards no intact copy holds.
struct tier_cover {
  bool own = false;
  bool with_partners = false;
  std::vector<std::string> missing;  // sorted
};
[[nodiscard]] tier_cover covered(const tier_run& run, std::int64_t step,
                                 const std::function<bool(const tier_step& copy, const std::string& shard)>& intact);

}  // namespace ckpt::detail::layout
