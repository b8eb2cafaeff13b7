// README.md, "What ckpt is". The lines between the two `// [quick_start]` markers are the README's
// code block `readme.cpp#quick_start` (tests/test_docs.cpp checks that the README shows them
// unchanged); the test case below runs them in test_docs's temporary folder.
// [quick_start]
#include <ckpt/ckpt.hpp>

struct linear { Eigen::MatrixXf w; Eigen::VectorXf b; };
struct mlp { linear l1, l2; };

void save_state(const mlp& model, std::int64_t step) {  // model.l1.w, model.l1.b, ..., step
  ckpt::save("run.safetensors",
             ckpt::concat({ckpt::of_params(model, "model"), ckpt::of_int("step", step)}));
}

mlp load_state(const mlp& like, std::int64_t& step) {  // `like` gives structure, shapes, dtypes
  const ckpt::checkpoint t = ckpt::load("run.safetensors");
  step = ckpt::to_int("step", t);
  return ckpt::to_params(t, like, ckpt::extract_options{.prefix = "model"});
}
// [quick_start]

#include <boost/test/unit_test.hpp>

BOOST_AUTO_TEST_SUITE(readme)

BOOST_AUTO_TEST_CASE(the_quick_start_saves_and_loads_the_state) {
  const mlp model{{Eigen::MatrixXf::Random(4, 3), Eigen::VectorXf::Random(4)},
                  {Eigen::MatrixXf::Random(2, 4), Eigen::VectorXf::Random(2)}};
  save_state(model, 42);
  const mlp like{{Eigen::MatrixXf::Zero(4, 3), Eigen::VectorXf::Zero(4)},
                 {Eigen::MatrixXf::Zero(2, 4), Eigen::VectorXf::Zero(2)}};
  std::int64_t step = 0;
  const mlp loaded = load_state(like, step);
  BOOST_TEST(step == 42);
  BOOST_TEST((loaded.l1.w == model.l1.w && loaded.l1.b == model.l1.b));
  BOOST_TEST((loaded.l2.w == model.l2.w && loaded.l2.b == model.l2.b));
}

BOOST_AUTO_TEST_SUITE_END()
