// docs/guide.md, "Resume training". The lines between two `// [name]` markers are the guide's
// code block `resume.cpp#name` (tests/test_docs.cpp checks that the guide shows them unchanged);
// the test case below runs them: a run killed with SIGKILL while a background save may be in
// flight, resumed in another process, ends bit-identical to a run that was never stopped.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

namespace {

// [model]
struct model {
  ckpt::frozen<Eigen::MatrixXf> embedding;     // pretrained: saved, never trained
  Eigen::MatrixXf w;                           // trained by Adam
  ckpt::frozen<Eigen::VectorXf> running_mean;  // a buffer the loop updates itself
  std::int64_t samples_seen = 0;               // a counter: saved, not trained
};

// Where the data loader is: the engine that shuffles, as it was at the start of this epoch, and
// how many samples of the epoch were served. On resume, the epoch's order is drawn again from
// the engine and the served samples are skipped.
struct data_position {
  std::mt19937_64 rng;
  std::int64_t served = 0;
};

// The order of one epoch of `n` samples, drawn from a copy of `rng` (Fisher-Yates with `r() % k`,
// the same on every standard library); `after` receives the engine past the draw.
std::vector<int> epoch_order(std::mt19937_64 rng, int n, std::mt19937_64& after) {
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng() % (i + 1)]);
  after = rng;
  return order;
}
// [model]

constexpr int samples = 12;

model initial() {
  model m;
  m.embedding.value = Eigen::MatrixXf(samples, 3);
  for (Eigen::Index i = 0; i < m.embedding.value.size(); ++i)
    m.embedding.value.data()[i] = std::sin(static_cast<float>(i));
  m.w = Eigen::MatrixXf::Constant(3, 2, 0.5f);
  m.running_mean.value = Eigen::VectorXf::Zero(2);
  return m;
}

// A stand-in for forward and backward passes on one sample: the output, and the gradient of w.
std::pair<Eigen::RowVectorXf, Eigen::MatrixXf> forward_backward(const model& m, int sample) {
  const Eigen::RowVectorXf x = m.embedding.value.row(sample);
  const Eigen::RowVectorXf y = (x * m.w).array().tanh().matrix();
  return {y, x.transpose() * (y.array() - 0.25f).matrix()};
}

// [loop]
// Trains `m` to `steps`, resuming from the latest checkpoint in `folder` if there is one.
// `after_step` lets the test below kill the process at a step of its choosing.
void train(model& m, std::int64_t steps, const std::filesystem::path& folder,
           const std::function<void(std::int64_t)>& after_step = {}) {
  const ckpt::adam opt{.lr = 1e-2};
  ckpt::adam_state<model> state = opt.init(m);  // moments for `w` only
  data_position data{std::mt19937_64(2024)};
  ckpt::checkpoint_manager manager(folder, {.max_to_keep = 2, .save_interval_steps = 5});
  // The training state (ckpt/adam.hpp) and the data position: the list saved and read back, made
  // anew for each save (it holds the step as it is when made).
  const auto sections = [&] {
    std::vector<ckpt::section> list = ckpt::training_state(m, state);
    list.emplace_back(data, "data");
    return list;
  };
  if (auto latest = manager.load_latest()) ckpt::read_params(*latest, sections());  // strict
  std::mt19937_64 next_epoch;
  std::vector<int> order = epoch_order(data.rng, samples, next_epoch);
  while (state.step < steps) {
    if (data.served == samples) {  // a new epoch, shuffled from where the last one left the engine
      data = {next_epoch, 0};
      order = epoch_order(data.rng, samples, next_epoch);
    }
    const auto [y, grad_w] = forward_backward(m, order[static_cast<std::size_t>(data.served++)]);
    m.running_mean.value = 0.9f * m.running_mean.value + 0.1f * y.transpose();
    ++m.samples_seen;
    model grads = m;  // the frozen leaves' and the counter's gradients are not read
    grads.w = grad_w;
    opt.update(m, grads, state);
    if (manager.should_save(state.step))  // snapshotted; written while training goes on
      manager.save_async(state.step, sections());
    if (after_step) after_step(state.step);
  }
  manager.wait();
}
// [loop]

// [fallback]
// Resumes `m` and `state` from the newest step of `manager` that loads. A damaged newer step (a
// file cut short by a full disk, a flipped bit) is set aside as `<file>.damaged` and reported;
// the run goes on from the step before it, and saves the damaged step's number again.
std::int64_t resume(ckpt::checkpoint_manager& manager, model& m, ckpt::adam_state<model>& state) {
  const ckpt::checkpoint_manager::latest latest = manager.load_latest();
  for (const ckpt::checkpoint_manager::step_status& skipped : latest.skipped)
    std::cerr << "step " << skipped.step << " is damaged (" << skipped.reason << "), set aside as "
              << skipped.path << '\n';
  if (!latest) return 0;  // nothing to resume: a fresh start
  ckpt::read_params(*latest, ckpt::training_state(m, state));
  return latest.step;
}
// [fallback]
// [strict]
// The model without its running mean: the checkpoints of the run above hold `model.running_mean`,
// which no leaf of this model reads.
struct model_without_mean {
  ckpt::frozen<Eigen::MatrixXf> embedding;
  Eigen::MatrixXf w;
  std::int64_t samples_seen = 0;
};

void restore(const ckpt::checkpoint& t, model_without_mean& m, ckpt::adam_state<model_without_mean>& state) {
  // Strict, the default: throws std::invalid_argument and changes nothing, with "ckpt: read_params:
  // strict read: 1 entry not in the template: 'model.running_mean' (strict = false ignores them)".
  // Missing entries and shapes that differ join the same message.
  ckpt::read_params(t, ckpt::training_state(m, state));
}

ckpt::read_report restore_without_the_mean(const ckpt::checkpoint& t, model_without_mean& m,
                                           ckpt::adam_state<model_without_mean>& state) {
  // Relaxed: entries no leaf reads are ignored (the mean is dropped on purpose) and listed in the
  // report (report.ignored: model.running_mean); a missing entry is still an error.
  return ckpt::read_params(t, ckpt::training_state(m, state), {.strict = false});
}
// [strict]

}  // namespace

BOOST_AUTO_TEST_SUITE(guide_resume)

BOOST_AUTO_TEST_CASE(a_killed_run_resumes_bit_identical_to_an_unstopped_one) {
  constexpr std::int64_t total = 53;  // four epochs and a part, a save every 5 steps
  model straight = initial();
  train(straight, total, "runs/resume-straight");

  // A process that dies by SIGKILL at step 23: the save of step 20 may still be in flight, so the
  // latest checkpoint is step 15 or 20; both resume exactly.
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    model doomed = initial();
    train(doomed, total, "runs/resume-killed", [](std::int64_t step) {
      if (step == 23) ::raise(SIGKILL);
    });
    std::_Exit(0);  // not reached
  }
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_REQUIRE(WIFSIGNALED(status));
  BOOST_TEST(WTERMSIG(status) == SIGKILL);

  model resumed = initial();  // a new process: the initial model is only the template
  resumed.w.setZero();
  train(resumed, total, "runs/resume-killed");
  BOOST_TEST((resumed.w == straight.w));
  BOOST_TEST((resumed.running_mean.value == straight.running_mean.value));
  BOOST_TEST(resumed.samples_seen == total);
  BOOST_TEST((resumed.embedding.value == initial().embedding.value));  // frozen: never trained

  // The optimizer state names the trained leaf only; the data position is in the file too.
  const ckpt::checkpoint latest = *ckpt::checkpoint_manager("runs/resume-killed").load_latest();
  BOOST_TEST((latest.names() == std::vector<std::string>{"data.rng", "data.served", "model.embedding",
                                                         "model.running_mean", "model.samples_seen", "model.w",
                                                         "optim.mu.w", "optim.nu.w", "optim.step"}));
}

BOOST_AUTO_TEST_CASE(a_damaged_newest_step_resumes_from_the_one_before) {
  const std::int64_t total = 40;
  model straight = initial();
  train(straight, total, "runs/resume-damaged-straight");

  model first = initial();
  train(first, 30, "runs/resume-damaged");  // steps 25 and 30 kept
  const std::filesystem::path newest = "runs/resume-damaged/ckpt-0000000030.safetensors";
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) - 100);  // cut short

  {
    ckpt::checkpoint_manager manager("runs/resume-damaged", {.max_to_keep = 2, .save_interval_steps = 5});
    model m = initial();
    ckpt::adam_state<model> state = ckpt::adam{}.init(m);
    BOOST_TEST(resume(manager, m, state) == 25);
    BOOST_TEST(std::filesystem::exists("runs/resume-damaged/ckpt-0000000030.safetensors.damaged"));
  }
  model resumed = initial();  // train() resumes from step 25 and saves step 30 again
  train(resumed, total, "runs/resume-damaged");
  BOOST_TEST((resumed.w == straight.w));
  BOOST_TEST((resumed.running_mean.value == straight.running_mean.value));
}

BOOST_AUTO_TEST_CASE(a_removed_field_is_refused_unless_the_restore_is_relaxed) {
  model trained = initial();
  train(trained, 5, "runs/resume-strict");
  const ckpt::checkpoint latest = *ckpt::checkpoint_manager("runs/resume-strict").load_latest();

  model_without_mean m{{Eigen::MatrixXf::Zero(samples, 3)}, Eigen::MatrixXf::Zero(3, 2)};
  ckpt::adam_state<model_without_mean> state;
  BOOST_CHECK_EXCEPTION(restore(latest, m, state), std::invalid_argument, [](const std::invalid_argument& e) {
    return std::string(e.what()) ==
           "ckpt: read_params: strict read: 1 entry not in the template: 'model.running_mean' "
           "(strict = false ignores them)";
  });
  BOOST_TEST(m.w.isZero());  // unchanged
  const ckpt::read_report report = restore_without_the_mean(latest, m, state);
  BOOST_TEST((report.ignored == std::vector<std::string>{"model.running_mean"}));
  BOOST_TEST(report.to_string() == "restored 6 entries as saved\nignored 1 entry with no leaf: 'model.running_mean'");
  BOOST_TEST((m.w == trained.w));
  BOOST_TEST(state.step == 5);
}

BOOST_AUTO_TEST_SUITE_END()
