// The safetensors format, rule by rule: files built in memory are fed to ckpt::parse and every
// malformed one must be refused with a ckpt::format_error carrying the exact message (file name
// and broken rule), without a crash or a huge allocation. Then what save writes, byte by byte,
// names that need escaping, and loaded tensors outliving their file.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <boost/json.hpp>  // declarations only: the test links Boost::json

#include <ckpt/file.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <new>
#include <numeric>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "allocation_watch.hpp"

BOOST_AUTO_TEST_SUITE(test_format)

using ckpt_test::allocation_cap;
namespace {
constexpr std::size_t allocation_cap_bytes = std::size_t{64} << 20;  // 64 MiB
}  // namespace

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

const fs::path origin = "mem.safetensors";

// The 8-byte little-endian `length`, then `rest` (header and data).
std::vector<std::byte> raw_file(std::uint64_t length, std::string_view rest) {
  std::vector<std::byte> out(8 + rest.size());
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<std::byte>((length >> (8 * i)) & 0xFF);
  if (!rest.empty()) std::memcpy(out.data() + 8, rest.data(), rest.size());
  return out;
}

// A file whose header is `header` (its exact length) followed by `data`.
std::vector<std::byte> file_of(std::string_view header, std::string_view data = {}) {
  return raw_file(header.size(), std::string(header) + std::string(data));
}

// `"name":{"dtype":...,"shape":[...],"data_offsets":[begin,end]}`
std::string entry(std::string_view name, std::string_view dtype, std::string_view shape,
                  std::uint64_t begin, std::uint64_t end) {
  return "\"" + std::string(name) + "\":{\"dtype\":\"" + std::string(dtype) + "\",\"shape\":" +
         std::string(shape) + ",\"data_offsets\":[" + std::to_string(begin) + "," +
         std::to_string(end) + "]}";
}

// `n` distinct bytes.
std::string data_of(std::size_t n) {
  std::string out(n, '\0');
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i * 7 + 1);
  return out;
}

// The full message of a format_error about `origin` breaking `rule`.
std::string msg(std::string_view rule) {
  return "ckpt: 'mem.safetensors' is not a valid safetensors file: " + std::string(rule);
}

// The what() of the format_error that parsing `file` raises, or a description of what happened
// instead. Checks the error's path() and rule() agree with its message.
std::string rejection(const std::vector<std::byte>& file) {
  try {
    const ckpt::checkpoint c = ckpt::parse(file, origin);
    return "<accepted with " + std::to_string(c.size()) + " entries>";
  } catch (const ckpt::format_error& e) {
    BOOST_TEST(e.path() == origin);
    BOOST_TEST(std::string(e.what()) == msg(e.rule()));
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a ckpt::format_error: ") + e.what() + ">";
  } catch (...) {
    return "<not a std::exception>";
  }
}

// Parses a file that must be valid.
ckpt::checkpoint accept(const std::vector<std::byte>& file) { return ckpt::parse(file, origin); }

std::string text_of(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

ckpt::tensor tensor_of(ckpt::dtype type, ckpt::dims shape) {
  const std::size_t size = ckpt::detail::nbytes_of(type, ckpt::detail::numel_of(shape));
  const std::string bytes = data_of(size);
  return ckpt::tensor::copy_of(type, std::move(shape), std::as_bytes(std::span(bytes)));
}

ckpt::dims dims_of(std::span<const std::int64_t> shape) { return {shape.begin(), shape.end()}; }

// Captures what is written to std::cerr while it lives.
class cerr_capture {
 public:
  cerr_capture() : old_(std::cerr.rdbuf(out_.rdbuf())) {}
  cerr_capture(const cerr_capture&) = delete;
  cerr_capture& operator=(const cerr_capture&) = delete;
  ~cerr_capture() { std::cerr.rdbuf(old_); }
  [[nodiscard]] std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::streambuf* old_;
};

const std::string a_f32_2 = entry("a", "F32", "[2]", 0, 8);  // with data_of(8)

}  // namespace

BOOST_AUTO_TEST_CASE(the_allocation_cap_works) {
  // Called directly, operator new cannot be elided: the cap must refuse this.
  const allocation_cap cap(allocation_cap_bytes);
  BOOST_CHECK_THROW(::operator delete(::operator new(allocation_cap_bytes + 1)), std::bad_alloc);
  ::operator delete(::operator new(16));
}

// --- The length prefix ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(files_shorter_than_8_bytes_are_refused_with_their_size) {
  for (std::size_t n = 0; n < 8; ++n) {
    const std::vector<std::byte> file(n, std::byte{0});
    BOOST_TEST(rejection(file) ==
               msg("the file has " + std::to_string(n) + " bytes, fewer than the 8 of the header length"));
  }
}

BOOST_AUTO_TEST_CASE(a_header_length_over_the_limit_is_refused_without_allocating_it) {
  const allocation_cap cap(allocation_cap_bytes);
  BOOST_TEST(rejection(raw_file(100'000'001, "{}")) ==
             msg("the header length 100000001 exceeds the limit of 100000000 bytes"));
  BOOST_TEST(rejection(raw_file(std::uint64_t{1} << 63, "")) ==
             msg("the header length 9223372036854775808 exceeds the limit of 100000000 bytes"));
  BOOST_TEST(rejection(raw_file(std::numeric_limits<std::uint64_t>::max(), "{}")) ==
             msg("the header length 18446744073709551615 exceeds the limit of 100000000 bytes"));
  // Exactly the limit is allowed by the limit, then found to run past this small file.
  BOOST_TEST(rejection(raw_file(100'000'000, "{}")) ==
             msg("the header length 100000000 runs past the end of the 10-byte file"));
}

BOOST_AUTO_TEST_CASE(a_header_length_past_the_end_of_the_file_is_refused) {
  BOOST_TEST(rejection(raw_file(100, "{}        ")) ==
             msg("the header length 100 runs past the end of the 18-byte file"));
  BOOST_TEST(rejection(raw_file(1, "")) == msg("the header length 1 runs past the end of the 8-byte file"));
  // One byte short.
  const std::string header = "{" + a_f32_2 + "}";
  BOOST_TEST(rejection(raw_file(header.size() + 1, header)) ==
             msg("the header length " + std::to_string(header.size() + 1) + " runs past the end of the " +
                 std::to_string(8 + header.size()) + "-byte file"));
}

// --- The JSON header -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_header_that_is_not_strict_json_is_refused) {
  BOOST_TEST(rejection(file_of("")) == msg("the header is not valid JSON (incomplete JSON)"));
  BOOST_TEST(rejection(file_of("        ")) == msg("the header is not valid JSON (incomplete JSON)"));
  BOOST_TEST(rejection(file_of("{")) == msg("the header is not valid JSON (incomplete JSON)"));
  BOOST_TEST(rejection(file_of("nope")) == msg("the header is not valid JSON (syntax error)"));
  BOOST_TEST(rejection(file_of("{\"a\":}")) == msg("the header is not valid JSON (syntax error)"));
  BOOST_TEST(rejection(file_of("{'a':1}")) == msg("the header is not valid JSON (syntax error)"));
  // Comments and trailing commas are not JSON.
  BOOST_TEST(rejection(file_of("{/* c */}")) == msg("the header is not valid JSON (syntax error)"));
  BOOST_TEST(rejection(file_of("{" + a_f32_2 + ",}", data_of(8))) ==
             msg("the header is not valid JSON (syntax error)"));
}

BOOST_AUTO_TEST_CASE(a_header_that_is_not_a_json_object_is_refused_naming_what_it_is) {
  BOOST_TEST(rejection(file_of("[]")) == msg("the header is a JSON array, not an object"));
  BOOST_TEST(rejection(file_of("[{}]")) == msg("the header is a JSON array, not an object"));
  BOOST_TEST(rejection(file_of("\"{}\"")) == msg("the header is a string, not a JSON object"));
  BOOST_TEST(rejection(file_of("42")) == msg("the header is a number, not a JSON object"));
  BOOST_TEST(rejection(file_of("-1")) == msg("the header is a negative number, not a JSON object"));
  BOOST_TEST(rejection(file_of("1.5")) == msg("the header is a non-integer number, not a JSON object"));
  BOOST_TEST(rejection(file_of("true")) == msg("the header is a boolean, not a JSON object"));
  BOOST_TEST(rejection(file_of("null")) == msg("the header is null, not a JSON object"));
}

BOOST_AUTO_TEST_CASE(an_entry_that_is_not_an_object_is_refused_naming_what_it_is) {
  BOOST_TEST(rejection(file_of("{\"a\":5}")) == msg("entry 'a' is a number instead of an object"));
  BOOST_TEST(rejection(file_of("{\"a\":\"F32\"}")) == msg("entry 'a' is a string instead of an object"));
  BOOST_TEST(rejection(file_of("{\"a\":[0,8]}")) == msg("entry 'a' is an array instead of an object"));
  BOOST_TEST(rejection(file_of("{\"a\":null}")) == msg("entry 'a' is null instead of an object"));
  BOOST_TEST(rejection(file_of("{\"a\":true}")) == msg("entry 'a' is a boolean instead of an object"));
  // After a good entry too.
  BOOST_TEST(rejection(file_of("{" + a_f32_2 + ",\"b\":1}", data_of(8))) ==
             msg("entry 'b' is a number instead of an object"));
}

BOOST_AUTO_TEST_CASE(an_entry_missing_dtype_shape_or_data_offsets_is_refused_naming_the_field) {
  BOOST_TEST(rejection(file_of(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", data_of(8))) ==
             msg("entry 'a' has no 'dtype'"));
  BOOST_TEST(rejection(file_of(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", data_of(8))) ==
             msg("entry 'a' has no 'shape'"));
  BOOST_TEST(rejection(file_of(R"({"a":{"dtype":"F32","shape":[2]}})", data_of(8))) ==
             msg("entry 'a' has no 'data_offsets'"));
  BOOST_TEST(rejection(file_of(R"({"a":{}})")) == msg("entry 'a' has no 'dtype'"));
  // Field names are case-sensitive: "DType" is an unknown field, so dtype is missing.
  BOOST_TEST(rejection(file_of(R"({"a":{"DType":"F32","shape":[2],"data_offsets":[0,8]}})", data_of(8))) ==
             msg("entry 'a' has no 'dtype'"));
}

BOOST_AUTO_TEST_CASE(a_dtype_that_is_not_a_string_is_refused_naming_what_it_is) {
  const auto with_dtype = [](std::string_view dtype) {
    return file_of(R"({"a":{"dtype":)" + std::string(dtype) + R"(,"shape":[2],"data_offsets":[0,8]}})",
                   data_of(8));
  };
  BOOST_TEST(rejection(with_dtype("32")) == msg("entry 'a' has a number as 'dtype' instead of a string"));
  BOOST_TEST(rejection(with_dtype("[\"F32\"]")) == msg("entry 'a' has an array as 'dtype' instead of a string"));
  BOOST_TEST(rejection(with_dtype("{}")) == msg("entry 'a' has an object as 'dtype' instead of a string"));
  BOOST_TEST(rejection(with_dtype("null")) == msg("entry 'a' has null as 'dtype' instead of a string"));
  BOOST_TEST(rejection(with_dtype("false")) == msg("entry 'a' has a boolean as 'dtype' instead of a string"));
}

BOOST_AUTO_TEST_CASE(a_shape_that_is_not_an_array_of_non_negative_integers_is_refused) {
  const auto with_shape = [](std::string_view shape) {
    return file_of(R"({"a":{"dtype":"F32","shape":)" + std::string(shape) + R"(,"data_offsets":[0,8]}})",
                   data_of(8));
  };
  const std::string not_array = " as 'shape' instead of an array of non-negative integers";
  BOOST_TEST(rejection(with_shape("2")) == msg("entry 'a' has a number" + not_array));
  BOOST_TEST(rejection(with_shape("\"[2]\"")) == msg("entry 'a' has a string" + not_array));
  BOOST_TEST(rejection(with_shape("{\"0\":2}")) == msg("entry 'a' has an object" + not_array));
  BOOST_TEST(rejection(with_shape("null")) == msg("entry 'a' has null" + not_array));
  BOOST_TEST(rejection(with_shape("[[2]]")) == msg("entry 'a' has a nested array" + not_array));
  BOOST_TEST(rejection(with_shape("[-2]")) == msg("entry 'a' has a negative number in 'shape'"));
  BOOST_TEST(rejection(with_shape("[2,-1]")) == msg("entry 'a' has a negative number in 'shape'"));
  BOOST_TEST(rejection(with_shape("[1.5]")) == msg("entry 'a' has a non-integer number in 'shape'"));
  BOOST_TEST(rejection(with_shape("[2e0]")) == msg("entry 'a' has a non-integer number in 'shape'"));
  BOOST_TEST(rejection(with_shape("[9223372036854775808]")) == msg("entry 'a' has a number too large in 'shape'"));
}

// Values of the wrong JSON type inside the shape array must be reported like the other bad
// values there: naming the entry and the field.
BOOST_AUTO_TEST_CASE(a_non_number_in_shape_or_data_offsets_is_refused_naming_the_entry_and_field) {
  const auto with_shape = [](std::string_view shape) {
    return file_of(R"({"a":{"dtype":"F32","shape":)" + std::string(shape) + R"(,"data_offsets":[0,8]}})",
                   data_of(8));
  };
  BOOST_TEST(rejection(with_shape("[true]")) == msg("entry 'a' has a boolean in 'shape'"));
  BOOST_TEST(rejection(with_shape("[\"2\"]")) == msg("entry 'a' has a string in 'shape'"));
  BOOST_TEST(rejection(with_shape("[null]")) == msg("entry 'a' has null in 'shape'"));
  BOOST_TEST(rejection(with_shape("[{}]")) == msg("entry 'a' has an object in 'shape'"));
  BOOST_TEST(rejection(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,true]}})", data_of(8))) ==
             msg("entry 'a' has a boolean in 'data_offsets'"));
}

// An integer beyond 64 bits is an integer: too large, not "non-integer".
BOOST_AUTO_TEST_CASE(a_shape_integer_beyond_64_bits_is_refused_as_too_large_not_as_non_integer) {
  BOOST_TEST(rejection(file_of(R"({"a":{"dtype":"F32","shape":[18446744073709551616],"data_offsets":[0,8]}})",
                               data_of(8))) == msg("entry 'a' has a number too large in 'shape'"));
}

BOOST_AUTO_TEST_CASE(data_offsets_that_are_not_two_non_negative_integers_are_refused) {
  const auto with_offsets = [](std::string_view offsets) {
    return file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)" + std::string(offsets) + "}}",
                   data_of(8));
  };
  const std::string not_array = " as 'data_offsets' instead of an array of two non-negative integers";
  BOOST_TEST(rejection(with_offsets("[]")) == msg("entry 'a' has 'data_offsets' of 0 numbers instead of 2"));
  BOOST_TEST(rejection(with_offsets("[8]")) == msg("entry 'a' has 'data_offsets' of 1 numbers instead of 2"));
  BOOST_TEST(rejection(with_offsets("[0,8,8]")) == msg("entry 'a' has 'data_offsets' of 3 numbers instead of 2"));
  BOOST_TEST(rejection(with_offsets("8")) == msg("entry 'a' has a number" + not_array));
  BOOST_TEST(rejection(with_offsets("\"0,8\"")) == msg("entry 'a' has a string" + not_array));
  BOOST_TEST(rejection(with_offsets("{}")) == msg("entry 'a' has an object" + not_array));
  BOOST_TEST(rejection(with_offsets("[[0,8]]")) == msg("entry 'a' has a nested array" + not_array));
  BOOST_TEST(rejection(with_offsets("[-8,0]")) == msg("entry 'a' has a negative number in 'data_offsets'"));
  BOOST_TEST(rejection(with_offsets("[0,8.0]")) == msg("entry 'a' has a non-integer number in 'data_offsets'"));
  BOOST_TEST(rejection(with_offsets("[0,9223372036854775808]")) ==
             msg("entry 'a' has a number too large in 'data_offsets'"));
}

// --- Sizes ----------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(byte_count_must_match_the_shape) {
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[2,3]", 0, 16) + "}", data_of(16))) ==
             msg("entry 'a' of dtype F32 and shape [2, 3] needs 24 bytes but its data_offsets span 16"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "F64", "[]", 0, 4) + "}", data_of(4))) ==
             msg("entry 'a' of dtype F64 and shape [] needs 8 bytes but its data_offsets span 4"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "I16", "[0]", 0, 2) + "}", data_of(2))) ==
             msg("entry 'a' of dtype I16 and shape [0] needs 0 bytes but its data_offsets span 2"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "F4", "[4]", 0, 4) + "}", data_of(4))) ==
             msg("entry 'a' of dtype F4 and shape [4] needs 2 bytes but its data_offsets span 4"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "F6_E2M3", "[4]", 0, 4) + "}", data_of(4))) ==
             msg("entry 'a' of dtype F6_E2M3 and shape [4] needs 3 bytes but its data_offsets span 4"));
}

BOOST_AUTO_TEST_CASE(sub_byte_counts_must_be_whole_bytes) {
  BOOST_TEST(rejection(file_of("{" + entry("a", "F4", "[3]", 0, 2) + "}", data_of(2))) ==
             msg("entry 'a' has shape [3] whose byte count as F4 overflows or is not a whole number of bytes"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "F4", "[]", 0, 1) + "}", data_of(1))) ==
             msg("entry 'a' has shape [] whose byte count as F4 overflows or is not a whole number of bytes"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "F6_E3M2", "[2]", 0, 2) + "}", data_of(2))) ==
             msg("entry 'a' has shape [2] whose byte count as F6_E3M2 overflows or is not a whole number of bytes"));
  // Whole numbers of bytes are fine.
  const ckpt::checkpoint c = accept(file_of(
      "{" + entry("f4", "F4", "[2,3]", 0, 3) + "," + entry("f6", "F6_E2M3", "[4]", 3, 6) + "}", data_of(6)));
  BOOST_TEST(c.get("f4").nbytes() == 3u);
  BOOST_TEST(c.get("f6").nbytes() == 3u);
  BOOST_TEST(c.get("f6").numel() == 4);
}

BOOST_AUTO_TEST_CASE(overflowing_shapes_are_refused_without_allocating) {
  const allocation_cap cap(allocation_cap_bytes);
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[4611686018427387904,4]", 0, 16) + "}", data_of(16))) ==
             msg("entry 'a' has shape [4611686018427387904, 4] whose byte count as F32 overflows or is not "
                 "a whole number of bytes"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "U8", "[4294967296,4294967296]", 0, 16) + "}", data_of(16))) ==
             msg("entry 'a' has shape [4294967296, 4294967296] whose byte count as U8 overflows or is not "
                 "a whole number of bytes"));
  // The element count fits in 63 bits, the byte count does not.
  BOOST_TEST(rejection(file_of("{" + entry("a", "F64", "[2305843009213693952]", 0, 16) + "}", data_of(16))) ==
             msg("entry 'a' has shape [2305843009213693952] whose byte count as F64 overflows or is not "
                 "a whole number of bytes"));
  // Huge but representable: a plain mismatch, still nothing allocated.
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[1099511627776]", 0, 16) + "}", data_of(16))) ==
             msg("entry 'a' of dtype F32 and shape [1099511627776] needs 4398046511104 bytes but its "
                 "data_offsets span 16"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[1099511627776]", 0, 4398046511104) + "}", data_of(16))) ==
             msg("entry 'a' has data_offsets [0, 4398046511104] past the end of the 16-byte data buffer"));
}

// --- Offsets --------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(data_offsets_that_end_before_they_begin_are_refused) {
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[4]", 16, 0) + "}", data_of(16))) ==
             msg("entry 'a' has data_offsets [16, 0] that end before they begin"));
}

BOOST_AUTO_TEST_CASE(data_offsets_past_the_end_of_the_data_buffer_are_refused) {
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[4]", 0, 16) + "}", data_of(8))) ==
             msg("entry 'a' has data_offsets [0, 16] past the end of the 8-byte data buffer"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[2]", 8, 16) + "}", data_of(8))) ==
             msg("entry 'a' has data_offsets [8, 16] past the end of the 8-byte data buffer"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[0]", 9, 9) + "}", data_of(8))) ==
             msg("entry 'a' has data_offsets [9, 9] past the end of the 8-byte data buffer"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "U8", "[1]", 9223372036854775806, 9223372036854775807) + "}",
                               data_of(8))) ==
             msg("entry 'a' has data_offsets [9223372036854775806, 9223372036854775807] past the end of the "
                 "8-byte data buffer"));
}

BOOST_AUTO_TEST_CASE(overlapping_entries_are_refused_zero_size_ones_included) {
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[4]", 0, 16) + "," + entry("b", "F32", "[4]", 8, 24) + "}",
                               data_of(24))) == msg("entry 'b' overlaps entry 'a'"));
  // The same bytes twice under two names.
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "I32", "[2]", 0, 8) + "}",
                               data_of(8))) == msg("entry 'b' overlaps entry 'a'"));
  // A zero-size entry inside another one's bytes.
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[4]", 0, 16) + "," + entry("z", "F32", "[0]", 8, 8) + "}",
                               data_of(16))) == msg("entry 'z' overlaps entry 'a'"));
}

BOOST_AUTO_TEST_CASE(bytes_that_belong_to_no_entry_are_refused_as_a_hole) {
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[4]", 0, 16) + "," + entry("b", "F32", "[4]", 24, 40) + "}",
                               data_of(40))) ==
             msg("bytes 16 to 24 of the data buffer belong to no entry (a hole before 'b')"));
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[4]", 8, 24) + "}", data_of(24))) ==
             msg("bytes 0 to 8 of the data buffer belong to no entry (a hole before 'a')"));
}

BOOST_AUTO_TEST_CASE(bytes_after_the_last_entry_are_refused_as_trailing) {
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[4]", 0, 16) + "}", data_of(24))) ==
             msg("the data buffer has 8 trailing bytes after the last entry"));
  BOOST_TEST(rejection(file_of("{}", data_of(1))) == msg("the data buffer has 1 trailing bytes after the last entry"));
  BOOST_TEST(rejection(file_of("{" + entry("z", "F32", "[0]", 0, 0) + "}", data_of(4))) ==
             msg("the data buffer has 4 trailing bytes after the last entry"));
}

BOOST_AUTO_TEST_CASE(any_entry_field_and_data_order_and_zero_size_entries_anywhere_are_accepted) {
  // JSON order differs from data order; zero-size entries at the start, middle and end.
  const ckpt::checkpoint c = accept(file_of(
      "{" + entry("z0", "F64", "[0]", 0, 0) + "," + entry("b", "I16", "[3]", 16, 22) + "," +
          entry("a", "F32", "[2,2]", 0, 16) + "," + entry("z1", "U8", "[0,3]", 16, 16) + "," +
          entry("z2", "F32", "[3,0]", 22, 22) + "}",
      data_of(22)));
  BOOST_TEST(c.names() == (std::vector<std::string>{"a", "b", "z0", "z1", "z2"}), boost::test_tools::per_element());
  BOOST_TEST(text_of(c.get("a").bytes()) == data_of(22).substr(0, 16));
  BOOST_TEST(text_of(c.get("b").bytes()) == data_of(22).substr(16, 6));
  BOOST_TEST(dims_of(c.get("z1").shape()) == (ckpt::dims{0, 3}), boost::test_tools::per_element());
  BOOST_TEST(c.get("z2").nbytes() == 0u);
  // Fields in any order.
  const ckpt::checkpoint reordered =
      accept(file_of(R"({"a":{"data_offsets":[0,8],"shape":[2,1],"dtype":"I32"}})", data_of(8)));
  BOOST_TEST(ckpt::to_string(reordered.get("a").dtype()) == "I32");
  BOOST_TEST(dims_of(reordered.get("a").shape()) == (ckpt::dims{2, 1}), boost::test_tools::per_element());
  // No entries at all, and no data.
  BOOST_TEST(accept(file_of("{}")).empty());
  BOOST_TEST(accept(file_of("{" + entry("z", "F32", "[0]", 0, 0) + "}")).size() == 1u);
}

// --- Duplicates -----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(an_entry_name_that_appears_twice_is_refused_even_spelled_differently) {
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("a", "I32", "[2]", 8, 16) + "}",
                               data_of(16))) == msg("the entry name 'a' appears twice"));
  // Identical entries: last-wins parsing would accept this; the reader must not.
  BOOST_TEST(rejection(file_of("{" + a_f32_2 + "," + a_f32_2 + "}", data_of(8))) ==
             msg("the entry name 'a' appears twice"));
  // Not adjacent in the JSON.
  BOOST_TEST(rejection(file_of("{" + entry("x", "U8", "[1]", 0, 1) + "," + entry("b", "U8", "[1]", 1, 2) + "," +
                                   entry("x", "U8", "[1]", 2, 3) + "}",
                               data_of(3))) == msg("the entry name 'x' appears twice"));
  // Spelled differently in JSON, the same string once decoded.
  BOOST_TEST(rejection(file_of("{" + entry("a", "U8", "[1]", 0, 1) + "," + entry("\\u0061", "U8", "[1]", 1, 2) + "}",
                               data_of(2))) == msg("the entry name 'a' appears twice"));
}

BOOST_AUTO_TEST_CASE(a_field_that_appears_twice_in_an_entry_is_refused) {
  BOOST_TEST(rejection(file_of(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                               data_of(8))) == msg("entry 'a' has 'dtype' twice"));
  BOOST_TEST(rejection(file_of(R"({"a":{"dtype":"F32","shape":[2],"shape":[2],"data_offsets":[0,8]}})",
                               data_of(8))) == msg("entry 'a' has 'shape' twice"));
  BOOST_TEST(rejection(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"data_offsets":[0,8]}})",
                               data_of(8))) == msg("entry 'a' has 'data_offsets' twice"));
  BOOST_TEST(rejection(file_of(R"({"a":{"dtype":"I32","shape":[2],"data_offsets":[0,8],"dtype":"F32"}})",
                               data_of(8))) == msg("entry 'a' has 'dtype' twice"));
}

// --- __metadata__ ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(metadata_must_be_a_string_to_string_object) {
  BOOST_TEST(rejection(file_of(R"({"__metadata__":"x"})")) == msg("'__metadata__' is a string instead of an object"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":["x"]})")) == msg("'__metadata__' is an array instead of an object"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":1})")) == msg("'__metadata__' is a number instead of an object"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":null})")) == msg("'__metadata__' is null instead of an object"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{"k":1}})")) ==
             msg("'__metadata__' maps 'k' to a number instead of a string"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{"k":-1.5}})")) ==
             msg("'__metadata__' maps 'k' to a non-integer number instead of a string"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{"k":true}})")) ==
             msg("'__metadata__' maps 'k' to a boolean instead of a string"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{"k":null}})")) ==
             msg("'__metadata__' maps 'k' to null instead of a string"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{"ok":"v","k":{}}})")) ==
             msg("'__metadata__' maps 'k' to an object instead of a string"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{"k":["v"]}})")) ==
             msg("'__metadata__' maps 'k' to an array instead of a string"));
  // A tensor-like entry named __metadata__ is metadata, and not a valid one.
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data_of(8))) ==
             msg("'__metadata__' maps 'shape' to an array instead of a string"));
}

BOOST_AUTO_TEST_CASE(metadata_or_a_metadata_key_that_appears_twice_is_refused) {
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{"a":"1"},"__metadata__":{"b":"2"}})")) ==
             msg("'__metadata__' appears twice"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{},"__metadata__":{}})")) == msg("'__metadata__' appears twice"));
  BOOST_TEST(rejection(file_of(R"({"__metadata__":{"k":"1","k":"1"}})")) ==
             msg("'__metadata__' has the key 'k' twice"));
}

BOOST_AUTO_TEST_CASE(metadata_is_kept) {
  const ckpt::checkpoint c = accept(file_of(
      R"({"__metadata__":{"format":"pt","empty":"","esc":"q\"b\\n\nt\tu\u00e9"},)" + a_f32_2 + "}", data_of(8)));
  const ckpt::metadata_map expected{{"format", "pt"}, {"empty", ""}, {"esc", "q\"b\\n\nt\tu\xc3\xa9"}};
  BOOST_TEST((c.metadata() == expected));
  BOOST_TEST(c.names() == std::vector<std::string>{"a"}, boost::test_tools::per_element());
  // After the entries rather than first.
  const ckpt::checkpoint last = accept(file_of("{" + a_f32_2 + R"(,"__metadata__":{"k":"v"}})", data_of(8)));
  BOOST_TEST((last.metadata() == ckpt::metadata_map{{"k", "v"}}));
  BOOST_TEST(last.names() == std::vector<std::string>{"a"}, boost::test_tools::per_element());
  BOOST_TEST(accept(file_of(R"({"__metadata__":{}})")).metadata().empty());
  const ckpt::checkpoint only = accept(file_of(R"({"__metadata__":{"k":"v"}})"));
  BOOST_TEST(only.empty());
  BOOST_TEST((only.metadata() == ckpt::metadata_map{{"k", "v"}}));
}

BOOST_AUTO_TEST_CASE(no_entry_can_be_named_metadata) {
  const ckpt::tensor x = tensor_of(ckpt::dtype::f32, {2});
  std::vector<ckpt::checkpoint::entry> entries;
  entries.emplace_back("__metadata__", x);
  BOOST_CHECK_THROW(ckpt::checkpoint(std::move(entries)), std::invalid_argument);
  BOOST_CHECK_THROW((void)ckpt::of_tensor("__metadata__", x), std::invalid_argument);
  BOOST_CHECK_THROW((void)ckpt::of_int("__metadata__", 1), std::invalid_argument);
  // Names that merely look like it are fine.
  BOOST_TEST(ckpt::of_tensor("__metadata", x).size() == 1u);
  BOOST_TEST(ckpt::of_tensor("__metadata__.x", x).size() == 1u);
  BOOST_TEST(ckpt::of_tensor("a.__metadata__", x).size() == 1u);
}

// --- Unknown things -------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(unknown_dtypes_are_skipped_with_a_warning) {
  ckpt::checkpoint c;
  std::string warning;
  {
    const cerr_capture capture;
    c = accept(file_of("{" + entry("odd", "F128", "[1]", 8, 24) + "," + entry("a", "F32", "[2]", 0, 8) + "," +
                           entry("b", "I16", "[2]", 24, 28) + "}",
                       data_of(28)));
    warning = capture.text();
  }
  BOOST_TEST(warning == "ckpt: warning: 'mem.safetensors': skipping entry 'odd' of unknown dtype 'F128'\n");
  BOOST_TEST(c.names() == (std::vector<std::string>{"a", "b"}), boost::test_tools::per_element());
  BOOST_TEST(c.find("odd") == nullptr);
  BOOST_TEST(text_of(c.get("a").bytes()) == data_of(28).substr(0, 8));
  BOOST_TEST(text_of(c.get("b").bytes()) == data_of(28).substr(24, 4));
  // Spellings are case-sensitive.
  {
    const cerr_capture capture;
    BOOST_TEST(accept(file_of("{" + entry("a", "f32", "[2]", 0, 8) + "}", data_of(8))).empty());
    BOOST_TEST(capture.text() == "ckpt: warning: 'mem.safetensors': skipping entry 'a' of unknown dtype 'f32'\n");
  }
}

BOOST_AUTO_TEST_CASE(a_caller_can_hear_of_skipped_entries_instead_of_the_warning) {
  std::vector<std::string> heard;
  const cerr_capture capture;
  const std::vector<std::byte> bytes = file_of("{" + entry("odd", "F128", "[1]", 8, 24) + "," +
                                                   entry("a", "F32", "[2]", 0, 8) + "," + entry("z", "F63", "[1]", 24, 28) + "}",
                                               data_of(28));
  const ckpt::checkpoint c = ckpt::parse(bytes, "mem.safetensors",
                                         {.skipped = [&](std::string_view name, std::string_view dtype) {
                                           heard.push_back(std::string(name) + ":" + std::string(dtype));
                                         }});
  BOOST_TEST(c.names() == std::vector<std::string>{"a"}, boost::test_tools::per_element());
  BOOST_TEST(heard == (std::vector<std::string>{"odd:F128", "z:F63"}), boost::test_tools::per_element());
  BOOST_TEST(capture.text().empty());
}

BOOST_AUTO_TEST_CASE(unknown_dtypes_still_count_in_the_layout) {
  const cerr_capture quiet;
  // Its only tensor has an unknown dtype and leaves a hole.
  BOOST_TEST(rejection(file_of("{" + entry("odd", "X9", "[1]", 8, 16) + "}", data_of(16))) ==
             msg("bytes 0 to 8 of the data buffer belong to no entry (a hole before 'odd')"));
  // ...or does not reach the end.
  BOOST_TEST(rejection(file_of("{" + entry("odd", "X9", "[1]", 0, 8) + "}", data_of(16))) ==
             msg("the data buffer has 8 trailing bytes after the last entry"));
  // ...or overlaps a known one.
  BOOST_TEST(rejection(file_of("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("odd", "X9", "[1]", 4, 12) + "}",
                               data_of(12))) == msg("entry 'odd' overlaps entry 'a'"));
  // ...or runs out of the buffer.
  BOOST_TEST(rejection(file_of("{" + entry("odd", "X9", "[1]", 0, 9) + "}", data_of(8))) ==
             msg("entry 'odd' has data_offsets [0, 9] past the end of the 8-byte data buffer"));
  // ...or shares its name.
  BOOST_TEST(rejection(file_of("{" + a_f32_2 + "," + entry("a", "X9", "[1]", 8, 9) + "}", data_of(9))) ==
             msg("the entry name 'a' appears twice"));
  // Its fields must still be well-formed.
  BOOST_TEST(rejection(file_of(R"({"odd":{"dtype":"X9","shape":[-1],"data_offsets":[0,8]}})", data_of(8))) ==
             msg("entry 'odd' has a negative number in 'shape'"));
  BOOST_TEST(rejection(file_of(R"({"odd":{"dtype":"X9","data_offsets":[0,8]}})", data_of(8))) ==
             msg("entry 'odd' has no 'shape'"));
}

BOOST_AUTO_TEST_CASE(unknown_fields_are_ignored) {
  const ckpt::checkpoint c = accept(file_of(
      R"({"a":{"note":"x","dtype":"F32","extra":{"k":[1,{"deep":[[],{}]},null],"dtype":5,"shape":"no"},)"
      R"("shape":[2],"list":[[1,2],["s"],-3,1.5,true,null],"n":null,"b":false,"num":-1.5,"big":1e400,)"
      R"("data_offsets":[0,8],"data_offsets_":[9,9],"__metadata__":{"x":1}}})",
      data_of(8)));
  BOOST_TEST(c.names() == std::vector<std::string>{"a"}, boost::test_tools::per_element());
  BOOST_TEST(ckpt::to_string(c.get("a").dtype()) == "F32");
  BOOST_TEST(dims_of(c.get("a").shape()) == ckpt::dims{2}, boost::test_tools::per_element());
  BOOST_TEST(text_of(c.get("a").bytes()) == data_of(8));
  BOOST_TEST(c.metadata().empty());
}

// --- Whitespace and text ----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(spaces_around_the_json_are_accepted_and_anything_else_after_it_refused) {
  const std::string object = "{" + a_f32_2 + "}";
  for (const std::string& header : {"   " + object, object + "     ", "  " + object + " ", object + std::string(101, ' ')}) {
    BOOST_TEST_CONTEXT("header '" << header << "'") {
      const ckpt::checkpoint c = accept(file_of(header, data_of(8)));
      BOOST_TEST(c.names() == std::vector<std::string>{"a"}, boost::test_tools::per_element());
      BOOST_TEST(text_of(c.get("a").bytes()) == data_of(8));
    }
  }
  const std::string trailing = msg("the header has bytes other than spaces after its JSON object");
  BOOST_TEST(rejection(file_of(object + "x", data_of(8))) == trailing);
  BOOST_TEST(rejection(file_of(object + "   x   ", data_of(8))) == trailing);
  BOOST_TEST(rejection(file_of(object + "{}", data_of(8))) == trailing);
  BOOST_TEST(rejection(file_of(object + std::string(1, '\0'), data_of(8))) == trailing);
  BOOST_TEST(rejection(file_of(object + std::string("  \0\0", 4), data_of(8))) == trailing);
}

BOOST_AUTO_TEST_CASE(invalid_utf8_is_refused) {
  const std::string syntax = msg("the header is not valid JSON (syntax error)");
  for (const std::string bad : {"\xff", "\xc0\xaf" /* overlong '/' */, "\xed\xa0\x80" /* a surrogate */,
                                "\xe2\x82" /* truncated */, "\x80" /* lone continuation */,
                                "\xf4\x90\x80\x80" /* beyond U+10FFFF */}) {
    BOOST_TEST_CONTEXT("bytes " << bad.size()) {
      BOOST_TEST(rejection(file_of("{" + entry("a" + bad, "F32", "[2]", 0, 8) + "}", data_of(8))) == syntax);
      BOOST_TEST(rejection(file_of(R"({"__metadata__":{"k":"v)" + bad + R"("}})")) == syntax);
    }
  }
  // An escaped lone surrogate is not a Unicode string either.
  BOOST_TEST(rejection(file_of("{" + entry("\\ud800", "F32", "[2]", 0, 8) + "}", data_of(8))) == syntax);
}

BOOST_AUTO_TEST_CASE(escapes_in_names_are_decoded) {
  const ckpt::checkpoint c = accept(file_of(
      "{" + entry("\\u00e9", "U8", "[1]", 0, 1) + "," + entry("\\ud83d\\ude42", "U8", "[1]", 1, 2) + "," +
          entry("q\\\"b\\\\s\\/", "U8", "[1]", 2, 3) + "," + entry("t\\tn\\nz\\u0000", "U8", "[1]", 3, 4) + "}",
      data_of(4)));
  BOOST_TEST(c.contains("\xc3\xa9"));
  BOOST_TEST(c.contains("\xf0\x9f\x99\x82"));
  BOOST_TEST(c.contains("q\"b\\s/"));
  BOOST_TEST(c.contains(std::string_view("t\tn\nz\0", 6)));
  BOOST_TEST(c.size() == 4u);
}

BOOST_AUTO_TEST_CASE(empty_names_are_refused) {
  BOOST_TEST(rejection(file_of("{" + entry("", "F32", "[2]", 0, 8) + "}", data_of(8))) ==
             msg("an entry has an empty name"));
}

// --- Round trips through save and load --------------------------------------------------------

BOOST_AUTO_TEST_CASE(awkward_names_round_trip) {
  const std::vector<std::string> names{
      "plain",
      "with \"quotes\"",
      "back\\slash",
      "ctl\x01\x02\x1f\x7f",
      "tab\tnew\nline\rreturn\bbs\fff",
      std::string("nul\0inside", 10),
      "caf\xc3\xa9 \xe5\x90\x8d\xe5\x89\x8d \xf0\x9f\x99\x82",
      "slash/and.dots",
      " leading and trailing spaces ",
      "__metadata",
      "__not_metadata__",
      "</script>",
      "\\u0041",
  };
  std::vector<ckpt::checkpoint::entry> entries;
  for (std::size_t i = 0; i < names.size(); ++i)
    entries.emplace_back(names[i], tensor_of(ckpt::dtype::i16, {static_cast<std::int64_t>(i) + 1}));
  ckpt::metadata_map metadata;
  for (const std::string& n : names) metadata.emplace(n, n + "\"\\\n");
  const ckpt::checkpoint original(std::move(entries), metadata);

  temp_dir dir;
  const fs::path path = dir.path() / "names.safetensors";
  ckpt::save(path, original, {.digest = false});  // the metadata exactly as given
  const ckpt::checkpoint again = ckpt::load(path);
  std::vector<std::string> expected = names;
  std::sort(expected.begin(), expected.end());
  BOOST_TEST(again.names() == expected, boost::test_tools::per_element());
  for (const auto& [name, x] : original) BOOST_TEST((again.get(name) == x));
  metadata.emplace("format", "pt");  // what every save writes
  BOOST_TEST((again.metadata() == metadata));

  // And the header is strict JSON any other reader accepts, with the same strings.
  const std::string raw = read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, raw.data(), 8);
  const json::object header = json::parse(std::string_view(raw).substr(8, n)).as_object();
  for (const std::string& name : names) BOOST_TEST(header.contains(name));
}

BOOST_AUTO_TEST_CASE(save_writes_the_canonical_layout) {
  // Names whose order differs from their dtypes' widths and from insertion order.
  std::vector<ckpt::checkpoint::entry> entries;
  entries.emplace_back("z", tensor_of(ckpt::dtype::u8, {3}));
  entries.emplace_back("b", tensor_of(ckpt::dtype::f64, {2, 2}));
  entries.emplace_back("a.x", tensor_of(ckpt::dtype::i16, {}));
  entries.emplace_back("A", tensor_of(ckpt::dtype::f32, {0}));
  entries.emplace_back("a", tensor_of(ckpt::dtype::bf16, {5}));
  entries.emplace_back("\xc3\xa9", tensor_of(ckpt::dtype::f4, {2, 3}));
  entries.emplace_back("c", tensor_of(ckpt::dtype::c64, {1}));
  const ckpt::checkpoint plain(std::move(entries));

  temp_dir dir;
  // Without metadata of its own, a checkpoint is saved with "format": "pt" (what transformers'
  // readers ask for); a "format" of its own is kept.
  for (const bool with_metadata : {false, true}) {
    BOOST_TEST_CONTEXT("with metadata: " << with_metadata) {
      const ckpt::checkpoint c =
          with_metadata ? plain.with_metadata({{"format", "np"}, {"step", "12"}}) : plain.with_metadata({{"format", "pt"}});
      const fs::path path = dir.path() / "layout.safetensors";
      ckpt::save(path, with_metadata ? c : plain, {.digest = false});  // the metadata exactly as given
      const std::string raw = read_bytes(path);
      BOOST_TEST_REQUIRE(raw.size() >= 8u);
      std::uint64_t n = 0;
      for (std::size_t i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(raw[i])) << (8 * i);
      BOOST_TEST_REQUIRE(n <= raw.size() - 8);
      // The data starts 8-byte aligned, after spaces only, and no more of them than needed.
      BOOST_TEST((8 + n) % 8 == 0u);
      const std::string header = raw.substr(8, n);
      BOOST_TEST(header.front() == '{');
      const std::size_t close = header.find_last_not_of(' ');
      BOOST_TEST_REQUIRE(close != std::string::npos);
      BOOST_TEST(header[close] == '}');
      BOOST_TEST(n - (close + 1) < 8u);

      const json::object object = json::parse(header).as_object();
      BOOST_TEST(object.begin()->key() == "__metadata__");
      const json::object& m = object.at("__metadata__").as_object();
      BOOST_TEST(m.size() == (with_metadata ? 2u : 1u));
      BOOST_TEST(m.at("format").as_string() == (with_metadata ? "np" : "pt"));
      if (with_metadata) BOOST_TEST(m.at("step").as_string() == "12");
      // Entries in name order with contiguous offsets from 0 covering the whole data.
      std::vector<std::string> order;
      std::uint64_t offset = 0;
      const std::string data = raw.substr(8 + n);
      for (const auto& kv : object) {
        const std::string name(kv.key());
        if (name == "__metadata__") continue;
        order.push_back(name);
        BOOST_TEST_CONTEXT("entry '" << name << "'") {
          const ckpt::tensor& x = c.get(name);
          const json::object& e = kv.value().as_object();
          BOOST_TEST(e.at("dtype").as_string() == ckpt::to_string(x.dtype()));
          ckpt::dims shape;
          for (const json::value& d : e.at("shape").as_array()) shape.push_back(d.to_number<std::int64_t>());
          BOOST_TEST(shape == dims_of(x.shape()), boost::test_tools::per_element());
          const json::array& offsets = e.at("data_offsets").as_array();
          BOOST_TEST_REQUIRE(offsets.size() == 2u);
          BOOST_TEST(offsets[0].to_number<std::uint64_t>() == offset);
          BOOST_TEST(offsets[1].to_number<std::uint64_t>() == offset + x.nbytes());
          BOOST_TEST(data.substr(offset, x.nbytes()) == text_of(x.bytes()));
          offset += x.nbytes();
        }
      }
      BOOST_TEST(order == c.names(), boost::test_tools::per_element());
      BOOST_TEST(offset == data.size());
      // And it reads back.
      const ckpt::checkpoint again = ckpt::load(path);
      BOOST_TEST(again.names() == c.names(), boost::test_tools::per_element());
      for (const auto& [name, x] : c) BOOST_TEST((again.get(name) == x));
      BOOST_TEST((again.metadata() == c.metadata()));
    }
  }

  // The empty checkpoint: the metadata every save without a digest writes, nothing else.
  const fs::path empty = dir.path() / "empty.safetensors";
  ckpt::save(empty, ckpt::checkpoint{}, {.digest = false});
  BOOST_TEST(read_bytes(empty) == std::string("\x20\0\0\0\0\0\0\0{\"__metadata__\":{\"format\":\"pt\"}}", 40));
  BOOST_TEST(ckpt::load(empty).empty());
  // Metadata alone.
  ckpt::save(empty, ckpt::checkpoint{}.with_metadata({{"k", "v"}}), {.digest = false});
  const std::string raw = read_bytes(empty);
  BOOST_TEST(raw.size() % 8 == 0u);
  BOOST_TEST(raw.find("\"__metadata__\"") != std::string::npos);
  BOOST_TEST((ckpt::load(empty).metadata() == ckpt::metadata_map{{"format", "pt"}, {"k", "v"}}));
}

// --- Where the bytes live ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(loaded_tensors_outlive_their_file) {
  temp_dir dir;
  const fs::path path = dir.path() / "gone.safetensors";
  const ckpt::tensor w = tensor_of(ckpt::dtype::f32, {64, 64});
  const ckpt::tensor b = tensor_of(ckpt::dtype::i64, {3});
  ckpt::save(path, ckpt::checkpoint({{"w", w}, {"b", b}}));

  ckpt::checkpoint c = ckpt::load(path);
  BOOST_TEST_REQUIRE(fs::remove(path));
  BOOST_TEST(!fs::exists(path));
  BOOST_TEST((c.get("w") == w));
  BOOST_TEST((c.get("b") == b));

  // A tensor alone keeps the mapping alive after its checkpoint is gone.
  const ckpt::tensor kept = c.get("w");
  c = ckpt::checkpoint{};
  BOOST_TEST(c.empty());
  BOOST_TEST((kept == w));
  const std::span<const float> values = kept.as<float>();
  const std::span<const float> expected = w.as<float>();
  BOOST_TEST(std::equal(values.begin(), values.end(), expected.begin(), expected.end()));

  // Replacing the file does not change what was loaded from the old one either.
  ckpt::save(path, ckpt::checkpoint({{"w", tensor_of(ckpt::dtype::f32, {2})}}));
  ckpt::checkpoint d = ckpt::load(path);
  ckpt::save(path, ckpt::checkpoint({{"w", b}}));
  BOOST_TEST(ckpt::to_string(d.get("w").dtype()) == "F32");
  BOOST_TEST(d.get("w").numel() == 2);
}

BOOST_AUTO_TEST_CASE(parse_copies_its_input) {
  std::vector<std::byte> file = file_of("{" + a_f32_2 + "}", data_of(8));
  const ckpt::checkpoint c = ckpt::parse(file, origin);
  std::fill(file.begin(), file.end(), std::byte{0xAB});
  BOOST_TEST(text_of(c.get("a").bytes()) == data_of(8));
}

BOOST_AUTO_TEST_CASE(misaligned_data_is_read_correctly) {
  // A header length of 9 puts the data at byte 17 of the file: no scalar is aligned there.
  const double values[3] = {1.5, -2.25, 1e300};
  std::string data(sizeof values, '\0');
  std::memcpy(data.data(), values, sizeof values);
  std::string header = "{" + entry("d", "F64", "[3]", 0, 24) + "}";
  while (header.size() % 8 != 1) header += ' ';
  BOOST_TEST_REQUIRE(header.size() % 8 == 1u);
  const ckpt::checkpoint c = accept(file_of(header, data));
  const std::span<const double> d = c.get("d").as<double>();
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(d.data()) % alignof(double) == 0u);
  BOOST_TEST_REQUIRE(d.size() == 3u);
  BOOST_TEST(d[0] == 1.5);
  BOOST_TEST(d[1] == -2.25);
  BOOST_TEST(d[2] == 1e300);
}

BOOST_AUTO_TEST_CASE(load_reports_files_it_cannot_read) {
  temp_dir dir;
  const fs::path missing = dir.path() / "missing.safetensors";
  try {
    (void)ckpt::load(missing);
    BOOST_ERROR("loading a missing file succeeded");
  } catch (const ckpt::format_error& e) {
    BOOST_ERROR("a missing file is an io_error, not a format_error: " << e.what());
  } catch (const ckpt::io_error& e) {
    BOOST_TEST(e.path() == missing);
    BOOST_TEST(std::string(e.what()).find(missing.string()) != std::string::npos);
  }
  // A folder is not a safetensors file.
  try {
    (void)ckpt::load(dir.path());
    BOOST_ERROR("loading a folder succeeded");
  } catch (const ckpt::error& e) {
    BOOST_TEST(e.path() == dir.path());
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_format
