// Tests for ckpt/detail/field_names.hpp: compile-time names of aggregate fields.
//
// Most checks are static_asserts, because the names must be usable in constant expressions; the
// test cases repeat the interesting ones at run time (so that a failure shows the actual value)
// and compare field_name() with the fallback implementation (and with boost::pfr::get_name when
// the installed Boost has it).

#include <boost/test/unit_test.hpp>

#include <ckpt/detail/field_names.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_field_names)

using ckpt::detail::fallback_field_name;
using ckpt::detail::field_name;
using ckpt::detail::field_names;

namespace ckpt_test {

// Eigen members of every kind the library saves.
struct optimizer_state {
  Eigen::MatrixXf weight;
  Eigen::Matrix<float, 3, 1> bias;
  Eigen::Tensor<float, 3> kernel;
  float learning_rate;
  std::int64_t step;
};

// Nested aggregates: only the outer field's name is reported.
struct moments {
  Eigen::VectorXf m;
  Eigen::VectorXf v;
};
struct adam {
  moments first_moment;
  moments second;
  int count;
};

// Standard containers (std::array only of trivial types: see the GCC 12 limit in the brief).
struct containers {
  std::vector<Eigen::MatrixXf> layers;
  std::map<std::string, Eigen::VectorXf> by_name;
  std::array<float, 4> betas;
  std::array<std::int32_t, 2> shape;
  std::vector<float> history;
};

enum class phase { train, eval };

// Scalars of assorted kinds.
struct scalars {
  bool flag;
  char c;
  double d;
  unsigned u;
  float* ptr;
  phase mode;
};

// Identifiers with digits and underscores in every position allowed.
struct odd_names {
  int x1;
  int layer_2_weight;
  int _private;
  int a__b;
  int W;
  int CamelCase9;
  int trailing_;
  int z;
};

// A type that cannot be default constructed makes the aggregate holding it non-default
// constructible too; names must still be available since no object is ever created.
struct needs_arg {
  explicit needs_arg(int v) : value(v) {}
  int value;
};
struct not_default_constructible {
  needs_arg config;
  Eigen::MatrixXf table;
};
static_assert(!std::is_default_constructible_v<not_default_constructible>);

// Structs inside templates: a class template, and a struct nested in one.
template <class T>
struct layer {
  T w;
  T b;
};
template <class T>
struct model {
  struct block {
    T query;
    T key;
    T value;
  };
  block attn;
  layer<T> out_proj;
};

// Same field name in unrelated types.
struct has_x {
  int x;
};
struct has_y {
  int y;
};

// Many fields (PFR 1.81 handles up to 100), with mixed types so that field counting works hard.
struct wide {
  float f00; Eigen::VectorXf v01; int i02; double d03; std::vector<float> s04;
  float f05; Eigen::VectorXf v06; int i07; double d08; std::vector<float> s09;
  float f10; Eigen::VectorXf v11; int i12; double d13; std::vector<float> s14;
  float f15; Eigen::VectorXf v16; int i17; double d18; std::vector<float> s19;
  float f20; Eigen::VectorXf v21; int i22; double d23; std::vector<float> s24;
  float f25; Eigen::VectorXf v26; int i27; double d28; std::vector<float> s29;
  float f30; Eigen::VectorXf v31; int i32; double d33; std::vector<float> s34;
  float f35; Eigen::VectorXf v36; int i37; double d38; std::vector<float> s39;
  float f40; Eigen::VectorXf v41; int i42; double d43; std::vector<float> s44;
  float f45; Eigen::VectorXf v46; int last_field_47;
};

namespace deeply::nested {
struct point {
  float x_coord;
  float y_coord;
};
}  // namespace deeply::nested

}  // namespace ckpt_test

namespace {

// Internal linkage: the fake object's declaration must not turn into a link error or warning.
struct hidden {
  Eigen::MatrixXf secret_w;
  float scale;
};
template <class T>
struct hidden_template {
  T inner_value;
};

/// `field_names<T>()` as std::strings, for readable Boost.Test failure messages.
template <class T>
std::vector<std::string> names_of() {
  std::vector<std::string> out;
  for (std::string_view n : field_names<T>()) out.emplace_back(n);
  return out;
}

/// Checks, for every field of T, that field_name, fallback_field_name and (when available)
/// boost::pfr::get_name agree, that field_names lists the same names, and that the fallback's
/// view is NUL-terminated as documented.
template <class T, std::size_t... I>
void check_agreement(std::index_sequence<I...>) {
  constexpr auto all = field_names<T>();
  (
      [&] {
        constexpr std::string_view chosen = field_name<T, I>();
        constexpr std::string_view fallback = fallback_field_name<T, I>();
        BOOST_TEST(chosen == fallback, "field " << I << ": " << chosen << " vs " << fallback);
        BOOST_TEST(all[I] == chosen);
        BOOST_TEST(!fallback.empty());
        BOOST_TEST(fallback.data()[fallback.size()] == '\0');
#if CKPT_DETAIL_HAS_PFR_CORE_NAME
        constexpr std::string_view pfr = boost::pfr::get_name<I, std::remove_cv_t<T>>();
        BOOST_TEST(pfr == fallback, "field " << I << ": PFR " << pfr << " vs fallback " << fallback);
#endif
      }(),
      ...);
}
template <class T>
void check_agreement() {
  check_agreement<T>(std::make_index_sequence<boost::pfr::tuple_size_v<T>>{});
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Compile-time checks: these are the guarantee that matters, since checkpoint keys are built
// from field names during constant evaluation.

namespace {
using namespace ckpt_test;
using sv = std::string_view;

static_assert(field_name<optimizer_state, 0>() == "weight");
static_assert(field_name<optimizer_state, 1>() == "bias");
static_assert(field_name<optimizer_state, 2>() == "kernel");
static_assert(field_name<optimizer_state, 3>() == "learning_rate");
static_assert(field_name<optimizer_state, 4>() == "step");
static_assert(fallback_field_name<optimizer_state, 2>() == "kernel");
static_assert(field_names<optimizer_state>() ==
              std::array<sv, 5>{"weight", "bias", "kernel", "learning_rate", "step"});

static_assert(field_names<adam>() == std::array<sv, 3>{"first_moment", "second", "count"});
static_assert(field_names<moments>() == std::array<sv, 2>{"m", "v"});

static_assert(field_names<containers>() ==
              std::array<sv, 5>{"layers", "by_name", "betas", "shape", "history"});
static_assert(field_names<scalars>() == std::array<sv, 6>{"flag", "c", "d", "u", "ptr", "mode"});
static_assert(field_names<odd_names>() == std::array<sv, 8>{"x1", "layer_2_weight", "_private", "a__b",
                                                            "W", "CamelCase9", "trailing_", "z"});
static_assert(field_names<not_default_constructible>() == std::array<sv, 2>{"config", "table"});

static_assert(field_names<layer<float>>() == std::array<sv, 2>{"w", "b"});
static_assert(field_names<layer<Eigen::MatrixXf>>() == std::array<sv, 2>{"w", "b"});
static_assert(field_names<layer<layer<double>>>() == std::array<sv, 2>{"w", "b"});
static_assert(field_names<model<Eigen::MatrixXf>::block>() == std::array<sv, 3>{"query", "key", "value"});
static_assert(field_names<model<float>>() == std::array<sv, 2>{"attn", "out_proj"});

static_assert(field_name<has_x, 0>() == "x");
static_assert(field_name<has_y, 0>() == "y");

static_assert(field_names<deeply::nested::point>() == std::array<sv, 2>{"x_coord", "y_coord"});
static_assert(field_names<hidden>() == std::array<sv, 2>{"secret_w", "scale"});
static_assert(field_names<hidden_template<Eigen::VectorXf>>() == std::array<sv, 1>{"inner_value"});

static_assert(boost::pfr::tuple_size_v<wide> == 48);
static_assert(field_name<wide, 0>() == "f00");
static_assert(field_name<wide, 1>() == "v01");
static_assert(field_name<wide, 23>() == "d23");
static_assert(field_name<wide, 39>() == "s39");
static_assert(field_name<wide, 46>() == "v46");
static_assert(field_name<wide, 47>() == "last_field_47");

// cv-qualified types name the same fields.
static_assert(field_name<const optimizer_state, 1>() == "bias");
static_assert(field_names<const volatile adam>() == field_names<adam>());
}  // namespace

// ---------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(eigen_members_are_named_by_their_identifiers) {
  BOOST_TEST(names_of<optimizer_state>() ==
                 (std::vector<std::string>{"weight", "bias", "kernel", "learning_rate", "step"}),
             boost::test_tools::per_element());
  check_agreement<optimizer_state>();
}

BOOST_AUTO_TEST_CASE(nested_structs_name_their_own_fields_not_those_of_their_members) {
  BOOST_TEST(names_of<adam>() == (std::vector<std::string>{"first_moment", "second", "count"}),
             boost::test_tools::per_element());
  check_agreement<adam>();
  check_agreement<moments>();
}

BOOST_AUTO_TEST_CASE(container_and_scalar_members_are_named_like_any_other) {
  BOOST_TEST(names_of<containers>() ==
                 (std::vector<std::string>{"layers", "by_name", "betas", "shape", "history"}),
             boost::test_tools::per_element());
  BOOST_TEST(names_of<scalars>() == (std::vector<std::string>{"flag", "c", "d", "u", "ptr", "mode"}),
             boost::test_tools::per_element());
  check_agreement<containers>();
  check_agreement<scalars>();
}

BOOST_AUTO_TEST_CASE(identifiers_with_digits_and_underscores_anywhere_are_named_whole) {
  BOOST_TEST(names_of<odd_names>() == (std::vector<std::string>{"x1", "layer_2_weight", "_private", "a__b",
                                                                "W", "CamelCase9", "trailing_", "z"}),
             boost::test_tools::per_element());
  check_agreement<odd_names>();
}

BOOST_AUTO_TEST_CASE(a_type_that_cannot_be_default_constructed_is_still_named) {
  BOOST_TEST(names_of<not_default_constructible>() == (std::vector<std::string>{"config", "table"}),
             boost::test_tools::per_element());
  check_agreement<not_default_constructible>();
}

BOOST_AUTO_TEST_CASE(members_of_class_templates_and_of_structs_nested_in_them_are_named) {
  check_agreement<layer<float>>();
  check_agreement<layer<Eigen::MatrixXf>>();
  check_agreement<layer<layer<double>>>();
  check_agreement<model<Eigen::MatrixXf>::block>();
  check_agreement<model<float>>();
  BOOST_TEST(names_of<model<float>::block>() == (std::vector<std::string>{"query", "key", "value"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(types_in_namespaces_or_with_internal_linkage_are_named) {
  check_agreement<ckpt_test::deeply::nested::point>();
  check_agreement<hidden>();
  check_agreement<hidden_template<Eigen::VectorXf>>();
  check_agreement<has_x>();
  check_agreement<has_y>();
  BOOST_TEST(names_of<hidden>() == (std::vector<std::string>{"secret_w", "scale"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(all_48_fields_of_a_wide_struct_are_named_in_order) {
  const std::vector<std::string> names = names_of<wide>();
  BOOST_TEST_REQUIRE(names.size() == 48u);
  // Rebuild the expected names from the struct's naming scheme: a type letter, then the index.
  const char kinds[] = {'f', 'v', 'i', 'd', 's'};
  for (std::size_t i = 0; i < 47; ++i) {
    std::string expected(1, kinds[i % 5]);
    expected += static_cast<char>('0' + i / 10);
    expected += static_cast<char>('0' + i % 10);
    BOOST_TEST(names[i] == expected, "field " << i);
  }
  BOOST_TEST(names[47] == "last_field_47");
  check_agreement<wide>();
}

BOOST_AUTO_TEST_CASE(cv_qualified_types_name_the_same_fields) {
  BOOST_TEST((field_name<const optimizer_state, 0>() == "weight"));
  BOOST_TEST((fallback_field_name<const volatile optimizer_state, 4>() == "step"));
  check_agreement<const moments>();
}

BOOST_AUTO_TEST_CASE(names_are_static) {
  // The views point to storage shared by all uses (not to a temporary), so they may be kept.
  const std::string_view a = field_name<optimizer_state, 0>();
  const std::string_view b = field_names<optimizer_state>()[0];
  BOOST_TEST(static_cast<const void*>(a.data()) == static_cast<const void*>(b.data()));
  BOOST_TEST(std::string(a) == "weight");
}

BOOST_AUTO_TEST_CASE(the_log_names_the_implementation_and_before_boost_1_84_it_is_the_fallback) {
  // Documents, in the test log, which path field_name() took on this build.
  BOOST_TEST_MESSAGE("CKPT_DETAIL_HAS_PFR_CORE_NAME = " << CKPT_DETAIL_HAS_PFR_CORE_NAME
                                                         << " (BOOST_VERSION " << BOOST_VERSION << ")");
  BOOST_TEST((CKPT_DETAIL_HAS_PFR_CORE_NAME == 0 || CKPT_DETAIL_HAS_PFR_CORE_NAME == 1));
#if BOOST_VERSION < 108400
  // Before 1.84 PFR has no field names, so the fallback must be the one in use.
  BOOST_TEST(CKPT_DETAIL_HAS_PFR_CORE_NAME == 0);
#endif
}

BOOST_AUTO_TEST_SUITE_END()  // test_field_names
