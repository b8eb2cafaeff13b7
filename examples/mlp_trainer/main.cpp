// mlp_trainer: trains a small MLP on two spirals with Adam, checkpointing with
// ckpt::checkpoint_manager, and resumes bit-exactly after a stop, a crash or a preemption.
//
//   mlp_trainer --steps 3000 --ckpt-dir runs/a                # train from scratch
//   mlp_trainer --steps 6000 --ckpt-dir runs/a --resume       # continue to step 6000
//   mlp_trainer --steps 8000 --ckpt-dir runs/a --resume --hidden 64 --adapt   # wider, from a's state
//   mlp_trainer --steps 3000 --ckpt-dir runs/b --init-from runs/a --hidden 64 # warm start of a new run
//   mlp_trainer --steps 3000 --ckpt-dir s3://bucket/runs/c    # a run in a bucket (AWS_* environment)
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
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace {

using namespace mlp_example;

struct options : training_options {
  std::filesystem::path csv;        // default: <ckpt-dir>/loss.csv (loss.csv here for a run in a bucket)
  std::filesystem::path init_from;  // a run folder whose newest model starts this run (warm start)
  bool adapt = false;               // read a checkpoint of another width: the overlap, fresh values elsewhere
};

// The command line; exits with CLI11's message (status 2 for a usage error, 0 for --help).
// Whether the run folder is a prefix of a bucket (`s3://bucket/run`): the manager keeps the steps
// there as objects (the guide's "Checkpoints in object storage").
bool in_bucket(const std::filesystem::path& folder) { return folder.native().starts_with("s3://"); }

options parse(int argc, char** argv) {
  options o;
  o.ckpt_dir = "checkpoints";
  CLI::App app{"Trains a small MLP on two spirals with Adam, checkpointing and resuming bit-exactly.",
               "mlp_trainer"};
  add_training_flags(app, o);
  app.add_option("--csv", o.csv, "loss per step (default <ckpt-dir>/loss.csv; loss.csv in the working folder for an "
                                 "s3:// --ckpt-dir)")->type_name("FILE");
  app.add_option("--init-from", o.init_from,
                 "warm start: a new run in --ckpt-dir, from step 0 with a fresh Adam state and the data order of "
                 "--seed, whose parameters are the model of RUN's newest intact step (RUN is only read, never "
                 "written). --ckpt-dir must be another folder, holding no step; with --resume, a --ckpt-dir that "
                 "already holds steps is resumed instead and RUN is not read")
      ->type_name("RUN");
  app.add_flag("--adapt", o.adapt,
               "with --resume or --init-from: read a checkpoint saved with another --hidden. Each entry's block "
               "that both shapes share is copied, the other values keep their fresh initialization (Adam's "
               "moments: zero), a leaf the checkpoint lacks keeps its initial value; what was adapted is "
               "printed. Without --adapt, any difference is an error naming the entries and their shapes");
  app.get_option("--params-out")
      ->description("also write the parameters (the model.* entries, no metadata) to F at the end; with --steps "
                    "at the step resumed from, or --steps 0 with --init-from, the restored parameters, untrained");
  app.footer("Every resume and warm start prints what it read (\"restored N entries as saved\", and with --adapt "
             "the entries copied partly or kept). Exit status: 0 done (or stopped by SIGINT/SIGTERM, saved), 1 an "
             "error (a checkpoint that does not fit the model, unreadable steps), 2 a usage error or a refused "
             "folder (one that holds steps without --resume, --init-from into itself).");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e) == 0 ? 0 : 2);
  }
  if (o.adapt && !o.resume && o.init_from.empty()) {
    std::cerr << "mlp_trainer: --adapt needs --resume or --init-from (it says how to read a checkpoint)\n";
    std::exit(2);
  }
  if (o.csv.empty()) o.csv = in_bucket(o.ckpt_dir) ? std::filesystem::path("loss.csv") : o.ckpt_dir / "loss.csv";
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

namespace fs = std::filesystem;

// Whether `a` and `b` name the same folder: the same file when both exist, else the same path
// once made absolute and normal.
bool same_folder(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  std::error_code ea, eb;
  const fs::path ca = fs::weakly_canonical(a, ea), cb = fs::weakly_canonical(b, eb);
  return !ea && !eb && ca == cb;
}

// The newest step `folder` holds, if it exists, looked at through a read-only manager: a refused
// run must leave the folder as it was, and a writing manager applies the retention rules (--keep)
// as soon as it opens.
std::optional<std::int64_t> newest_step_in(const fs::path& folder) {
  std::error_code ec;
  if (!in_bucket(folder) && !fs::is_directory(folder, ec)) return std::nullopt;
  return ckpt::checkpoint_manager(folder, {.read_only = true}).latest_step();
}

// The refusal of a new run (a fresh start or a warm start) in a folder that holds steps.
int refuse_new_run_over(const options& o, std::int64_t latest) {
  std::cerr << "mlp_trainer: " << o.ckpt_dir.string() << " already holds checkpoints (up to step " << latest << "): "
            << (o.init_from.empty() ? "pass --resume to continue, or choose another --ckpt-dir"
                                    : "--init-from starts a new run, in a folder without steps: choose another "
                                      "--ckpt-dir, or pass --resume to continue the run there")
            << '\n';
  return 2;
}

// Reads `t` (the checkpoint at `file`) into `sections`: as saved, or with --adapt across a change
// of --hidden (the block both shapes share copied, the template's fresh values elsewhere).
ckpt::read_report read_checkpoint(const ckpt::checkpoint& t, std::span<const ckpt::section> sections,
                                  const options& o, const fs::path& file) {
  const ckpt::extract_options how =
      o.adapt ? ckpt::extract_options{.keep_missing = true, .copy_overlap = true} : ckpt::extract_options{};
  try {
    return ckpt::read_params(t, sections, how);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("cannot read " + file.string() + " into the model (--hidden " +
                                std::to_string(o.hidden) + "): " + e.what() +
                                (o.adapt ? "" : "; --adapt reads a checkpoint of another --hidden"));
  }
}

// The newest step of the run `folder` that loads, for a warm start, through a read-only manager:
// no lock taken, nothing set aside, deleted or created in `folder`.
// \throws std::runtime_error if `folder` cannot be opened or no step of it loads.
std::pair<ckpt::checkpoint_manager::latest, fs::path> newest_model_of(const fs::path& folder) {
  std::optional<ckpt::checkpoint_manager> source;
  try {
    source.emplace(folder, ckpt::checkpoint_manager::options{.read_only = true});
  } catch (const std::exception& e) {
    throw std::runtime_error("--init-from " + folder.string() + ": " + e.what());
  }
  ckpt::checkpoint_manager::latest found = source->load_latest();
  for (const ckpt::checkpoint_manager::step_status& s : found.skipped)
    std::cout << "--init-from: skipped damaged step " << s.step << " of " << folder.string() << ": " << s.reason << '\n';
  if (!found)
    throw std::runtime_error("--init-from " + folder.string() + ": no step of it loads (" +
                             (source->status().empty() ? std::string("it holds none") : "its steps are damaged") +
                             "); nothing was trained");
  fs::path file = source->path_of(found.step);
  return {std::move(found), std::move(file)};
}

int run(options o) {
  const bool warm_start = !o.init_from.empty();
  if (warm_start && same_folder(o.init_from, o.ckpt_dir)) {
    std::cerr << "mlp_trainer: --init-from " << o.init_from.string() << " and --ckpt-dir " << o.ckpt_dir.string()
              << " are the same folder: a warm start is a new run, written into another --ckpt-dir (--init-from "
                 "is only read); to continue that run, pass --resume without --init-from\n";
    return 2;
  }
  // Whatever refuses the run, or fails to read --init-from, does so before --ckpt-dir is created,
  // locked or pruned.
  const std::optional<std::int64_t> held =
      !o.resume || warm_start ? newest_step_in(o.ckpt_dir) : std::optional<std::int64_t>();
  if (held && !o.resume) return refuse_new_run_over(o, *held);

  const ckpt::adam opt{.lr = o.lr};
  mlp params;
  ckpt::adam_state<mlp> state;
  // A warm start (--init-from, into a folder without steps): the model of RUN's newest step that
  // loads, read into fresh parameters of --seed and --hidden (the model part of the training
  // state); Adam's state and the step count are opt.init's.
  std::string init_from;  // the step file a warm start read, kept in the metadata of every step saved
  std::string warm_start_report;
  if (warm_start && !held) {
    const auto [initial, file] = newest_model_of(o.init_from);
    params = init_mlp(o.seed, o.hidden);
    state = opt.init(params);
    const ckpt::read_report report = read_checkpoint(*initial, ckpt::training_state(params), o, file);
    init_from = file.string();
    warm_start_report = "initialized the model from " + file.string() + " (step " + std::to_string(initial.step) +
                        " of " + o.init_from.string() + "); Adam's state and the step count start fresh\n" +
                        report.to_string();
  }

  ckpt::checkpoint_manager manager(o.ckpt_dir, {.max_to_keep = o.keep, .save_interval_steps = o.save_every});
  // Checked again under the manager's lock: another run may have saved in between.
  if (const std::optional<std::int64_t> latest = manager.latest_step(); latest && !o.resume)
    return refuse_new_run_over(o, *latest);

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
      std::cout << "no checkpoint in " << o.ckpt_dir.string() << ": starting "
                << (warm_start ? "a new run from " + o.init_from.string() : std::string("fresh")) << '\n';
    } else if (warm_start) {
      std::cout << "--init-from " << o.init_from.string() << " not used: " << o.ckpt_dir.string()
                << " holds steps, and --resume continues them\n";
    }
  }
  if (!restored && !warm_start_report.empty()) std::cout << warm_start_report << '\n';

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
    const auto it = meta.find("init_from");
    init_from = it != meta.end() ? it->second : std::string();
  }
  const dataset data = two_spirals(o.seed);
  shuffled_batches order(o.seed, static_cast<int>(data.x.cols()), std::min<int>(o.batch, static_cast<int>(data.x.cols())));
  if (restored || warm_start_report.empty()) {
    params = init_mlp(o.seed, o.hidden);
    state = opt.init(params);
  }
  if (restored) {
    // The freshly initialized parameters are the template: names, shapes and dtypes, and with
    // --adapt the values of what the checkpoint does not hold. The training state and the data
    // position are read in one go: nothing changes unless all of it fits.
    data_position position = order.position();  // the template: an engine and a count
    std::vector<ckpt::section> sections = ckpt::training_state(params, state);
    sections.emplace_back(position, "data");
    const ckpt::read_report report = read_checkpoint(*restored, sections, o, manager.path_of(restored.step));
    order.restore(position);
    std::cout << "resumed from " << manager.path_of(restored.step).string() << " at step " << state.step << '\n'
              << report.to_string() << '\n';
  }

  std::ofstream csv = open_csv(o.csv, restored ? std::optional(state.step) : std::nullopt);
  auto metadata = [&](float loss) {
    ckpt::metadata_map m{{"loss", exact(loss)}, {"seed", std::to_string(o.seed)}, {"batch", std::to_string(o.batch)}};
    if (!init_from.empty()) m.emplace("init_from", init_from);
    return m;
  };

  // The training state and the data position, written from where they live (save) or from a
  // snapshot the manager reuses (save_async, which returns at once). The last step and a
  // preemption are saved whatever --save-every says (force).
  auto save = [&](bool in_background, float loss) {
    std::vector<ckpt::section> sections = ckpt::training_state(params, state);
    sections.emplace_back(order.position(), "data");
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

  const bool stopped = stop_requested.load() && state.step < o.steps;
  if (saved != state.step) {
    // The last step and a preemption are saved whatever --save-every says (unless just saved).
    save(/*in_background=*/false, loss);
  }
  manager.wait();
  if (stopped)
    std::cout << "stopped by a signal at step " << state.step << " (run again with --resume to continue)\n";
  report_end(o.params_out, params, data, manager.path_of(state.step).string());
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
