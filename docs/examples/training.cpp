// docs/guide.md, "The manager and resuming". The lines between two `// [name]` markers are the
// guide's code block `training.cpp#name` (tests/test_docs.cpp checks that the guide shows them
// unchanged); the test cases below run them.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace {

struct linear {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};

struct mlp {
  linear l1, l2;
};

// A stand-in for back-propagation on the mini-batch of `step`: what matters for resuming is that
// it depends on nothing but the parameters and the step.
mlp gradients(const mlp& params, std::int64_t step) {
  const float s = std::sin(static_cast<float>(step));
  mlp grads = ckpt::zeros_like(params);
  ckpt::zip_leaves([s](auto& g, const auto& x) { g = (x.array() * 0.5f + s).matrix(); }, grads, params);
  return grads;
}

// [manager]
void train(mlp& params, std::int64_t steps, const std::filesystem::path& folder) {
  const ckpt::adam opt{.lr = 1e-2};
  ckpt::adam_state<mlp> state = opt.init(params);
  // Checkpoints every 10 steps, the newest 2 kept; a second manager on `folder` would throw.
  ckpt::checkpoint_manager manager(folder, {.max_to_keep = 2, .save_interval_steps = 10});
  if (auto latest = manager.load_latest())  // digest verified
    ckpt::read_params(*latest, ckpt::training_state(params, state));  // strict
  while (state.step < steps) {
    opt.update(params, gradients(params, state.step), state);
    if (manager.should_save(state.step))  // a snapshot; the write runs in the background
      manager.save_async(state.step, ckpt::training_state(params, state), {{"lr", "0.01"}});
  }
  manager.wait();  // the last write is on disk, or its error is thrown here
}
// [manager]

mlp initial() {
  return {{Eigen::MatrixXf::Constant(8, 2, 0.5f), Eigen::VectorXf::Zero(8)},
          {Eigen::MatrixXf::Constant(2, 8, -0.25f), Eigen::VectorXf::Zero(2)}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(guide_training)

BOOST_AUTO_TEST_CASE(a_stopped_and_resumed_run_ends_bit_identical) {
  mlp straight = initial();
  train(straight, 30, "runs/straight");

  mlp first = initial();
  train(first, 20, "runs/resumed");  // stopped at step 20
  mlp resumed = initial();           // a new process: fresh parameters, then the checkpoint
  train(resumed, 30, "runs/resumed");

  BOOST_TEST((resumed.l1.w == straight.l1.w));
  BOOST_TEST((resumed.l2.b == straight.l2.b));
  BOOST_TEST(!(first.l1.w == straight.l1.w));  // the 10 resumed steps did change something

  ckpt::checkpoint_manager manager("runs/resumed");
  BOOST_TEST(manager.steps() == (std::vector<std::int64_t>{20, 30}));
  const ckpt::checkpoint latest = *manager.load_latest();
  BOOST_TEST(latest.metadata().at("lr") == "0.01");
  BOOST_TEST(latest.metadata().at("step") == "30");
  BOOST_TEST(latest.metadata().contains("ckpt.xxh3_64_file"));
  BOOST_TEST(std::filesystem::exists("runs/resumed/ckpt-0000000030.safetensors"));
}

BOOST_AUTO_TEST_SUITE_END()
