// Named structures into checkpoints and back: the seed's stories, every leaf kind, both storage
// orders byte by byte, the customization point, ptree paths and every extraction error.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/ckpt.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using ckpt_test::message_of;

// Whether options of type O name the function of a read's messages (extract_options does not).
template <class O>
concept has_function_member = requires(O o) { o.function; };

template <class T>
std::vector<T> elements(const ckpt::tensor& x) {
  const auto span = x.as<T>();
  return {span.begin(), span.end()};
}

std::vector<std::int64_t> shape_of(const ckpt::tensor& x) { return {x.shape().begin(), x.shape().end()}; }

struct linear {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};

struct mlp {
  linear l1;
  linear l2;
};

mlp make_mlp(float seed) {
  mlp m{{Eigen::MatrixXf(3, 2), Eigen::VectorXf(3)}, {Eigen::MatrixXf(1, 3), Eigen::VectorXf(1)}};
  float v = seed;
  for (Eigen::MatrixXf* w : {&m.l1.w, &m.l2.w})
    for (Eigen::Index i = 0; i < w->size(); ++i) w->data()[i] = v++;
  for (Eigen::VectorXf* b : {&m.l1.b, &m.l2.b})
    for (Eigen::Index i = 0; i < b->size(); ++i) (*b)[i] = v++;
  return m;
}

struct mixed {
  Eigen::MatrixXd weights;
  Eigen::Matrix<Eigen::half, 2, 2> half_block;
  Eigen::Array<Eigen::bfloat16, Eigen::Dynamic, 1> bf;
  Eigen::Matrix<std::int64_t, 1, 3> ids;
  Eigen::Array<std::uint8_t, 2, 3, Eigen::RowMajor> bytes;
  Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic> mask;
  Eigen::VectorX<std::complex<float>> spectrum;
  Eigen::Tensor<float, 3> volume;
  Eigen::Tensor<std::int16_t, 3, Eigen::RowMajor> counts;
  Eigen::TensorFixedSize<double, Eigen::Sizes<2, 3>> fixed;
  Eigen::Tensor<std::uint32_t, 0> rank0;
  float lr;
  std::int32_t epoch;
  bool frozen;
  std::uint16_t u16;
  std::int8_t i8;
  std::uint64_t u64;
};

mixed make_mixed() {
  mixed m;
  m.weights = Eigen::MatrixXd::Random(3, 4);
  m.half_block << Eigen::half(1.5f), Eigen::half(-2.0f), Eigen::half(0.25f), Eigen::half(3.0f);
  m.bf = Eigen::Array<Eigen::bfloat16, Eigen::Dynamic, 1>::Constant(5, Eigen::bfloat16(0.5f));
  m.ids << 1, -2, std::int64_t{1} << 40;
  m.bytes << 1, 2, 3, 4, 5, 255;
  m.mask = Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic>::Zero(2, 3);
  m.mask(1, 2) = true;
  m.spectrum = Eigen::VectorX<std::complex<float>>::Constant(2, {1.0f, -1.0f});
  m.volume = Eigen::Tensor<float, 3>(2, 3, 4);
  m.volume.setRandom();
  m.counts = Eigen::Tensor<std::int16_t, 3, Eigen::RowMajor>(1, 2, 3);
  m.counts.setConstant(-7);
  m.fixed.setConstant(2.5);
  m.rank0() = 42u;
  m.lr = 0.001f;
  m.epoch = 7;
  m.frozen = true;
  m.u16 = 65535;
  m.i8 = -128;
  m.u64 = ~std::uint64_t{0};
  return m;
}

template <class T>
bool same_tensor(const T& a, const T& b) {
  for (std::size_t i = 0; i < std::size_t{T::NumIndices}; ++i)
    if (a.dimension(i) != b.dimension(i)) return false;
  return std::memcmp(a.data(), b.data(), sizeof(typename T::Scalar) * static_cast<std::size_t>(a.size())) == 0;
}

bool same_mixed(const mixed& a, const mixed& b) {
  return a.weights == b.weights && a.half_block == b.half_block && (a.bf == b.bf).all() &&
         a.ids == b.ids && (a.bytes == b.bytes).all() && a.mask == b.mask &&
         a.spectrum == b.spectrum && same_tensor(a.volume, b.volume) &&
         same_tensor(a.counts, b.counts) && same_tensor(a.fixed, b.fixed) &&
         a.rank0() == b.rank0() && a.lr == b.lr && a.epoch == b.epoch && a.frozen == b.frozen &&
         a.u16 == b.u16 && a.i8 == b.i8 && a.u64 == b.u64;
}

}  // namespace

// The file's types are at global scope, for the leaf_traits and fields specialized among them;
// its test cases are in the suite test_params, opened again after each specialization (this
// file is compiled on its own, not in a unity batch: tests/CMakeLists.txt).
BOOST_AUTO_TEST_SUITE(test_params)

BOOST_AUTO_TEST_CASE(names_come_from_field_identifiers) {
  const auto t = ckpt::of_params(make_mlp(0));
  BOOST_TEST(t.names() == (std::vector<std::string>{"l1.b", "l1.w", "l2.b", "l2.w"}));
  BOOST_TEST(ckpt::leaf_names(make_mlp(0)) == (std::vector<std::string>{"l1.w", "l1.b", "l2.w", "l2.b"}));
}

BOOST_AUTO_TEST_CASE(prefix_joins_with_a_dot) {
  const auto t = ckpt::of_params(make_mlp(0), "model");
  BOOST_TEST(t.names() == (std::vector<std::string>{"model.l1.b", "model.l1.w", "model.l2.b", "model.l2.w"}));
}

BOOST_AUTO_TEST_CASE(mixed_dtype_struct_round_trips_through_a_file) {
  const mixed original = make_mixed();
  const ckpt_test::temp_dir tmp;
  const auto path = tmp.path() / "mixed.safetensors";
  ckpt::save(path, ckpt::of_params(original, "m"));
  const ckpt::checkpoint loaded = ckpt::load(path);
  std::filesystem::remove(path);

  BOOST_TEST(loaded.get("m.weights").dtype() == ckpt::dtype::f64);
  BOOST_TEST(loaded.get("m.half_block").dtype() == ckpt::dtype::f16);
  BOOST_TEST(loaded.get("m.bf").dtype() == ckpt::dtype::bf16);
  BOOST_TEST(loaded.get("m.ids").dtype() == ckpt::dtype::i64);
  BOOST_TEST(loaded.get("m.bytes").dtype() == ckpt::dtype::u8);
  BOOST_TEST(loaded.get("m.mask").dtype() == ckpt::dtype::boolean);
  BOOST_TEST(loaded.get("m.spectrum").dtype() == ckpt::dtype::c64);
  BOOST_TEST(loaded.get("m.volume").dtype() == ckpt::dtype::f32);
  BOOST_TEST(loaded.get("m.counts").dtype() == ckpt::dtype::i16);
  BOOST_TEST(loaded.get("m.rank0").dtype() == ckpt::dtype::u32);
  BOOST_TEST(loaded.get("m.epoch").dtype() == ckpt::dtype::i32);
  BOOST_TEST(loaded.get("m.frozen").dtype() == ckpt::dtype::boolean);
  BOOST_TEST(loaded.get("m.u16").dtype() == ckpt::dtype::u16);
  BOOST_TEST(loaded.get("m.i8").dtype() == ckpt::dtype::i8);
  BOOST_TEST(loaded.get("m.u64").dtype() == ckpt::dtype::u64);

  BOOST_TEST(shape_of(loaded.get("m.weights")) == (std::vector<std::int64_t>{3, 4}));
  BOOST_TEST(shape_of(loaded.get("m.bf")) == (std::vector<std::int64_t>{5}));
  BOOST_TEST(shape_of(loaded.get("m.ids")) == (std::vector<std::int64_t>{3}));
  BOOST_TEST(shape_of(loaded.get("m.volume")) == (std::vector<std::int64_t>{2, 3, 4}));
  BOOST_TEST(shape_of(loaded.get("m.fixed")) == (std::vector<std::int64_t>{2, 3}));
  BOOST_TEST(shape_of(loaded.get("m.rank0")).empty());
  BOOST_TEST(shape_of(loaded.get("m.lr")).empty());

  mixed like = make_mixed();
  like.weights.setZero();
  like.volume.setZero();
  like.lr = 0;
  const mixed restored = ckpt::to_params(loaded, like, {.prefix = "m"});
  BOOST_TEST(same_mixed(restored, original));
}

BOOST_AUTO_TEST_CASE(column_major_matrices_are_written_in_c_order) {
  Eigen::MatrixXf m(2, 3);
  m << 1, 2, 3, 4, 5, 6;
  const Eigen::Matrix<float, 2, 3, Eigen::RowMajor> r = m;
  const std::vector<float> c_order{1, 2, 3, 4, 5, 6};
  BOOST_TEST(elements<float>(ckpt::of_params(m, "w").get("w")) == c_order);
  BOOST_TEST(elements<float>(ckpt::of_params(r, "w").get("w")) == c_order);
  BOOST_TEST(shape_of(ckpt::of_params(m, "w").get("w")) == (std::vector<std::int64_t>{2, 3}));

  // And read back into either order.
  const auto t = ckpt::of_params(m, "w");
  BOOST_TEST((ckpt::to_params(t, Eigen::MatrixXf::Zero(2, 3).eval(), {.prefix = "w"}) == m));
  BOOST_TEST((ckpt::to_params(t, Eigen::Matrix<float, 2, 3, Eigen::RowMajor>::Zero().eval(), {.prefix = "w"}) == r));
  const Eigen::Array<float, 2, 3> fixed = ckpt::to_params(t, Eigen::Array<float, 2, 3>::Zero().eval(), {.prefix = "w"});
  BOOST_TEST((fixed.matrix() == m));
}

BOOST_AUTO_TEST_CASE(vector_shapes_follow_compile_time_extents) {
  BOOST_TEST(ckpt::detail::leaf_shape(Eigen::VectorXf(4)) == ckpt::dims{4});
  BOOST_TEST(ckpt::detail::leaf_shape(Eigen::RowVectorXf(4)) == ckpt::dims{4});
  BOOST_TEST(ckpt::detail::leaf_shape(Eigen::Matrix<float, 3, 1>::Zero().eval()) == ckpt::dims{3});
  BOOST_TEST(ckpt::detail::leaf_shape(Eigen::MatrixXf(4, 1)) == (ckpt::dims{4, 1}));
  BOOST_TEST(ckpt::detail::leaf_shape(Eigen::MatrixXf(1, 4)) == (ckpt::dims{1, 4}));
  BOOST_TEST(ckpt::detail::leaf_shape(Eigen::ArrayXXd(0, 3)) == (ckpt::dims{0, 3}));
  BOOST_TEST(ckpt::detail::leaf_shape(2.0f) == ckpt::dims{});
}

BOOST_AUTO_TEST_CASE(column_major_tensors_are_written_in_c_order) {
  Eigen::Tensor<int, 3> col(2, 3, 4);
  Eigen::Tensor<int, 3, Eigen::RowMajor> row(2, 3, 4);
  std::vector<int> c_order;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) {
        const int v = 100 * i + 10 * j + k;
        col(i, j, k) = v;
        row(i, j, k) = v;
        c_order.push_back(v);
      }
  BOOST_TEST(elements<int>(ckpt::of_params(col, "t").get("t")) == c_order);
  BOOST_TEST(elements<int>(ckpt::of_params(row, "t").get("t")) == c_order);

  const auto t = ckpt::of_params(row, "t");
  Eigen::Tensor<int, 3> col_back = ckpt::to_params(t, Eigen::Tensor<int, 3>(2, 3, 4).setZero(), {.prefix = "t"});
  BOOST_TEST(same_tensor(col_back, col));
  Eigen::TensorFixedSize<int, Eigen::Sizes<2, 3, 4>> fixed_back =
      ckpt::to_params(t, Eigen::TensorFixedSize<int, Eigen::Sizes<2, 3, 4>>().setZero(), {.prefix = "t"});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) BOOST_TEST(fixed_back(i, j, k) == col(i, j, k));
}

BOOST_AUTO_TEST_CASE(bools_read_any_nonzero_byte_as_true) {
  const std::array<std::uint8_t, 4> raw{0, 1, 2, 255};
  const auto t = ckpt::of_tensor("m", ckpt::tensor::copy_of(ckpt::dtype::boolean, {2, 2}, std::as_bytes(std::span(raw))));
  const Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic> col =
      ckpt::to_params(t, Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic>(Eigen::Matrix<bool, Eigen::Dynamic, Eigen::Dynamic>::Zero(2, 2)), {.prefix = "m"});
  BOOST_TEST(!col(0, 0));
  BOOST_TEST(col(0, 1));
  BOOST_TEST(col(1, 0));
  BOOST_TEST(col(1, 1));
}

BOOST_AUTO_TEST_CASE(containers_are_named_by_position_and_key) {
  struct block {
    Eigen::VectorXf b;
  };
  struct net {
    std::vector<block> layers;
    std::array<float, 2> scales;
    std::map<std::string, Eigen::VectorXf> heads;
  };
  const net n{{{Eigen::VectorXf::Ones(2)}, {Eigen::VectorXf::Zero(2)}},
              {1.0f, 2.0f},
              {{"cls", Eigen::VectorXf::Ones(1)}, {"box", Eigen::VectorXf::Ones(4)}}};
  BOOST_TEST(ckpt::of_params(n).names() ==
             (std::vector<std::string>{"heads.box", "heads.cls", "layers.0.b", "layers.1.b", "scales.0", "scales.1"}));
  const net back = ckpt::to_params(ckpt::of_params(n), n);
  BOOST_TEST((back.layers[0].b == n.layers[0].b));
  BOOST_TEST(back.scales[1] == 2.0f);
  BOOST_TEST((back.heads.at("box") == n.heads.at("box")));
}

BOOST_AUTO_TEST_CASE(ptree_leaves_are_named_by_path_as_in_the_seed) {
  const ckpt::ptree tree = ckpt::ptree::dict({
      {"layers", ckpt::ptree::list({ckpt::ptree::tensor(Eigen::MatrixXf::Ones(2, 2).eval()),
                                    ckpt::ptree::tensor(Eigen::MatrixXf::Zero(2, 2).eval())})},
      {"head", ckpt::ptree::tensor(Eigen::VectorXf::Ones(2).eval())},
  });
  BOOST_TEST(ckpt::leaf_names(tree) == (std::vector<std::string>{"layers.0", "layers.1", "head"}));
  BOOST_TEST(ckpt::of_params(tree).names() == (std::vector<std::string>{"head", "layers.0", "layers.1"}));

  // The seed's example: dict {layers: [ {w}, {w} ], head}.
  const ckpt::ptree seed = ckpt::ptree::dict({
      {"layers", ckpt::ptree::list({ckpt::ptree::dict({{"w", ckpt::ptree::tensor(1.0f)}}),
                                    ckpt::ptree::dict({{"w", ckpt::ptree::tensor(2.0f)}})})},
      {"head", ckpt::ptree::tensor(3.0f)},
  });
  BOOST_TEST(ckpt::of_params(seed).names() == (std::vector<std::string>{"head", "layers.0.w", "layers.1.w"}));
}

BOOST_AUTO_TEST_CASE(to_params_with_a_ptree_gives_the_files_values) {
  const ckpt::ptree like = ckpt::ptree::dict({{"a", ckpt::ptree::tensor(0.0f)},
                                              {"b", ckpt::ptree::list({ckpt::ptree::tensor(Eigen::Vector2d(0, 0))})}});
  const auto t = ckpt::concat({ckpt::of_params(5.0f, "p.a"), ckpt::of_params(Eigen::Vector2d(1, 2), "p.b.0"),
                               ckpt::of_params(1.0f, "unrelated")});
  const ckpt::ptree got = ckpt::to_params(t, like, {.prefix = "p"});
  BOOST_TEST(got.at("a").as_tensor().as<float>()[0] == 5.0f);
  BOOST_TEST(elements<double>(got.at("b").at(0).as_tensor()) == (std::vector<double>{1, 2}));
  // A ptree leaf shares the entry's bytes rather than copying them.
  BOOST_TEST(got.at("a").as_tensor().bytes().data() == t.get("p.a").bytes().data());
  BOOST_TEST(message_of<std::invalid_argument>([] { (void)ckpt::ptree::dict({{"k", {}}, {"k", {}}}); }) ==
             "ckpt: ptree::dict: duplicate key 'k'");
}

BOOST_AUTO_TEST_CASE(bare_root_leaf_is_named_by_the_prefix) {
  const auto t = ckpt::of_params(Eigen::Vector3f(1, 2, 3), "bias");
  BOOST_TEST(t.names() == std::vector<std::string>{"bias"});
  BOOST_TEST(message_of<std::invalid_argument>([] { (void)ckpt::of_params(Eigen::Vector3f(1, 2, 3)); }) ==
             "ckpt: of_params: a leaf has an empty name (a bare leaf needs a prefix)");
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(t, Eigen::Vector3f::Zero().eval()); }) ==
             "ckpt: to_params: a leaf has an empty name (a bare leaf needs a prefix)");
  BOOST_TEST((ckpt::to_params(t, Eigen::Vector3f::Zero().eval(), {.prefix = "bias"}) == Eigen::Vector3f(1, 2, 3)));
}

BOOST_AUTO_TEST_CASE(pretrained_bare_tensors_load_into_a_struct) {
  // Tensors saved one by one under the names a struct will have, as another tool would.
  Eigen::MatrixXf w(3, 2);
  w << 1, 2, 3, 4, 5, 6;
  const auto t = ckpt::concat({ckpt::of_params(w, "l1.w"), ckpt::of_params(Eigen::VectorXf::Ones(3).eval(), "l1.b"),
                               ckpt::of_params(Eigen::MatrixXf::Zero(1, 3).eval(), "l2.w"),
                               ckpt::of_params(Eigen::VectorXf::Constant(1, 9).eval(), "l2.b")});
  const mlp m = ckpt::to_params(t, make_mlp(100));
  BOOST_TEST((m.l1.w == w));
  BOOST_TEST(m.l2.b(0) == 9.0f);
}

BOOST_AUTO_TEST_CASE(sections_load_independently_and_extra_entries_are_ignored) {
  const mlp model = make_mlp(1);
  const linear head{Eigen::MatrixXf::Constant(2, 2, 7), Eigen::VectorXf::Constant(2, 8)};
  const auto t = ckpt::concat({ckpt::of_params(model, "model"), ckpt::of_params(head, "head"), ckpt::of_int("step", 3)});
  const linear head_back = ckpt::to_params(t, linear{Eigen::MatrixXf::Zero(2, 2), Eigen::VectorXf::Zero(2)}, {.prefix = "head"});
  BOOST_TEST((head_back.w == head.w));
  const linear l1 = ckpt::to_params(t, make_mlp(0).l1, {.prefix = "model.l1"});
  BOOST_TEST((l1.w == model.l1.w));
  BOOST_TEST(ckpt::to_int("step", t) == 3);
}

BOOST_AUTO_TEST_CASE(extraction_errors_name_the_entry_and_both_sides) {
  const auto t = ckpt::of_params(make_mlp(0), "model");
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(t, make_mlp(0), {.prefix = "other"}); }) ==
             "ckpt: to_params: no entry named 'other.l1.w' (nothing in the checkpoint is under 'other'; its "
             "prefixes are 'model')");
  mlp wrong_shape = make_mlp(0);
  wrong_shape.l2.w.resize(3, 1);
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(t, wrong_shape, {.prefix = "model"}); }) ==
             "ckpt: to_params: entry 'model.l2.w' has shape [1, 3] but the template's leaf has shape [3, 1]");
  struct linear_d {
    Eigen::MatrixXd w;
    Eigen::VectorXf b;
  };
  const linear_d like{Eigen::MatrixXd::Zero(3, 2), Eigen::VectorXf::Zero(3)};
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(t, like, {.prefix = "model.l1"}); }) ==
             "ckpt: to_params: entry 'model.l1.w' has dtype F32 but the template's leaf has dtype F64 "
             "(pass cast = true to convert)");
  const linear_d cast = ckpt::to_params(t, like, {.prefix = "model.l1", .cast = true});
  BOOST_TEST((cast.w == make_mlp(0).l1.w.cast<double>()));
}

BOOST_AUTO_TEST_CASE(cast_converts_integers_and_halves) {
  const Eigen::Vector3f values(1.5f, -2.75f, 65504.0f);
  const auto t = ckpt::of_params(values, "v");
  const auto as_int = ckpt::to_params(t, Eigen::Vector3i::Zero().eval(), {.prefix = "v", .cast = true});
  BOOST_TEST((as_int == Eigen::Vector3i(1, -2, 65504)));
  const auto as_half = ckpt::to_params(t, Eigen::Matrix<Eigen::half, 3, 1>::Zero().eval(), {.prefix = "v", .cast = true});
  BOOST_TEST(static_cast<float>(as_half(1)) == -2.75f);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {
// A class with private members and a constructor: not an aggregate, named through ckpt::fields.
class dense_layer {
 public:
  dense_layer() = default;
  explicit dense_layer(int n) : weight_(Eigen::MatrixXf::Constant(n, n, 1.0f)), bias_(Eigen::VectorXf::Zero(n)) {}
  [[nodiscard]] const Eigen::MatrixXf& weight() const { return weight_; }

 private:
  friend struct ckpt::fields<dense_layer>;
  Eigen::MatrixXf weight_;
  Eigen::VectorXf bias_;
};

// An aggregate whose field was renamed after checkpoints were written with the old name.
struct renamed {
  Eigen::VectorXf new_name;
  float scale;
};
}  // namespace

template <>
struct ckpt::fields<dense_layer> {
  static constexpr std::array names{"w", "b"};
  static auto tie(auto& self) { return std::tie(self.weight_, self.bias_); }
};

template <>
struct ckpt::fields<renamed> {
  static constexpr std::array names{"old_name", "scale"};
  static auto tie(auto& self) { return std::tie(self.new_name, self.scale); }
};

BOOST_AUTO_TEST_SUITE(test_params)

BOOST_AUTO_TEST_CASE(customization_point_names_non_aggregates) {
  struct model {
    dense_layer first;
    std::vector<dense_layer> rest;
  };
  const model m{dense_layer(2), {dense_layer(3)}};
  BOOST_TEST(ckpt::of_params(m).names() == (std::vector<std::string>{"first.b", "first.w", "rest.0.b", "rest.0.w"}));
  model like{dense_layer(2), {dense_layer(3)}};
  const auto t = ckpt::of_params(model{dense_layer(2), {dense_layer(3)}});
  BOOST_TEST((ckpt::to_params(t, like).rest[0].weight() == Eigen::MatrixXf::Constant(3, 3, 1.0f)));
}

BOOST_AUTO_TEST_CASE(customization_point_renames_aggregate_fields) {
  const renamed r{Eigen::VectorXf::Ones(2), 0.5f};
  BOOST_TEST(ckpt::of_params(r).names() == (std::vector<std::string>{"old_name", "scale"}));
  const renamed back = ckpt::to_params(ckpt::of_params(r), renamed{Eigen::VectorXf::Zero(2), 0});
  BOOST_TEST((back.new_name == r.new_name));
}

BOOST_AUTO_TEST_CASE(duplicate_leaf_names_are_refused) {
  // A map key with a dot can collide with a nested path.
  const std::map<std::string, std::map<std::string, float>> clash{{"a", {{"b.c", 1.0f}}}, {"a.b", {{"c", 2.0f}}}};
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::of_params(clash); }) ==
             "ckpt: of_params: two leaves are named 'a.b.c'");
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(ckpt::checkpoint{}, clash); }) ==
             "ckpt: to_params: two leaves are named 'a.b.c'");
  // With the entry present, which both leaves find; strict or not, in place or not.
  const ckpt::checkpoint present = ckpt::of_params(std::map<std::string, float>{{"a.b.c", 3.0f}});
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(present, clash); }) ==
             "ckpt: to_params: two leaves are named 'a.b.c'");
  auto target = clash;
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::read_params(present, target, {.strict = true}); }) ==
             "ckpt: read_params: two leaves are named 'a.b.c'");
  BOOST_TEST(target == clash);  // nothing written
}

BOOST_AUTO_TEST_CASE(views_read_entries_in_place) {
  Eigen::MatrixXf m(2, 3);
  m << 1, 2, 3, 4, 5, 6;
  const auto t = ckpt::of_params(m, "w");
  const auto view = ckpt::matrix_view<float>(t.get("w"));
  BOOST_TEST((view == m));
  BOOST_TEST(view.data() == t.get("w").as<float>().data());
  BOOST_TEST(ckpt::matrix_view<float>(ckpt::of_params(Eigen::Vector3f(1, 2, 3), "v").get("v")).rows() == 3);
  BOOST_TEST(ckpt::matrix_view<double>(ckpt::of_params(2.0, "s").get("s"))(0, 0) == 2.0);

  Eigen::Tensor<int, 3> cube(2, 3, 4);
  cube.setRandom();
  const auto u = ckpt::of_params(cube, "u");
  const auto tv = ckpt::tensor_view<int, 3>(u.get("u"));
  BOOST_TEST(tv(1, 2, 3) == cube(1, 2, 3));
  BOOST_TEST(tv(0, 1, 2) == cube(0, 1, 2));
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::tensor_view<int, 2>(u.get("u")); }) ==
             "ckpt: a view of rank 2 cannot show a tensor of shape [2, 3, 4]");
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::matrix_view<int>(u.get("u")); }) ==
             "ckpt: a view of rank 2 cannot show a tensor of shape [2, 3, 4]");
  BOOST_CHECK_THROW((void)ckpt::matrix_view<double>(t.get("w")), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(read_params_fills_existing_leaves_in_place) {
  const mlp saved = make_mlp(1);
  const auto t = ckpt::of_params(saved, "model");
  mlp live = make_mlp(50);
  const float* storage = live.l1.w.data();
  ckpt::read_params(t, live, {.prefix = "model"});
  BOOST_TEST((live.l1.w == saved.l1.w));
  BOOST_TEST((live.l2.b == saved.l2.b));
  BOOST_TEST(live.l1.w.data() == storage);  // no reallocation: the leaf's own storage was filled
}

BOOST_AUTO_TEST_CASE(read_params_changes_nothing_when_an_entry_is_wrong) {
  // l2.w comes after l1.* in walking order: a late error must not leave l1 half-loaded.
  mlp saved = make_mlp(1);
  saved.l2.w.resize(3, 1);
  const auto t = ckpt::of_params(saved);
  const mlp before = make_mlp(50);
  mlp live = before;
  // Not strict (read_params is strict by default): the first problem alone.
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::read_params(t, live, {.strict = false}); }) ==
             "ckpt: read_params: entry 'l2.w' has shape [3, 1] but the template's leaf has shape [1, 3] "
             "(copy_overlap = true copies the block both shapes share)");
  BOOST_TEST((live.l1.w == before.l1.w));
  BOOST_TEST((live.l1.b == before.l1.b));
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::read_params(ckpt::checkpoint{}, live, {.strict = false}); }) ==
             "ckpt: read_params: no entry named 'l1.w'");
  // Strict, the default: the same leaves unchanged.
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::read_params(t, live); }) ==
             "ckpt: read_params: strict read: 1 entry of another shape: 'l2.w' [3, 1] (the template's [1, 3]) "
             "(copy_overlap = true copies the block both shapes share)");
  BOOST_TEST((live.l1.w == before.l1.w));
  // A function built on the extraction reports under its own name (a detail parameter: no option of
  // the public struct, which has no `function` member).
  static_assert(!has_function_member<ckpt::extract_options>);
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::detail::extract(ckpt::checkpoint{}, live, {.prefix = "m", .strict = false}, "load_model", true);
             }) == "ckpt: load_model: no entry named 'm.l1.w' (nothing in the checkpoint is under 'm'; it is empty)");
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(ckpt::checkpoint{}, live); }) ==
             "ckpt: to_params: no entry named 'l1.w'");
}

// Architecture drift, as PyTorch's load_state_dict(strict=True) reports it.
struct deep {
  std::vector<linear> layers;
  std::map<std::string, Eigen::VectorXf> norms;
};

deep make_deep(std::size_t layers, std::vector<std::string> norms) {
  deep d;
  for (std::size_t i = 0; i < layers; ++i)
    d.layers.push_back({Eigen::MatrixXf::Constant(2, 2, static_cast<float>(i)), Eigen::VectorXf::Constant(2, 1)});
  for (const std::string& key : norms) d.norms[key] = Eigen::VectorXf::Constant(2, 3);
  return d;
}

BOOST_AUTO_TEST_CASE(strict_reads_list_every_unread_and_missing_entry) {
  const auto t = ckpt::of_params(make_deep(3, {"in", "out"}), "model");
  const deep two_layers = make_deep(2, {"in", "out"});
  // Not strict (to_params's default, Kaun's rule): extra entries are ignored; read_params's report
  // (strict = false) says which.
  BOOST_TEST((ckpt::to_params(t, two_layers, {.prefix = "model"}).layers.size() == 2));
  deep into_two = two_layers, into_three = make_deep(3, {"in", "out"});
  BOOST_TEST((ckpt::read_params(t, into_two, {.prefix = "model", .strict = false}).ignored ==
              std::vector<std::string>{"model.layers.2.b", "model.layers.2.w"}));
  BOOST_TEST(ckpt::read_params(t, into_three, {.prefix = "model"}).ignored.empty());
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::to_params(t, two_layers, {.prefix = "model", .strict = true});
             }) == "ckpt: to_params: strict read: 2 entries not in the template: 'model.layers.2.b', "
                   "'model.layers.2.w' (strict = false ignores them)");
  // A map template missing a key the file has, and one naming a key the file lacks: both at once.
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::to_params(t, make_deep(3, {"in", "mid"}), {.prefix = "model", .strict = true});
             }) == "ckpt: to_params: strict read: 1 entry missing: 'model.norms.mid'; 1 entry not in the template: 'model.norms.out' (strict = false ignores "
                   "them)");
  // Entries outside the prefix are not the template's business.
  const auto both = ckpt::concat({t, ckpt::of_int("step", 4), ckpt::of_params(two_layers, "modelx")});
  BOOST_TEST((ckpt::to_params(both, make_deep(3, {"in", "out"}), {.prefix = "model", .strict = true}).norms.size() == 2));
  // Without a prefix every entry counts: with no leaf's entry there (kept), every entry is ignored.
  deep unprefixed = make_deep(3, {"in", "out"});
  const ckpt::read_report report = ckpt::read_params(both, unprefixed, {.strict = false, .keep_missing = true});
  BOOST_TEST(report.ignored.size() == both.size());
  BOOST_TEST(report.kept.size() == 8u);
  BOOST_TEST(report.restored == 0u);
}

BOOST_AUTO_TEST_CASE(strict_read_params_changes_nothing_and_names_the_caller) {
  const auto t = ckpt::of_params(make_deep(3, {"in"}));
  const deep before = make_deep(2, {"in"});
  deep live = before;
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::detail::extract(t, live, {.strict = true}, "load_model", true);
             }) == "ckpt: load_model: strict read: 2 entries not in the template: 'layers.2.b', 'layers.2.w' "
                   "(strict = false ignores them)");
  BOOST_TEST((live.layers[0].w == before.layers[0].w));
  BOOST_TEST((live.layers[1].b == before.layers[1].b));
}

BOOST_AUTO_TEST_CASE(a_wrong_prefix_is_answered_with_the_prefixes_there_are) {
  std::vector<ckpt::checkpoint> parts;
  for (const char* prefix : {"a", "b", "c", "d", "e", "f"})
    parts.push_back(ckpt::of_params(Eigen::Vector2f(1, 2), prefix));
  parts.push_back(ckpt::of_params(make_mlp(0), "model"));
  const auto t = ckpt::concat(parts);
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(t, make_mlp(0), {.prefix = "modle"}); }) ==
             "ckpt: to_params: no entry named 'modle.l1.w' (nothing in the checkpoint is under 'modle'; its 7 "
             "prefixes begin 'a', 'b', 'c', 'd', 'e')");
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               (void)ckpt::to_params(t, make_mlp(0), {.prefix = "modle", .strict = true});
             }) == "ckpt: to_params: strict read: 4 entries missing: 'modle.l1.b', 'modle.l1.w', 'modle.l2.b', "
                   "'modle.l2.w' (nothing in the checkpoint is "
                   "under 'modle'; its 7 prefixes begin 'a', 'b', 'c', 'd', 'e')");
  // A prefix that is there but lacks the entry gives no hint.
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_params(t, make_deep(1, {}), {.prefix = "model"}); }) ==
             "ckpt: to_params: no entry named 'model.layers.0.w'");
}

namespace {

struct every_kind {
  Eigen::MatrixXf w;
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r;
  Eigen::ArrayXXf a;
  Eigen::Tensor<float, 3> t;
  Eigen::Matrix3f fixed;
  std::vector<Eigen::VectorXf> layers;
  std::vector<std::array<Eigen::VectorXd, 2>> pairs;  // (an array field would crash GCC 12: named.hpp)
  std::map<std::string, Eigen::MatrixXf> by_name;
  ckpt::frozen<Eigen::MatrixXf> embedding;
  ckpt::ptree extra;
  std::int64_t count = 0;
};

every_kind make_every_kind(float seed) {
  every_kind x;
  x.w = Eigen::MatrixXf::Constant(3, 4, seed);
  x.r = Eigen::MatrixXd::Constant(2, 5, seed);
  x.a = Eigen::ArrayXXf::Constant(4, 2, seed);
  x.t = Eigen::Tensor<float, 3>(2, 3, 4);
  x.t.setConstant(seed);
  x.fixed = Eigen::Matrix3f::Constant(seed);
  x.layers = {Eigen::VectorXf::Constant(5, seed), Eigen::VectorXf::Constant(7, seed)};
  x.pairs = {{Eigen::VectorXd::Constant(1, seed), Eigen::VectorXd::Constant(2, seed)}};
  x.by_name = {{"k", Eigen::MatrixXf::Constant(2, 2, seed)}, {"q", Eigen::MatrixXf::Constant(1, 3, seed)}};
  x.embedding.value = Eigen::MatrixXf::Constant(6, 2, seed);
  x.extra = ckpt::ptree::dict({{"v", ckpt::ptree::tensor(Eigen::Vector2f(seed, seed))}});
  x.count = static_cast<std::int64_t>(seed);
  return x;
}

}  // namespace

BOOST_AUTO_TEST_CASE(to_params_builds_every_kind_of_structure_without_copying_like) {
  // The structure to_params, map_leaves and zeros_like start from: `like`'s shape everywhere
  // (zip_leaves throws where lengths or keys differ), leaf shapes equal, values left to the caller.
  const every_kind like = make_every_kind(1);
  const every_kind shell = ckpt::detail::unfilled_structure(like);
  int leaves = 0;
  ckpt::zip_leaves(
      [&leaves](const auto& a, const auto& b) {
        using leaf_type = std::remove_cvref_t<decltype(a)>;
        BOOST_TEST(ckpt::leaf_traits<leaf_type>::shape(a) == ckpt::leaf_traits<leaf_type>::shape(b));
        ++leaves;
      },
      shell, like);
  BOOST_TEST(leaves == 14);
  // And to_params fills all of it from the checkpoint.
  const every_kind saved = make_every_kind(7);
  const every_kind back = ckpt::to_params(ckpt::of_params(saved), like);
  BOOST_TEST((back.w == saved.w && back.r == saved.r && (back.a == saved.a).all() && back.fixed == saved.fixed));
  BOOST_TEST(static_cast<float>(back.t(1, 2, 3)) == 7.0f);
  BOOST_TEST((back.layers[1] == saved.layers[1] && back.pairs[0][1] == saved.pairs[0][1]));
  BOOST_TEST((back.by_name.at("q") == saved.by_name.at("q") && back.embedding.value == saved.embedding.value));
  BOOST_TEST(back.extra.at("v").as_tensor().as<float>()[1] == 7.0f);
  BOOST_TEST(back.count == 7);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {
// A leaf of 2 MiB of floats whose read notes the thread it ran on; `Alone` is its
// reads_only_its_leaf.
template <bool Alone>
struct thread_probe {
  std::vector<float> v = std::vector<float>(std::size_t{1} << 19);
  std::thread::id read_on;
};

// While set, each probe's read waits (up to 10 s) until two reads have started: reads that run at
// once on two threads both go on, reads on one thread one after the other would wait it out.
std::atomic<bool> meet{false};
std::atomic<int> reads_started{0};
}  // namespace

template <bool Alone>
struct ckpt::leaf_traits<thread_probe<Alone>> {
  static ckpt::dtype dtype(const thread_probe<Alone>&) { return ckpt::dtype::f32; }
  static ckpt::dims shape(const thread_probe<Alone>& x) { return {static_cast<std::int64_t>(x.v.size())}; }
  static void write(const thread_probe<Alone>& x, std::span<std::byte> out) {
    std::memcpy(out.data(), x.v.data(), out.size());
  }
  static void read(thread_probe<Alone>& x, const ckpt::tensor& in) {
    std::memcpy(x.v.data(), in.bytes().data(), in.nbytes());
    x.read_on = std::this_thread::get_id();
    if (meet) {
      reads_started.fetch_add(1);
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (reads_started.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    }
  }
  static constexpr bool reads_only_its_leaf = Alone;
};

BOOST_AUTO_TEST_SUITE(test_params)

namespace {
template <bool FirstAlone, bool SecondAlone>
struct probed_model {
  thread_probe<FirstAlone> first;
  thread_probe<SecondAlone> second;
};

template <class M>
M probed(float fill) {
  M m;
  std::ranges::fill(m.first.v, fill);
  std::ranges::fill(m.second.v, fill + 1);
  return m;
}
}  // namespace

BOOST_AUTO_TEST_CASE(leaves_that_read_alone_are_read_on_two_threads_and_the_others_on_the_callers) {
  using alone_model = probed_model<true, true>;
  using mixed_model = probed_model<true, false>;
  const auto t = ckpt::of_params(probed<alone_model>(1));
  // Every leaf declares reads_only_its_leaf, and there are 4 MiB to read: two runs of leaves,
  // one on this thread and one on a helper, where the machine has two threads.
  alone_model alone = probed<alone_model>(0);
  meet = std::thread::hardware_concurrency() > 1;
  ckpt::read_params(t, alone);
  meet = false;
  BOOST_TEST(alone.first.v.back() == 1.0f);
  BOOST_TEST(alone.second.v.front() == 2.0f);
  const bool here = alone.first.read_on == std::this_thread::get_id() || alone.second.read_on == std::this_thread::get_id();
  BOOST_TEST(here);
  BOOST_TEST((alone.first.read_on != alone.second.read_on) == (std::thread::hardware_concurrency() > 1));
  // One leaf that does not declare it: every leaf is read on the calling thread.
  const mixed_model mixed = ckpt::to_params(t, probed<mixed_model>(0));
  BOOST_TEST(mixed.second.v.back() == 2.0f);
  BOOST_TEST((mixed.first.read_on == std::this_thread::get_id()));
  BOOST_TEST((mixed.second.read_on == std::this_thread::get_id()));
}

// The library's leaf types declare that their read touches their leaf alone (so that
// extraction may read them on two threads); a type of one's own is read on the calling thread
// unless it says so, and frozen<T> says what T says. Checked when this file compiles.
static_assert(ckpt::detail::reads_only_its_leaf<Eigen::MatrixXf>);
static_assert(ckpt::detail::reads_only_its_leaf<Eigen::Array<double, 3, 1>>);
static_assert(ckpt::detail::reads_only_its_leaf<Eigen::Tensor<float, 3>>);
static_assert(ckpt::detail::reads_only_its_leaf<float>);
static_assert(ckpt::detail::reads_only_its_leaf<ckpt::tensor>);
static_assert(ckpt::detail::reads_only_its_leaf<std::mt19937>);
static_assert(ckpt::detail::reads_only_its_leaf<ckpt::frozen<Eigen::MatrixXf>>);
static_assert(!ckpt::detail::reads_only_its_leaf<ckpt::frozen<thread_probe<false>>>);
static_assert(!ckpt::detail::reads_only_its_leaf<thread_probe<false>>);

BOOST_AUTO_TEST_SUITE_END()

// Leaf types of one's own with fewer hooks than the four: the others derived (ckpt::leaf_traits).
namespace {
// Shape and elements: everything else derived.
struct grid {
  std::vector<double> values;
  std::int64_t rows = 0, cols = 0;
};
// Elements of a const leaf only, and a `read` of its own: `read` is not derived, nor
// reads_only_its_leaf.
struct counted_ids {
  std::vector<std::int32_t> ids;
  int reads = 0;
};
// dtype, shape, write_rows and read: `write` is all the rows.
struct by_rows {
  Eigen::MatrixXf m;  // column-major: the rows are written one element at a time
};
// Three elements for a shape of four.
struct short_grid {
  std::vector<float> values{1, 2, 3};
};
// Bools, which an entry may hold as bytes other than 0 and 1.
struct flags {
  std::array<bool, 4> bits{};
};
}  // namespace

template <>
struct ckpt::leaf_traits<grid> {
  static ckpt::dims shape(const grid& g) { return {g.rows, g.cols}; }
  static auto elements(auto& g) { return std::span(g.values); }
};

template <>
struct ckpt::leaf_traits<counted_ids> {
  static ckpt::dims shape(const counted_ids& c) { return {static_cast<std::int64_t>(c.ids.size())}; }
  static std::span<const std::int32_t> elements(const counted_ids& c) { return c.ids; }
  static void read(counted_ids& c, const ckpt::tensor& in) {
    ++c.reads;
    std::memcpy(c.ids.data(), in.bytes().data(), in.nbytes());
  }
};

template <>
struct ckpt::leaf_traits<by_rows> {
  static ckpt::dtype dtype(const by_rows&) { return ckpt::dtype::f32; }
  static ckpt::dims shape(const by_rows& r) { return {r.m.rows(), r.m.cols()}; }
  static void write_rows(const by_rows& r, std::size_t first, std::size_t count, std::byte* out) {
    for (auto i = static_cast<Eigen::Index>(first); i < static_cast<Eigen::Index>(first + count); ++i)
      for (Eigen::Index j = 0; j < r.m.cols(); ++j, out += sizeof(float)) std::memcpy(out, &r.m(i, j), sizeof(float));
  }
  static void read(by_rows& r, const ckpt::tensor& in) { r.m = ckpt::matrix_view<float>(in); }
};

template <>
struct ckpt::leaf_traits<short_grid> {
  static ckpt::dims shape(const short_grid&) { return {4}; }
  static auto elements(auto& g) { return std::span(g.values); }
};

template <>
struct ckpt::leaf_traits<flags> {
  static ckpt::dims shape(const flags&) { return {4}; }
  static auto elements(auto& f) { return std::span(f.bits); }
};

static_assert(ckpt::leaf<grid> && ckpt::leaf<counted_ids> && ckpt::leaf<by_rows> && ckpt::leaf<flags>);
static_assert(ckpt::detail::reads_only_its_leaf<grid>);
static_assert(ckpt::detail::reads_only_its_leaf<ckpt::frozen<grid>>);
static_assert(!ckpt::detail::reads_only_its_leaf<counted_ids>);
static_assert(!ckpt::detail::reads_only_its_leaf<by_rows>);
static_assert(ckpt::detail::has_contiguous<grid> && !ckpt::detail::has_write_rows<grid>);
static_assert(ckpt::detail::has_contiguous<counted_ids>);
static_assert(!ckpt::detail::has_contiguous<by_rows> && ckpt::detail::has_write_rows<by_rows>);
// Elements that are not scalars of a dtype, or no elements and no `read`: not a leaf.
namespace {
struct no_read {
  std::vector<float> values;
};
struct string_elements {
  std::vector<std::string> values;
};
}  // namespace
template <>
struct ckpt::leaf_traits<no_read> {
  static ckpt::dtype dtype(const no_read&) { return ckpt::dtype::f32; }
  static ckpt::dims shape(const no_read& x) { return {static_cast<std::int64_t>(x.values.size())}; }
  static void write(const no_read&, std::span<std::byte>) {}
};
template <>
struct ckpt::leaf_traits<string_elements> {
  static ckpt::dims shape(const string_elements& x) { return {static_cast<std::int64_t>(x.values.size())}; }
  static auto elements(auto& x) { return std::span(x.values); }
};
static_assert(!ckpt::leaf<no_read> && !ckpt::leaf<string_elements>);

BOOST_AUTO_TEST_SUITE(test_params)

BOOST_AUTO_TEST_CASE(a_leaf_of_shape_and_elements_is_saved_extracted_and_cast) {
  const grid g{{1, 2, 3, 4, 5, 6}, 2, 3};
  const ckpt::checkpoint t = ckpt::of_params(g, "g");
  BOOST_TEST(t.get("g").dtype() == ckpt::dtype::f64);
  BOOST_TEST(shape_of(t.get("g")) == (std::vector<std::int64_t>{2, 3}));
  BOOST_TEST(elements<double>(t.get("g")) == g.values);
  const grid like{std::vector<double>(6), 2, 3};
  BOOST_TEST(ckpt::to_params(t, like, {.prefix = "g"}).values == g.values);
  grid in_place = like;
  ckpt::read_params(t, in_place, {.prefix = "g"});
  BOOST_TEST(in_place.values == g.values);
  // From F32, with cast; frozen; a ptree leaf; zeros.
  const Eigen::Matrix<float, 2, 3, Eigen::RowMajor> f = Eigen::Matrix<float, 2, 3, Eigen::RowMajor>::Constant(0.5f);
  BOOST_TEST(ckpt::to_params(ckpt::of_params(f, "g"), like, {.prefix = "g", .cast = true}).values ==
             std::vector<double>(6, 0.5));
  const ckpt::frozen<grid> kept{g};
  BOOST_TEST((ckpt::of_params(kept, "g").get("g") == t.get("g")));
  BOOST_TEST(ckpt::to_params(t, ckpt::frozen<grid>{like}, {.prefix = "g"}).value.values == g.values);
  BOOST_TEST((ckpt::ptree::tensor(g).as_tensor() == t.get("g")));
  BOOST_TEST(ckpt::zeros_like(g).values == std::vector<double>(6, 0.0));
  // The save of sections writes the file from the elements.
  const ckpt_test::temp_dir d;
  ckpt::save(d.path() / "g.safetensors", {{g, "g"}});
  BOOST_TEST((ckpt::load(d.path() / "g.safetensors").get("g") == t.get("g")));
}

BOOST_AUTO_TEST_CASE(a_hook_the_traits_give_is_called_and_write_is_made_of_rows) {
  const counted_ids c{{7, -1, 3}, 0};
  const ckpt::checkpoint ids = ckpt::of_params(c, "ids");
  BOOST_TEST(elements<std::int32_t>(ids.get("ids")) == c.ids);
  const counted_ids back = ckpt::to_params(ids, counted_ids{std::vector<std::int32_t>(3), 0}, {.prefix = "ids"});
  BOOST_TEST(back.ids == c.ids);
  BOOST_TEST(back.reads == 1);

  by_rows r{Eigen::MatrixXf(2, 3)};
  r.m << 1, 2, 3, 4, 5, 6;
  const ckpt::checkpoint t = ckpt::of_params(r, "r");  // write_rows, a band of rows at a time
  BOOST_TEST(elements<float>(t.get("r")) == (std::vector<float>{1, 2, 3, 4, 5, 6}));
  BOOST_TEST((ckpt::ptree::tensor(r).as_tensor() == t.get("r")));  // `write`: all the rows
  BOOST_TEST((ckpt::to_params(t, by_rows{Eigen::MatrixXf(2, 3)}, {.prefix = "r"}).m == r.m));
}

BOOST_AUTO_TEST_CASE(elements_of_another_size_than_the_shape_are_refused) {
  BOOST_TEST(message_of<std::invalid_argument>([] { (void)ckpt::of_params(short_grid{}, "g"); }) ==
             "ckpt: of_params: leaf_traits::contiguous gave 12 bytes for entry 'g' of 16 bytes");
  BOOST_TEST(message_of<std::invalid_argument>([] { (void)ckpt::ptree::tensor(short_grid{}); }) ==
             "ckpt: leaf_traits::elements gave 12 bytes for an entry of 16 bytes");
  const ckpt::checkpoint four = ckpt::of_params(Eigen::Vector4f(1, 2, 3, 4), "g");
  short_grid target;
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::read_params(four, target, {.prefix = "g"}); }) ==
             "ckpt: leaf_traits::elements gave 12 bytes for an entry of 16 bytes");
  BOOST_TEST(target.values == (std::vector<float>{1, 2, 3}));
}

BOOST_AUTO_TEST_CASE(bool_elements_are_read_as_zero_or_one) {
  const std::array<unsigned char, 4> raw{0, 2, 1, 255};
  const ckpt::checkpoint t = ckpt::of_tensor(
      "f", ckpt::tensor::copy_of(ckpt::dtype::boolean, {4}, std::as_bytes(std::span(raw))));
  const flags f = ckpt::to_params(t, flags{}, {.prefix = "f"});
  std::array<unsigned char, 4> bytes{};
  std::memcpy(bytes.data(), f.bits.data(), bytes.size());
  BOOST_TEST((bytes == std::array<unsigned char, 4>{0, 1, 1, 1}));
  BOOST_TEST(ckpt::of_params(f, "f").get("f").dtype() == ckpt::dtype::boolean);
}

BOOST_AUTO_TEST_CASE(read_params_of_a_structure_with_a_prefix_is_the_read_of_its_one_section) {
  // `read_params(t, s, {.prefix = "m"})` and `read_params(t, {{s, "m"}})`: one read, the same
  // leaves, the same default (strict), the same report and the same messages, naming read_params.
  const mlp saved = make_mlp(10);
  const ckpt::checkpoint t = ckpt::concat({ckpt::of_params(saved, "m"), ckpt::of_int("step", 3)});
  mlp by_prefix = make_mlp(0), by_section = make_mlp(0);
  const ckpt::read_report a = ckpt::read_params(t, by_prefix, {.prefix = "m"});
  const ckpt::read_report b = ckpt::read_params(t, {{by_section, "m"}});
  BOOST_TEST((by_prefix.l1.w == saved.l1.w && by_prefix.l2.b == saved.l2.b));
  BOOST_TEST((by_section.l1.w == saved.l1.w && by_section.l2.b == saved.l2.b));
  BOOST_TEST(a.to_string() == b.to_string());
  BOOST_TEST(a.restored == 4u);

  // An entry under the prefix that no leaf reads: refused by both, with one message.
  const ckpt::checkpoint extra = ckpt::concat({t, ckpt::of_int("m.extra", 1)});
  const auto by_prefix_error = message_of<std::invalid_argument>([&] { ckpt::read_params(extra, by_prefix, {.prefix = "m"}); });
  BOOST_TEST(by_prefix_error == "ckpt: read_params: strict read: 1 entry not in the template: 'm.extra' (strict = false "
                                "ignores them)");
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::read_params(extra, {{by_section, "m"}}); }) == by_prefix_error);
  // Relaxed alike: the same report.
  const ckpt::read_report relaxed_a = ckpt::read_params(extra, by_prefix, {.prefix = "m", .strict = false});
  const ckpt::read_report relaxed_b = ckpt::read_params(extra, {{by_section, "m"}}, {.strict = false});
  BOOST_TEST(relaxed_a.ignored == std::vector<std::string>{"m.extra"});
  BOOST_TEST(relaxed_a.to_string() == relaxed_b.to_string());
  // A shape that differs, as one error of each.
  mlp wider_a = make_mlp(0), wider_b = make_mlp(0);
  wider_a.l1.b = wider_b.l1.b = Eigen::VectorXf::Zero(4);
  const auto shape_error = message_of<std::invalid_argument>([&] { ckpt::read_params(t, wider_a, {.prefix = "m"}); });
  BOOST_TEST(shape_error == "ckpt: read_params: strict read: 1 entry of another shape: 'm.l1.b' [3] (the template's "
                            "[4]) (copy_overlap = true copies the block both shapes share)");
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::read_params(t, {{wider_b, "m"}}); }) == shape_error);
}

BOOST_AUTO_TEST_CASE(the_cast_of_a_read_is_ckpt_cast) {
  // extract_options::cast and ckpt::cast: one conversion, the same bits. Values that round (to
  // nearest even in F16 and BF16), overflow and a subnormal.
  const Eigen::Vector4f values(1.0f / 3.0f, 1.0009765625f + 0.00048828125f, 70000.0f, 1e-7f);
  const ckpt::checkpoint t = ckpt::of_params(values, "v");
  Eigen::Matrix<Eigen::half, 4, 1> half = Eigen::Matrix<Eigen::half, 4, 1>::Zero();
  const ckpt::read_report report = ckpt::read_params(t, half, {.prefix = "v", .cast = true});
  BOOST_TEST(report.cast.size() == 1u);
  BOOST_TEST((ckpt::of_params(half, "v").get("v") == ckpt::cast(t, ckpt::dtype::f16).get("v")));
  const auto bf = ckpt::to_params(t, Eigen::Array<Eigen::bfloat16, 4, 1>::Zero().eval(), {.prefix = "v", .cast = true});
  BOOST_TEST((ckpt::of_params(bf, "v").get("v") == ckpt::cast(t.get("v"), ckpt::dtype::bf16)));
}

BOOST_AUTO_TEST_SUITE_END()  // test_params
