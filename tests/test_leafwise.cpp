// Leaf-wise operations: zip_leaves (of one structure or several) and zeros_like (the API), and
// detail::flat_array (what ckpt::adam uses) over the kinds of structures the core names.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/leafwise.hpp>

#include <Eigen/Core>

#include <array>
#include <map>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_leafwise)

namespace {

using ckpt_test::floats;

struct linear {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};

struct net {
  linear l1;
  std::vector<Eigen::ArrayXd> extra;
  std::map<std::string, float> scales;
  std::array<double, 2> pair;
};

net make_net() {
  net n;
  n.l1.w = Eigen::MatrixXf::Constant(2, 3, 1.5f);
  n.l1.b = Eigen::VectorXf::LinSpaced(2, 1.0f, 2.0f);
  n.extra = {Eigen::ArrayXd::Constant(4, 2.0), Eigen::ArrayXd::Constant(1, -3.0)};
  n.scales = {{"a", 0.5f}, {"b", 4.0f}};
  n.pair = {1.0, 2.0};
  return n;
}

}  // namespace

BOOST_AUTO_TEST_CASE(zip_leaves_updates_in_place) {
  linear p{Eigen::MatrixXf::Ones(2, 2), Eigen::VectorXf::Ones(3)};
  const linear g{Eigen::MatrixXf::Constant(2, 2, 10.0f), Eigen::VectorXf::Constant(3, 20.0f)};
  linear m{Eigen::MatrixXf::Zero(2, 2), Eigen::VectorXf::Zero(3)};
  ckpt::zip_leaves(
      [](auto& x, const auto& y, auto& z) {
        z = 0.5f * y;
        x -= 0.1f * y;
      },
      p, g, m);
  BOOST_TEST(p.w.isApproxToConstant(0.0f));
  BOOST_TEST(p.b.isApproxToConstant(-1.0f));
  BOOST_TEST(m.b.isApproxToConstant(10.0f));
}

BOOST_AUTO_TEST_CASE(zip_leaves_of_one_structure_calls_f_on_each_of_its_leaves_in_place) {
  // Filling a structure needs no second one.
  linear p{Eigen::MatrixXf::Zero(2, 2), Eigen::VectorXf::Zero(3)};
  ckpt::zip_leaves([](auto& x) { x.setConstant(2.0f); }, p);
  BOOST_TEST(p.w.isApproxToConstant(2.0f));
  BOOST_TEST(p.b.isApproxToConstant(2.0f));
  // Every kind of structure, each leaf once, in for_each_leaf's order.
  net n = make_net();
  std::vector<double> firsts;
  ckpt::zip_leaves(
      [&firsts](auto& x) {
        auto flat = ckpt::detail::flat_array(x);
        firsts.push_back(static_cast<double>(flat(0)));
        flat.setConstant(3);
      },
      n);
  BOOST_TEST(firsts == (std::vector<double>{1.5, 1.0, 2.0, -3.0, 0.5, 4.0, 1.0, 2.0}), boost::test_tools::per_element());
  BOOST_TEST(firsts.size() == ckpt::leaf_names(n).size());
  BOOST_TEST(n.l1.w.isApproxToConstant(3.0f));
  BOOST_TEST((n.extra[1] == 3.0).all());
  BOOST_TEST(n.scales.at("b") == 3.0f);
  BOOST_TEST(n.pair[1] == 3.0);
  // A const structure is read, its leaves passed as const.
  const linear c = p;
  float sum = 0.0f;
  ckpt::zip_leaves(
      [&sum](auto& x) {
        static_assert(std::is_const_v<std::remove_reference_t<decltype(x)>>);
        sum += x.sum();
      },
      c);
  BOOST_TEST(sum == 14.0f);
}

BOOST_AUTO_TEST_CASE(zip_leaves_rejects_different_shapes) {
  std::vector<Eigen::VectorXf> a(2, Eigen::VectorXf::Ones(2));
  std::vector<Eigen::VectorXf> b(3, Eigen::VectorXf::Ones(2));
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { ckpt::zip_leaves([](auto&, auto&) {}, a, b); }) ==
             "ckpt: the structures differ at '': sequences of different lengths (2, 3)");
  std::map<std::string, float> m1{{"x", 1.0f}}, m2{{"x", 1.0f}, {"y", 2.0f}};
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { ckpt::zip_leaves([](auto&, auto&) {}, m1, m2); }) ==
             "ckpt: the structures differ at '': maps of different sizes (1, 2)");
}

BOOST_AUTO_TEST_CASE(zeros_like_keeps_shapes) {
  const net z = ckpt::zeros_like(make_net());
  BOOST_TEST(z.l1.w.rows() == 2);
  BOOST_TEST(z.l1.w.cols() == 3);
  BOOST_TEST(z.l1.w.isZero(0.0f));
  BOOST_TEST(z.l1.b.isZero(0.0f));
  BOOST_TEST(z.extra[0].size() == 4);
  BOOST_TEST((z.extra[0] == 0.0).all());
  BOOST_TEST(z.scales.at("a") == 0.0f);
  BOOST_TEST(z.pair[0] == 0.0);
}

BOOST_AUTO_TEST_CASE(zeros_like_of_a_ptree_or_an_eigen_tensor_keeps_dtypes_and_shapes) {
  const auto tree = ckpt::ptree::dict({{"w", ckpt::ptree::tensor(floats({1, 2, 3}))},
                                       {"l", ckpt::ptree::list({ckpt::ptree::tensor(7.0)})}});
  const ckpt::ptree zero = ckpt::zeros_like(tree);
  const ckpt::tensor& w = zero.at("w").as_tensor();
  BOOST_TEST(w.dtype() == ckpt::dtype::f32);
  BOOST_TEST((ckpt::dims(w.shape().begin(), w.shape().end()) == ckpt::dims{3}));
  BOOST_TEST(w.as<float>()[2] == 0.0f);
  const ckpt::tensor& l0 = zero.at("l").at(std::size_t{0}).as_tensor();
  BOOST_TEST(l0.dtype() == ckpt::dtype::f64);
  BOOST_TEST(l0.as<double>()[0] == 0.0);
  BOOST_TEST(tree.at("w").as_tensor().as<float>()[2] == 3.0f);  // the source is untouched

  Eigen::Tensor<float, 3> t(2, 3, 4);
  t.setConstant(5.0f);
  const Eigen::Tensor<float, 3> tz = ckpt::zeros_like(t);
  BOOST_TEST(tz.dimension(2) == 4);
  BOOST_TEST(tz(1, 2, 3) == 0.0f);
}

BOOST_AUTO_TEST_CASE(flat_array_views_any_storage_order) {
  Eigen::Matrix<float, 2, 3, Eigen::RowMajor> r;
  r << 1, 2, 3, 4, 5, 6;
  auto flat = ckpt::detail::flat_array(r);
  BOOST_TEST(flat.size() == 6);
  flat *= 2.0f;
  BOOST_TEST(r(1, 2) == 12.0f);
  double s = 3.0;
  ckpt::detail::flat_array(s) += 1.0;
  BOOST_TEST(s == 4.0);
  const Eigen::MatrixXd c = Eigen::MatrixXd::Ones(2, 2);
  BOOST_TEST(ckpt::detail::flat_array(c).sum() == 4.0);
}

BOOST_AUTO_TEST_SUITE_END()  // test_leafwise
