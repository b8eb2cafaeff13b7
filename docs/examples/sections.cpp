// docs/guide.md, "Several sections in one file" and "Partial loading". The lines between two
// `// [name]` markers are the guide's code block `sections.cpp#name` (tests/test_docs.cpp checks
// that the guide shows them unchanged); the test cases below run them.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <cstdint>
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

mlp make_mlp() {
  return {{Eigen::MatrixXf::Random(8, 2), Eigen::VectorXf::Random(8)},
          {Eigen::MatrixXf::Random(2, 8), Eigen::VectorXf::Random(2)}};
}

// [sections]
void save_run(const mlp& params, const mlp& ema, std::int64_t step) {
  ckpt::save("run.safetensors",
             ckpt::concat({ckpt::of_params(params, "model"), ckpt::of_params(ema, "ema"), ckpt::of_int("step", step)})
                 .with_metadata({{"config", "hidden=8"}}));
}

void load_run(mlp& params, mlp& ema, std::int64_t& step) {
  const ckpt::checkpoint t = ckpt::load("run.safetensors");  // mapped once, read per section
  ckpt::read_params(t, params, {.prefix = "model"});
  ckpt::read_params(t, ema, {.prefix = "ema"});
  step = ckpt::to_int("step", t);
}
// [sections]

// [training_state]
// The training state and a section of our own: the one list that is saved and read back.
std::vector<ckpt::section> run_state(mlp& params, ckpt::adam_state<mlp>& st, mlp& ema) {
  std::vector<ckpt::section> sections = ckpt::training_state(params, st);
  sections.emplace_back(ema, "ema");
  return sections;
}

void save_training(mlp& params, ckpt::adam_state<mlp>& st, mlp& ema) {
  // Written straight from the live structures.
  ckpt::save("train.safetensors", run_state(params, st, ema));
}

void restore_training(mlp& params, ckpt::adam_state<mlp>& st, mlp& ema) {
  // Strict: every entry under the four sections and `ema` is read, or nothing changes.
  ckpt::read_params(ckpt::load("train.safetensors"), run_state(params, st, ema));
}
// [training_state]

// [partial]
struct backbone {
  linear l1, l2;
};

struct classifier {
  backbone body;
  linear head;  // new: 10 classes
};

classifier from_pretrained(const char* path, classifier model) {
  const ckpt::checkpoint t = ckpt::load(path);
  // The pretrained file holds model.l1.*, model.l2.* (an mlp): extract the backbone alone; the
  // head keeps its initial values. (read_params is strict: an entry under `model` that the
  // backbone does not name would be refused; {.strict = false} ignores such entries.)
  ckpt::read_params(t, model.body, {.prefix = "model"});
  return model;
}
// [partial]

void step_once(mlp& params, ckpt::adam_state<mlp>& st) {
  const ckpt::adam opt{.lr = 1e-2};
  mlp grads = make_mlp();
  opt.update(params, grads, st);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(guide_sections)

BOOST_AUTO_TEST_CASE(sections_share_one_file) {
  const mlp params = make_mlp(), ema = make_mlp();
  save_run(params, ema, 2);

  const ckpt::checkpoint t = ckpt::load("run.safetensors");
  BOOST_TEST(t.size() == 2u * 4u + 1u);
  BOOST_TEST(t.metadata().at("config") == "hidden=8");

  mlp params2 = make_mlp(), ema2 = make_mlp();
  std::int64_t step = 0;
  load_run(params2, ema2, step);
  BOOST_TEST((params2.l1.w == params.l1.w));
  BOOST_TEST((ema2.l2.w == ema.l2.w));
  BOOST_TEST(step == 2);
}

BOOST_AUTO_TEST_CASE(training_state_round_trips) {
  mlp params = make_mlp(), ema = make_mlp();
  ckpt::adam_state<mlp> st = ckpt::adam{}.init(params);
  step_once(params, st);
  save_training(params, st, ema);
  BOOST_TEST(ckpt::load("train.safetensors").names() ==
             (std::vector<std::string>{"ema.l1.b", "ema.l1.w", "ema.l2.b", "ema.l2.w", "model.l1.b", "model.l1.w",
                                       "model.l2.b", "model.l2.w", "optim.mu.l1.b", "optim.mu.l1.w", "optim.mu.l2.b",
                                       "optim.mu.l2.w", "optim.nu.l1.b", "optim.nu.l1.w", "optim.nu.l2.b",
                                       "optim.nu.l2.w", "optim.step"}));
  mlp params2 = make_mlp(), ema2 = make_mlp();
  ckpt::adam_state<mlp> st2;
  restore_training(params2, st2, ema2);
  BOOST_TEST((params2.l2.w == params.l2.w));
  BOOST_TEST((st2.nu.values.l2.w == st.nu.values.l2.w));
  BOOST_TEST(st2.step == 1);
  BOOST_TEST((ema2.l1.w == ema.l1.w));
}

BOOST_AUTO_TEST_CASE(a_pretrained_backbone_loads_under_a_new_head_that_keeps_its_values) {
  const mlp pretrained = make_mlp();
  ckpt::save("pretrained.safetensors", ckpt::of_params(pretrained, "model"));
  const linear head{Eigen::MatrixXf::Constant(10, 2, 0.25f), Eigen::VectorXf::Zero(10)};
  const classifier fresh{{{Eigen::MatrixXf::Zero(8, 2), Eigen::VectorXf::Zero(8)},
                          {Eigen::MatrixXf::Zero(2, 8), Eigen::VectorXf::Zero(2)}},
                         head};
  const classifier model = from_pretrained("pretrained.safetensors", fresh);
  BOOST_TEST((model.body.l1.w == pretrained.l1.w));
  BOOST_TEST((model.body.l2.b == pretrained.l2.b));
  BOOST_TEST((model.head.w == head.w));
  // The whole classifier does not load from the file: its head is not there.
  BOOST_CHECK_THROW((void)ckpt::to_params(ckpt::load("pretrained.safetensors"), fresh, {.prefix = "model"}),
                    std::invalid_argument);
}

BOOST_AUTO_TEST_SUITE_END()
