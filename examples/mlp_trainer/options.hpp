#pragma once
// The command line both trainers share (examples/mlp_trainer and examples/mlp_trainer_mpi),
// parsed with CLI11.

#include "mlp.hpp"

#include <CLI/CLI.hpp>
#include <ckpt/adam.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mlp_example {

struct training_options {
  std::int64_t steps = 3000;
  int batch = 64;
  double lr = 1e-2;
  std::uint64_t seed = 1;
  std::filesystem::path ckpt_dir;  // each trainer sets its default before add_training_flags
  std::int64_t save_every = 500;
  std::size_t keep = 3;
  bool resume = false;
  int hidden = 32;
  std::int64_t log_every = 100;
  std::filesystem::path params_out;  // optional: the final parameters alone, without metadata
};

// A CLI11 check that a value is a number of at least `min` (greater than `min` if `strictly`); its
// message, unlike CLI::PositiveNumber's, does not spell out the largest double.
inline CLI::Validator at_least(double min, bool strictly = false) {
  const std::string bound = (strictly ? "> " : ">= ") + CLI::detail::to_string(min);
  return CLI::Validator(
      [min, strictly, bound](std::string& text) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !(strictly ? x > min : x >= min))
          return "'" + text + "' is not a number " + bound;
        return {};
      },
      "");
}

// Adds the option `name`, a number of at least `min` (greater than `min` if `strictly`), with its
// current value as the default shown by --help.
template <class T>
CLI::Option* add_number(CLI::App& app, const std::string& name, T& value, const std::string& help, double min,
                        bool strictly = false) {
  return app.add_option(name, value, help)->check(at_least(min, strictly))->capture_default_str();
}

// Adds the flags of `o` to `app`, with their current values as the defaults shown by --help.
inline void add_training_flags(CLI::App& app, training_options& o) {
  add_number(app, "--steps", o.steps, "total number of steps to reach", 0);
  add_number(app, "--batch", o.batch, "mini-batch size", 1);
  add_number(app, "--lr", o.lr, "Adam learning rate", 0, /*strictly=*/true);
  app.add_option("--seed", o.seed, "seed of the data set, initial parameters and batch order")
      ->capture_default_str();
  app.add_option("--ckpt-dir", o.ckpt_dir, "checkpoint folder, or s3://bucket/prefix for a run in object storage")
      ->capture_default_str();
  add_number(app, "--save-every", o.save_every, "save every N steps; the last step is always saved", 1);
  app.add_option("--keep", o.keep, "keep the newest N checkpoints, 0 for all")->capture_default_str();
  app.add_flag("--resume", o.resume, "continue from the latest checkpoint in --ckpt-dir up to --steps");
  add_number(app, "--hidden", o.hidden, "hidden units", 1);
  add_number(app, "--log-every", o.log_every, "progress line every N steps", 1);
  app.add_option("--params-out", o.params_out, "also write the final parameters alone (no metadata) to F")
      ->type_name("F");
}

// The number `text` (a value of `what`, for the message), as a T.
// Throws std::invalid_argument if `text` is not a whole T.
template <class T>
T number(std::string_view what, std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    throw std::invalid_argument("invalid value '" + std::string(text) + "' for " + std::string(what));
  return value;
}

// `x` with enough digits to tell two floats apart, for the progress lines that runs compare.
inline std::string exact(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", x);
  return text;
}

// The end of a run, the same for both trainers: the parameters to `params_out` if one was given,
// and the line that runs compare: the accuracy of `params` on `data` and the last checkpoint (its
// path, or where it is).
inline void report_end(const std::filesystem::path& params_out, const mlp& params, const dataset& data,
                       std::string_view last_checkpoint) {
  if (!params_out.empty()) ckpt::save(params_out, ckpt::training_state(params));  // the model alone
  std::cout << "accuracy " << exact(accuracy(params, data)) << "; last checkpoint: " << last_checkpoint << '\n';
}

// A resume that found no step to load: starting fresh is right only where the run has never saved
// a step. If the folder holds steps that are all damaged, or steps an earlier run set aside, a
// fresh start would quietly replace a run: the trainer stops instead, and says how to go on.
// `status` is the manager's status() after load_latest (the same member in both managers).
// \throws std::runtime_error naming the folder and the steps found.
inline void refuse_fresh_start_over(const std::vector<ckpt::checkpoint_manager::step_status>& status,
                                    const std::filesystem::path& folder) {
  if (status.empty()) return;
  std::string steps;
  for (const ckpt::checkpoint_manager::step_status& s : status)
    steps += (steps.empty() ? "" : ", ") + std::to_string(s.step) + " (" + s.path.filename().string() + ")";
  throw std::runtime_error("no step of " + folder.string() + " loads, but it holds damaged steps: " + steps +
                           "; nothing was trained. Move them away or remove them (ckpt prune --damaged " +
                           folder.string() + ") to start a new run there, or choose another --ckpt-dir");
}

}  // namespace mlp_example
