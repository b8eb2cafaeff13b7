// Multi-level checkpoints of ckpt::mpi::checkpoint_manager (ckpt::mpi::tiers) at 2 and 4 ranks,
// as 2 simulated nodes: every step goes to the nodes' local folders with a partner copy on the
// other node, every second one is drained to the shared folder; a restore reads each shard from
// the fastest intact tier and says which: a lost node's shards come from the partner copies
// without the shared folder, both nodes lost fall back to the shared folder, a corrupt partner
// copy goes to the next tier, a step with no intact copy of a shard is skipped, and a job on
// fewer ranks restores from the same local folders. Steps of slices (ZeRO, tensor parallelism):
// each rank's part kept on its node and its partner, restored from them (a lost node's from the
// partner copies, on fewer ranks too), drained as ckpt::mpi::save's one file, which another rank
// count restores once the local tiers are gone.

#include "mpi_test.hpp"
#include "sliced_state.hpp"

#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/mpi.hpp>

#include <Eigen/Core>

#include <fstream>
#include <map>
#include <tuple>
#include <utility>

namespace {

using namespace ckpt_mpi_test;
namespace fs = std::filesystem;
using tier = ckpt::checkpoint_manager::tier;

// Rank `rank`'s part at `step` of run `run`: 64 Ki floats of its own (a shard per rank), and the
// replicated step.
Eigen::VectorXf part_of(int rank, std::int64_t step, int run = 0) {
  Eigen::VectorXf v(1 << 16);
  for (Eigen::Index i = 0; i < v.size(); ++i)
    v[i] = static_cast<float>(run * 100000 + step * 1000 + rank) + static_cast<float>(i) * 0.25f;
  return v;
}

ckpt::checkpoint state_of(int rank, std::int64_t step, int run = 0) {
  return ckpt::concat({ckpt::of_params(part_of(rank, step, run), "part." + std::to_string(rank)),
                       ckpt::of_int("step", static_cast<int>(step))});
}

// Two simulated nodes: ranks [0, n/2) and [n/2, n).
ckpt::mpi::tiers tiers_in(const fs::path& folder, std::int64_t drain_every) {
  return {.local = folder / "local",
          .ranks_per_node = std::max(1, size_of(MPI_COMM_WORLD) / 2),
          .drain_every = drain_every};
}

// Saves steps [first, last] of run `run`, every rank its part (save and save_async taking turns),
// then waits.
void train(ckpt::checkpoint_manager& manager, std::int64_t first, std::int64_t last, int run = 0) {
  const int rank = rank_of(MPI_COMM_WORLD);
  for (std::int64_t step = first; step <= last; ++step) {
    const ckpt::checkpoint state = state_of(rank, step, run);
    if (step % 2 == 0) manager.save_async(step, {state});
    else manager.save(step, {state});
  }
  manager.wait();
}

// Every rank's part and the step of run `run`, as a restore must give them back.
void check_step(const ckpt::checkpoint& t, std::int64_t step, int run = 0) {
  for (int r = 0; r < size_of(MPI_COMM_WORLD); ++r) {
    const Eigen::VectorXf expected = part_of(r, step, run);
    CHECK(std::ranges::equal(t.get("part." + std::to_string(r)).as<float>(), expected.reshaped()));
  }
  CHECK_EQ(ckpt::to_int("step", t), step);
}

// "shard: tier@node" for each row, to compare with what a case expects.
std::vector<std::string> shown(const std::vector<ckpt::checkpoint_manager::source>& sources) {
  std::vector<std::string> out;
  for (const auto& s : sources)
    out.push_back(s.file.substr(s.file.find('-') + 1, 5) + ":" + std::string(ckpt::to_string(s.from)) +
                  (s.from == tier::folder ? "" : "@" + std::to_string(s.node)));
  return out;
}

std::string shard(int k) {
  const int n = size_of(MPI_COMM_WORLD);
  char name[64];
  std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", k, n);
  return name;
}

// Node k's folder of the run in `folder / "shared"` (tiers_in's layout).
fs::path node_folder(const fs::path& folder, int k) {
  return run_tier(folder / "local", folder / "shared") / ("node-" + std::to_string(k));
}

// The node of rank `r` (tiers_in's layout).
int node_of(int r) { return r / std::max(1, size_of(MPI_COMM_WORLD) / 2); }

// Rank 0 removes `path`; every rank waits for it.
void remove_on_rank_0(const fs::path& path) {
  if (rank_of(MPI_COMM_WORLD) == 0) fs::remove_all(path);
  MPI_Barrier(MPI_COMM_WORLD);
}

void every_step_goes_to_the_local_tier_and_every_second_is_drained(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
    train(manager, 1, 5);
    // Steps 1 and 3 left the local tiers (they keep 2) and were never drained.
    CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2, 4, 5}));
    CHECK_EQ(committed_steps(folder / "shared"), (std::vector<std::int64_t>{2, 4}));
    // The local root holds the run's folder, named by its id, with the run's shared folder noted.
    const fs::path run = run_tier(folder / "local", folder / "shared");
    CHECK_EQ(listing(folder / "local"), (std::vector<std::string>{run.filename().string()}));
    CHECK_EQ(listing(run), (std::vector<std::string>{".ckpt-shared-folder", "node-0", "node-1"}));
    std::ifstream note(run / ".ckpt-shared-folder");
    std::string noted;
    std::getline(note, noted);
    CHECK_EQ(fs::path(noted), fs::absolute(folder / "shared").lexically_normal());
    // Node k's folder: its ranks' shards, and the other node's as partner copies; each committed.
    const fs::path node0 = node_folder(folder, 0);
    CHECK_EQ(listing(node0), (std::vector<std::string>{".ckpt-manager.lock", "partner", "step-0000000004", "step-0000000005"}));
    CHECK_EQ(listing(node0 / "partner"), (std::vector<std::string>{"step-0000000004", "step-0000000005"}));
    std::vector<std::string> own{"model.safetensors.index.json"};
    std::vector<std::string> partner{"model.safetensors.index.json"};
    for (int r = 0; r < size; ++r) (node_of(r) == 0 ? own : partner).push_back(shard(r + 1));
    std::ranges::sort(own);
    std::ranges::sort(partner);
    CHECK_EQ(listing(node0 / "step-0000000005"), own);
    CHECK_EQ(listing(node0 / "partner" / "step-0000000005"), partner);
  }
  // A new job restores the newest step from the local tiers, each node from its own copies.
  ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
  const auto latest = manager.load_latest();
  CHECK_EQ(latest.step, 5);
  check_step(*latest, 5);
  const int mine = node_of(rank_of(MPI_COMM_WORLD));
  std::vector<std::string> expected;
  for (int r = 0; r < size; ++r)
    expected.push_back(shard(r + 1).substr(6, 5) + ":" + (node_of(r) == mine ? "local" : "partner") + "@" + std::to_string(mine));
  CHECK_EQ(shown(latest.sources), expected);
}

void a_lost_node_restores_from_the_partner_copies_without_the_shared_folder(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
    train(manager, 1, 3);
  }
  remove_on_rank_0(node_folder(folder, 1));
  ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2, 3}));
  const auto latest = manager.load_latest();
  // Step 3 was never drained: it can only have come from node 0's folder.
  CHECK_EQ(latest.step, 3);
  CHECK(latest.skipped.empty());
  check_step(*latest, 3);
  std::vector<std::string> expected;
  for (int r = 0; r < size; ++r)
    expected.push_back(shard(r + 1).substr(6, 5) + ":" + (node_of(r) == 0 ? "local" : "partner") + "@0");
  CHECK_EQ(shown(latest.sources), expected);
  // Node 1 got the shards it lacked: its folder holds step 3's shards again.
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<std::string> all;
  for (int r = 0; r < size; ++r) all.push_back(shard(r + 1));
  CHECK_EQ(listing(node_folder(folder, 1) / "step-0000000003"), all);
  // The run goes on from there.
  train(manager, 4, 4);
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2, 3, 4}));
}

void both_nodes_lost_fall_back_to_the_shared_folder(const fs::path& folder) {
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
    train(manager, 1, 3);
  }
  remove_on_rank_0(folder / "local");
  ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2}));
  const auto latest = manager.load_latest();
  CHECK_EQ(latest.step, 2);
  check_step(*latest, 2);
  std::vector<std::string> expected;
  for (int r = 0; r < size_of(MPI_COMM_WORLD); ++r) expected.push_back(shard(r + 1).substr(6, 5) + ":folder");
  CHECK_EQ(shown(latest.sources), expected);
}

// Flips a byte of the data of `file` (rank 0), past its header.
void corrupt(const fs::path& file) {
  if (rank_of(MPI_COMM_WORLD) == 0) {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(-100, std::ios::end);
    f.write(&c, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

void a_corrupt_partner_copy_goes_to_the_next_tier(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
    train(manager, 1, 4);
  }
  // Node 1 lost, and node 0's partner copy of the last rank's shard damaged, in steps 3 and 4.
  remove_on_rank_0(node_folder(folder, 1));
  for (const char* step : {"step-0000000003", "step-0000000004"})
    corrupt(node_folder(folder, 0) / "partner" / step / shard(size));
  ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
  const auto latest = manager.load_latest();
  // Step 4 was drained: that shard comes from the shared folder, the others from node 0.
  CHECK_EQ(latest.step, 4);
  check_step(*latest, 4);
  std::vector<std::string> expected;
  for (int r = 0; r < size; ++r)
    expected.push_back(shard(r + 1).substr(6, 5) + ":" +
                       (r == size - 1 ? "folder" : std::string(node_of(r) == 0 ? "local" : "partner") + "@0"));
  CHECK_EQ(shown(latest.sources), expected);
  CHECK(latest.skipped.empty());
}

void a_step_without_an_intact_copy_of_a_shard_is_skipped(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
    train(manager, 1, 3);
  }
  remove_on_rank_0(node_folder(folder, 1));
  corrupt(node_folder(folder, 0) / "partner" / "step-0000000003" / shard(size));
  ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
  const auto latest = manager.load_latest();
  // Step 3 was not drained and its last shard's only copy is damaged: step 2 is restored.
  CHECK_EQ(latest.step, 2);
  check_step(*latest, 2);
  CHECK_EQ(latest.skipped.size(), 1U);
  CHECK_EQ(latest.skipped[0].step, 3);
  const std::string& reason = latest.skipped[0].reason;
  CHECK(reason.find("step 3 has shards without an intact copy in any tier: " + shard(size) +
                    ": node 0's partner copy: ") != std::string::npos);
  CHECK(reason.find("not drained") == std::string::npos || reason.find("no copy") != std::string::npos);
  // The step is no longer listed; the run saves step 3 again.
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2}));
  train(manager, 3, 3);
  CHECK_EQ(manager.load_latest().step, 3);
}

void fewer_ranks_restore_from_the_same_local_folders(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  if (size < 4) return;  // two nodes of one rank each need four ranks to start from
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 3));
    train(manager, 1, 2);
  }
  // The first rank of each node goes on alone: node k's folder is the same one.
  const int rank = rank_of(MPI_COMM_WORLD);
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank % 2 == 0 ? 0 : MPI_UNDEFINED, rank, &half);
  if (half != MPI_COMM_NULL) {
    {
      ckpt::mpi::checkpoint_manager manager(half, folder / "shared", {},
                                            {.local = folder / "local", .ranks_per_node = 1, .drain_every = 3});
      const auto latest = manager.load_latest();
      CHECK_EQ(latest.step, 2);
      check_step(*latest, 2);
      CHECK_EQ(latest.sources.size(), static_cast<std::size_t>(size));
      for (const auto& s : latest.sources) CHECK(s.from != tier::folder);
    }
    MPI_Comm_free(&half);
  }
}

void without_partner_copies_a_lost_node_falls_back_to_the_shared_folder(const fs::path& folder) {
  ckpt::mpi::tiers levels = tiers_in(folder, 2);
  levels.partner = false;
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, levels);
    train(manager, 1, 3);
    CHECK(listing(node_folder(folder, 0) / "partner" / "step-0000000003").empty());
  }
  remove_on_rank_0(node_folder(folder, 1));
  ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, levels);
  // Step 3 lived on both nodes' own folders only: with node 1 gone it is incomplete, not listed.
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2}));
  const auto latest = manager.load_latest();
  CHECK_EQ(latest.step, 2);
  check_step(*latest, 2);
  // Node 0's shards come from its folder (node 1 gets them sent), node 1's from the shared folder.
  const int size = size_of(MPI_COMM_WORLD);
  std::vector<std::string> expected;
  for (int r = 0; r < size; ++r) expected.push_back(shard(r + 1).substr(6, 5) + ":" + (node_of(r) == 0 ? "local@0" : "folder"));
  CHECK_EQ(shown(latest.sources), expected);
}

void options_and_a_second_manager_are_refused(const fs::path& folder) {
  const auto bad = [&](ckpt::mpi::tiers levels, ckpt::checkpoint_manager::options options, const std::string& expected) {
    const std::string message = MESSAGE_OF(std::invalid_argument,
                                           ckpt::mpi::checkpoint_manager(MPI_COMM_WORLD, folder / "shared", options, levels));
    CHECK_EQ(message, "ckpt: mpi::checkpoint_manager: " + expected);
  };
  bad({.local = folder / "local", .local_max_to_keep = 0}, {},
      "tiers::local_max_to_keep is 0 (a local tier keeps at least one step)");
  bad({.local = folder / "local", .drain_every = -1}, {}, "tiers::drain_every is negative (-1)");
  bad({.local = folder / "local"}, {.read_only = true},
      "a local tier ('" + (folder / "local").string() + "') cannot be read-only");
  // Two managers of one node-local folder would delete each other's steps: a copy of a run's
  // folder, its id included, is the same run to the local tiers, and a second manager of it is
  // refused by the lock of the run's node-local folder (the shared folders' locks are apart).
  ckpt::mpi::checkpoint_manager first(MPI_COMM_WORLD, folder / "a", {}, tiers_in(folder, 1));
  if (rank_of(MPI_COMM_WORLD) == 0) {  // a failure is a CHECK: an exception would leave the others in a collective
    std::error_code ec;
    fs::create_directories(folder / "b", ec);
    fs::copy_file(folder / "a" / ".ckpt-run-id", folder / "b" / ".ckpt-run-id", ec);
    CHECK(!ec);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::string message = MESSAGE_OF(ckpt::mpi::collective_error,
                                         ckpt::mpi::checkpoint_manager(MPI_COMM_WORLD, folder / "b", {}, tiers_in(folder, 1)));
  CHECK(message.find("failed on rank 0") != std::string::npos);
  CHECK(message.find((run_tier(folder / "local", folder / "a") / "node-0" / ".ckpt-manager.lock").string()) !=
        std::string::npos);
}

// Two runs over one local root (issue 49, finding 1): each run's local tiers are its own, under
// its id, so neither lists, restores or overwrites the other's steps, and one's retention never
// deletes the other's, whether they run one after the other or at once.
void two_runs_over_one_local_root_keep_their_steps_apart(const fs::path& folder) {
  const ckpt::mpi::tiers levels = tiers_in(folder, 0);  // never drained: the local tiers hold every step
  {
    ckpt::mpi::checkpoint_manager a(MPI_COMM_WORLD, folder / "a", {}, levels);
    train(a, 1, 4, /*run=*/1);
    CHECK_EQ(a.steps(), (std::vector<std::int64_t>{3, 4}));
  }
  // A new run on the same local root: nothing of run a's is its own, to list, restore or keep.
  {
    ckpt::mpi::checkpoint_manager b(MPI_COMM_WORLD, folder / "b", {}, levels);
    CHECK(b.steps().empty());
    CHECK(!b.load_latest());
    // Both at once: b's saves of the same step numbers, and its retention, leave a's steps alone.
    ckpt::mpi::checkpoint_manager a(MPI_COMM_WORLD, folder / "a", {}, levels);
    train(b, 1, 4, /*run=*/2);
    train(a, 5, 5, /*run=*/1);
    train(b, 5, 6, /*run=*/2);
    CHECK_EQ(a.steps(), (std::vector<std::int64_t>{4, 5}));
    CHECK_EQ(b.steps(), (std::vector<std::int64_t>{5, 6}));
  }
  const std::string a_id = run_id_of(folder / "a");
  const std::string b_id = run_id_of(folder / "b");
  CHECK(a_id != b_id);
  std::vector<std::string> runs{"run-" + a_id, "run-" + b_id};
  std::ranges::sort(runs);
  CHECK_EQ(listing(folder / "local"), runs);
  for (const auto& [shared, steps] : {std::pair{folder / "a", std::vector<std::string>{"step-0000000004", "step-0000000005"}},
                                      std::pair{folder / "b", std::vector<std::string>{"step-0000000005", "step-0000000006"}}})
    for (int k = 0; k < 2; ++k) {
      const fs::path node = run_tier(folder / "local", shared) / ("node-" + std::to_string(k));
      std::vector<std::string> expected = steps;
      expected.insert(expected.begin(), {".ckpt-manager.lock", "partner"});
      CHECK_EQ(listing(node), expected);
      CHECK_EQ(listing(node / "partner"), steps);
    }
  // Each run restores its own newest step, from its own tiers.
  for (const auto& [shared, run, newest] : {std::tuple{folder / "a", 1, 5}, std::tuple{folder / "b", 2, 6}}) {
    ckpt::mpi::checkpoint_manager m(MPI_COMM_WORLD, shared, {}, levels);
    const auto latest = m.load_latest();
    CHECK_EQ(latest.step, newest);
    check_step(*latest, newest, run);
    for (const auto& s : latest.sources) CHECK(s.from != tier::folder);
  }
}

// A run whose folder was deleted and made again is a new run, with a new id: the old run's local
// tiers are not its own (issue 49, finding 1, after `rm -rf runA`), and are left alone.
void a_run_made_again_under_the_same_name_is_a_new_run(const fs::path& folder) {
  const ckpt::mpi::tiers levels = tiers_in(folder, 2);
  {
    ckpt::mpi::checkpoint_manager a(MPI_COMM_WORLD, folder / "shared", {}, levels);
    train(a, 1, 3, /*run=*/1);
  }
  const fs::path old_run = run_tier(folder / "local", folder / "shared");
  const std::vector<std::string> old_steps = listing(old_run / "node-0");
  MPI_Barrier(MPI_COMM_WORLD);  // every rank has read the old id
  remove_on_rank_0(folder / "shared");
  {
    ckpt::mpi::checkpoint_manager a(MPI_COMM_WORLD, folder / "shared", {}, levels);
    CHECK(a.steps().empty());
    CHECK(!a.load_latest());
    train(a, 1, 2, /*run=*/2);
  }
  CHECK(run_tier(folder / "local", folder / "shared") != old_run);
  CHECK_EQ(listing(old_run / "node-0"), old_steps);
  ckpt::mpi::checkpoint_manager a(MPI_COMM_WORLD, folder / "shared", {}, levels);
  CHECK_EQ(a.steps(), (std::vector<std::int64_t>{1, 2}));
  const auto latest = a.load_latest();
  CHECK_EQ(latest.step, 2);
  check_step(*latest, 2, /*run=*/2);
}

// The id is made once, by the first writing open, and read by every later one; a read-only open
// writes none. A folder an earlier version made (no id, its tiers directly under the local root)
// gets an id at its first writing open; its old tier folders are not its own and are left alone.
void a_folder_gets_its_id_once_at_its_first_writing_open(const fs::path& folder) {
  const int rank = rank_of(MPI_COMM_WORLD);
  ckpt::mpi::save(MPI_COMM_WORLD, folder / "plain", 1, {state_of(rank, 1)});
  { const ckpt::mpi::checkpoint_manager reader(MPI_COMM_WORLD, folder / "plain", {.read_only = true}); }
  CHECK(!fs::exists(folder / "plain" / ".ckpt-run-id"));
  { const ckpt::mpi::checkpoint_manager writer(MPI_COMM_WORLD, folder / "plain"); }
  const std::string id = run_id_of(folder / "plain");
  CHECK_EQ(id.size(), 24U);
  { const ckpt::mpi::checkpoint_manager writer(MPI_COMM_WORLD, folder / "plain"); }
  CHECK_EQ(run_id_of(folder / "plain"), id);

  // An earlier version's run: steps 2 (drained) and 3 (local only), its tiers as node-<k>/ right
  // under the local root, no id.
  {
    ckpt::mpi::checkpoint_manager old(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
    train(old, 1, 3);
  }
  if (rank == 0) {
    const fs::path run = run_tier(folder / "local", folder / "shared");
    for (const char* node : {"node-0", "node-1"}) fs::rename(run / node, folder / "local" / node);
    fs::remove_all(run);
    fs::remove(folder / "shared" / ".ckpt-run-id");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const std::vector<std::string> old_node0 = listing(folder / "local" / "node-0");
  ckpt::mpi::checkpoint_manager m(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
  CHECK_EQ(run_id_of(folder / "shared").size(), 24U);
  CHECK_EQ(m.steps(), (std::vector<std::int64_t>{2}));
  const auto latest = m.load_latest();
  CHECK_EQ(latest.step, 2);
  check_step(*latest, 2);
  for (const auto& s : latest.sources) CHECK(s.from == tier::folder);
  train(m, 3, 3);
  CHECK_EQ(listing(folder / "local" / "node-0"), old_node0);
  CHECK(fs::exists(node_folder(folder, 0) / "step-0000000003" / "model.safetensors.index.json"));
}

// Saves steps [first, last] of sliced_state.hpp's tensors (`step` added to the values), each rank
// its slices and the replicated "b" (save and save_async taking turns), then waits.
void save_sliced(ckpt::checkpoint_manager& manager, std::int64_t first, std::int64_t last) {
  const int rank = rank_of(MPI_COMM_WORLD), size = size_of(MPI_COMM_WORLD);
  for (std::int64_t step = first; step <= last; ++step) {
    const rank_state s = pieces_of(rank, size, static_cast<float>(step));
    const std::vector<ckpt::mpi::slice> slices = slices_of(s);
    if (step % 2 == 0) manager.save_async(step, {ckpt::mpi::sliced(slices), ckpt::of_params(s.b, "b")});
    else manager.save(step, {ckpt::mpi::sliced(slices), ckpt::of_params(s.b, "b")});
  }
  manager.wait();
}

// Rank r's part of a step of slices in the local tiers: part r + 1 (every rank writes some).
std::string part(int k) {
  char name[64];
  std::snprintf(name, sizeof name, "part-%05d-of-%05d.safetensors", k, size_of(MPI_COMM_WORLD));
  return name;
}

void steps_of_slices_go_to_the_nodes_and_drain_as_saves_file(const fs::path& folder) {
  const int rank = rank_of(MPI_COMM_WORLD), size = size_of(MPI_COMM_WORLD);
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
    save_sliced(manager, 1, 2);
    CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{1, 2}));
    CHECK_EQ(committed_steps(folder / "shared"), (std::vector<std::int64_t>{2}));
    // Node 0's step folder: its ranks' parts and the index; its partner folder: the other node's.
    std::vector<std::string> own{"model.safetensors.index.json"};
    std::vector<std::string> partner{"model.safetensors.index.json"};
    for (int r = 0; r < size; ++r) (node_of(r) == 0 ? own : partner).push_back(part(r + 1));
    std::ranges::sort(own);
    std::ranges::sort(partner);
    for (const char* step : {"step-0000000001", "step-0000000002"}) {
      CHECK_EQ(listing(node_folder(folder, 0) / step), own);
      CHECK_EQ(listing(node_folder(folder, 0) / "partner" / step), partner);
    }
  }
  // The drained step is byte for byte the file ckpt::mpi::save writes of the same slices and
  // metadata (the manager's wall_time too).
  ckpt::metadata_map metadata = ckpt::load(shard_of(folder / "shared", 2)).metadata();
  metadata.erase("step");
  metadata.erase("ckpt.xxh3_64_file");
  const rank_state s = pieces_of(rank, size, 2.0f);
  const std::vector<ckpt::mpi::slice> slices = slices_of(s);
  ckpt::mpi::save(MPI_COMM_WORLD, folder / "plain", 2, {ckpt::mpi::sliced(slices), ckpt::of_params(s.b, "b")},
                  metadata);
  if (rank == 0) CHECK(file_bytes(shard_of(folder / "shared", 2)) == file_bytes(shard_of(folder / "plain", 2)));

  // With the shared tier's step deleted, a new job restores both steps from the local tiers, each
  // node from its own copies of the parts (its own and its partner copies).
  remove_on_rank_0(folder / "shared" / "step-0000000002");
  ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
  CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{1, 2}));
  const auto latest = manager.load_latest();
  CHECK_EQ(latest.step, 2);
  CHECK(same(*latest, whole_tensors(2.0f)));
  const int mine = node_of(rank);
  std::vector<std::string> expected;
  for (int r = 0; r < size; ++r)
    expected.push_back(part(r + 1).substr(5, 5) + ":" + (node_of(r) == mine ? "local" : "partner") + "@" +
                       std::to_string(mine));
  CHECK_EQ(shown(latest.sources), expected);
  // The file the nodes assembled from the parts is the drained one: the same header and digest.
  CHECK(latest->metadata() == ckpt::load(shard_of(folder / "plain", 2)).metadata());
  CHECK(same(manager.load(1), whole_tensors(1.0f)));
  // Each rank reads its slices of the restored step.
  Eigen::VectorXf big(s.big.size());
  ckpt::mpi::read_flat(*latest, "big", s.big_first, big);
  CHECK(big == s.big);
}

void a_lost_node_restores_a_step_of_slices_from_the_partner_copies(const fs::path& folder) {
  const int size = size_of(MPI_COMM_WORLD);
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
    save_sliced(manager, 1, 1);  // not drained
  }
  CHECK(committed_steps(folder / "shared").empty());
  remove_on_rank_0(node_folder(folder, 0));
  ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
  const auto latest = manager.load_latest();
  CHECK_EQ(latest.step, 1);
  CHECK(same(*latest, whole_tensors(1.0f)));
  // Node 1 holds node 0's parts as partner copies, its own as local ones; node 0 gets both over MPI.
  std::vector<std::string> expected;
  for (int r = 0; r < size; ++r)
    expected.push_back(part(r + 1).substr(5, 5) + ":" + (node_of(r) == 0 ? "partner" : "local") + "@1");
  CHECK_EQ(shown(latest.sources), expected);
}

// A job on fewer ranks (a sub-communicator of all but the last rank, nodes of the same size)
// restores a step only the local tiers hold from its parts; with the local tiers gone, the drained
// step from the shared tier.
void fewer_ranks_restore_steps_of_slices_from_the_parts_or_the_shared_tier(const fs::path& folder) {
  const int rank = rank_of(MPI_COMM_WORLD), size = size_of(MPI_COMM_WORLD);
  {
    ckpt::mpi::checkpoint_manager manager(MPI_COMM_WORLD, folder / "shared", {}, tiers_in(folder, 2));
    save_sliced(manager, 1, 2);
  }
  MPI_Comm fewer = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < size - 1 ? 0 : MPI_UNDEFINED, rank, &fewer);
  const ckpt::mpi::tiers levels = tiers_in(folder, 2);  // the nodes' size of the saving job
  if (fewer != MPI_COMM_NULL) {
    ckpt::mpi::checkpoint_manager manager(fewer, folder / "shared", {}, levels);
    CHECK(same(manager.load(1), whole_tensors(1.0f)));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  remove_on_rank_0(folder / "local");
  if (fewer != MPI_COMM_NULL) {
    {
      ckpt::mpi::checkpoint_manager manager(fewer, folder / "shared", {}, levels);
      CHECK_EQ(manager.steps(), (std::vector<std::int64_t>{2}));
      const auto latest = manager.load_latest();
      CHECK_EQ(latest.step, 2);
      CHECK(same(*latest, whole_tensors(2.0f)));
      CHECK_EQ(shown(latest.sources), (std::vector<std::string>{"00001:folder"}));
    }
    MPI_Comm_free(&fewer);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace

int main(int argc, char** argv) {
  return run_all(argc, argv, "test_mpi_tiers",
                 {{"local_and_drained", every_step_goes_to_the_local_tier_and_every_second_is_drained},
                  {"lost_node", a_lost_node_restores_from_the_partner_copies_without_the_shared_folder},
                  {"both_lost", both_nodes_lost_fall_back_to_the_shared_folder},
                  {"corrupt_partner", a_corrupt_partner_copy_goes_to_the_next_tier},
                  {"no_intact_copy", a_step_without_an_intact_copy_of_a_shard_is_skipped},
                  {"fewer_ranks", fewer_ranks_restore_from_the_same_local_folders},
                  {"no_partner", without_partner_copies_a_lost_node_falls_back_to_the_shared_folder},
                  {"refused", options_and_a_second_manager_are_refused},
                  {"two_runs", two_runs_over_one_local_root_keep_their_steps_apart},
                  {"made_again", a_run_made_again_under_the_same_name_is_a_new_run},
                  {"run_id", a_folder_gets_its_id_once_at_its_first_writing_open},
                  {"sliced_local_and_drained", steps_of_slices_go_to_the_nodes_and_drain_as_saves_file},
                  {"sliced_lost_node", a_lost_node_restores_a_step_of_slices_from_the_partner_copies},
                  {"sliced_fewer_ranks", fewer_ranks_restore_steps_of_slices_from_the_parts_or_the_shared_tier}});
}
