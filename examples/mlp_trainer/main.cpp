// mlp_trainer: trains a small MLP on two spirals with Adam, checkpointing with
// ckpt::checkpoint_manager, and resumes bit-exactly after a stop, a crash or a preemption.
//
//   mlp_trainer --steps 3000 --ckpt-dir runs/a                # train from scratch
//   mlp_trainer --steps 6000 --ckpt-dir runs/a --resume       # continue to step 6000
//
// SIGINT or SIGTERM finish the current step, save a checkpoint and exit 0.

#include "mlp.hpp"
#include "options.hpp"

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

struct options : training_options {
  std::filesystem::path csv;  // default: <ckpt-dir>/loss.csv
};

// The command line; exits with CLI11's message (status 2 for a usage error, 0 for --help).
options parse(int argc, char** argv) {
  options o;
  o.ckpt_dir = "checkpoints";
  CLI::App app{"Trains a small MLP on two spirals with Adam, checkpointing and resuming bit-exactly.",
               "mlp_trainer"};
  add_training_flags(app, o);
  app.add_option("--csv", o.csv, "loss per step (default <ckpt-dir>/loss.csv)")->type_name("FILE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
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
  ckpt::checkpoint_manager::latest restored;
  if (o.resume) {
    // The newest step that loads: a damaged newer step is set aside (renamed, not deleted) and
    // the run goes on from the one before, which the same seed replays bit for bit. A step that
    // cannot be read for another reason (a permission, no descriptor left) is an error: the
    // trainer stops with it, and nothing is set aside.
    restored = manager.load_latest();
    for (const ckpt::checkpoint_manager::step_status& s : restored.skipped)
      std::cout << "skipped damaged step " << s.step << " (set aside as " << s.path.filename().string()
                << "): " << s.reason << '\n';
    if (!restored) {
      refuse_fresh_start_over(manager.status(), o.ckpt_dir);
      std::cout << "no checkpoint in " << o.ckpt_dir.string() << ": starting fresh\n";
    }
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
  shuffled_batches order(o.seed, static_cast<int>(data.x.cols()), std::min<int>(o.batch, static_cast<int>(data.x.cols())));
  mlp params = init_mlp(o.seed, o.hidden);
  ckpt::adam_state<mlp> state = opt.init(params);
  if (restored) {
    // The freshly initialized parameters are the template: names, shapes and dtypes.
    ckpt::restore_training_state(*restored, params, state);
    data_position position = order.position();  // the template: an engine and a count
    ckpt::read_params(*restored, position, {.prefix = "data"});
    order.restore(position);
    std::cout << "resumed from " << manager.path_of(restored.step).string() << " at step " << state.step << '\n';
  }

  std::ofstream csv = open_csv(o.csv, restored ? std::optional(state.step) : std::nullopt);
  auto metadata = [&](float loss) {
    return ckpt::metadata_map{{"loss", exact(loss)}, {"seed", std::to_string(o.seed)}, {"batch", std::to_string(o.batch)}};
  };

  // The training state and the data position, written from where they live (save) or from a
  // snapshot the manager reuses (save_async, which returns at once). The last step and a
  // preemption are saved whatever --save-every says (force).
  auto save = [&](bool in_background, float loss) {
    const std::vector<ckpt::section> sections{{params, "model"},
                                              {state.mu, "optim.mu"},
                                              {state.nu, "optim.nu"},
                                              {ckpt::of_int("optim.step", state.step)},
                                              {order.position(), "data"}};
    return in_background ? manager.save_async(state.step, sections, metadata(loss))
                         : manager.save(state.step, sections, metadata(loss), /*force=*/true);
  };

  install_signal_handlers();
  const std::int64_t first = state.step;
  // The newest step saved; a saved step is never saved again (the manager refuses it).
  std::optional<std::int64_t> saved = manager.latest_step();  // after load_latest set damaged steps aside
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
    if (manager.should_save(state.step) && state.step != o.steps &&
        save(/*in_background=*/true, loss))
      saved = state.step;
  }
  csv.flush();

  const bool stopped = state.step < o.steps;
  if (saved != state.step) {
    // The last step and a preemption are saved whatever --save-every says (unless just saved).
    save(/*in_background=*/false, loss);
  }
  manager.wait();
  if (stopped)
    std::cout << "stopped by a signal at step " << state.step << " (run again with --resume to continue)\n";
  report_end(o.params_out, params, data, manager.path_of(state.step));
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
