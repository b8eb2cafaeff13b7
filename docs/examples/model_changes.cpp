// docs/guide.md, "When the model changes". The lines between two `// [name]` markers are the
// guide's code block `model_changes.cpp#name` (tests/test_docs.cpp checks that the guide shows
// them unchanged); the test cases below run them on a run of the first model, trained two steps
// and saved by a manager, and check the reports the guide prints and what the text says of them.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

// [models]
struct layer {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};
struct mlp {  // the model the run was saved with
  layer l1, l2;
};
const ckpt::adam opt{.lr = 1e-2};  // and its optimizer
// [models]

layer make_layer(Eigen::Index in, Eigen::Index out) {
  return {Eigen::MatrixXf::Constant(out, in, 0.5f), Eigen::VectorXf::Constant(out, 0.1f)};
}

// The outputs of `p` for the inputs `x` (one per column): l2(tanh(l1(x))).
Eigen::MatrixXf forward(const mlp& p, const Eigen::MatrixXf& x) {
  const Eigen::MatrixXf hidden = ((p.l1.w * x).colwise() + p.l1.b).array().tanh().matrix();
  return (p.l2.w * hidden).colwise() + p.l2.b;
}

// A run of `mlp` (hidden width 4) in a folder of its own, trained two steps and saved by a
// manager as its training state; the folder is removed at the end.
struct saved_run {
  std::filesystem::path folder_a =
      std::filesystem::temp_directory_path() / ("ckpt-docs-model-changes-" + std::to_string(::getpid()));
  mlp trained{make_layer(3, 4), make_layer(4, 2)};
  saved_run() {
    std::filesystem::remove_all(folder_a);
    ckpt::adam_state<mlp> state = opt.init(trained);
    for (int k = 0; k < 2; ++k) opt.update(trained, trained, state);  // the parameters as gradients
    ckpt::checkpoint_manager(folder_a).save(state.step, ckpt::training_state(trained, state));
  }
  ~saved_run() { std::filesystem::remove_all(folder_a); }
  saved_run(const saved_run&) = delete;
  saved_run& operator=(const saved_run&) = delete;
};

// What the snippets read: the newest step of the run in `folder_a`.
ckpt::checkpoint newest_of(const std::filesystem::path& folder_a) {
  // [latest]
  ckpt::checkpoint_manager run(folder_a);              // the run's folder, as the trainer resuming it opens it
  const ckpt::checkpoint latest = *run.load_latest();  // its newest step that loads
  // [latest]
  return latest;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_changes)

BOOST_AUTO_TEST_CASE(keep_missing_reads_a_model_with_an_added_field_keeping_its_initial_value) {
  const saved_run run;
  const ckpt::checkpoint latest = newest_of(run.folder_a);
  // [add]
  struct mlp_scaled {
    layer l1, l2;
    Eigen::VectorXf scale = Eigen::VectorXf::Ones(2);  // new: its initial value is kept
  };
  mlp_scaled params{make_layer(3, 4), make_layer(4, 2)};
  ckpt::adam_state<mlp_scaled> state = opt.init(params);
  const ckpt::read_report report =
      ckpt::read_params(latest, ckpt::training_state(params, state), {.keep_missing = true});
  std::cout << report.to_string() << '\n';
  // restored 13 entries as saved
  // kept 3 leaves with no entry: 'model.scale', 'optim.mu.scale', 'optim.nu.scale'
  // [add]
  BOOST_TEST(report.to_string() ==
             "restored 13 entries as saved\n"
             "kept 3 leaves with no entry: 'model.scale', 'optim.mu.scale', 'optim.nu.scale'");
  BOOST_TEST((params.scale.array() == 1.f).all());
  BOOST_TEST((state.mu.values.scale.array() == 0.f).all());
  BOOST_TEST(state.step == 2);
}

BOOST_AUTO_TEST_CASE(a_relaxed_read_ignores_the_entries_of_a_removed_field_and_reports_them) {
  const saved_run run;
  const ckpt::checkpoint latest = newest_of(run.folder_a);
  // [remove]
  struct mlp_one_layer {
    layer l1;  // l2 is gone
  };
  mlp_one_layer params{make_layer(3, 4)};
  ckpt::adam_state<mlp_one_layer> state = opt.init(params);
  const ckpt::read_report report =
      ckpt::read_params(latest, ckpt::training_state(params, state), {.strict = false});
  std::cout << report.to_string() << '\n';
  // restored 7 entries as saved
  // ignored 6 entries with no leaf: 'model.l2.b', 'model.l2.w', 'optim.mu.l2.b', 'optim.mu.l2.w',
  //   'optim.nu.l2.b', 'optim.nu.l2.w'
  // [remove]
  BOOST_TEST(report.to_string() ==
             "restored 7 entries as saved\n"
             "ignored 6 entries with no leaf: 'model.l2.b', 'model.l2.w', 'optim.mu.l2.b', 'optim.mu.l2.w', "
             "'optim.nu.l2.b', 'optim.nu.l2.w'");
}

BOOST_AUTO_TEST_CASE(a_renamed_field_reads_exactly_once_its_entries_and_moments_are_renamed) {
  const saved_run run;
  const ckpt::checkpoint latest = newest_of(run.folder_a);
  // [rename]
  struct mlp_head {
    layer l1, head;  // l2 renamed head
  };
  mlp_head params{make_layer(3, 4), make_layer(4, 2)};
  ckpt::adam_state<mlp_head> state = opt.init(params);
  // The entries are renamed before the read, the optimizer's moments with the parameters.
  const ckpt::checkpoint renamed =
      ckpt::rename(latest, ckpt::name_pattern(R"(^(model|optim\.mu|optim\.nu)\.l2\.)"), "$1.head.");
  const ckpt::read_report report = ckpt::read_params(renamed, ckpt::training_state(params, state));
  std::cout << report.to_string() << '\n';  // restored 13 entries as saved
  // [rename]
  BOOST_TEST(report.to_string() == "restored 13 entries as saved");
  BOOST_TEST(report.exact());
}

BOOST_AUTO_TEST_CASE(copy_overlap_reads_a_widened_layer_and_reports_each_partly_copied_entry) {
  const saved_run run;
  const ckpt::checkpoint latest = newest_of(run.folder_a);
  // [widen]
  mlp params{make_layer(3, 6), make_layer(6, 2)};  // hidden width 4 -> 6, initialized as usual
  params.l2.w.rightCols(2).setZero();  // the 2 new units' outgoing weights: the outputs stay the saved model's
  ckpt::adam_state<mlp> state = opt.init(params);
  const ckpt::read_report report =
      ckpt::read_params(latest, ckpt::training_state(params, state), {.copy_overlap = true});
  std::cout << report.to_string() << '\n';
  // restored 4 entries as saved
  // copied 9 entries partly: 'model.l1.b' [4] -> [6], 'model.l1.w' [4, 3] -> [6, 3],
  //   'model.l2.w' [2, 4] -> [2, 6], 'optim.mu.l1.b' [4] -> [6], ...
  // [widen]
  BOOST_TEST(report.to_string().starts_with(
      "restored 4 entries as saved\n"
      "copied 9 entries partly: 'model.l1.b' [4] -> [6], 'model.l1.w' [4, 3] -> [6, 3], 'model.l2.w' [2, 4] -> [2, 6], "
      "'optim.mu.l1.b' [4] -> [6], "));
  // The widened model computes what the saved one computed.
  const Eigen::MatrixXf x = Eigen::MatrixXf::Random(3, 16);
  BOOST_TEST((forward(params, x) - forward(run.trained, x)).cwiseAbs().maxCoeff() <= 1e-6f);
}

BOOST_AUTO_TEST_CASE(cast_reads_a_retyped_model_and_reports_each_cast_entry) {
  const saved_run run;
  const ckpt::checkpoint latest = newest_of(run.folder_a);
  // [retype]
  struct layer64 {
    Eigen::MatrixXd w;
    Eigen::VectorXd b;
  };
  struct mlp64 {  // float -> double
    layer64 l1, l2;
  };
  mlp64 params{{Eigen::MatrixXd(4, 3), Eigen::VectorXd(4)}, {Eigen::MatrixXd(2, 4), Eigen::VectorXd(2)}};
  ckpt::adam_state<mlp64> state = opt.init(params);
  const ckpt::read_report report = ckpt::read_params(latest, ckpt::training_state(params, state), {.cast = true});
  std::cout << report.to_string() << '\n';
  // restored 13 entries as saved
  // cast 12 entries: 'model.l1.b' F32 -> F64, 'model.l1.w' F32 -> F64, ...
  // [retype]
  BOOST_TEST(report.to_string().starts_with(
      "restored 13 entries as saved\ncast 12 entries: 'model.l1.b' F32 -> F64, 'model.l1.w' F32 -> F64, "));
}

BOOST_AUTO_TEST_CASE(a_warm_start_takes_the_model_of_another_run_and_saves_step_0_in_a_new_folder) {
  const saved_run run;
  const std::filesystem::path folder_a = run.folder_a;
  const auto folder_b = std::filesystem::temp_directory_path() / ("ckpt-docs-warm-" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder_b);
  // [warm_start]
  // The model of run A's newest step, a fresh optimizer, and a new run folder B counting from step 0.
  ckpt::checkpoint_manager a(folder_a, {.read_only = true});  // A is only read: no lock, nothing written
  const ckpt::checkpoint_manager::latest newest = a.load_latest();
  if (!newest) throw std::runtime_error(folder_a.string() + " holds no step that loads");
  mlp params{make_layer(3, 4), make_layer(4, 2)};
  ckpt::adam_state<mlp> state = opt.init(params);  // fresh: the read below does not touch it
  const ckpt::read_report report = ckpt::read_params(*newest, ckpt::training_state(params));
  ckpt::checkpoint_manager b(folder_b);
  b.save(0, ckpt::training_state(params, state));  // step numbering in B starts where you say
  // [warm_start]
  BOOST_TEST(report.to_string() == "restored 4 entries as saved");
  BOOST_TEST(newest.step == 2);
  BOOST_TEST((params.l1.w == run.trained.l1.w));
  BOOST_TEST(b.steps() == std::vector<std::int64_t>{0});
  BOOST_TEST(ckpt::to_int("optim.step", ckpt::load(b.path_of(0))) == 0);
  std::filesystem::remove_all(folder_b);
}

BOOST_AUTO_TEST_CASE(added_leaves_with_an_adam_state_of_their_own_count_their_own_steps) {
  const saved_run run;
  const ckpt::checkpoint latest = newest_of(run.folder_a);
  // Your backward pass: here the parameters themselves as gradients.
  const auto backward = [](const auto& p, const auto& q) { return std::pair(p, q); };
  // [own_step]
  // The added leaves in a structure of their own, with an Adam state of their own: its step
  // counts their updates from 0, as PyTorch counts each parameter's.
  struct added {
    Eigen::VectorXf scale = Eigen::VectorXf::Ones(2);
  };
  mlp params{make_layer(3, 4), make_layer(4, 2)};
  ckpt::adam_state<mlp> state = opt.init(params);
  added extra;
  ckpt::adam_state<added> extra_state = opt.init(extra);
  std::vector<ckpt::section> sections = ckpt::training_state(params, state);
  sections.insert(sections.end(), {{extra, "added.model"},
                                   {extra_state.mu, "added.optim.mu"},
                                   {extra_state.nu, "added.optim.nu"},
                                   {extra_state.step, "added.optim.step"}});
  // The first read after the change keeps them as they are (the later ones are exact):
  ckpt::read_params(latest, sections, {.keep_missing = true});
  // Each training step updates both, each state counting its own updates:
  const auto [grads, extra_grads] = backward(params, extra);  // your backward pass, for both
  opt.update(params, grads, state);
  opt.update(extra, extra_grads, extra_state);
  // Save `sections` (manager.save(state.step, sections)); read them back the same way.
  // [own_step]
  BOOST_TEST(state.step == 3);
  BOOST_TEST(extra_state.step == 1);
  // A fresh parameter's first Adam step: lr, whatever the gradient's size.
  BOOST_TEST(std::abs(1.f - extra.scale[0] - static_cast<float>(opt.lr)) < 1e-6f);
  // The sections save and read back exactly.
  const auto folder = run.folder_a / "own";
  ckpt::checkpoint_manager(folder).save(state.step, sections);
  const added saved = extra;
  extra.scale.setZero();
  extra_state.step = 0;
  BOOST_TEST(ckpt::read_params(ckpt::load(ckpt::checkpoint_manager(folder).path_of(3)), sections).exact());
  BOOST_TEST((extra.scale == saved.scale));
  BOOST_TEST(extra_state.step == 1);
}

BOOST_AUTO_TEST_SUITE_END()
