// ckpt::tensor and ckpt::dtype: spellings, sizes, typed views, validation of sizes.
#include <boost/test/unit_test.hpp>

#include <ckpt/tensor.hpp>

#include <array>
#include <limits>
#include <stdexcept>
#include <string>

BOOST_AUTO_TEST_SUITE(test_tensor)

BOOST_AUTO_TEST_CASE(every_dtype_spelling_round_trips) {
  const std::array<std::string_view, ckpt::detail::dtype_count> expected{
      "BOOL", "U8", "I8", "U16", "I16", "U32", "I32", "U64", "I64", "F16", "BF16", "F32", "F64",
      "C64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F6_E2M3", "F6_E3M2", "F4"};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto t = static_cast<ckpt::dtype>(i);
    BOOST_TEST(ckpt::to_string(t) == expected[i]);
    BOOST_TEST((ckpt::dtype_from_string(expected[i]) == t));
  }
  BOOST_TEST(!ckpt::dtype_from_string("F128").has_value());
  BOOST_TEST(!ckpt::dtype_from_string("f32").has_value());
}

BOOST_AUTO_TEST_CASE(each_dtype_has_its_bit_width_and_class_and_each_scalar_type_its_dtype) {
  BOOST_TEST(ckpt::detail::bit_width(ckpt::dtype::boolean) == 8u);
  BOOST_TEST(ckpt::detail::bit_width(ckpt::dtype::bf16) == 16u);
  BOOST_TEST(ckpt::detail::bit_width(ckpt::dtype::c64) == 64u);
  BOOST_TEST(ckpt::detail::bit_width(ckpt::dtype::f6_e3m2) == 6u);
  BOOST_TEST(ckpt::detail::bit_width(ckpt::dtype::f4) == 4u);
  BOOST_TEST(ckpt::detail::has_scalar(ckpt::dtype::c64));
  BOOST_TEST(!ckpt::detail::has_scalar(ckpt::dtype::f8_e4m3));
  BOOST_TEST(ckpt::detail::is_floating(ckpt::dtype::f8_e5m2fnuz));
  BOOST_TEST(!ckpt::detail::is_floating(ckpt::dtype::i64));
  BOOST_TEST(ckpt::detail::is_sub_byte(ckpt::dtype::f4));
  BOOST_TEST(!ckpt::detail::is_sub_byte(ckpt::dtype::f8_e8m0));
  static_assert(ckpt::dtype_of<Eigen::bfloat16> == ckpt::dtype::bf16);
  static_assert(ckpt::dtype_of<std::int64_t> == ckpt::dtype::i64);
  static_assert(ckpt::dtype_of<long long> == ckpt::dtype::i64);
  static_assert(ckpt::dtype_of<std::uint8_t> == ckpt::dtype::u8);
  static_assert(ckpt::dtype_of<std::complex<float>> == ckpt::dtype::c64);
  static_assert(!ckpt::scalar<char>);
  static_assert(!ckpt::scalar<long double>);
  static_assert(!ckpt::scalar<std::complex<double>>);
}

BOOST_AUTO_TEST_CASE(sizes_are_checked) {
  BOOST_TEST(ckpt::detail::numel_of(ckpt::dims{}) == 1);
  BOOST_TEST(ckpt::detail::numel_of(ckpt::dims{3, 0, 5}) == 0);
  BOOST_TEST(ckpt::detail::numel_of(ckpt::dims{2, 3, 4}) == 24);
  BOOST_CHECK_THROW((void)ckpt::detail::numel_of(ckpt::dims{-1}), std::invalid_argument);
  BOOST_CHECK_THROW((void)ckpt::detail::numel_of(ckpt::dims{std::int64_t{1} << 40, std::int64_t{1} << 40}),
                    std::invalid_argument);
  BOOST_TEST(ckpt::detail::nbytes_of(ckpt::dtype::f4, 4) == 2u);
  BOOST_TEST(ckpt::detail::nbytes_of(ckpt::dtype::f6_e2m3, 4) == 3u);
  BOOST_CHECK_THROW((void)ckpt::detail::nbytes_of(ckpt::dtype::f4, 3), std::invalid_argument);
  BOOST_CHECK_THROW((void)ckpt::detail::nbytes_of(ckpt::dtype::f64, std::numeric_limits<std::int64_t>::max()),
                    std::invalid_argument);
  BOOST_TEST(ckpt::to_string(ckpt::dims{2, 3}) == "[2, 3]");
  BOOST_TEST(ckpt::to_string(ckpt::dims{}) == "[]");
}

BOOST_AUTO_TEST_CASE(copy_of_checks_the_byte_count) {
  const std::array<float, 3> values{1, 2, 3};
  try {
    (void)ckpt::tensor::copy_of(ckpt::dtype::f32, {2, 2}, std::as_bytes(std::span(values)));
    BOOST_FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "ckpt: a F32 tensor of shape [2, 2] needs 16 bytes, got 12");
  }
}

BOOST_AUTO_TEST_CASE(typed_views_check_the_dtype) {
  const std::array<std::int16_t, 4> values{1, -2, 3, -4};
  const auto t = ckpt::tensor::copy_of(ckpt::dtype::i16, {2, 2}, std::as_bytes(std::span(values)));
  BOOST_TEST(t.numel() == 4);
  BOOST_TEST(t.nbytes() == 8u);
  BOOST_TEST(t.as<std::int16_t>()[3] == -4);
  try {
    (void)t.as<float>();
    BOOST_FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "ckpt: tensor of dtype I16 viewed as F32");
  }
}

BOOST_AUTO_TEST_CASE(views_share_or_realign) {
  alignas(8) std::array<std::byte, 12> storage{};
  const float one = 1.0f;
  std::memcpy(storage.data() + 1, &one, 4);
  std::memcpy(storage.data() + 8, &one, 4);
  const auto owner = std::make_shared<int>(0);
  const auto aligned = ckpt::tensor::view_of(ckpt::dtype::f32, {1}, std::span(storage).subspan(8, 4), owner);
  BOOST_TEST(aligned.bytes().data() == storage.data() + 8);
  const auto misaligned = ckpt::tensor::view_of(ckpt::dtype::f32, {1}, std::span(storage).subspan(1, 4), owner);
  BOOST_TEST(misaligned.bytes().data() != storage.data() + 1);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(misaligned.bytes().data()) % alignof(float) == 0u);
  BOOST_TEST(misaligned.as<float>()[0] == 1.0f);
}

BOOST_AUTO_TEST_CASE(equality_compares_dtype_shape_and_bytes) {
  const std::array<std::int32_t, 2> a{1, 2};
  const std::array<std::int32_t, 2> b{1, 3};
  const auto x = ckpt::tensor::copy_of(ckpt::dtype::i32, {2}, std::as_bytes(std::span(a)));
  BOOST_TEST((x == ckpt::tensor::copy_of(ckpt::dtype::i32, {2}, std::as_bytes(std::span(a)))));
  BOOST_TEST(!(x == ckpt::tensor::copy_of(ckpt::dtype::i32, {2}, std::as_bytes(std::span(b)))));
  BOOST_TEST(!(x == ckpt::tensor::copy_of(ckpt::dtype::i32, {1, 2}, std::as_bytes(std::span(a)))));
  BOOST_TEST(!(x == ckpt::tensor::copy_of(ckpt::dtype::u32, {2}, std::as_bytes(std::span(a)))));
  BOOST_TEST((ckpt::tensor{} == ckpt::tensor{}));
}

BOOST_AUTO_TEST_SUITE_END()  // test_tensor
