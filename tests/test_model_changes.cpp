// When the model changes between runs: each case (a field added, removed, renamed, widened,
// retyped; a warm start) trains, changes the structure, reads the training state back with
// `read_params` of `training_state`, and checks the values (restored bit-exact, kept from the
// template, new moments zero, the overlap copied) and the report. The strict default refuses
// each case with a message naming every entry. The last cases check what the guide's chapter
// says beyond the reads: a layer widened with zero outgoing weights computes what the saved model
// computed (on the example trainer's MLP), Adam's bias correction of a parameter added mid-run,
// and why a state to train starts from `opt.init`.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include "mlp.hpp"  // examples/mlp_trainer: the example trainer's model, data and training step

#include <ckpt/adam.hpp>
#include <ckpt/adapt.hpp>
#include <ckpt/file.hpp>
#include <ckpt/params.hpp>
#include <ckpt/section.hpp>

#include <Eigen/Core>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_model_changes)

namespace {

using ckpt_test::message_of;

struct layer {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};
struct net {
  layer l1, l2;
};
struct net_with_scale {  // net + a new parameter
  layer l1, l2;
  Eigen::VectorXf scale;
};
struct net_renamed {  // l2 renamed head
  layer l1, head;
};
struct net_double {  // net in double
  struct layer64 {
    Eigen::MatrixXd w;
    Eigen::VectorXd b;
  };
  layer64 l1, l2;
};

layer make_layer(Eigen::Index in, Eigen::Index out, float seed) {
  layer l{Eigen::MatrixXf(out, in), Eigen::VectorXf(out)};
  for (Eigen::Index k = 0; k < l.w.size(); ++k) l.w.data()[k] = seed + 0.01f * static_cast<float>(k);
  for (Eigen::Index k = 0; k < l.b.size(); ++k) l.b[k] = -seed + 0.1f * static_cast<float>(k);
  return l;
}

net make_net(Eigen::Index hidden) { return {make_layer(3, hidden, 0.5f), make_layer(hidden, 2, -0.25f)}; }

// Gradients that depend on the parameters, so that moments differ leaf by leaf.
template <class P>
P gradients(const P& p) {
  P g = p;
  ckpt::for_each_leaf([](std::string_view, auto& x) { x = (x.array() * 0.5f + 0.125f).matrix(); }, g);
  return g;
}

// A model trained for three Adam steps and its state, saved as the training state.
struct trained {
  net params = make_net(4);
  ckpt::adam opt{.lr = 0.01};
  ckpt::adam_state<net> state = opt.init(params);
  explicit trained(int steps = 3) {
    for (int k = 0; k < steps; ++k) opt.update(params, gradients(params), state);
  }
  [[nodiscard]] ckpt::checkpoint saved() {
    ckpt_test::temp_dir dir;
    ckpt::save(dir.path() / "run.safetensors", ckpt::training_state(params, state));
    return ckpt::load(dir.path() / "run.safetensors");
  }
};

template <class A, class B>
bool same_bits(const A& a, const B& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(*a.data())) == 0;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_same_model_reads_back_bit_exact_and_the_report_is_exact) {
  trained run;
  const ckpt::checkpoint t = run.saved();
  net params = make_net(4);
  ckpt::adam_state<net> state;  // default-constructed: the moments are shaped from the parameters
  const ckpt::read_report report = ckpt::read_params(t, ckpt::training_state(params, state));
  BOOST_TEST(report.exact());
  BOOST_TEST(report.restored == 13u);  // 4 parameters, 4 + 4 moments, the step
  BOOST_TEST(report.to_string() == "restored 13 entries as saved");
  BOOST_TEST(same_bits(params.l1.w, run.params.l1.w));
  BOOST_TEST(same_bits(state.mu.values.l2.b, run.state.mu.values.l2.b));
  BOOST_TEST(same_bits(state.nu.values.l1.w, run.state.nu.values.l1.w));
  BOOST_TEST(state.step == 3);
}

BOOST_AUTO_TEST_CASE(an_added_field_keeps_its_initial_value_and_starts_its_moments_at_zero) {
  trained run;
  const ckpt::checkpoint t = run.saved();
  net_with_scale params{make_layer(3, 4, 9.f), make_layer(4, 2, 9.f), Eigen::VectorXf::Constant(2, 1.5f)};
  ckpt::adam_state<net_with_scale> state;
  // Strict (the default): the three new entries are named, with the way through.
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, ckpt::training_state(params, state)); }) ==
             "ckpt: read_params: strict read: 3 entries missing: 'model.scale', 'optim.mu.scale', 'optim.nu.scale' "
             "(keep_missing = true keeps the template's values)");
  BOOST_TEST(params.l1.w(0, 0) == 9.f);  // nothing changed
  BOOST_TEST(state.step == 0);

  const ckpt::read_report report =
      ckpt::read_params(t, ckpt::training_state(params, state), {.keep_missing = true});
  BOOST_TEST((report.kept == std::vector<std::string>{"model.scale", "optim.mu.scale", "optim.nu.scale"}));
  BOOST_TEST(report.ignored.empty());
  BOOST_TEST(report.restored == 13u);
  BOOST_TEST(!report.exact());
  BOOST_TEST(report.to_string() ==
             "restored 13 entries as saved\n"
             "kept 3 leaves with no entry: 'model.scale', 'optim.mu.scale', 'optim.nu.scale'");
  BOOST_TEST(same_bits(params.l1.w, run.params.l1.w));
  BOOST_TEST(same_bits(params.l2.b, run.params.l2.b));
  BOOST_TEST((params.scale == Eigen::VectorXf::Constant(2, 1.5f)));
  BOOST_TEST((state.mu.values.scale == Eigen::VectorXf::Zero(2)));
  BOOST_TEST((state.nu.values.scale == Eigen::VectorXf::Zero(2)));
  BOOST_TEST(same_bits(state.mu.values.l1.w, run.state.mu.values.l1.w));
  BOOST_TEST(state.step == 3);
  // Training goes on: the new parameter starts its moments fresh.
  ckpt::adam{.lr = 0.01}.update(params, gradients(params), state);
  BOOST_TEST(state.step == 4);
}

BOOST_AUTO_TEST_CASE(a_removed_field_is_ignored_and_reported) {
  struct only_l1 {
    layer l1;
  };
  trained run;
  const ckpt::checkpoint t = run.saved();
  only_l1 params{make_layer(3, 4, 9.f)};
  ckpt::adam_state<only_l1> state;
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, ckpt::training_state(params, state)); }) ==
             "ckpt: read_params: strict read: 6 entries not in the template: 'model.l2.b', 'model.l2.w', "
             "'optim.mu.l2.b', 'optim.mu.l2.w', 'optim.nu.l2.b', 'optim.nu.l2.w' (strict = false ignores them)");
  const ckpt::read_report report = ckpt::read_params(t, ckpt::training_state(params, state), {.strict = false});
  BOOST_TEST((report.ignored == std::vector<std::string>{"model.l2.b", "model.l2.w", "optim.mu.l2.b", "optim.mu.l2.w",
                                                         "optim.nu.l2.b", "optim.nu.l2.w"}));
  BOOST_TEST(report.kept.empty());
  BOOST_TEST(report.restored == 7u);
  BOOST_TEST(same_bits(params.l1.w, run.params.l1.w));
  BOOST_TEST(same_bits(state.nu.values.l1.b, run.state.nu.values.l1.b));
}

BOOST_AUTO_TEST_CASE(a_renamed_field_is_read_through_a_rename_of_the_checkpoint_with_its_moments) {
  trained run;
  const ckpt::checkpoint t = run.saved();
  net_renamed params{make_layer(3, 4, 9.f), make_layer(4, 2, 9.f)};
  ckpt::adam_state<net_renamed> state;
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, ckpt::training_state(params, state)); })
                 .starts_with("ckpt: read_params: strict read: 6 entries missing: 'model.head.b', 'model.head.w', "
                              "'optim.mu.head.b',"));
  const ckpt::checkpoint renamed = ckpt::rename(t, ckpt::name_pattern(R"(^(model|optim\.mu|optim\.nu)\.l2\.)"), "$1.head.");
  const ckpt::read_report report = ckpt::read_params(renamed, ckpt::training_state(params, state));
  BOOST_TEST(report.exact());
  BOOST_TEST(same_bits(params.head.w, run.params.l2.w));
  BOOST_TEST(same_bits(state.mu.values.head.b, run.state.mu.values.l2.b));
  BOOST_TEST(same_bits(state.nu.values.head.w, run.state.nu.values.l2.w));
}

BOOST_AUTO_TEST_CASE(a_widened_layer_gets_the_overlap_and_keeps_its_initial_values_elsewhere) {
  trained run;  // hidden width 4
  const ckpt::checkpoint t = run.saved();
  net params = make_net(6);  // hidden width 6: l1.w [6, 3], l1.b [6], l2.w [2, 6]
  params.l1.w.setConstant(7.f);
  params.l1.b.setConstant(7.f);
  params.l2.w.setConstant(7.f);
  const net before = params;
  ckpt::adam_state<net> state;
  const std::string strict = message_of<std::invalid_argument>(
      [&] { (void)ckpt::read_params(t, ckpt::training_state(params, state)); });
  BOOST_TEST(strict ==
             "ckpt: read_params: strict read: 9 entries of another shape: 'model.l1.b' [4] (the template's [6]), "
             "'model.l1.w' [4, 3] (the template's [6, 3]), 'model.l2.w' [2, 4] (the template's [2, 6]), "
             "'optim.mu.l1.b' [4] (the template's [6]), 'optim.mu.l1.w' [4, 3] (the template's [6, 3]), "
             "'optim.mu.l2.w' [2, 4] (the template's [2, 6]), 'optim.nu.l1.b' [4] (the template's [6]), "
             "'optim.nu.l1.w' [4, 3] (the template's [6, 3]), 'optim.nu.l2.w' [2, 4] (the template's [2, 6]) "
             "(copy_overlap = true copies the block both shapes share)");
  BOOST_TEST(same_bits(params.l1.w, before.l1.w));

  const ckpt::read_report report = ckpt::read_params(t, ckpt::training_state(params, state), {.copy_overlap = true});
  BOOST_TEST(report.reshaped.size() == 9u);
  BOOST_TEST(report.reshaped[1].name == "model.l1.w");
  BOOST_TEST((report.reshaped[1].saved == ckpt::dims{4, 3}));
  BOOST_TEST((report.reshaped[1].now == ckpt::dims{6, 3}));
  BOOST_TEST(report.restored == 4u);  // model.l2.b and its two moments are as saved; the step too
  BOOST_TEST(report.to_string().find("\ncopied 9 entries partly: 'model.l1.b' [4] -> [6], 'model.l1.w' [4, 3] -> [6, 3]") !=
             std::string::npos);
  // The first 4 rows of l1 (its old outputs) come from the checkpoint, the 2 new ones keep 7.
  BOOST_TEST((params.l1.w.topRows(4) == run.params.l1.w));
  BOOST_TEST((params.l1.w.bottomRows(2).array() == 7.f).all());
  BOOST_TEST((params.l1.b.head(4) == run.params.l1.b));
  BOOST_TEST((params.l1.b.tail(2).array() == 7.f).all());
  // l2 takes the 4 old inputs as its first columns (Eigen column-major, the file C order).
  BOOST_TEST((params.l2.w.leftCols(4) == run.params.l2.w));
  BOOST_TEST((params.l2.w.rightCols(2).array() == 7.f).all());
  // The moments: the overlap copied, zeros elsewhere.
  BOOST_TEST((state.mu.values.l1.w.topRows(4) == run.state.mu.values.l1.w));
  BOOST_TEST((state.mu.values.l1.w.bottomRows(2).array() == 0.f).all());
  BOOST_TEST((state.nu.values.l2.w.leftCols(4) == run.state.nu.values.l2.w));
  BOOST_TEST((state.nu.values.l2.w.rightCols(2).array() == 0.f).all());
  BOOST_TEST(state.step == 3);
}

BOOST_AUTO_TEST_CASE(a_narrowed_layer_gets_the_block_that_still_fits) {
  trained run;  // hidden width 4
  net params = make_net(2);
  ckpt::adam_state<net> state;
  const ckpt::read_report report =
      ckpt::read_params(run.saved(), ckpt::training_state(params, state), {.copy_overlap = true});
  BOOST_TEST(report.reshaped.size() == 9u);
  BOOST_TEST((params.l1.w == run.params.l1.w.topRows(2)));
  BOOST_TEST((params.l2.w == run.params.l2.w.leftCols(2)));
}

BOOST_AUTO_TEST_CASE(a_retyped_model_is_cast_and_the_report_lists_each_entry) {
  trained run;
  const ckpt::checkpoint t = run.saved();
  net_double params;
  params.l1 = {Eigen::MatrixXd::Zero(4, 3), Eigen::VectorXd::Zero(4)};
  params.l2 = {Eigen::MatrixXd::Zero(2, 4), Eigen::VectorXd::Zero(2)};
  ckpt::adam_state<net_double> state;
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, ckpt::training_state(params, state)); }) ==
             "ckpt: read_params: entry 'model.l1.w' has dtype F32 but the template's leaf has dtype F64 "
             "(pass cast = true to convert)");
  const ckpt::read_report report = ckpt::read_params(t, ckpt::training_state(params, state), {.cast = true});
  BOOST_TEST(report.cast.size() == 12u);
  BOOST_TEST(report.cast[0].name == "model.l1.b");
  BOOST_TEST((report.cast[0].saved == ckpt::dtype::f32 && report.cast[0].now == ckpt::dtype::f64));
  BOOST_TEST(report.restored == 13u);
  BOOST_TEST((params.l1.w == run.params.l1.w.cast<double>()));
  BOOST_TEST((state.nu.values.l2.b == run.state.nu.values.l2.b.cast<double>()));
}

BOOST_AUTO_TEST_CASE(the_choices_combine_and_each_stays_separate) {
  trained run;
  const ckpt::checkpoint t = run.saved();
  // Wider and with a new field: overlap alone still refuses the missing field, and the reverse.
  net_with_scale params{make_layer(3, 6, 9.f), make_layer(6, 2, 9.f), Eigen::VectorXf::Constant(2, 1.5f)};
  ckpt::adam_state<net_with_scale> state;
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::read_params(t, ckpt::training_state(params, state), {.copy_overlap = true});
             }).starts_with("ckpt: read_params: strict read: 3 entries missing: 'model.scale'"));
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::read_params(t, ckpt::training_state(params, state), {.keep_missing = true});
             }).starts_with("ckpt: read_params: strict read: 9 entries of another shape: 'model.l1.b' [4]"));
  const ckpt::read_report report = ckpt::read_params(t, ckpt::training_state(params, state),
                                                     {.keep_missing = true, .copy_overlap = true});
  BOOST_TEST(report.kept.size() == 3u);
  BOOST_TEST(report.reshaped.size() == 9u);
  BOOST_TEST((params.l1.b.head(4) == run.params.l1.b));
}

BOOST_AUTO_TEST_CASE(a_warm_start_takes_the_model_only_and_a_fresh_optimizer) {
  trained run;
  const ckpt::checkpoint t = run.saved();
  net params = make_net(4);
  params.l1.w.setZero();
  // Strict, as every read of sections: the optimizer's entries are outside the section read.
  const ckpt::read_report report = ckpt::read_params(t, {{params, "model"}});
  BOOST_TEST(report.exact());
  BOOST_TEST(report.restored == 4u);
  BOOST_TEST(same_bits(params.l1.w, run.params.l1.w));
  const ckpt::adam_state<net> fresh = ckpt::adam{}.init(params);
  BOOST_TEST(fresh.step == 0);
}

BOOST_AUTO_TEST_CASE(read_params_of_one_structure_takes_the_same_choices) {
  const net saved = make_net(4);
  const ckpt::checkpoint t = ckpt::of_params(saved, "model");
  net_with_scale params{make_layer(3, 6, 9.f), make_layer(6, 2, 9.f), Eigen::VectorXf::Constant(2, 1.5f)};
  const ckpt::read_report report =
      ckpt::read_params(t, params, {.prefix = "model", .keep_missing = true, .copy_overlap = true});
  BOOST_TEST((report.kept == std::vector<std::string>{"model.scale"}));
  BOOST_TEST(report.reshaped.size() == 3u);
  BOOST_TEST((params.l1.w.topRows(4) == saved.l1.w));
  // to_params has no values to keep: it refuses both choices and says where to go.
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(t, params, {.keep_missing = true}); })
                 .starts_with("ckpt: to_params: keep_missing and copy_overlap keep the template's values"));
}

BOOST_AUTO_TEST_CASE(copy_overlap_refuses_another_number_of_dimensions) {
  const ckpt::checkpoint t = ckpt::of_params(Eigen::VectorXf::Ones(4).eval(), "v");
  Eigen::MatrixXf m = Eigen::MatrixXf::Zero(2, 2);
  // Strict (the default), and not: neither points to copy_overlap, which is on and cannot copy it.
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, m, {.prefix = "v", .copy_overlap = true}); }) ==
             "ckpt: read_params: strict read: 1 entry of another shape: 'v' [4] (the template's [2, 2])");
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::read_params(t, m, {.prefix = "v", .strict = false, .copy_overlap = true});
             }) == "ckpt: read_params: entry 'v' has shape [4] but the template's leaf has shape [2, 2]");
  BOOST_TEST((m.array() == 0.f).all());
}

BOOST_AUTO_TEST_CASE(a_section_that_cannot_be_written_is_not_read_into) {
  const net saved = make_net(4);
  const ckpt::checkpoint t = ckpt::of_params(saved, "model");
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, {{saved, "model"}}); }) ==
             "ckpt: read_params: section 0 ('model') was made from a checkpoint or a const structure: it can be "
             "saved, not read into");
  net params = make_net(4);
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, {{params, "model"}}, {.prefix = "x"}); }) ==
             "ckpt: read_params: extract_options::prefix ('x') is for a single structure; sections carry their own");
}

BOOST_AUTO_TEST_CASE(a_list_made_once_saves_the_step_and_values_of_each_save) {
  trained run;
  const std::vector<ckpt::section> sections = ckpt::training_state(run.params, run.state);
  ckpt_test::temp_dir dir;
  ckpt::save(dir.path() / "a.safetensors", sections);
  run.opt.update(run.params, gradients(run.params), run.state);  // step 4
  ckpt::save(dir.path() / "b.safetensors", sections);
  const ckpt::checkpoint a = ckpt::load(dir.path() / "a.safetensors"), b = ckpt::load(dir.path() / "b.safetensors");
  BOOST_TEST(ckpt::to_int("optim.step", a) == 3);
  BOOST_TEST(ckpt::to_int("optim.step", b) == 4);
  BOOST_TEST(b.get("optim.step").dtype() == ckpt::dtype::i32);  // Kaun's of_int
  net params = make_net(4);
  ckpt::adam_state<net> state;
  BOOST_TEST(ckpt::read_params(b, ckpt::training_state(params, state)).exact());
  BOOST_TEST(same_bits(params.l1.w, run.params.l1.w));
  BOOST_TEST(state.step == 4);
}

BOOST_AUTO_TEST_CASE(a_section_of_a_temporary_is_saved_not_read_into) {
  ckpt_test::temp_dir dir;
  ckpt::save(dir.path() / "t.safetensors", {{Eigen::Vector2f(1, 2), "x"}});
  const ckpt::checkpoint t = ckpt::load(dir.path() / "t.safetensors");
  BOOST_TEST((t.get("x").as<float>()[1] == 2.f));
}

// The outputs of the example trainer's MLP for the inputs `x` (one per column), as its
// loss_and_grads computes them.
Eigen::MatrixXf logits(const mlp_example::mlp& p, const Eigen::MatrixXf& x) {
  const Eigen::MatrixXf hidden = ((p.l1.w * x).colwise() + p.l1.b).array().tanh().matrix();
  return (p.l2.w * hidden).colwise() + p.l2.b;
}

// The example trainer's MLP of `hidden` units trained `steps` steps on its data, saved as its
// training state and loaded back.
ckpt::checkpoint trained_mlp(const mlp_example::dataset& data, int hidden, int steps, mlp_example::mlp& params) {
  const ckpt::adam opt{.lr = 0.01};
  params = mlp_example::init_mlp(1, hidden);
  ckpt::adam_state<mlp_example::mlp> state = opt.init(params);
  mlp_example::shuffled_batches order(1, static_cast<int>(data.x.cols()), 64);
  for (int k = 0; k < steps; ++k) (void)mlp_example::train_step(data, order, opt, params, state);
  ckpt_test::temp_dir dir;
  ckpt::save(dir.path() / "run.safetensors", ckpt::training_state(params, state));
  return ckpt::load(dir.path() / "run.safetensors");
}

BOOST_AUTO_TEST_CASE(a_layer_widened_with_zero_outgoing_weights_computes_what_the_saved_model_computed) {
  const mlp_example::dataset data = mlp_example::two_spirals(1);
  mlp_example::mlp old;
  const ckpt::checkpoint t = trained_mlp(data, 8, 200, old);
  const Eigen::MatrixXf before = logits(old, data.x);

  // Hidden width 8 -> 12, initialized as the trainer initializes (seed 2: other values than the
  // run's), the 4 new units' outgoing weights zeroed; the run's state read over it.
  const ckpt::adam opt{.lr = 0.01};
  mlp_example::mlp wide = mlp_example::init_mlp(2, 12);
  wide.l2.w.rightCols(4).setZero();
  ckpt::adam_state<mlp_example::mlp> state = opt.init(wide);
  const ckpt::read_report report = ckpt::read_params(t, ckpt::training_state(wide, state), {.copy_overlap = true});
  BOOST_TEST(report.reshaped.size() == 9u);
  BOOST_TEST(state.step == 200);
  // The new units are alive (their incoming weights are the fresh initialization's)...
  BOOST_TEST((wide.l1.w.bottomRows(4).array() != 0.f).all());
  // ...and the outputs are the saved model's, to the last bit, before the first update.
  BOOST_TEST((logits(wide, data.x) == before));
  // So are the loss and the old parameters' gradients.
  mlp_example::mlp wide_grads, old_grads;
  BOOST_TEST(mlp_example::loss_and_grads(wide, data.x, data.y, wide_grads) ==
             mlp_example::loss_and_grads(old, data.x, data.y, old_grads));
  BOOST_TEST((wide_grads.l1.w.topRows(8) == old_grads.l1.w));
  BOOST_TEST((wide_grads.l1.b.head(8) == old_grads.l1.b));
  BOOST_TEST((wide_grads.l2.w.leftCols(8) == old_grads.l2.w));
  BOOST_TEST((wide_grads.l2.b == old_grads.l2.b));

  // Without the zeroing, the same read gives another function.
  mlp_example::mlp unzeroed = mlp_example::init_mlp(2, 12);
  ckpt::adam_state<mlp_example::mlp> unzeroed_state = opt.init(unzeroed);
  (void)ckpt::read_params(t, ckpt::training_state(unzeroed, unzeroed_state), {.copy_overlap = true});
  BOOST_TEST((logits(unzeroed, data.x) - before).cwiseAbs().maxCoeff() > 1e-2f);

  // The first update gives the new units' outgoing weights values of their own: they train.
  mlp_example::shuffled_batches order(1, static_cast<int>(data.x.cols()), 64);
  (void)mlp_example::train_step(data, order, opt, wide, state);
  BOOST_TEST((wide.l2.w.rightCols(4).array() != 0.f).all());
}

BOOST_AUTO_TEST_CASE(new_units_with_zero_incoming_and_outgoing_weights_never_train) {
  const mlp_example::dataset data = mlp_example::two_spirals(1);
  mlp_example::mlp old;
  const ckpt::checkpoint t = trained_mlp(data, 8, 50, old);
  const ckpt::adam opt{.lr = 0.01};
  mlp_example::mlp wide = mlp_example::init_mlp(2, 12);
  wide.l1.w.bottomRows(4).setZero();  // init_mlp's biases are zero already
  wide.l2.w.rightCols(4).setZero();
  ckpt::adam_state<mlp_example::mlp> state = opt.init(wide);
  (void)ckpt::read_params(t, ckpt::training_state(wide, state), {.copy_overlap = true});
  mlp_example::shuffled_batches order(1, static_cast<int>(data.x.cols()), 64);
  for (int k = 0; k < 20; ++k) (void)mlp_example::train_step(data, order, opt, wide, state);
  // Their gradients are zero: tanh(0) reaches no output, and no output reaches them.
  BOOST_TEST((wide.l1.w.bottomRows(4).array() == 0.f).all());
  BOOST_TEST((wide.l1.b.tail(4).array() == 0.f).all());
  BOOST_TEST((wide.l2.w.rightCols(4).array() == 0.f).all());
  BOOST_TEST((wide.l1.w.topRows(8).array() != old.l1.w.array()).any());  // the old units trained
}

BOOST_AUTO_TEST_CASE(a_parameter_added_mid_run_gets_the_bias_correction_of_the_runs_step) {
  const std::int64_t t = 2000;
  trained run(static_cast<int>(t));
  const ckpt::checkpoint saved = run.saved();
  net_with_scale params{make_layer(3, 4, 9.f), make_layer(4, 2, 9.f), Eigen::VectorXf::Constant(2, 1.5f)};
  ckpt::adam_state<net_with_scale> state = run.opt.init(params);
  (void)ckpt::read_params(saved, ckpt::training_state(params, state), {.keep_missing = true});
  BOOST_TEST(state.step == t);
  const net_with_scale grads = gradients(params);  // 0.875 for `scale`
  run.opt.update(params, grads, state);
  // Its first update is lr * m^ / sqrt(v^) with its zero moments corrected by the run's step
  // t + 1, not by 1 as a fresh parameter's: ratio times the fresh parameter's lr.
  const double b1 = run.opt.beta1, b2 = run.opt.beta2;
  const double ratio = (1 - b1) / (1 - std::pow(b1, t + 1)) * std::sqrt((1 - std::pow(b2, t + 1)) / (1 - b2));
  const double moved = 1.5 - static_cast<double>(params.scale[0]);
  BOOST_TEST(ratio > 2.9);  // past the first few thousand steps: about 3.2 (sqrt(1 - b2) / (1 - b1))
  BOOST_TEST(moved / run.opt.lr == ratio, boost::test_tools::tolerance(1e-4));

  // In an Adam state of its own (step 0), its first update is a fresh parameter's: lr.
  Eigen::VectorXf scale = Eigen::VectorXf::Constant(2, 1.5f);
  ckpt::adam_state<Eigen::VectorXf> own = run.opt.init(scale);
  run.opt.update(scale, grads.scale, own);
  BOOST_TEST((1.5 - static_cast<double>(scale[0])) / run.opt.lr == 1.0, boost::test_tools::tolerance(1e-4));
}

BOOST_AUTO_TEST_CASE(a_default_constructed_state_is_filled_by_a_read_and_refused_by_update) {
  net params = make_net(4);
  ckpt::adam_state<net> state;  // no moments: a read of the training state shapes them, update does not
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::adam{}.update(params, gradients(params), state); }) ==
             "ckpt: adam: the gradient or state of 'l1.w' has another shape than the parameter [4, 3]");
  BOOST_TEST(state.step == 0);
  // A read of the whole training state replaces it all: the same state then trains.
  trained run;
  (void)ckpt::read_params(run.saved(), ckpt::training_state(params, state));
  ckpt::adam{}.update(params, gradients(params), state);
  BOOST_TEST(state.step == 4);
}

BOOST_AUTO_TEST_SUITE_END()  // test_model_changes
