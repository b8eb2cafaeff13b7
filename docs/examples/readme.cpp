// README.md, "What ckpt is". The lines between the two `// [quick_start]` markers are the README's
// code block `readme.cpp#quick_start` (tests/test_docs.cpp checks that the README shows them
// unchanged); the test case below runs them in test_docs's temporary folder.
// [quick_start]
#include <ckpt/ckpt.hpp>

struct linear { Eigen::MatrixXf w; Eigen::VectorXf b; };
struct mlp { linear l1, l2; };

// The training state as one list of sections: model.l1.w, model.l1.b, ..., and Adam's
// optim.mu.*, optim.nu.* and optim.step. The same list is saved and read back.
void save_state(mlp& model, ckpt::adam_state<mlp>& adam) {
  ckpt::save("run.safetensors", ckpt::training_state(model, adam));
}

void load_state(mlp& model, ckpt::adam_state<mlp>& adam) {  // `model` gives structure, shapes, dtypes
  ckpt::read_params(ckpt::load("run.safetensors"), ckpt::training_state(model, adam));
}
// [quick_start]

#include <boost/test/unit_test.hpp>

BOOST_AUTO_TEST_SUITE(readme)

BOOST_AUTO_TEST_CASE(the_quick_start_saves_and_loads_the_state) {
  mlp model{{Eigen::MatrixXf::Random(4, 3), Eigen::VectorXf::Random(4)},
            {Eigen::MatrixXf::Random(2, 4), Eigen::VectorXf::Random(2)}};
  const ckpt::adam opt{.lr = 1e-2};
  ckpt::adam_state<mlp> adam = opt.init(model);
  for (int step = 0; step < 3; ++step) opt.update(model, model, adam);  // the parameters as gradients
  save_state(model, adam);
  mlp loaded{{Eigen::MatrixXf::Zero(4, 3), Eigen::VectorXf::Zero(4)},
             {Eigen::MatrixXf::Zero(2, 4), Eigen::VectorXf::Zero(2)}};
  ckpt::adam_state<mlp> loaded_adam;
  load_state(loaded, loaded_adam);
  BOOST_TEST(loaded_adam.step == 3);
  BOOST_TEST((loaded.l1.w == model.l1.w && loaded.l1.b == model.l1.b));
  BOOST_TEST((loaded.l2.w == model.l2.w && loaded.l2.b == model.l2.b));
  BOOST_TEST((loaded_adam.mu.values.l1.w == adam.mu.values.l1.w && loaded_adam.nu.values.l2.b == adam.nu.values.l2.b));
}

BOOST_AUTO_TEST_SUITE_END()
