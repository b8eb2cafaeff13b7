// The random engines of <random> as leaves: their full state saved and restored exactly, inside
// named structures, through a file.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <random>
#include <stdexcept>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_random)

namespace {

using ckpt_test::message_of;
using ckpt_test::temp_dir;

// The next `n` numbers an engine draws (on a copy: `e` itself is left as it is).
template <class E>
std::vector<typename E::result_type> next_draws(E e, int n = 2000) {
  std::vector<typename E::result_type> out;
  for (int i = 0; i < n; ++i) out.push_back(e());
  return out;
}

// Saves `e` after `advance` draws to a file, restores it into a differently seeded engine, and
// checks that both then draw the same numbers.
template <class E>
void check_round_trip(int advance) {
  E e(12345u);
  e.discard(static_cast<unsigned long long>(advance));
  temp_dir dir;
  ckpt::save(dir.path() / "e.safetensors", ckpt::of_params(e, "rng"));
  const ckpt::checkpoint t = ckpt::load(dir.path() / "e.safetensors");
  BOOST_TEST(t.get("rng").dtype() == ckpt::dtype::u64);
  BOOST_TEST(t.get("rng").shape().size() == 1u);
  E restored(7u);
  BOOST_REQUIRE(next_draws(restored) != next_draws(e));
  ckpt::read_params(t, restored, {.prefix = "rng"});
  BOOST_TEST(restored == e);
  BOOST_TEST(next_draws(restored) == next_draws(e));
}

struct model {
  Eigen::MatrixXf w;
  std::mt19937_64 data_order;
  std::int64_t position = 0;
};

}  // namespace

BOOST_AUTO_TEST_CASE(every_standard_engine_round_trips_mid_stream) {
  for (const int advance : {0, 1, 311, 624, 1000, 100003}) {
    check_round_trip<std::mt19937>(advance);
    check_round_trip<std::mt19937_64>(advance);
    check_round_trip<std::minstd_rand0>(advance);
    check_round_trip<std::minstd_rand>(advance);
    check_round_trip<std::ranlux24_base>(advance);
    check_round_trip<std::ranlux48_base>(advance);
    check_round_trip<std::ranlux24>(advance);
    check_round_trip<std::ranlux48>(advance);
    check_round_trip<std::knuth_b>(advance);
    check_round_trip<std::default_random_engine>(advance);
    check_round_trip<std::independent_bits_engine<std::mt19937, 13, std::uint32_t>>(advance);
  }
}

BOOST_AUTO_TEST_CASE(engines_are_saved_as_u64_words_in_the_documented_shapes_the_seed_first) {
#if defined(__GLIBCXX__)
  BOOST_TEST(ckpt::detail::leaf_shape(std::mt19937{}) == (ckpt::dims{625}));
  BOOST_TEST(ckpt::detail::leaf_shape(std::mt19937_64{}) == (ckpt::dims{313}));
  BOOST_TEST(ckpt::detail::leaf_shape(std::minstd_rand{}) == (ckpt::dims{1}));
#endif
  BOOST_TEST(ckpt::leaf_traits<std::mt19937>::dtype(std::mt19937{}) == ckpt::dtype::u64);
  // The first word of a freshly seeded mt19937 is its seed.
  const ckpt::tensor x = ckpt::detail::to_tensor(std::mt19937(42u));
  BOOST_TEST(x.as<std::uint64_t>()[0] == 42u);
}

BOOST_AUTO_TEST_CASE(an_engine_inside_a_structure_is_named_and_restored) {
  model m{Eigen::MatrixXf::Constant(2, 3, 1.5f), std::mt19937_64(99u), 17};
  std::vector<int> order(100);
  for (int i = 0; i < 100; ++i) order[static_cast<std::size_t>(i)] = i;
  std::shuffle(order.begin(), order.end(), m.data_order);
  temp_dir dir;
  ckpt::save(dir.path() / "m.safetensors", ckpt::of_params(m, "model"));
  const ckpt::checkpoint t = ckpt::load(dir.path() / "m.safetensors");
  BOOST_TEST(t.names() == (std::vector<std::string>{"model.data_order", "model.position", "model.w"}));
  const model back = ckpt::to_params(t, model{Eigen::MatrixXf::Zero(2, 3), std::mt19937_64(1u), 0},
                                     {.prefix = "model"});
  BOOST_TEST(back.position == 17);
  BOOST_TEST(back.data_order == m.data_order);
  // The next epoch's order is the one the saved run would have drawn.
  std::vector<int> a = order, b = order;
  std::shuffle(a.begin(), a.end(), m.data_order);
  std::mt19937_64 resumed = back.data_order;
  std::shuffle(b.begin(), b.end(), resumed);
  BOOST_TEST(a == b);
}

BOOST_AUTO_TEST_CASE(numbers_that_are_no_state_of_the_engine_are_refused) {
  // An engine of 32-bit words cannot hold 2^40.
  using engine = std::linear_congruential_engine<std::uint32_t, 48271, 0, 2147483647>;
  const std::uint64_t bad = std::uint64_t{1} << 40;
  const ckpt::checkpoint t = ckpt::of_tensor("rng", ckpt::tensor::copy_of(ckpt::dtype::u64, {1},
                                                                          std::as_bytes(std::span(&bad, 1))));
  engine e(5u);
  const engine before = e;
  const std::string message = message_of<std::invalid_argument>([&] { ckpt::read_params(t, e, {.prefix = "rng"}); });
  BOOST_TEST(message.find("does not hold a state of this random engine") != std::string::npos, message);
  BOOST_TEST(e == before);
}

BOOST_AUTO_TEST_SUITE_END()  // test_random
