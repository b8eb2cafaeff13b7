// The seed's checkpoint operations that need no template: entries, names, of_int, concat.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/checkpoint.hpp>

#include <array>
#include <limits>
#include <stdexcept>
#include <string>

BOOST_AUTO_TEST_SUITE(test_checkpoint)

namespace {

using ckpt_test::floats;
using ckpt_test::message_of;

}  // namespace

BOOST_AUTO_TEST_CASE(empty_checkpoint_has_no_entries) {
  const ckpt::checkpoint empty;
  BOOST_TEST(empty.size() == 0u);
  BOOST_TEST(empty.empty());
  BOOST_TEST(empty.names().empty());
  BOOST_TEST(empty.find("x") == nullptr);
  BOOST_TEST(empty.metadata().empty());
  BOOST_TEST(std::distance(empty.begin(), empty.end()) == 0);
}

BOOST_AUTO_TEST_CASE(of_tensor_holds_one_entry) {
  const auto t = ckpt::of_tensor("w", floats({1, 2, 3}));
  BOOST_TEST(t.names() == std::vector<std::string>{"w"});
  const ckpt::tensor& w = t.get("w");
  BOOST_TEST(w.dtype() == ckpt::dtype::f32);
  BOOST_TEST((std::vector<std::int64_t>(w.shape().begin(), w.shape().end()) == ckpt::dims{3}));
  BOOST_TEST(w.as<float>()[2] == 3.0f);
  BOOST_TEST(t.find("w") == &w);
}

BOOST_AUTO_TEST_CASE(of_tensor_rejects_empty_and_reserved_names) {
  BOOST_TEST(message_of<std::invalid_argument>([] { (void)ckpt::of_tensor("", floats({1})); }) ==
             "ckpt: entry names must not be empty");
  BOOST_TEST(message_of<std::invalid_argument>([] { (void)ckpt::of_tensor("__metadata__", floats({1})); }) ==
             "ckpt: '__metadata__' is reserved by the safetensors format and cannot name an entry");
}

BOOST_AUTO_TEST_CASE(get_quotes_a_missing_name) {
  const auto t = ckpt::of_tensor("a", floats({1}));
  BOOST_TEST(t.find("b") == nullptr);
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)t.get("b"); }) ==
             "ckpt: no entry named 'b'");
}

BOOST_AUTO_TEST_CASE(of_int_round_trips_through_to_int) {
  for (const std::int64_t i : {std::int64_t{0}, std::int64_t{-7}, std::int64_t{123456},
                               std::int64_t{std::numeric_limits<std::int32_t>::max()},
                               std::int64_t{std::numeric_limits<std::int32_t>::min()}}) {
    const auto t = ckpt::of_int("step", i);
    BOOST_TEST(ckpt::to_int("step", t) == i);
    const ckpt::tensor& x = t.get("step");
    BOOST_TEST(x.dtype() == ckpt::dtype::i32);
    BOOST_TEST(x.rank() == 1u);
    BOOST_TEST(x.shape()[0] == 1);
  }
}

BOOST_AUTO_TEST_CASE(of_int_stores_values_outside_32_bits_as_i64) {
  for (const std::int64_t i : {std::int64_t{1} << 31, -(std::int64_t{1} << 31) - 1, std::numeric_limits<std::int64_t>::max()}) {
    const auto t = ckpt::of_int("step", i);
    BOOST_TEST(t.get("step").dtype() == ckpt::dtype::i64);
    BOOST_TEST(t.get("step").shape()[0] == 1);
    BOOST_TEST(ckpt::to_int("step", t) == i);
  }
  BOOST_TEST(ckpt::of_int("step", -(std::int64_t{1} << 31)).get("step").dtype() == ckpt::dtype::i32);
  BOOST_CHECK_THROW((void)ckpt::of_int("", 1), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(to_int_rejects_missing_and_wrong_entries) {
  const auto t = ckpt::concat({ckpt::of_tensor("f", floats({1})), ckpt::of_tensor("v", floats({1, 2}))});
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_int("n", t); }) ==
             "ckpt: to_int: no entry named 'n'");
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_int("f", t); }) ==
             "ckpt: to_int: entry 'f' is not a one-element I32 or I64 tensor (it is F32 of shape [1])");
  const std::array<std::int32_t, 2> two{1, 2};
  const auto pair = ckpt::of_tensor("p", ckpt::tensor::copy_of(ckpt::dtype::i32, {2}, std::as_bytes(std::span(two))));
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::to_int("p", pair); }) ==
             "ckpt: to_int: entry 'p' is not a one-element I32 or I64 tensor (it is I32 of shape [2])");
}

BOOST_AUTO_TEST_CASE(concat_merges_and_sorts_names) {
  const auto t = ckpt::concat({ckpt::of_tensor("b", floats({1})), ckpt::of_int("a", 3),
                               ckpt::of_tensor("c.x", floats({2, 3})), ckpt::checkpoint{}});
  BOOST_TEST(t.names() == (std::vector<std::string>{"a", "b", "c.x"}));
  BOOST_TEST(t.size() == 3u);
  std::vector<std::string> iterated;
  for (const auto& [name, x] : t) iterated.push_back(name);
  BOOST_TEST(iterated == t.names());
}

BOOST_AUTO_TEST_CASE(concat_rejects_a_name_in_two_checkpoints) {
  BOOST_TEST(message_of<std::invalid_argument>([] {
               (void)ckpt::concat({ckpt::of_int("a", 1), ckpt::of_int("b", 1), ckpt::of_int("a", 2)});
             }) == "ckpt: duplicate entry name 'a'");
}

BOOST_AUTO_TEST_CASE(names_sort_bytewise) {
  const auto t = ckpt::concat({ckpt::of_int("b", 1), ckpt::of_int("B", 1), ckpt::of_int("a.10", 1),
                               ckpt::of_int("a.9", 1), ckpt::of_int("\xc3\xa9", 1)});
  BOOST_TEST(t.names() == (std::vector<std::string>{"B", "a.10", "a.9", "b", "\xc3\xa9"}));
}

BOOST_AUTO_TEST_CASE(metadata_is_kept_and_merged) {
  const auto a = ckpt::of_int("a", 1).with_metadata({{"loss", "0.5"}});
  const auto b = ckpt::of_int("b", 1).with_metadata({{"loss", "0.5"}, {"step", "3"}});
  BOOST_TEST(a.metadata().at("loss") == "0.5");
  BOOST_TEST(ckpt::to_int("a", a) == 1);
  const auto both = ckpt::concat({a, b});
  BOOST_TEST(both.metadata().size() == 2u);
  const auto other = ckpt::of_int("c", 1).with_metadata({{"loss", "0.7"}});
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)ckpt::concat({a, other}); }) ==
             "ckpt: concat: metadata key 'loss' has two different values ('0.5' and '0.7')");
}

BOOST_AUTO_TEST_CASE(copies_share_entries) {
  const auto t = ckpt::of_tensor("w", floats({1, 2}));
  const ckpt::checkpoint copy = t;
  BOOST_TEST(copy.find("w") == t.find("w"));
  BOOST_TEST(copy.get("w").bytes().data() == t.get("w").bytes().data());
}

BOOST_AUTO_TEST_SUITE_END()  // test_checkpoint
