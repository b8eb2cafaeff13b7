// mlp_trainer: trains a small MLP on two spirals with Adam, checkpointing with
// ckpt::checkpoint_manager, and resumes bit-exactly after a stop, a crash or a preemption.
//
//   mlp_trainer --steps 3000 --ckpt-dir runs/a                # train from scratch
//   mlp_trainer --steps 6000 --ckpt-dir runs/a --resume       # continue to step 6000
//
// SIGINT or SIGTERM finish the current step, save a checkpoint and exit 0.

#include "mlp.hpp"

#include <ckpt/adam.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>

#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace mlp_example;

struct options {
  std::int64_t steps = 3000;
  int batch = 64;
  double lr = 1e-2;
  std::uint64_t seed = 1;
  std::filesystem::path ckpt_dir = "checkpoints";
  std::int64_t save_every = 500;
  std::size_t keep = 3;
  bool resume = false;
  int hidden = 32;
  std::int64_t log_every = 100;
  std::filesystem::path csv;         // default: <ckpt-dir>/loss.csv
  std::filesystem::path params_out;  // optional: the final parameters alone, without metadata
};

constexpr const char* usage =
    "usage: mlp_trainer [--steps N] [--batch N] [--lr X] [--seed N] [--ckpt-dir DIR]\n"
    "                   [--save-every N] [--keep N] [--resume] [--hidden N] [--log-every N]\n"
    "                   [--csv FILE] [--params-out FILE]\n"
    "\n"
    "  --steps N        total number of steps to reach (default 3000)\n"
    "  --batch N        mini-batch size (default 64)\n"
    "  --lr X           Adam learning rate (default 0.01)\n"
    "  --seed N         seed of the data set, initial parameters and batch order (default 1)\n"
    "  --ckpt-dir DIR   checkpoint folder (default checkpoints)\n"
    "  --save-every N   save every N steps; the last step is always saved (default 500)\n"
    "  --keep N         keep the newest N checkpoints, 0 for all (default 3)\n"
    "  --resume         continue from the latest checkpoint in --ckpt-dir up to --steps\n"
    "  --hidden N       hidden units (default 32)\n"
    "  --log-every N    progress line every N steps (default 100)\n"
    "  --csv FILE       loss per step (default <ckpt-dir>/loss.csv)\n"
    "  --params-out F   also write the final parameters alone (no metadata) to F\n";

[[noreturn]] void fail_usage(const std::string& message) {
  std::cerr << "mlp_trainer: " << message << "\n\n" << usage;
  std::exit(2);
}

template <class T>
T number(std::string_view flag, std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    fail_usage("invalid value '" + std::string(text) + "' for " + std::string(flag));
  return value;
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    std::string_view value;
    bool has_value = false;
    if (const auto eq = flag.find('='); eq != std::string_view::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      has_value = true;
    }
    auto next = [&]() -> std::string_view {
      if (has_value) return value;
      if (i + 1 >= argc) fail_usage("missing value for " + std::string(flag));
      return argv[++i];
    };
    if (flag == "--help" || flag == "-h") {
      std::cout << usage;
      std::exit(0);
    } else if (flag == "--resume") {
      o.resume = true;
    } else if (flag == "--steps") {
      o.steps = number<std::int64_t>(flag, next());
    } else if (flag == "--batch") {
      o.batch = number<int>(flag, next());
    } else if (flag == "--lr") {
      o.lr = number<double>(flag, next());
    } else if (flag == "--seed") {
      o.seed = number<std::uint64_t>(flag, next());
    } else if (flag == "--ckpt-dir") {
      o.ckpt_dir = std::string(next());
    } else if (flag == "--save-every") {
      o.save_every = number<std::int64_t>(flag, next());
    } else if (flag == "--keep") {
      o.keep = number<std::size_t>(flag, next());
    } else if (flag == "--hidden") {
      o.hidden = number<int>(flag, next());
    } else if (flag == "--log-every") {
      o.log_every = number<std::int64_t>(flag, next());
    } else if (flag == "--csv") {
      o.csv = std::string(next());
    } else if (flag == "--params-out") {
      o.params_out = std::string(next());
    } else {
      fail_usage("unknown flag '" + std::string(flag) + "'");
    }
  }
  if (o.steps < 0) fail_usage("--steps must not be negative");
  if (o.batch < 1) fail_usage("--batch must be at least 1");
  if (o.save_every < 1) fail_usage("--save-every must be at least 1");
  if (o.hidden < 1) fail_usage("--hidden must be at least 1");
  if (o.log_every < 1) fail_usage("--log-every must be at least 1");
  if (!(o.lr > 0)) fail_usage("--lr must be positive");
  if (o.csv.empty()) o.csv = o.ckpt_dir / "loss.csv";
  return o;
}

std::atomic<bool> stop_requested{false};

extern "C" void on_signal(int) { stop_requested.store(true); }

void install_signal_handlers() {
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

std::string exact(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", x);
  return text;
}

// Keeps the rows of an earlier run up to `step` (later ones are from steps that are about to be
// trained again) and opens the file for appending.
std::ofstream open_csv(const std::filesystem::path& path, std::optional<std::int64_t> resumed_at) {
  std::vector<std::string> kept;
  if (resumed_at) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      std::int64_t step = 0;
      const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), step);
      if (ec == std::errc() && end != line.data() + line.size() && *end == ',' && step <= *resumed_at)
        kept.push_back(line);
    }
  }
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write '" + path.string() + "'");
  out << "step,loss\n";
  for (const auto& line : kept) out << line << '\n';
  return out;
}

int run(options o) {
  ckpt::checkpoint_manager manager(o.ckpt_dir, {.max_to_keep = o.keep, .save_interval_steps = o.save_every});
  const std::optional<std::int64_t> latest = manager.latest_step();
  if (latest && !o.resume) {
    std::cerr << "mlp_trainer: " << o.ckpt_dir.string() << " already holds checkpoints (up to step "
              << *latest << "): pass --resume to continue, or choose another --ckpt-dir\n";
    return 2;
  }

  const ckpt::adam opt{.lr = o.lr};
  std::optional<ckpt::checkpoint> restored;
  if (o.resume) {
    restored = manager.load_latest();
    if (!restored) std::cout << "no checkpoint in " << o.ckpt_dir.string() << ": starting fresh\n";
  }
  // The data set, initial parameters and batch order all come from the seed and the batch
  // size: a resumed run takes them from the checkpoint, so that it continues the same run.
  if (restored) {
    const auto& meta = restored->metadata();
    if (auto it = meta.find("seed"); it != meta.end() && number<std::uint64_t>("seed", it->second) != o.seed) {
      std::cout << "using the checkpoint's seed " << it->second << " (not --seed " << o.seed << ")\n";
      o.seed = number<std::uint64_t>("seed", it->second);
    }
    if (auto it = meta.find("batch"); it != meta.end() && number<int>("batch", it->second) != o.batch) {
      std::cout << "using the checkpoint's batch size " << it->second << " (not --batch " << o.batch << ")\n";
      o.batch = number<int>("batch", it->second);
    }
  }
  const dataset data = two_spirals(o.seed);
  batch_order order(o.seed, static_cast<int>(data.x.cols()), std::min<int>(o.batch, static_cast<int>(data.x.cols())));
  mlp params = init_mlp(o.seed, o.hidden);
  ckpt::adam_state<mlp> state = opt.init(params);
  if (restored) {
    // The freshly initialized parameters are the template: names, shapes and dtypes.
    ckpt::restore_training_state(*restored, params, state);
    std::cout << "resumed from " << manager.path_of(*latest).string() << " at step " << state.step << '\n';
  }

  std::ofstream csv = open_csv(o.csv, restored ? std::optional(state.step) : std::nullopt);
  auto metadata = [&](float loss) {
    return ckpt::metadata_map{{"loss", exact(loss)}, {"seed", std::to_string(o.seed)}, {"batch", std::to_string(o.batch)}};
  };

  install_signal_handlers();
  const std::int64_t first = state.step;
  float loss = 0;
  auto started = std::chrono::steady_clock::now();
  auto last_log = started;
  std::int64_t last_log_step = first;
  while (state.step < o.steps && !stop_requested.load()) {
    loss = train_step(data, order, opt, params, state);
    csv << state.step << ',' << exact(loss) << '\n';
    if (state.step % o.log_every == 0 || state.step == o.steps) {
      const auto now = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(now - last_log).count();
      const double rate = seconds > 0 ? static_cast<double>(state.step - last_log_step) / seconds : 0.0;
      std::printf("step %lld/%lld  loss %.5f  %.0f steps/s\n", static_cast<long long>(state.step),
                  static_cast<long long>(o.steps), static_cast<double>(loss), rate);
      std::fflush(stdout);
      last_log = now;
      last_log_step = state.step;
    }
    // The write runs in the background while training goes on: the checkpoint is a snapshot.
    if (manager.should_save(state.step) && state.step != o.steps)
      manager.save_async(state.step, ckpt::training_state(params, state), metadata(loss));
  }
  csv.flush();

  const bool stopped = state.step < o.steps;
  if (state.step > first || !latest) {
    // The last step and a preemption are saved whatever --save-every says.
    manager.save(state.step, ckpt::training_state(params, state), metadata(loss), /*force=*/true);
  }
  manager.wait();
  if (stopped)
    std::cout << "stopped by a signal at step " << state.step << " (run again with --resume to continue)\n";
  if (!o.params_out.empty()) ckpt::save(o.params_out, ckpt::of_params(params, "model"));
  std::cout << "accuracy " << exact(accuracy(params, data)) << "; last checkpoint: "
            << manager.path_of(state.step).string() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "mlp_trainer: " << e.what() << '\n';
    return 1;
  }
}
