// docs/guide.md, "When the model changes". The lines between two `// [name]` markers are the
// guide's code block `model_changes.cpp#name` (tests/test_docs.cpp checks that the guide shows
// them unchanged); the test cases below run them on a checkpoint of the first model, trained, and
// check the reports the guide prints.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <filesystem>
#include <string>

namespace {

// [models]
struct layer {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};
struct mlp {  // the model the run was saved with
  layer l1, l2;
};
// [models]

layer make_layer(Eigen::Index in, Eigen::Index out) {
  return {Eigen::MatrixXf::Constant(out, in, 0.5f), Eigen::VectorXf::Constant(out, 0.1f)};
}

// A run of `mlp` (hidden width 4), trained two steps and saved as its training state.
std::filesystem::path saved_run() {
  const auto path = std::filesystem::temp_directory_path() / ("ckpt-docs-model-changes-" + std::to_string(::getpid()));
  mlp params{make_layer(3, 4), make_layer(4, 2)};
  const ckpt::adam opt{.lr = 1e-2};
  auto state = opt.init(params);
  for (int k = 0; k < 2; ++k) opt.update(params, params, state);  // the parameters as gradients
  ckpt::save(path, ckpt::training_state(params, state));
  return path;
}

struct saved_file {
  std::filesystem::path path = saved_run();
  ~saved_file() { std::filesystem::remove(path); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(model_changes)

BOOST_AUTO_TEST_CASE(keep_missing_reads_a_model_with_an_added_field_keeping_its_initial_value) {
  const saved_file run;
  const ckpt::checkpoint latest = ckpt::load(run.path);
  // [add]
  struct mlp_scaled {
    layer l1, l2;
    Eigen::VectorXf scale = Eigen::VectorXf::Ones(2);  // new: its initial value is kept
  };
  mlp_scaled params{make_layer(3, 4), make_layer(4, 2)};
  ckpt::adam_state<mlp_scaled> state;
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
  const saved_file run;
  const ckpt::checkpoint latest = ckpt::load(run.path);
  // [remove]
  struct mlp_one_layer {
    layer l1;  // l2 is gone
  };
  mlp_one_layer params{make_layer(3, 4)};
  ckpt::adam_state<mlp_one_layer> state;
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
  const saved_file run;
  const ckpt::checkpoint latest = ckpt::load(run.path);
  // [rename]
  struct mlp_head {
    layer l1, head;  // l2 renamed head
  };
  mlp_head params{make_layer(3, 4), make_layer(4, 2)};
  ckpt::adam_state<mlp_head> state;
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
  const saved_file run;
  const ckpt::checkpoint latest = ckpt::load(run.path);
  // [widen]
  mlp params{make_layer(3, 6), make_layer(6, 2)};  // hidden width 4 -> 6, initialized as usual
  ckpt::adam_state<mlp> state;
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
}

BOOST_AUTO_TEST_CASE(cast_reads_a_retyped_model_and_reports_each_cast_entry) {
  const saved_file run;
  const ckpt::checkpoint latest = ckpt::load(run.path);
  // [retype]
  struct layer64 {
    Eigen::MatrixXd w;
    Eigen::VectorXd b;
  };
  struct mlp64 {  // float -> double
    layer64 l1, l2;
  };
  mlp64 params{{Eigen::MatrixXd(4, 3), Eigen::VectorXd(4)}, {Eigen::MatrixXd(2, 4), Eigen::VectorXd(2)}};
  ckpt::adam_state<mlp64> state;
  const ckpt::read_report report = ckpt::read_params(latest, ckpt::training_state(params, state), {.cast = true});
  std::cout << report.to_string() << '\n';
  // restored 13 entries as saved
  // cast 12 entries: 'model.l1.b' F32 -> F64, 'model.l1.w' F32 -> F64, ...
  // [retype]
  BOOST_TEST(report.to_string().starts_with(
      "restored 13 entries as saved\ncast 12 entries: 'model.l1.b' F32 -> F64, 'model.l1.w' F32 -> F64, "));
}

BOOST_AUTO_TEST_CASE(a_warm_start_takes_the_model_of_another_run_and_saves_step_0_in_a_new_folder) {
  const saved_file run;
  const auto folder_b = std::filesystem::temp_directory_path() / ("ckpt-docs-warm-" + std::to_string(::getpid()));
  std::filesystem::remove_all(folder_b);
  // [warm_start]
  // The model of run A's file, a fresh optimizer, and a new run folder B counting from step 0.
  mlp params{make_layer(3, 4), make_layer(4, 2)};
  const ckpt::adam opt{.lr = 1e-3};
  ckpt::adam_state<mlp> state = opt.init(params);
  const ckpt::read_report report = ckpt::read_params(ckpt::load(run.path), ckpt::training_state(params));
  ckpt::checkpoint_manager b(folder_b);
  b.save(0, ckpt::training_state(params, state));  // step numbering in B starts where you say
  // [warm_start]
  BOOST_TEST(report.to_string() == "restored 4 entries as saved");
  BOOST_TEST(b.steps() == std::vector<std::int64_t>{0});
  BOOST_TEST(ckpt::to_int("optim.step", ckpt::load(b.path_of(0))) == 0);
  std::filesystem::remove_all(folder_b);
}

BOOST_AUTO_TEST_SUITE_END()
