// mlp_trainer_mpi: the MLP trainer of examples/mlp_trainer made data-parallel over MPI ranks, each
// rank computing a share of every batch, checkpointing through ckpt::mpi and resuming on any
// number of ranks that divides --groups.
//
//   mpirun -np 4 mlp_trainer_mpi --steps 1500 --ckpt-dir runs/d            # train, checkpoint
//   mpirun -np 2 mlp_trainer_mpi --steps 3000 --ckpt-dir runs/d --resume   # resume on 2 ranks
//
// With the default --reduction ordered, the run is bit-identical whatever the number of ranks and
// wherever it is stopped and resumed (see data_parallel.hpp).

#include "data_parallel.hpp"

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

namespace {

using namespace mlp_example;

struct options {
  std::int64_t steps = 3000;
  int batch = 64;
  int groups = 8;
  double lr = 1e-2;
  std::uint64_t seed = 1;
  std::filesystem::path ckpt_dir = "checkpoints-mpi";
  std::int64_t save_every = 500;
  std::size_t keep = 3;
  bool resume = false;
  int hidden = 32;
  std::int64_t log_every = 100;
  reduction how = reduction::ordered;
  std::filesystem::path params_out;
};

constexpr const char* usage =
    "usage: mpirun -np P mlp_trainer_mpi [--steps N] [--batch N] [--groups N] [--lr X] [--seed N]\n"
    "                   [--ckpt-dir DIR] [--save-every N] [--keep N] [--resume] [--hidden N]\n"
    "                   [--log-every N] [--reduction ordered|allreduce] [--params-out FILE]\n"
    "\n"
    "  --steps N        total number of steps to reach (default 3000)\n"
    "  --batch N        global mini-batch size, split over the ranks (default 64)\n"
    "  --groups N       fixed groups the batch is cut into; P must divide it (default 8)\n"
    "  --lr X           Adam learning rate (default 0.01)\n"
    "  --seed N         seed of the data set, initial parameters and batch order (default 1)\n"
    "  --ckpt-dir DIR   checkpoint folder, seen by every rank (default checkpoints-mpi)\n"
    "  --save-every N   save every N steps; the last step is always saved (default 500)\n"
    "  --keep N         keep the newest N steps, 0 for all (default 3)\n"
    "  --resume         continue from the latest step in --ckpt-dir up to --steps\n"
    "  --hidden N       hidden units (default 32)\n"
    "  --log-every N    progress line every N steps (default 100)\n"
    "  --reduction R    ordered: allgather + sum in group order, bit-identical on any number of\n"
    "                   ranks (default); allreduce: MPI_Allreduce, identical on the same number\n"
    "  --params-out F   rank 0 also writes the final parameters alone (no metadata) to F\n";

// Thrown for a bad command line, so that every rank (they all parse the same one) stops cleanly.
struct usage_error {
  std::string message;
};

template <class T>
T number(std::string_view flag, std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    throw usage_error{"invalid value '" + std::string(text) + "' for " + std::string(flag)};
  return value;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    auto next = [&]() -> std::string_view {
      if (i + 1 >= argc) throw usage_error{"missing value for " + std::string(flag)};
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") throw usage_error{};
    if (flag == "--resume") o.resume = true;
    else if (flag == "--steps") o.steps = number<std::int64_t>(flag, next());
    else if (flag == "--batch") o.batch = number<int>(flag, next());
    else if (flag == "--groups") o.groups = number<int>(flag, next());
    else if (flag == "--lr") o.lr = number<double>(flag, next());
    else if (flag == "--seed") o.seed = number<std::uint64_t>(flag, next());
    else if (flag == "--ckpt-dir") o.ckpt_dir = std::string(next());
    else if (flag == "--save-every") o.save_every = number<std::int64_t>(flag, next());
    else if (flag == "--keep") o.keep = number<std::size_t>(flag, next());
    else if (flag == "--hidden") o.hidden = number<int>(flag, next());
    else if (flag == "--log-every") o.log_every = number<std::int64_t>(flag, next());
    else if (flag == "--params-out") o.params_out = std::string(next());
    else if (flag == "--reduction") {
      const std::string_view how = next();
      if (how == "ordered") o.how = reduction::ordered;
      else if (how == "allreduce") o.how = reduction::allreduce;
      else throw usage_error{"--reduction is ordered or allreduce, not '" + std::string(how) + "'"};
    } else {
      throw usage_error{"unknown flag '" + std::string(flag) + "'"};
    }
  }
  if (o.steps < 0) throw usage_error{"--steps must not be negative"};
  if (o.batch < 1 || o.groups < 1) throw usage_error{"--batch and --groups must be at least 1"};
  if (o.save_every < 1 || o.log_every < 1 || o.hidden < 1) throw usage_error{"--save-every, --log-every and --hidden must be at least 1"};
  if (!(o.lr > 0)) throw usage_error{"--lr must be positive"};
  return o;
}

std::string exact(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", x);
  return text;
}

int run(MPI_Comm comm, options o) {
  int rank = 0;
  int ranks = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &ranks);
  ckpt::mpi::checkpoint_manager manager(comm, o.ckpt_dir, {.max_to_keep = o.keep, .save_interval_steps = o.save_every});
  const std::optional<std::int64_t> latest = manager.latest_step();
  if (latest && !o.resume) {
    if (rank == 0)
      std::cerr << "mlp_trainer_mpi: " << o.ckpt_dir.string() << " already holds steps (up to " << *latest
                << "): pass --resume to continue, or choose another --ckpt-dir\n";
    return 2;
  }
  std::optional<ckpt::checkpoint> restored;
  if (o.resume) restored = manager.load_latest();
  // What shapes the run comes from the checkpoint when resuming, so that it continues the same run.
  if (restored) {
    const auto& meta = restored->metadata();
    if (auto it = meta.find("seed"); it != meta.end()) o.seed = number<std::uint64_t>("seed", it->second);
    if (auto it = meta.find("batch"); it != meta.end()) o.batch = number<int>("batch", it->second);
    if (auto it = meta.find("groups"); it != meta.end()) o.groups = number<int>("groups", it->second);
    if (auto it = meta.find("hidden"); it != meta.end()) o.hidden = number<int>("hidden", it->second);
  }
  const dataset data = two_spirals(o.seed);
  o.batch = std::min<int>(o.batch, static_cast<int>(data.x.cols()));
  check_split(comm, o.batch, o.groups);
  batch_order order(o.seed, static_cast<int>(data.x.cols()), o.batch);
  const ckpt::adam opt{.lr = o.lr};
  mlp params = init_mlp(o.seed, o.hidden);
  ckpt::adam_state<mlp> state = opt.init(params);
  if (restored) {
    ckpt::restore_training_state(*restored, params, state);
    if (rank == 0) std::cout << "resumed at step " << state.step << " on " << ranks << " ranks\n";
  }
  auto metadata = [&](float loss) {
    return ckpt::metadata_map{{"loss", exact(loss)},
                              {"seed", std::to_string(o.seed)},
                              {"batch", std::to_string(o.batch)},
                              {"groups", std::to_string(o.groups)},
                              {"hidden", std::to_string(o.hidden)}};
  };

  const std::int64_t first = state.step;
  float loss = 0;
  while (state.step < o.steps) {
    loss = train_step_mpi(comm, data, order, opt, params, state, o.groups, o.how);
    if (rank == 0 && (state.step % o.log_every == 0 || state.step == o.steps)) {
      std::printf("step %lld/%lld  loss %.5f  (%d ranks)\n", static_cast<long long>(state.step),
                  static_cast<long long>(o.steps), static_cast<double>(loss), ranks);
      std::fflush(stdout);
    }
    // Every rank offers the whole replicated state; ckpt::mpi writes each entry once (rank 0).
    if (manager.should_save(state.step) && state.step != o.steps)
      manager.save(state.step, ckpt::training_state(params, state), metadata(loss));
  }
  if (state.step > first || !latest)
    manager.save(state.step, ckpt::training_state(params, state), metadata(loss), /*force=*/true);
  if (rank == 0) {
    if (!o.params_out.empty()) ckpt::save(o.params_out, ckpt::of_params(params, "model"));
    std::cout << "accuracy " << exact(accuracy(params, data)) << "; last step "
              << ckpt::mpi::step_folder(manager.folder(), state.step).string() << '\n';
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int code = 0;
  try {
    code = run(MPI_COMM_WORLD, parse(argc, argv));
  } catch (const usage_error& e) {
    if (rank == 0) {
      if (!e.message.empty()) std::cerr << "mlp_trainer_mpi: " << e.message << "\n\n";
      std::cerr << usage;
    }
    code = e.message.empty() ? 0 : 2;
  } catch (const std::exception& e) {
    // ckpt::mpi throws on every rank alike; one report is enough.
    if (rank == 0) std::cerr << "mlp_trainer_mpi: " << e.what() << '\n';
    code = 1;
  }
  MPI_Finalize();
  return code;
}
