// mlp_trainer_mpi: the MLP trainer of examples/mlp_trainer made data-parallel over MPI ranks, each
// rank computing a share of every batch, checkpointing through ckpt::mpi and resuming on any
// number of ranks.
//
//   mpirun -np 4 mlp_trainer_mpi --steps 1500 --ckpt-dir runs/d            # train, checkpoint
//   mpirun -np 3 mlp_trainer_mpi --steps 3000 --ckpt-dir runs/d --resume   # resume on 3 ranks
//   mpirun -np 4 mlp_trainer_mpi --shard-optimizer ...                      # ZeRO-1 (zero.hpp)
//   mpirun -np 4 mlp_trainer_mpi --local-dir /tmp/ckpt --drain-every 5 ... # multi-level checkpoints
//   mpirun -np 4 mlp_trainer_mpi --ckpt-dir s3://bucket/run ...             # the run in a bucket
//
// With the default --reduction ordered, the run is bit-identical whatever the number of ranks and
// wherever it is stopped and resumed (see data_parallel.hpp).

#include "data_parallel.hpp"
#include "zero.hpp"
#include "../mlp_trainer/options.hpp"

#include <ckpt/adam.hpp>
#include <ckpt/file.hpp>
#include <ckpt/mpi.hpp>

#include <mpi.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace mlp_example;

struct options : training_options {
  int groups = 8;
  reduction how = reduction::ordered;
  bool shard_optimizer = false;
  // Multi-level checkpoints (ckpt::mpi::tiers): --ckpt-dir is then the shared tier.
  std::filesystem::path local_dir;
  int ranks_per_node = 0;
  std::int64_t drain_every = 1;
};

// The command line, parsed alike on every rank; a usage error or --help ends every rank with
// CLI11's message printed once, by rank 0.
struct usage_exit {
  int code;
};

options parse(int argc, char** argv, int rank) {
  options o;
  o.ckpt_dir = "checkpoints-mpi";
  CLI::App app{"The MLP trainer made data-parallel over MPI ranks (run it with mpirun -np P).", "mlp_trainer_mpi"};
  add_training_flags(app, o);
  add_number(app, "--groups", o.groups, "fixed groups the batch is cut into, split over the ranks as evenly as they can be",
             1);
  std::string how = "ordered";
  app.add_option("--reduction", how,
                 "ordered: allgather + sum in group order, bit-identical on any number of ranks; "
                 "allreduce: MPI_Allreduce, identical on the same number")
      ->check(CLI::IsMember({"ordered", "allreduce"}))
      ->capture_default_str();
  app.add_flag("--shard-optimizer", o.shard_optimizer,
               "ZeRO-1: each rank keeps 1/P of Adam's moments, saved as slices (ckpt::mpi::sliced) by the "
               "checkpoint manager; with --local-dir, each rank's part of a step is kept in its node's tier "
               "(and the partner node's), and a drained step is the one file of slices in --ckpt-dir");
  app.add_option("--local-dir", o.local_dir,
                 "node-local tier (tmpfs or a local SSD): every step is saved there, with a partner copy on the "
                 "next node, and every --drain-every-th step is drained to --ckpt-dir")
      ->type_name("DIR");
  add_number(app, "--ranks-per-node", o.ranks_per_node,
             "with --local-dir: simulate nodes of N ranks on one machine, each with its own subfolder "
             "node-<k> of the run's folder in --local-dir (0: the ranks that share memory are a node)",
             0);
  add_number(app, "--drain-every", o.drain_every,
             "with --local-dir: drain every M-th saved step (steps that are multiples of M x --save-every) "
             "to --ckpt-dir (0: never)",
             0);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = rank == 0 ? app.exit(e) : e.get_exit_code();
    throw usage_exit{code == 0 ? 0 : 2};
  }
  o.how = how == "ordered" ? reduction::ordered : reduction::allreduce;
  return o;
}

// What shapes the run comes from the checkpoint when resuming, so that it continues the same run.
void continue_run(options& o, const ckpt::checkpoint& restored) {
  const auto& meta = restored.metadata();
  if (auto it = meta.find("seed"); it != meta.end()) o.seed = number<std::uint64_t>("seed", it->second);
  if (auto it = meta.find("batch"); it != meta.end()) o.batch = number<int>("batch", it->second);
  if (auto it = meta.find("groups"); it != meta.end()) o.groups = number<int>("groups", it->second);
  if (auto it = meta.find("hidden"); it != meta.end()) o.hidden = number<int>("hidden", it->second);
}

ckpt::metadata_map run_metadata(const options& o, float loss) {
  return ckpt::metadata_map{{"loss", exact(loss)},
                            {"seed", std::to_string(o.seed)},
                            {"batch", std::to_string(o.batch)},
                            {"groups", std::to_string(o.groups)},
                            {"hidden", std::to_string(o.hidden)}};
}

// True, saying so on rank 0, if the folder holds steps and --resume was not given.
bool refuse_to_overwrite(const options& o, const std::optional<std::int64_t>& latest, int rank) {
  if (!latest || o.resume) return false;
  if (rank == 0)
    std::cerr << "mlp_trainer_mpi: " << o.ckpt_dir.string() << " already holds steps (up to " << *latest
              << "): pass --resume to continue, or choose another --ckpt-dir\n";
  return true;
}

// What both trainings start from: the data (--batch clamped to its size and checked against
// --groups), the order of its batches, the optimizer and freshly initialized parameters.
struct start {
  dataset data;
  batch_order order;
  ckpt::adam opt;
  mlp params;
};

start start_of(options& o) {
  dataset data = two_spirals(o.seed);
  o.batch = std::min<int>(o.batch, static_cast<int>(data.x.cols()));
  check_split(o.batch, o.groups);
  batch_order order(o.seed, static_cast<int>(data.x.cols()), o.batch);
  return {std::move(data), std::move(order), ckpt::adam{.lr = o.lr}, init_mlp(o.seed, o.hidden)};
}

// Says (on rank 0) which damaged steps the resume skipped: the run goes on from an older step.
void report_skipped(int rank, const ckpt::mpi::checkpoint_manager::latest& restored) {
  if (rank == 0)
    for (const ckpt::mpi::checkpoint_manager::step_status& s : restored.skipped)
      std::cout << "skipped damaged step " << s.step << ": " << s.reason << '\n';
}

// Says (on rank 0) which tier served each shard of the restored step, as rank 0 read it:
// "restored step 300: model-00001-of-00001.safetensors from the partner tier of node 0".
void report_sources(int rank, const ckpt::mpi::checkpoint_manager::latest& restored) {
  if (rank != 0 || !restored) return;
  for (const ckpt::mpi::checkpoint_manager::source& s : restored.sources) {
    std::cout << "restored step " << restored.step << ": " << s.file << " from the " << ckpt::to_string(s.from) << " tier";
    if (s.from != ckpt::checkpoint_manager::tier::folder) std::cout << " of node " << s.node;
    std::cout << '\n';
  }
}

// The run's start, collective: nothing (said on rank 0) if the folder holds steps and --resume
// was not given; else the step resumed from (none for a fresh start: `--resume` of a folder
// without steps, or whose steps are all damaged, is refused), its skipped damaged steps and the
// tier of each shard said on rank 0, and what shapes the run taken from its metadata.
std::optional<ckpt::mpi::checkpoint_manager::latest> open_run(ckpt::mpi::checkpoint_manager& manager, options& o,
                                                              int rank) {
  if (refuse_to_overwrite(o, manager.latest_step(), rank)) return std::nullopt;
  ckpt::mpi::checkpoint_manager::latest restored;
  if (o.resume) {
    // The newest step that loads; damaged newer ones are set aside (collective: every rank alike).
    restored = manager.load_latest();
    report_skipped(rank, restored);
    report_sources(rank, restored);
    if (!restored) refuse_fresh_start_over(manager.status(), o.ckpt_dir);  // every rank alike
  }
  if (restored) continue_run(o, *restored);
  return restored;
}

// The run's checkpoint manager (collective): --ckpt-dir, with --local-dir its node-local tiers.
ckpt::mpi::checkpoint_manager manager_of(MPI_Comm comm, const options& o) {
  return ckpt::mpi::checkpoint_manager(
      comm, o.ckpt_dir, {.max_to_keep = o.keep, .save_interval_steps = o.save_every},
      {.local = o.local_dir, .ranks_per_node = o.ranks_per_node, .drain_every = o.drain_every * o.save_every});
}

// Where the last step is, for the end line: with --local-dir, the last step is in the shared tier
// (a folder or a bucket) only if it was drained (a multiple of the drain's steps); else it is in
// the node-local tiers alone.
std::string last_checkpoint(const options& o, const ckpt::mpi::checkpoint_manager& manager, std::int64_t step) {
  const std::int64_t drain = o.drain_every * o.save_every;
  if (!o.local_dir.empty() && (drain == 0 || step % drain != 0))
    return "step " + std::to_string(step) + " in the node-local tiers under " + o.local_dir.string() +
           " (not drained to " + o.ckpt_dir.string() + ")";
  return manager.path_of(step).string();
}

// The loop of both trainings, from the step `steps()` says (the restored one, or 0) to --steps:
// `train_step()` trains a step and returns its loss; `save(loss, in_background)` saves the step
// `steps()` says, with `run_metadata`. Every --save-every steps a save in the background, which
// the next one (or wait()) commits; at the end the last step, if it trained any or the run has
// none yet. Says the progress on rank 0, `how` ending its line's parenthesis. Returns the last step.
template <class Steps, class Train, class Save>
std::int64_t train(const options& o, const ckpt::mpi::checkpoint_manager& manager, int rank, int ranks,
                   const char* how, Steps steps, Train train_step, Save save) {
  const std::int64_t first = steps();
  float loss = 0;
  while (steps() < o.steps) {
    loss = train_step();
    const std::int64_t step = steps();
    if (rank == 0 && (step % o.log_every == 0 || step == o.steps)) {
      std::printf("step %lld/%lld  loss %.5f  (%d ranks%s)\n", static_cast<long long>(step),
                  static_cast<long long>(o.steps), static_cast<double>(loss), ranks, how);
      std::fflush(stdout);
    }
    if (manager.should_save(step) && step != o.steps) save(loss, /*in_background=*/true);
  }
  if (steps() > first || !manager.latest_step()) save(loss, /*in_background=*/false);
  return steps();
}

// --shard-optimizer: ZeRO-1 (zero.hpp), each rank's slices saved by the checkpoint manager.
std::int64_t train_sharded(MPI_Comm comm, const options& o, ckpt::mpi::checkpoint_manager& manager,
                           const ckpt::mpi::checkpoint_manager::latest& restored, start& s) {
  const auto [rank, ranks] = place_in(comm);
  zero_optimizer optimizer(comm, s.opt, s.params);
  if (restored) {
    optimizer.restore(*restored, s.params);
    if (rank == 0) std::cout << "resumed at step " << optimizer.steps() << " on " << ranks << " ranks\n";
  }
  // Each rank's share of Adam's moments against the replicated run's.
  const auto mine = static_cast<unsigned long long>(optimizer.bytes());
  std::vector<unsigned long long> all(static_cast<std::size_t>(ranks));
  MPI_Gather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
  if (rank == 0) {
    std::cout << "optimizer state per rank (bytes):";
    for (const unsigned long long n : all) std::cout << ' ' << n;
    std::cout << " (replicated: " << 2 * sizeof(float) * static_cast<std::size_t>(flat_size(s.params)) << ")\n";
  }
  return train(
      o, manager, rank, ranks, ", sharded optimizer", [&] { return optimizer.steps(); },
      [&] { return optimizer.step(s.data, s.order, s.opt, s.params, o.groups, o.how); },
      [&](float loss, bool in_background) {
        optimizer.save(manager, s.params, run_metadata(o, loss), in_background);
      });
}

// Every rank keeps the whole state (the parameters and Adam's moments), replicated.
std::int64_t train_replicated(MPI_Comm comm, const options& o, ckpt::mpi::checkpoint_manager& manager,
                              const ckpt::mpi::checkpoint_manager::latest& restored, start& s) {
  const auto [rank, ranks] = place_in(comm);
  ckpt::adam_state<mlp> state = s.opt.init(s.params);
  if (restored) {
    ckpt::read_params(*restored, ckpt::training_state(s.params, state));  // strict
    if (rank == 0) std::cout << "resumed at step " << state.step << " on " << ranks << " ranks\n";
  }
  return train(
      o, manager, rank, ranks, "", [&] { return state.step; },
      [&] { return train_step_mpi(comm, s.data, s.order, s.opt, s.params, state, o.groups, o.how); },
      [&](float loss, bool in_background) {
        // Every rank offers the whole replicated state; ckpt::mpi writes each entry once (rank 0,
        // in the background while training goes on; the next save or wait() commits it).
        const ckpt::metadata_map metadata = run_metadata(o, loss);
        if (in_background) manager.save_async(state.step, ckpt::training_state(s.params, state), metadata);
        else manager.save(state.step, ckpt::training_state(s.params, state), metadata, /*force=*/true);
      });
}

int run(MPI_Comm comm, options o) {
  const int rank = place_in(comm).rank;
  ckpt::mpi::checkpoint_manager manager = manager_of(comm, o);
  const std::optional<ckpt::mpi::checkpoint_manager::latest> restored = open_run(manager, o, rank);
  if (!restored) return 2;
  start s = start_of(o);
  const std::int64_t last = o.shard_optimizer ? train_sharded(comm, o, manager, *restored, s)
                                              : train_replicated(comm, o, manager, *restored, s);
  manager.wait();
  if (rank == 0) report_end(o.params_out, s.params, s.data, last_checkpoint(o, manager, last));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // MPI_THREAD_MULTIPLE lets the checkpoint manager's background thread send the partner copies of
  // a multi-level checkpoint (--local-dir) itself; the trainer's own MPI calls stay on this thread.
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  try {
    code = run(MPI_COMM_WORLD, parse(argc, argv, rank));
  } catch (const usage_exit& e) {
    code = e.code;
  } catch (const std::exception& e) {
    // ckpt::mpi throws on every rank alike; one report is enough.
    if (rank == 0) std::cerr << "mlp_trainer_mpi: " << e.what() << '\n';
    code = 1;
  }
  MPI_Finalize();
  return code;
}
