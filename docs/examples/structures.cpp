// docs/guide.md, "Named structures". The lines between two `// [name]` markers are the guide's
// code block `structures.cpp#name` (tests/test_docs.cpp checks that the guide shows them
// unchanged); the test cases below run them and check what the guide says of them.
#include <boost/test/unit_test.hpp>

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

namespace {

// [aggregates]
struct linear {
  Eigen::MatrixXf w;  // entry "w", shape [rows, cols]
  Eigen::VectorXf b;  // entry "b", shape [rows]
};

struct encoder {
  std::vector<linear> layers;                    // layers.0.w, layers.0.b, layers.1.w, ...
  std::map<std::string, Eigen::VectorXf> norms;  // norms.<key>
  std::array<float, 2> scale{};                  // scale.0, scale.1: shape []
  Eigen::Tensor<float, 3> kernel;                // kernel: shape [d0, d1, d2]
  std::int64_t seen = 0;                         // seen: I64, shape []
};
// [aggregates]

encoder make_encoder() {
  // [aggregates_names]
  encoder e{.layers = {{Eigen::MatrixXf::Zero(4, 3), Eigen::VectorXf::Zero(4)},
                       {Eigen::MatrixXf::Zero(2, 4), Eigen::VectorXf::Zero(2)}},
            .norms = {{"out", Eigen::VectorXf::Ones(2)}},
            .kernel = Eigen::Tensor<float, 3>(2, 3, 5)};
  // ckpt::leaf_names(e) == {"layers.0.w", "layers.0.b", "layers.1.w", "layers.1.b",
  //                         "norms.out", "scale.0", "scale.1", "kernel", "seen"}
  // [aggregates_names]
  e.kernel.setConstant(0.5f);
  return e;
}

ckpt::ptree make_tree() {
  const Eigen::MatrixXf w0 = Eigen::MatrixXf::Constant(2, 2, 1.0f);
  const Eigen::MatrixXf w1 = Eigen::MatrixXf::Constant(2, 2, 2.0f);
  const Eigen::VectorXf head = Eigen::VectorXf::Constant(2, 3.0f);
  // [ptree]
  // Built at run time, say from a configuration file: "layers.0", "layers.1", "head".
  const ckpt::ptree tree = ckpt::ptree::dict({
      {"layers", ckpt::ptree::list({ckpt::ptree::tensor(w0), ckpt::ptree::tensor(w1)})},
      {"head", ckpt::ptree::tensor(head)}});
  // [ptree]
  return tree;
}

// [fields_class]
class attention {
 public:
  explicit attention(int width) : query_(width, width), key_(width, width) {}

 private:
  friend struct ckpt::fields<attention>;
  Eigen::MatrixXf query_;
  Eigen::MatrixXf key_;
};
// [fields_class]

// [leaf_type]
struct grid {  // a tensor type of your own: values in C order, and the shape
  std::vector<float> values;
  std::int64_t rows = 0, cols = 0;
};
// [leaf_type]

}  // namespace

// [fields]
template <>
struct ckpt::fields<attention> {
  static constexpr std::array names{"q", "k"};  // the entries are q and k
  static auto tie(auto& self) { return std::tie(self.query_, self.key_); }
};
// [fields]

// [leaf_traits]
template <>
struct ckpt::leaf_traits<grid> {
  static ckpt::dims shape(const grid& g) { return {g.rows, g.cols}; }
  static auto elements(auto& g) { return std::span(g.values); }  // const or not
};
// [leaf_traits]

BOOST_AUTO_TEST_SUITE(guide_structures)

BOOST_AUTO_TEST_CASE(aggregates_and_containers_are_named_by_path) {
  const encoder e = make_encoder();
  BOOST_TEST(ckpt::leaf_names(e) == (std::vector<std::string>{"layers.0.w", "layers.0.b", "layers.1.w",
                                                               "layers.1.b", "norms.out", "scale.0", "scale.1",
                                                               "kernel", "seen"}));
  const ckpt::checkpoint t = ckpt::of_params(e, "enc");
  BOOST_TEST(ckpt::to_string(t.get("enc.layers.0.w").shape()) == "[4, 3]");
  BOOST_TEST(ckpt::to_string(t.get("enc.layers.0.b").shape()) == "[4]");
  BOOST_TEST(ckpt::to_string(t.get("enc.scale.1").shape()) == "[]");
  BOOST_TEST(ckpt::to_string(t.get("enc.kernel").shape()) == "[2, 3, 5]");
  BOOST_TEST(t.get("enc.seen").dtype() == ckpt::dtype::i64);
  const encoder back = ckpt::to_params(t, e, {.prefix = "enc"});
  BOOST_TEST((back.norms.at("out") == e.norms.at("out")));
  BOOST_TEST(back.kernel(1, 2, 4) == 0.5f);
}

BOOST_AUTO_TEST_CASE(a_ptree_is_named_by_keys_and_positions) {
  const ckpt::ptree tree = make_tree();
  BOOST_TEST(ckpt::leaf_names(tree) == (std::vector<std::string>{"layers.0", "layers.1", "head"}));
  const ckpt::checkpoint t = ckpt::of_params(tree, "model");
  BOOST_TEST(t.names() == (std::vector<std::string>{"model.head", "model.layers.0", "model.layers.1"}));
  BOOST_TEST((ckpt::to_params(t, tree, {.prefix = "model"}) == tree));
}

BOOST_AUTO_TEST_CASE(fields_names_the_members_of_a_class) {
  attention a(3);
  BOOST_TEST(ckpt::leaf_names(a) == (std::vector<std::string>{"q", "k"}));
  BOOST_TEST(ckpt::of_params(a, "attn").names() == (std::vector<std::string>{"attn.k", "attn.q"}));
}

BOOST_AUTO_TEST_CASE(a_type_with_shape_and_elements_is_a_leaf) {
  static_assert(ckpt::leaf<grid>);
  const grid g{{1, 2, 3, 4, 5, 6}, 2, 3};
  const ckpt::checkpoint t = ckpt::of_params(g, "g");
  BOOST_TEST(t.get("g").dtype() == ckpt::dtype::f32);
  BOOST_TEST(ckpt::to_string(t.get("g").shape()) == "[2, 3]");
  BOOST_TEST((std::vector<float>(t.get("g").as<float>().begin(), t.get("g").as<float>().end()) == g.values));
  const grid back = ckpt::to_params(t, grid{std::vector<float>(6), 2, 3}, {.prefix = "g"});
  BOOST_TEST(back.values == g.values);
}

BOOST_AUTO_TEST_SUITE_END()
