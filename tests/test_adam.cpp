// Adam: the update against hand-computed and closed-form values, and the training state
// (`training_state`: model.* / optim.mu.* / optim.nu.* / optim.step) saved and read back.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/adam.hpp>
#include <ckpt/adapt.hpp>
#include <ckpt/file.hpp>
#include <ckpt/section.hpp>
#include <ckpt/snapshot.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

BOOST_AUTO_TEST_SUITE(test_adam)

namespace {

using ckpt_test::message_of;

struct linear {
  Eigen::MatrixXd w;
  Eigen::VectorXd b;
};

// The training state as a checkpoint in memory: the entries a save of it writes.
template <class P>
ckpt::checkpoint training_checkpoint(P& p, ckpt::adam_state<P>& st) {
  return ckpt::snapshot_arena().snapshot(ckpt::training_state(p, st));
}

// A random linear layer after one update (a gradient of 1 everywhere), and its Adam state.
std::pair<linear, ckpt::adam_state<linear>> trained_once(const ckpt::adam& opt) {
  linear p{Eigen::MatrixXd::Random(2, 3), Eigen::VectorXd::Random(2)};
  auto st = opt.init(p);
  opt.update(p, linear{Eigen::MatrixXd::Ones(2, 3), Eigen::VectorXd::Ones(2)}, st);
  return {std::move(p), std::move(st)};
}

}  // namespace

// lr = 0.1, β1 = 0.9, β2 = 0.999, ε = 1e-8; one scalar parameter p = 1, gradients 2 then -1.
// Step 1: m = 0.2, v = 0.004, m̂ = 0.2/0.1 = 2, v̂ = 0.004/0.001 = 4,
//         p = 1 - 0.1 * 2 / (2 + 1e-8) = 0.9000000005
// Step 2: m = 0.18 - 0.1 = 0.08, v = 0.003996 + 0.001 = 0.004996,
//         m̂ = 0.08/0.19 = 0.42105263157894735, v̂ = 0.004996/0.001999 = 2.4992496248124062,
//         p = 0.9000000005 - 0.1 * 0.42105263157894735 / (1.5809015228 + 1e-8)
//           = 0.8733662967...
BOOST_AUTO_TEST_CASE(two_steps_match_the_moments_and_parameters_worked_out_by_hand) {
  const ckpt::adam opt{.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
  linear p{Eigen::MatrixXd::Constant(1, 1, 1.0), Eigen::VectorXd::Constant(1, 1.0)};
  auto st = opt.init(p);
  BOOST_TEST(st.step == 0);
  BOOST_TEST(st.mu.values.w.rows() == 1);
  BOOST_TEST(st.nu.values.b(0) == 0.0);

  opt.update(p, linear{Eigen::MatrixXd::Constant(1, 1, 2.0), Eigen::VectorXd::Constant(1, 2.0)}, st);
  BOOST_TEST(st.step == 1);
  BOOST_TEST(st.mu.values.w(0, 0) == 0.2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(st.nu.values.w(0, 0) == 0.004, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(p.w(0, 0) == 0.9000000005, boost::test_tools::tolerance(1e-14));

  opt.update(p, linear{Eigen::MatrixXd::Constant(1, 1, -1.0), Eigen::VectorXd::Constant(1, -1.0)}, st);
  BOOST_TEST(st.step == 2);
  BOOST_TEST(st.mu.values.w(0, 0) == 0.08, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(st.nu.values.w(0, 0) == 0.004996, boost::test_tools::tolerance(1e-12));
  const double m_hat = 0.08 / (1 - 0.81);
  const double v_hat = 0.004996 / (1 - 0.998001);
  const double expected = 0.9000000005 - 0.1 * m_hat / (std::sqrt(v_hat) + 1e-8);
  BOOST_TEST(p.w(0, 0) == expected, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(p.w(0, 0) == 0.8733662967, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(p.b(0) == p.w(0, 0));
}

// With a constant gradient g the bias-corrected moments are exactly m̂ = g, v̂ = g² at every step,
// so each step moves p by lr · g / (|g| + ε): after n steps p = p0 − n · lr · sign(g) (ε → 0).
BOOST_AUTO_TEST_CASE(a_constant_gradient_moves_each_parameter_by_lr_times_its_sign_each_step) {
  const ckpt::adam opt{.lr = 0.01, .eps = 0};
  Eigen::VectorXd p = Eigen::VectorXd::LinSpaced(5, -2.0, 2.0);
  const Eigen::VectorXd p0 = p;
  Eigen::VectorXd g(5);
  g << 3.0, -0.5, 1e-3, -7.0, 2.0;
  auto st = opt.init(p);
  for (int i = 0; i < 50; ++i) opt.update(p, g, st);
  const Eigen::VectorXd expected = p0 - 50 * 0.01 * g.array().sign().matrix();
  BOOST_TEST((p - expected).cwiseAbs().maxCoeff() < 1e-12);
}

// AdamW's decoupled decay with a zero gradient: the Adam term is 0/(0+ε) = 0, so only the decay
// acts and p = p0 · (1 − lr·λ)^n.
BOOST_AUTO_TEST_CASE(with_a_zero_gradient_decoupled_weight_decay_alone_scales_by_1_minus_lr_lambda) {
  const ckpt::adam opt{.lr = 0.1, .weight_decay = 0.5};
  Eigen::ArrayXf p = Eigen::ArrayXf::Constant(3, 2.0f);
  const Eigen::ArrayXf g = Eigen::ArrayXf::Zero(3);
  auto st = opt.init(p);
  for (int i = 0; i < 10; ++i) opt.update(p, g, st);
  BOOST_TEST(p(0) == 2.0f * std::pow(0.95f, 10.0f), boost::test_tools::tolerance(1e-5f));
}

BOOST_AUTO_TEST_CASE(ptree_parameters_update_like_eigen_ones) {
  const ckpt::adam opt{.lr = 0.05};
  Eigen::VectorXf e = Eigen::VectorXf::LinSpaced(4, 0.0f, 1.0f);
  const Eigen::VectorXf ge = Eigen::VectorXf::Constant(4, 0.3f);
  auto ste = opt.init(e);
  auto tree = ckpt::ptree::dict({{"x", ckpt::ptree::tensor(e)}});
  const auto gtree = ckpt::ptree::dict({{"x", ckpt::ptree::tensor(ge)}});
  auto stt = opt.init(tree);
  for (int i = 0; i < 3; ++i) {
    opt.update(e, ge, ste);
    opt.update(tree, gtree, stt);
  }
  BOOST_TEST((tree.at("x").as_tensor() == ckpt::detail::to_tensor(e)));
}

BOOST_AUTO_TEST_CASE(mismatched_gradients_change_nothing) {
  const ckpt::adam opt;
  linear p{Eigen::MatrixXd::Ones(2, 2), Eigen::VectorXd::Ones(2)};
  auto st = opt.init(p);
  const linear g{Eigen::MatrixXd::Ones(2, 2), Eigen::VectorXd::Ones(3)};
  BOOST_TEST(message_of<std::invalid_argument>([&] { opt.update(p, g, st); }).find("'b'") !=
             std::string::npos);
  BOOST_TEST(p.w(0, 0) == 1.0);
  BOOST_TEST(st.step == 0);
  BOOST_CHECK_THROW((ckpt::adam{.beta1 = 1.0}.update(p, p, st)), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(the_training_state_uses_the_seed_sections) {
  const ckpt::adam opt{.lr = 0.1};
  auto [p, st] = trained_once(opt);
  const ckpt::checkpoint c = training_checkpoint(p, st);
  BOOST_TEST(c.names() == (std::vector<std::string>{"model.b", "model.w", "optim.mu.b", "optim.mu.w",
                                                    "optim.nu.b", "optim.nu.w", "optim.step"}));
  BOOST_TEST(ckpt::to_int("optim.step", c) == 1);

  const ckpt_test::temp_dir tmp;
  const auto path = tmp.path() / "state.safetensors";
  ckpt::save(path, ckpt::training_state(p, st));
  linear q{Eigen::MatrixXd::Zero(2, 3), Eigen::VectorXd::Zero(2)};
  ckpt::adam_state<linear> restored;
  const ckpt::read_report report = ckpt::read_params(ckpt::load(path), ckpt::training_state(q, restored));
  BOOST_TEST(report.exact());
  BOOST_TEST(report.restored == 7u);
  std::filesystem::remove(path);
  BOOST_TEST((q.w == p.w));
  BOOST_TEST((q.b == p.b));
  BOOST_TEST((restored.mu.values.w == st.mu.values.w));
  BOOST_TEST((restored.nu.values.b == st.nu.values.b));
  BOOST_TEST(restored.step == 1);
}

// "A list made once serves every save": a read through the list keeps it valid, so the next save
// of the same list writes the moments just read (they were moved into `state` before, and the
// list's sections still referred to the storage the move gave away: a save read freed memory).
BOOST_AUTO_TEST_CASE(a_list_read_through_saves_what_was_read) {
  const ckpt::adam opt{.lr = 0.1};
  auto [p, st] = trained_once(opt);
  const ckpt::checkpoint saved = training_checkpoint(p, st);

  linear q{Eigen::MatrixXd::Zero(2, 3), Eigen::VectorXd::Zero(2)};
  auto resumed = opt.init(q);
  const std::vector<ckpt::section> list = ckpt::training_state(q, resumed);
  BOOST_TEST(ckpt::read_params(saved, list).exact());
  const ckpt::checkpoint again = ckpt::snapshot_arena().snapshot(list);
  for (const std::string& name : saved.names()) {
    BOOST_TEST_REQUIRE(again.find(name) != nullptr, name);
    BOOST_TEST(std::ranges::equal(again.find(name)->bytes(), saved.find(name)->bytes()), name);
  }
}

BOOST_AUTO_TEST_CASE(restore_changes_nothing_on_a_missing_entry) {
  linear p{Eigen::MatrixXd::Ones(1, 1), Eigen::VectorXd::Ones(1)};
  ckpt::adam_state<linear> st = ckpt::adam{}.init(p);
  const ckpt::checkpoint partial = ckpt::concat({ckpt::of_params(p, "model"), ckpt::of_int("optim.step", 3)});
  const std::string message =
      message_of<std::invalid_argument>([&] { (void)ckpt::read_params(partial, ckpt::training_state(p, st)); });
  BOOST_TEST(message.starts_with("ckpt: read_params: "), message);  // the reading function's name
  BOOST_TEST(message.find("optim.mu") != std::string::npos, message);
  BOOST_TEST(st.step == 0);
}

BOOST_AUTO_TEST_CASE(steps_past_2_pow_31_are_kept_whole) {
  const std::int64_t big = std::int64_t{1} << 40;
  const ckpt::checkpoint c = ckpt::of_int("optim.step", big);
  BOOST_TEST(c.get("optim.step").dtype() == ckpt::dtype::i64);
  BOOST_TEST(ckpt::to_int("optim.step", c) == big);

  const std::int64_t max32 = std::numeric_limits<std::int32_t>::max();
  const ckpt::checkpoint small = ckpt::of_int("optim.step", max32);
  BOOST_TEST(small.get("optim.step").dtype() == ckpt::dtype::i32);  // Raven's Kaun.Checkpoint.of_int format
  BOOST_TEST(ckpt::to_int("optim.step", small) == max32);
  BOOST_TEST(ckpt::to_int("optim.step", ckpt::of_int("optim.step", max32 + 1)) == max32 + 1);
  // A negative step is refused when the training state is read back, under the reading function's name.
  {
    linear q{Eigen::MatrixXd::Ones(1, 1), Eigen::VectorXd::Ones(1)};
    ckpt::adam_state<linear> qs = ckpt::adam{}.init(q);
    const ckpt::checkpoint negative = ckpt::concat({ckpt::of_params(q, "model"), ckpt::of_params(q, "optim.mu"),
                                                    ckpt::of_params(q, "optim.nu"), ckpt::of_int("optim.step", -1)});
    BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(negative, ckpt::training_state(q, qs)); }) ==
               "ckpt: read_params: entry 'optim.step' holds the negative step -1");
    BOOST_TEST(qs.step == 0);  // nothing changed
  }

  Eigen::VectorXf p = Eigen::VectorXf::Ones(2);
  ckpt::adam_state<Eigen::VectorXf> st = ckpt::adam{}.init(p);
  st.step = big;
  ckpt::adam{}.update(p, Eigen::VectorXf(Eigen::VectorXf::Ones(2)), st);
  Eigen::VectorXf q = Eigen::VectorXf::Zero(2);
  ckpt::adam_state<Eigen::VectorXf> back;
  (void)ckpt::read_params(training_checkpoint(p, st), ckpt::training_state(q, back));
  BOOST_TEST(back.step == big + 1);
}

// Trainable and non-trainable leaves in one model: Adam trains `w`, leaves the frozen embedding,
// the running mean (a buffer the loop updates itself), the counter and the random engine alone,
// keeps moments only for `w`, and a resume in another process is bit-identical to a straight run.
namespace {

struct model {
  ckpt::frozen<Eigen::MatrixXf> embedding;
  Eigen::MatrixXf w;
  ckpt::frozen<Eigen::VectorXf> running_mean;
  std::int64_t batches_seen = 0;
  std::mt19937_64 rng{42};
};

model make_model() {
  model m;
  m.embedding.value.resize(6, 3);
  for (Eigen::Index i = 0; i < m.embedding.value.size(); ++i)
    m.embedding.value.data()[i] = std::sin(static_cast<float>(i));
  m.w = Eigen::MatrixXf::Constant(3, 2, 0.5f);
  m.running_mean.value = Eigen::VectorXf::Zero(2);
  return m;
}

// One step: a batch drawn from the model's own engine, a made-up gradient, the buffer updated by
// the loop (as BatchNorm does in training), then Adam.
void train_step(const ckpt::adam& opt, model& m, ckpt::adam_state<model>& state) {
  std::uniform_int_distribution<int> pick(0, 5);
  const Eigen::RowVectorXf x = m.embedding.value.row(pick(m.rng));
  const Eigen::RowVectorXf y = x * m.w;
  model grads = m;
  grads.w = x.transpose() * y;
  m.running_mean.value = 0.9f * m.running_mean.value + 0.1f * y.transpose();
  ++m.batches_seen;
  opt.update(m, grads, state);
}

}  // namespace

BOOST_AUTO_TEST_CASE(frozen_leaves_buffers_counters_and_engines_are_kept_not_trained) {
  const ckpt::adam opt{.lr = 0.01};
  model m = make_model();
  const Eigen::MatrixXf embedding = m.embedding.value;
  ckpt::adam_state<model> state = opt.init(m);
  // The moments name the trained leaf only; the others are empty in them.
  BOOST_TEST((ckpt::leaf_names(state.mu) == std::vector<std::string>{"w"}));
  BOOST_TEST(state.mu.values.embedding.value.size() == 0);
  const ckpt::checkpoint t = training_checkpoint(m, state);
  BOOST_TEST((t.names() == std::vector<std::string>{"model.batches_seen", "model.embedding", "model.rng", "model.running_mean",
                                                    "model.w", "optim.mu.w", "optim.nu.w", "optim.step"}));
  for (int i = 0; i < 5; ++i) train_step(opt, m, state);
  BOOST_TEST((m.embedding.value == embedding));
  BOOST_TEST(m.batches_seen == 5);
  BOOST_TEST(!m.running_mean.value.isZero());
  BOOST_TEST(!(m.w.array() == 0.5f).all());
}

BOOST_AUTO_TEST_CASE(frozen_leaves_resume_bit_exactly_in_another_process) {
  const ckpt_test::temp_dir dir;
  const ckpt::adam opt{.lr = 0.01};
  constexpr int total = 40, half = 17;
  const auto final_file = [](const model& m, const std::filesystem::path& path) {
    ckpt::save(path, {{m, "model"}});
    return ckpt_test::read_bytes(path);
  };

  model straight = make_model();
  ckpt::adam_state<model> straight_state = opt.init(straight);
  for (int i = 0; i < total; ++i) train_step(opt, straight, straight_state);
  const std::string expected = final_file(straight, dir.path() / "straight.safetensors");

  model first = make_model();
  ckpt::adam_state<model> first_state = opt.init(first);
  for (int i = 0; i < half; ++i) train_step(opt, first, first_state);
  ckpt::save(dir.path() / "half.safetensors", ckpt::training_state(first, first_state));

  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    // A fresh process: a model made differently (another engine seed, other values) is the template.
    int code = 1;
    try {
      model resumed = make_model();
      resumed.embedding.value.setZero();
      resumed.rng.seed(7);
      resumed.w.setZero();
      ckpt::adam_state<model> resumed_state;
      (void)ckpt::read_params(ckpt::load(dir.path() / "half.safetensors"), ckpt::training_state(resumed, resumed_state));
      while (resumed_state.step < total) train_step(opt, resumed, resumed_state);
      (void)final_file(resumed, dir.path() / "resumed.safetensors");
      code = 0;
    } catch (...) {
    }
    std::_Exit(code);
  }
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_REQUIRE(WIFEXITED(status));
  BOOST_REQUIRE(WEXITSTATUS(status) == 0);
  BOOST_TEST((ckpt_test::read_bytes(dir.path() / "resumed.safetensors") == expected));
}

// Every leaf type the library accepts, in one model: Adam trains the float and double ones
// (Eigen matrices and arrays of fixed, partly dynamic and dynamic size in both storage orders,
// Eigen::Tensor of ranks 1 to 5 in both layouts, TensorFixedSize, F32/F64 ckpt::tensor, scalars)
// and keeps the others (frozen<...> of each kind, integers, a bool, random engines, an I32
// ckpt::tensor) without moments; a resume from the saved training state into a model made
// differently continues bit for bit as the uninterrupted run.
namespace {

template <class S, int N>
struct both_layouts {
  Eigen::Tensor<S, N> col;
  Eigen::Tensor<S, N, Eigen::RowMajor> row;
};

template <int N>
struct rank {
  both_layouts<float, N> f;
  both_layouts<double, N> d;
};

struct every_leaf {
  Eigen::Matrix<float, 3, 2> fixed_col;
  Eigen::Matrix<double, 2, 3, Eigen::RowMajor> fixed_row;
  Eigen::MatrixXf dynamic_col;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> dynamic_row;
  Eigen::Matrix<float, 3, Eigen::Dynamic> fixed_rows;
  Eigen::Matrix<double, Eigen::Dynamic, 4, Eigen::RowMajor> fixed_cols_row;
  Eigen::VectorXd vector;
  Eigen::RowVector3f row_vector;
  Eigen::Array22f array_fixed;
  Eigen::ArrayXXd array_dynamic;
  Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> array_row;
  rank<1> t1;
  rank<2> t2;
  rank<3> t3;
  rank<4> t4;
  rank<5> t5;
  Eigen::TensorFixedSize<float, Eigen::Sizes<2, 3>> fixed_tensor;
  Eigen::TensorFixedSize<double, Eigen::Sizes<2, 2, 2>, Eigen::RowMajor> fixed_tensor_row;
  ckpt::tensor tensor_f32;
  ckpt::tensor tensor_f64;
  ckpt::tensor tensor_i32;  // kept, not trained
  float scalar_f = 0;
  double scalar_d = 0;
  std::int32_t count32 = 0;
  std::int64_t count = 0;
  bool flag = false;
  std::mt19937_64 rng;
  std::mt19937 rng32;
  std::minstd_rand lcg;
  std::ranlux24 ranlux;
  ckpt::frozen<Eigen::Matrix<float, 3, 2>> frozen_fixed;
  ckpt::frozen<Eigen::MatrixXd> frozen_dynamic;
  ckpt::frozen<Eigen::Matrix<float, 3, Eigen::Dynamic, Eigen::RowMajor>> frozen_fixed_rows;
  ckpt::frozen<Eigen::Array<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> frozen_array;
  ckpt::frozen<Eigen::Tensor<float, 3>> frozen_tensor;
  ckpt::frozen<Eigen::Tensor<double, 5, Eigen::RowMajor>> frozen_tensor_row;
  ckpt::frozen<Eigen::TensorFixedSize<float, Eigen::Sizes<2, 2>>> frozen_fixed_tensor;
  ckpt::frozen<ckpt::tensor> frozen_ckpt_tensor;
  ckpt::frozen<double> frozen_scalar;
  ckpt::frozen<std::mt19937_64> frozen_rng;
  ckpt::frozen<Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic>> frozen_half;
  ckpt::frozen<Eigen::VectorXcf> frozen_complex;
};

constexpr std::size_t trained_leaves = 11 + 20 + 2 + 2 + 2;  // matrices, tensors, fixed tensors, ckpt::tensor, scalars

template <class T>
void shape_tensor(T& x) {
  typename T::Dimensions d;
  for (int i = 0; i < T::NumDimensions; ++i) d[i] = 2 + (i % 2);
  x.resize(d);
}

// A model of the fixed shapes with values drawn from `seed`.
every_leaf make_every_leaf(unsigned seed) {
  every_leaf m;
  m.dynamic_col.resize(4, 3);
  m.dynamic_row.resize(3, 5);
  m.fixed_rows.resize(3, 4);
  m.fixed_cols_row.resize(2, 4);
  m.vector.resize(6);
  m.array_dynamic.resize(2, 5);
  m.array_row.resize(3, 3);
  auto shape_rank = [](auto& r) {
    shape_tensor(r.f.col);
    shape_tensor(r.f.row);
    shape_tensor(r.d.col);
    shape_tensor(r.d.row);
  };
  shape_rank(m.t1);
  shape_rank(m.t2);
  shape_rank(m.t3);
  shape_rank(m.t4);
  shape_rank(m.t5);
  m.tensor_f32 = ckpt::detail::to_tensor(Eigen::VectorXf(Eigen::VectorXf::Zero(5)));
  m.tensor_f64 = ckpt::detail::to_tensor(Eigen::MatrixXd(Eigen::MatrixXd::Zero(2, 2)));
  m.tensor_i32 = ckpt::detail::to_tensor(Eigen::VectorXi(Eigen::VectorXi::Zero(3)));
  m.frozen_dynamic.value.resize(2, 3);
  m.frozen_fixed_rows.value.resize(3, 2);
  m.frozen_array.value.resize(2, 2);
  shape_tensor(m.frozen_tensor.value);
  shape_tensor(m.frozen_tensor_row.value);
  m.frozen_ckpt_tensor.value = ckpt::detail::to_tensor(Eigen::VectorXf(Eigen::VectorXf::Zero(4)));
  m.frozen_half.value.resize(2, 2);
  m.frozen_complex.value.resize(3);

  std::mt19937 values(seed);
  std::uniform_real_distribution<double> uniform(-1, 1);
  ckpt::for_each_leaf(
      [&](std::string_view, auto& leaf) {
        auto& x = [](auto& l) -> auto& {
          if constexpr (ckpt::detail::is_frozen_v<std::remove_cvref_t<decltype(l)>>) return l.value;
          else return l;
        }(leaf);
        using L = std::remove_cvref_t<decltype(x)>;
        if constexpr (std::is_same_v<L, ckpt::tensor>) {
          x = ckpt::tensor::make(x.dtype(), ckpt::dims(x.shape().begin(), x.shape().end()), [&](std::span<std::byte> out) {
            for (std::byte& b : out) b = static_cast<std::byte>(values() % 64);
          });
        } else if constexpr (ckpt::detail::is_std_engine<L>::value) {
          x.seed(values());
        } else if constexpr (ckpt::detail::flat_leaf<L>) {
          using S = typename decltype(ckpt::detail::flat_array(x))::Scalar;
          for (S& v : ckpt::detail::flat_array(x)) {
            if constexpr (std::is_arithmetic_v<S>) v = static_cast<S>(uniform(values));
            else v = S(static_cast<float>(uniform(values)));  // Eigen::half, std::complex<float>
          }
        }
      },
      m);
  return m;
}

// One step: the gradient of every trained leaf is a function of the leaf and of a number drawn
// from the model's engines; the loop updates the kept leaves itself; then Adam.
void train_every_leaf(const ckpt::adam& opt, every_leaf& m, ckpt::adam_state<every_leaf>& state) {
  const double noise = std::uniform_real_distribution<double>(-0.1, 0.1)(m.rng) + 1e-3 * static_cast<double>(m.rng32() % 7) +
                       1e-4 * static_cast<double>(m.lcg() % 5) + 1e-5 * static_cast<double>(m.ranlux() % 3) +
                       1e-6 * static_cast<double>(m.frozen_rng.value() % 11);
  every_leaf grads = m;
  ckpt::for_each_leaf(
      [&](std::string_view, auto& g, const auto& p) {
        using L = std::remove_cvref_t<decltype(p)>;
        if constexpr (std::is_same_v<L, ckpt::tensor>) {
          const auto sine = [&]<class S>(S) {
            g = ckpt::tensor::make(p.dtype(), ckpt::dims(p.shape().begin(), p.shape().end()), [&](std::span<std::byte> out) {
              using array = Eigen::Array<S, Eigen::Dynamic, 1>;
              const auto n = static_cast<Eigen::Index>(p.numel());
              Eigen::Map<array>(reinterpret_cast<S*>(out.data()), n) =
                  (Eigen::Map<const array>(p.template as<S>().data(), n) + static_cast<S>(noise)).sin();
            });
          };
          if (p.dtype() == ckpt::dtype::f32) sine(float{});
          if (p.dtype() == ckpt::dtype::f64) sine(double{});
        } else if constexpr (ckpt::detail::flat_leaf<L>) {
          using S = typename decltype(ckpt::detail::flat_array(p))::Scalar;
          if constexpr (std::is_floating_point_v<S>)
            ckpt::detail::flat_array(g) = (ckpt::detail::flat_array(p) * S(1.7) + static_cast<S>(noise)).sin();
        }
      },
      grads, std::as_const(m));
  ++m.count;
  m.count32 += 2;
  m.flag = !m.flag;
  m.frozen_dynamic.value *= 0.5;
  m.frozen_tensor.value = m.frozen_tensor.value * 0.9f + static_cast<float>(noise);
  m.frozen_scalar.value += noise;
  opt.update(m, grads, state);
}

std::string bytes_of(every_leaf& m, ckpt::adam_state<every_leaf>& state, const std::filesystem::path& path) {
  ckpt::save(path, ckpt::training_state(m, state));
  return ckpt_test::read_bytes(path);
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_leaf_type_trains_and_resumes_bit_exactly) {
  const ckpt_test::temp_dir dir;
  const ckpt::adam opt{.lr = 0.05, .weight_decay = 0.01};
  constexpr int total = 6, half = 3;

  every_leaf straight = make_every_leaf(1);
  const every_leaf initial = straight;
  ckpt::adam_state<every_leaf> straight_state = opt.init(straight);
  // Moments for the trained leaves only.
  const std::vector<std::string> moments = ckpt::leaf_names(straight_state.mu);
  BOOST_TEST(moments.size() == trained_leaves);
  for (const std::string& name : moments)
    BOOST_TEST((!name.starts_with("frozen_") && !name.starts_with("count") && !name.starts_with("rng") &&
                name != "tensor_i32" && name != "flag" && name != "lcg" && name != "ranlux"),
               name);
  for (int i = 0; i < total; ++i) train_every_leaf(opt, straight, straight_state);
  // Every trained leaf moved; the frozen ones the loop does not touch did not.
  const ckpt::checkpoint before = ckpt::of_params(initial), after = ckpt::of_params(straight);
  for (const std::string& name : moments) BOOST_TEST(!(before.get(name) == after.get(name)), name);
  for (const char* kept : {"frozen_fixed", "frozen_half", "frozen_complex", "frozen_ckpt_tensor", "frozen_fixed_tensor",
                           "frozen_tensor_row", "tensor_i32"})
    BOOST_TEST((before.get(kept) == after.get(kept)), kept);
  const std::string expected = bytes_of(straight, straight_state, dir.path() / "straight.safetensors");

  every_leaf first = make_every_leaf(1);
  ckpt::adam_state<every_leaf> first_state = opt.init(first);
  for (int i = 0; i < half; ++i) train_every_leaf(opt, first, first_state);
  ckpt::save(dir.path() / "half.safetensors", ckpt::training_state(first, first_state));

  every_leaf resumed = make_every_leaf(2);  // other values and seeds: the template's shapes only
  ckpt::adam_state<every_leaf> resumed_state;
  BOOST_TEST(ckpt::read_params(ckpt::load(dir.path() / "half.safetensors"), ckpt::training_state(resumed, resumed_state))
                 .exact());
  BOOST_TEST(resumed_state.step == half);
  while (resumed_state.step < total) train_every_leaf(opt, resumed, resumed_state);
  BOOST_TEST((bytes_of(resumed, resumed_state, dir.path() / "resumed.safetensors") == expected));

}

// `read_params` of `training_state` is strict by default: every entry under model, optim.mu,
// optim.nu and optim.step is read, and whatever is missing or left over, in all four sections, is
// listed in one error before anything changes.
namespace {

struct linear_x {
  Eigen::MatrixXd w;
  Eigen::VectorXd b;
  Eigen::VectorXd x;
};

struct linear_y {
  Eigen::MatrixXd w;
  Eigen::VectorXd b;
  Eigen::VectorXd y;
};

// A trained state of `p`, as a checkpoint.
template <class P>
ckpt::checkpoint trained_state(P p) {
  const ckpt::adam opt{.lr = 0.1};
  auto st = opt.init(p);
  opt.update(p, p, st);
  opt.update(p, p, st);
  return training_checkpoint(p, st);
}

}  // namespace

BOOST_AUTO_TEST_CASE(strict_restore_refuses_the_entries_of_a_removed_field) {
  const linear_x saved{Eigen::MatrixXd::Constant(2, 2, 0.5), Eigen::VectorXd::Constant(2, 0.25), Eigen::VectorXd::Ones(3)};
  const ckpt::checkpoint t = trained_state(saved);
  linear p{Eigen::MatrixXd::Zero(2, 2), Eigen::VectorXd::Zero(2)};
  ckpt::adam_state<linear> st = ckpt::adam{}.init(p);
  st.step = 5;
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, ckpt::training_state(p, st)); }) ==
             "ckpt: read_params: strict read: 3 entries not in the template: 'model.x', 'optim.mu.x', "
             "'optim.nu.x' (strict = false ignores them)");
  // Nothing changed.
  BOOST_TEST(p.w.isZero());
  BOOST_TEST(p.b.isZero());
  BOOST_TEST(st.step == 5);
  BOOST_TEST(st.mu.values.w.isZero());
  // Relaxed, the entries the model does not name are ignored, and the report lists them.
  const ckpt::read_report report = ckpt::read_params(t, ckpt::training_state(p, st), {.strict = false});
  BOOST_TEST((report.ignored == std::vector<std::string>{"model.x", "optim.mu.x", "optim.nu.x"}));
  BOOST_TEST(st.step == 2);
  BOOST_TEST((ckpt::detail::to_tensor(p.w) == t.get("model.w")));
  BOOST_TEST((ckpt::detail::to_tensor(st.mu.values.b) == t.get("optim.mu.b")));
  BOOST_TEST((ckpt::detail::to_tensor(st.nu.values.w) == t.get("optim.nu.w")));
}

BOOST_AUTO_TEST_CASE(strict_restore_lists_missing_and_left_over_entries_of_all_sections_at_once) {
  // The entries of a new field are missing; a removed field's are left over; the step is gone.
  // Entries outside the four sections (another section, another optim.* entry) are not its business.
  const linear_x saved{Eigen::MatrixXd::Ones(2, 2), Eigen::VectorXd::Ones(2), Eigen::VectorXd::Ones(3)};
  std::vector<ckpt::checkpoint::entry> entries;
  for (const auto& entry : trained_state(saved))
    if (entry.first != "optim.step") entries.push_back(entry);
  const ckpt::checkpoint t = ckpt::concat({ckpt::checkpoint(std::move(entries)), ckpt::of_int("data.position", 3),
                                           ckpt::of_int("optim.lr_schedule", 1)});
  linear_y p{Eigen::MatrixXd::Zero(2, 2), Eigen::VectorXd::Zero(2), Eigen::VectorXd::Zero(3)};
  ckpt::adam_state<linear_y> st = ckpt::adam{}.init(p);
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, ckpt::training_state(p, st)); }) ==
             "ckpt: read_params: strict read: 4 entries missing: 'model.y', 'optim.mu.y', 'optim.nu.y', "
             "'optim.step' (keep_missing = true keeps the template's values); 3 entries not in the template: "
             "'model.x', 'optim.mu.x', 'optim.nu.x' (strict = false ignores them)");
  BOOST_TEST(p.w.isZero());
  // Relaxed, a missing entry is still an error (the first one, in the order of the names).
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::read_params(t, ckpt::training_state(p, st), {.strict = false});
             }) == "ckpt: read_params: no entry named 'model.y'");
  // Missing entries alone, and a checkpoint with none of the sections.
  linear_x q{Eigen::MatrixXd::Zero(2, 2), Eigen::VectorXd::Zero(2), Eigen::VectorXd::Zero(3)};
  ckpt::adam_state<linear_x> qs;
  const linear small{Eigen::MatrixXd::Ones(2, 2), Eigen::VectorXd::Ones(2)};
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::read_params(trained_state(small), ckpt::training_state(q, qs));
             }) == "ckpt: read_params: strict read: 3 entries missing: 'model.x', 'optim.mu.x', 'optim.nu.x' "
                   "(keep_missing = true keeps the template's values)");
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::read_params(ckpt::of_params(small, "params"), ckpt::training_state(q, qs));
             }) == "ckpt: read_params: strict read: 10 entries missing: 'model.b', 'model.w', 'model.x', "
                   "'optim.mu.b', 'optim.mu.w', 'optim.mu.x', 'optim.nu.b', 'optim.nu.w', 'optim.nu.x', "
                   "'optim.step' (keep_missing = true keeps the template's values) (nothing in the checkpoint is "
                   "under 'model', 'optim.mu', 'optim.nu', 'optim.step'; its prefixes are 'params')");
  BOOST_TEST(q.x.isZero());
  BOOST_TEST(qs.step == 0);
}

// A leaf that was trained when the state was saved and is frozen now: its moments are left over.
BOOST_AUTO_TEST_CASE(strict_restore_refuses_moments_of_a_leaf_now_frozen) {
  struct trained {
    Eigen::MatrixXf embedding, w;
  };
  struct frozen_now {
    ckpt::frozen<Eigen::MatrixXf> embedding;
    Eigen::MatrixXf w;
  };
  const ckpt::checkpoint t = trained_state(trained{Eigen::MatrixXf::Ones(2, 2), Eigen::MatrixXf::Ones(1, 2)});
  frozen_now p{{Eigen::MatrixXf::Zero(2, 2)}, Eigen::MatrixXf::Zero(1, 2)};
  ckpt::adam_state<frozen_now> st;
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, ckpt::training_state(p, st)); }) ==
             "ckpt: read_params: strict read: 2 entries not in the template: 'optim.mu.embedding', "
             "'optim.nu.embedding' (strict = false ignores them)");
  const ckpt::read_report report = ckpt::read_params(t, ckpt::training_state(p, st), {.strict = false});
  BOOST_TEST((report.ignored == std::vector<std::string>{"optim.mu.embedding", "optim.nu.embedding"}));
  BOOST_TEST((ckpt::detail::to_tensor(p.embedding.value) == t.get("model.embedding")));
}

// The read takes the options of every read (ckpt::extract_options), strict by default: `cast`
// converts another dtype, `function` names the caller, and `prefix` is refused (the sections
// carry their own).
BOOST_AUTO_TEST_CASE(restore_takes_the_options_of_to_params) {
  struct single {
    Eigen::MatrixXf w;
    Eigen::VectorXf b;
  };
  const ckpt::checkpoint t = trained_state(linear{Eigen::MatrixXd::Constant(2, 2, 0.5), Eigen::VectorXd::Ones(2)});
  single p{Eigen::MatrixXf::Zero(2, 2), Eigen::VectorXf::Zero(2)};
  ckpt::adam_state<single> st;
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::read_params(t, ckpt::training_state(p, st)); }) ==
             "ckpt: read_params: entry 'model.w' has dtype F64 but the template's leaf has dtype F32 "
             "(pass cast = true to convert)");
  // Cast, and still strict without saying so: an entry nothing reads is refused.
  const ckpt::checkpoint extra = ckpt::concat({t, ckpt::of_int("model.x", 1)});
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::read_params(extra, ckpt::training_state(p, st), {.cast = true});
             }) == "ckpt: read_params: strict read: 1 entry not in the template: 'model.x' "
                   "(strict = false ignores them)");
  // Relaxed: model.x ignored.
  const ckpt::read_report report = ckpt::read_params(extra, ckpt::training_state(p, st), {.cast = true, .strict = false});
  BOOST_TEST(report.cast.size() == 6u);  // the parameters and both moments, F64 -> F32
  BOOST_TEST((report.ignored == std::vector<std::string>{"model.x"}));
  BOOST_TEST(st.step == 2);
  BOOST_TEST((ckpt::detail::to_tensor(p.w) == ckpt::cast(t.get("model.w"), ckpt::dtype::f32)));
  BOOST_TEST((ckpt::detail::to_tensor(st.nu.values.b) == ckpt::cast(t.get("optim.nu.b"), ckpt::dtype::f32)));
  // The caller's name in the messages (a detail parameter: no option of the public struct).
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::detail::read_sections(ckpt::of_int("optim.step", 1), ckpt::training_state(p, st),
                                                 {.strict = true}, "resume");
             }).starts_with("ckpt: resume: strict read: "));
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::read_params(t, ckpt::training_state(p, st), {.prefix = "run"});
             }) == "ckpt: read_params: extract_options::prefix ('run') is for a single structure; sections carry "
                   "their own");
  BOOST_TEST(st.step == 2);
}

// The update on several threads (adam::threads) cuts large leaves in ranges and updates them on
// the process's pool; each element must come out bit-identical to the update on one thread
// (Eigen's vectorized square root differs from the scalar one in the last bits: a range that put
// an element on the other path would show), for row- and column-major leaves of several sizes,
// above and below the size where a leaf is cut, and below the size where threads are used at all.
namespace {

struct wide_model {
  Eigen::MatrixXf big;  // column-major, 3.1 MB: cut in ranges
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows;  // 2.1 MB, odd sides
  Eigen::VectorXd doubles;  // 2.4 MB
  Eigen::Tensor<float, 3> cube;  // column-major rank 3, 0.4 MB: one range
  Eigen::MatrixXf small;  // below the cut
  Eigen::Matrix3f fixed;
  Eigen::VectorXf odd;
  float scalar = 0;
  double scalar_d = 0;
  ckpt::frozen<Eigen::VectorXf> kept;
  std::int64_t count = 0;
};

// Values of every magnitude, signs mixed, from `seed`.
template <class M>
void fill_random(M& x, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-20, 4);
  using scalar = std::remove_cvref_t<decltype(*x.data())>;
  for (Eigen::Index i = 0; i < x.size(); ++i)
    x.data()[i] = static_cast<scalar>(std::ldexp(mantissa(gen), exponent(gen)));
}

// Each side divided by `shrink`.
wide_model make_wide(std::uint32_t seed, Eigen::Index shrink) {
  wide_model m;
  m.big.resize(701 / shrink, 1103 / shrink);
  m.rows.resize(513 / shrink, 1031 / shrink);
  m.doubles.resize(300007 / shrink / shrink);
  m.cube.resize(37, 51, 53 / shrink);
  m.small.resize(31, 17);
  m.odd.resize(7);
  m.kept.value.resize(5);
  fill_random(m.big, seed);
  fill_random(m.rows, seed + 1);
  fill_random(m.doubles, seed + 2);
  fill_random(m.cube, seed + 3);
  fill_random(m.small, seed + 4);
  fill_random(m.fixed, seed + 5);
  fill_random(m.odd, seed + 6);
  fill_random(m.kept.value, seed + 7);
  m.scalar = 0.25f + static_cast<float>(seed);
  m.scalar_d = -0.5 - seed;
  return m;
}

// Every leaf of both, byte for byte.
bool same_bytes(const wide_model& a, const wide_model& b) {
  bool same = true;
  ckpt::for_each_leaf(
      [&same](std::string_view, const auto& x, const auto& y) {
        const ckpt::tensor tx = ckpt::detail::to_tensor(x), ty = ckpt::detail::to_tensor(y);
        same = same && std::ranges::equal(tx.bytes(), ty.bytes());
      },
      a, b);
  return same;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_update_on_several_threads_is_bit_identical_to_one_on_one_thread) {
  for (const Eigen::Index shrink : {1, 4}) {  // 8 MB of parameters: threads; 0.6 MB: one thread
    const wide_model start = make_wide(1, shrink);
    // A fixed-size leaf is updated in place, and which of its elements Eigen takes through vectors
    // depends on its address: the three copies sit equally aligned, as one model updated either
    // way would (clang places them differently on the stack otherwise).
    alignas(64) wide_model one = start;
    alignas(64) wide_model several = start;
    alignas(64) wide_model by_default = start;
    const ckpt::adam single{.lr = 1e-2, .weight_decay = 0.1, .threads = 1};
    ckpt::adam threaded = single;
    threaded.threads = 4;
    ckpt::adam defaults = single;
    defaults.threads = 0;
    ckpt::adam_state<wide_model> s1 = single.init(one), s2 = threaded.init(several), s3 = defaults.init(by_default);
    for (std::uint32_t step = 0; step < 3; ++step) {
      const wide_model grads = make_wide(10 + step, shrink);
      single.update(one, grads, s1);
      threaded.update(several, grads, s2);
      defaults.update(by_default, grads, s3);
    }
    BOOST_TEST(!same_bytes(one, start));
    BOOST_TEST(same_bytes(one, several), "shrink " << shrink);
    BOOST_TEST(same_bytes(one, by_default), "shrink " << shrink);
    BOOST_TEST(same_bytes(s1.mu.values, s2.mu.values));
    BOOST_TEST(same_bytes(s1.nu.values, s2.nu.values));
    BOOST_TEST(same_bytes(s1.nu.values, s3.nu.values));
    BOOST_TEST(s2.step == 3);
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_adam
