// Files from strangers: whatever size a header claims (a header length, a shape, an offset) is
// checked against the real file before anything is allocated or read, every name JSON can carry
// survives a save and a load byte for byte, and invalid UTF-8 is refused on the way in and on the
// way out. (test_format covers each rule of the format; this suite pushes the claimed sizes and
// the strings to their limits, and the fuzz target and test_corpus cover arbitrary bytes.)
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/ckpt.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "allocation_watch.hpp"

BOOST_AUTO_TEST_SUITE(test_untrusted)

using ckpt_test::largest_allocation;

namespace fs = std::filesystem;
using ckpt_test::message_of;
using ckpt_test::temp_dir;

namespace {

constexpr std::uint64_t two_to_62 = std::uint64_t{1} << 62;
constexpr std::uint64_t two_to_63 = std::uint64_t{1} << 63;
constexpr std::uint64_t all_ones = std::numeric_limits<std::uint64_t>::max();
constexpr std::size_t small = 64 * 1024;  // far above what a refusal needs, far below any claim

const fs::path origin = "stranger.safetensors";

std::string msg(std::string_view rule) {
  return "ckpt: 'stranger.safetensors' is not a valid safetensors file: " + std::string(rule);
}

// The 8-byte little-endian `length`, then `rest`.
std::string raw_file(std::uint64_t length, std::string_view rest) {
  std::string out(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
  return out + std::string(rest);
}

std::string file_of(std::string_view header, std::string_view data = {}) {
  return raw_file(header.size(), std::string(header) + std::string(data));
}

std::string entry(std::string_view name, std::string_view dtype, std::string_view shape,
                  std::uint64_t begin, std::uint64_t end) {
  return "\"" + std::string(name) + "\":{\"dtype\":\"" + std::string(dtype) + "\",\"shape\":" +
         std::string(shape) + ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

struct refusal {
  std::string message;
  std::size_t largest_allocation;
};

// Parses `bytes`, which must be refused with a format_error; reports the message and the
// largest single allocation made while parsing.
refusal refuse(const std::string& bytes) {
  largest_allocation.store(0);
  std::string message = "<accepted>";
  try {
    (void)ckpt::parse(std::as_bytes(std::span(bytes)), origin);
  } catch (const ckpt::format_error& e) {
    message = e.what();
  }
  return {message, largest_allocation.load()};
}

}  // namespace

// --- Claimed sizes ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(huge_header_lengths_are_refused_at_once) {
  // Only the 8 bytes of the length: reading anything past them is an overflow ASan reports.
  for (const std::uint64_t length : {two_to_63, all_ones, two_to_63 + 1, std::uint64_t{100'000'001}}) {
    BOOST_TEST_CONTEXT("length " << length) {
      const refusal r = refuse(raw_file(length, ""));
      BOOST_TEST(r.message == msg("the header length " + std::to_string(length) +
                                  " exceeds the limit of 100000000 bytes"));
      BOOST_TEST(r.largest_allocation < small);
    }
  }
  // Within the limit but past the end of the file: also refused before the header is read.
  const refusal r = refuse(raw_file(99'999'999, "{}"));
  BOOST_TEST(r.message == msg("the header length 99999999 runs past the end of the 10-byte file"));
  BOOST_TEST(r.largest_allocation < small);
}

BOOST_AUTO_TEST_CASE(huge_header_lengths_are_refused_through_a_file_too) {
  // The mmap path of load: the same refusal, naming the file on disk.
  const temp_dir dir;
  const fs::path path = dir.path() / "claims.safetensors";
  for (const std::uint64_t length : {two_to_63, all_ones}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << raw_file(length, "");
    largest_allocation.store(0);
    BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::load(path); }) ==
               "ckpt: '" + path.string() + "' is not a valid safetensors file: the header length " +
                   std::to_string(length) + " exceeds the limit of 100000000 bytes");
    BOOST_TEST(largest_allocation.load() < small);
  }
}

BOOST_AUTO_TEST_CASE(a_shape_of_two_to_the_62_elements_is_refused_for_every_dtype) {
  const std::string shape = "[" + std::to_string(two_to_62) + "]";
  for (std::size_t i = 0; i < ckpt::detail::dtype_count; ++i) {
    const auto type = static_cast<ckpt::dtype>(i);
    const std::string spelling(ckpt::to_string(type));
    BOOST_TEST_CONTEXT(spelling) {
      const refusal r = refuse(file_of("{" + entry("big", spelling, shape, 0, 8) + "}", std::string(8, '\0')));
      // Sizes are counted in bits (F4 and F6 elements are not whole bytes), and 2^62 elements of
      // even the 4-bit dtype need 2^64 bits: an overflow, whatever the dtype.
      BOOST_TEST(r.message == msg("entry 'big' has shape " + shape + " whose byte count as " + spelling +
                                  " overflows or is not a whole number of bytes"));
      BOOST_TEST(r.largest_allocation < small);
    }
  }
}

BOOST_AUTO_TEST_CASE(shape_products_that_overflow_are_refused) {
  const auto overflow = [](std::string_view shape, std::string_view dtype) {
    return msg("entry 'a' has shape " + std::string(shape) + " whose byte count as " + std::string(dtype) +
               " overflows or is not a whole number of bytes");
  };
  // The element count wraps uint64 (2^96), wraps it to exactly 0 (2^64), passes int64, or
  // fits but its bit count does not (3037000499^2 < 2^63, times 8 bits).
  for (const std::string shape : {"[4294967296, 4294967296, 4294967296]", "[4294967296, 4294967296]",
                                  "[3037000500, 3037000500]", "[2, 4611686018427387904]",
                                  "[9223372036854775807, 9223372036854775807]", "[3037000499, 3037000499]",
                                  "[2305843009213693952]"}) {
    BOOST_TEST_CONTEXT(shape) {
      std::string json_shape = shape;
      std::erase(json_shape, ' ');
      const refusal r = refuse(file_of("{" + entry("a", "U8", json_shape, 0, 0) + "}"));
      BOOST_TEST(r.message == overflow(shape, "U8"));
      BOOST_TEST(r.largest_allocation < small);
    }
  }
  // The largest count of bytes whose bits fit in 64 bits, (2^64 - 1) / 8 = 2^61 - 1: a byte count
  // the data does not have, still nothing allocated.
  const refusal r = refuse(file_of("{" + entry("a", "U8", "[2305843009213693951]", 0, 0) + "}"));
  BOOST_TEST(r.message == msg("entry 'a' of dtype U8 and shape [2305843009213693951] needs "
                              "2305843009213693951 bytes but its data_offsets span 0"));
  BOOST_TEST(r.largest_allocation < small);
}

BOOST_AUTO_TEST_CASE(a_zero_extent_first_makes_an_empty_tensor_whatever_follows) {
  // As in the reference reader (a checked product from the left), a leading 0 makes every
  // later extent harmless: an empty tensor, nothing allocated for it.
  largest_allocation.store(0);
  const std::string bytes = file_of("{" + entry("e", "F32", "[0,4611686018427387904,4]", 0, 0) + "}");
  const ckpt::checkpoint c = ckpt::parse(std::as_bytes(std::span(bytes)), origin);
  BOOST_TEST(largest_allocation.load() < small);
  BOOST_TEST(c.get("e").numel() == 0);
  BOOST_TEST(c.get("e").nbytes() == 0u);
  BOOST_TEST(c.get("e").shape()[1] == static_cast<std::int64_t>(two_to_62));
}

BOOST_AUTO_TEST_CASE(huge_offsets_are_refused) {
  const std::string max63 = std::to_string(std::numeric_limits<std::int64_t>::max());
  // An empty entry placed far past the data.
  refusal r = refuse(file_of("{" + entry("a", "F32", "[0]", two_to_63 - 1, two_to_63 - 1) + "}"));
  BOOST_TEST(r.message == msg("entry 'a' has data_offsets [" + max63 + ", " + max63 +
                              "] past the end of the 0-byte data buffer"));
  BOOST_TEST(r.largest_allocation < small);
  // A span whose size matches a huge shape but not the file.
  r = refuse(file_of("{" + entry("a", "U8", "[" + max63 + "]", 0, two_to_63 - 1) + "}", std::string(8, 'x')));
  BOOST_TEST(r.message == msg("entry 'a' has data_offsets [0, " + max63 + "] past the end of the 8-byte data buffer"));
  BOOST_TEST(r.largest_allocation < small);
  // Reversed, and beyond int64 (as unsigned 64-bit JSON integers, then beyond 64 bits).
  r = refuse(file_of("{" + entry("a", "F32", "[0]", two_to_63 - 1, 0) + "}"));
  BOOST_TEST(r.message == msg("entry 'a' has data_offsets [" + max63 + ", 0] that end before they begin"));
  r = refuse(file_of("{" + entry("a", "F32", "[0]", 0, all_ones) + "}"));
  BOOST_TEST(r.message == msg("entry 'a' has a number too large in 'data_offsets'"));
  r = refuse(file_of(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,184467440737095516150]}})"));
  BOOST_TEST(r.message == msg("entry 'a' has a number too large in 'data_offsets'"));
}

// --- Names --------------------------------------------------------------------------------------

namespace {

std::vector<std::string> awkward_names() {
  std::vector<std::string> names;
  // Every ASCII byte but NUL alone, and NUL inside a name.
  for (int c = 1; c < 0x80; ++c) names.emplace_back("n" + std::string(1, static_cast<char>(c)));
  names.emplace_back(std::string("nul\0byte", 8));
  names.emplace_back("\"");
  names.emplace_back("\\");
  names.emplace_back("\\u0041\\n");  // a backslash and letters, not an escape
  names.emplace_back("tab\there, newline\nthere, \x01\x1f\x7f");
  // The boundaries of each UTF-8 length: U+0080, U+07FF, U+0800, U+FFFF, U+10000, U+10FFFF,
  // then a BOM, a line separator (which JavaScript once did not allow in strings), é, CJK, emoji.
  names.emplace_back("\xc2\x80");
  names.emplace_back("\xdf\xbf");
  names.emplace_back("\xe0\xa0\x80");
  names.emplace_back("\xef\xbf\xbf");
  names.emplace_back("\xf0\x90\x80\x80");
  names.emplace_back("\xf4\x8f\xbf\xbf");
  names.emplace_back("\xef\xbb\xbf" "bom");
  names.emplace_back("line\xe2\x80\xa8sep");
  names.emplace_back("caf\xc3\xa9");
  names.emplace_back("\xe6\xa8\xa1\xe5\x9e\x8b.\xe6\x9d\x83\xe9\x87\x8d");
  names.emplace_back("\xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd");
  return names;
}

}  // namespace

BOOST_AUTO_TEST_CASE(names_and_metadata_round_trip_byte_for_byte) {
  const std::vector<std::string> names = awkward_names();
  std::vector<ckpt::checkpoint::entry> entries;
  ckpt::metadata_map metadata;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto value = static_cast<std::int32_t>(i);
    entries.emplace_back(names[i], ckpt::of_int("x", value).get("x"));
    metadata.emplace(names[i], names[(i + 1) % names.size()]);
  }
  const ckpt::checkpoint original(std::move(entries), metadata);

  const temp_dir dir;
  const fs::path path = dir.path() / "names.safetensors";
  ckpt::save(path, original, {.digest = false});  // the metadata as given
  const ckpt::checkpoint again = ckpt::load(path);
  BOOST_TEST(again.names() == original.names(), boost::test_tools::per_element());
  metadata.try_emplace("format", "pt");  // what every save writes
  BOOST_TEST((again.metadata() == metadata));
  for (std::size_t i = 0; i < names.size(); ++i)
    BOOST_TEST(ckpt::to_int(names[i], again) == static_cast<int>(i));

  // The same bytes read from memory give the same checkpoint, and so does a second save.
  const std::string bytes = ckpt_test::read_bytes(path);
  BOOST_TEST(ckpt::parse(std::as_bytes(std::span(bytes))).names() == original.names(), boost::test_tools::per_element());
  ckpt::save(path, again, {.digest = false});
  BOOST_TEST(ckpt_test::read_bytes(path) == bytes);
}

BOOST_AUTO_TEST_CASE(escaped_names_decode_to_their_utf8) {
  // What other writers may emit: \u escapes for control characters, BMP characters and
  // surrogate pairs, and the short escapes.
  const std::string header = "{" + entry("\\u0001\\u001f\\u007f", "U8", "[1]", 0, 1) + "," +
                             entry("\\u00e9\\u6a21", "U8", "[1]", 1, 2) + "," +
                             entry("\\ud83d\\ude00", "U8", "[1]", 2, 3) + "," +
                             entry("\\\"\\\\\\/\\b\\f\\n\\r\\t", "U8", "[1]", 3, 4) + "}";
  const std::string bytes = file_of(header, "abcd");
  const ckpt::checkpoint c = ckpt::parse(std::as_bytes(std::span(bytes)), origin);
  BOOST_TEST(c.contains("\x01\x1f\x7f"));
  BOOST_TEST(c.contains("\xc3\xa9\xe6\xa8\xa1"));
  BOOST_TEST(c.contains("\xf0\x9f\x98\x80"));
  BOOST_TEST(c.contains("\"\\/\b\f\n\r\t"));
}

namespace {

// Broken UTF-8, each kind once.
const std::vector<std::pair<std::string, std::string>> invalid_utf8{
    {"overlong 2-byte '/'", "\xc0\xaf"},
    {"overlong 3-byte '/'", "\xe0\x80\xaf"},
    {"overlong 4-byte '/'", "\xf0\x80\x80\xaf"},
    {"lone continuation byte", "\x80"},
    {"continuation bytes only", "\xbf\xbf"},
    {"UTF-8-encoded surrogate", "\xed\xa0\x80"},
    {"CESU-8 surrogate pair", "\xed\xa0\xbd\xed\xb8\x80"},
    {"truncated 3-byte sequence", "\xe6\xa8"},
    {"truncated 4-byte sequence", "\xf0\x9f\x98"},
    {"sequence cut by ASCII", "\xe6" "a"},
    {"beyond U+10FFFF", "\xf4\x90\x80\x80"},
    {"5-byte lead", "\xf8\x88\x80\x80\x80"},
    {"0xFE and 0xFF", "\xfe\xff"},
};

}  // namespace

BOOST_AUTO_TEST_CASE(invalid_utf8_in_the_header_is_refused_wherever_it_is) {
  const std::string syntax = msg("the header is not valid JSON (syntax error)");
  for (const auto& [kind, bad] : invalid_utf8) {
    BOOST_TEST_CONTEXT(kind) {
      // In a name (alone, at its start, at its very end), a metadata key and value, a dtype, and
      // in an unknown field the reader otherwise skips.
      for (const std::string& header :
           {"{" + entry(bad, "U8", "[1]", 0, 1) + "}", "{" + entry(bad + "x", "U8", "[1]", 0, 1) + "}",
            "{" + entry("x" + bad, "U8", "[1]", 0, 1) + "}",
            R"({"__metadata__":{")" + bad + R"(":"v"}})", R"({"__metadata__":{"k":")" + bad + R"("}})",
            "{" + entry("x", "U8" + bad, "[1]", 0, 1) + "}",
            R"({"x":{"note":")" + bad + R"(","dtype":"U8","shape":[1],"data_offsets":[0,1]}})"}) {
        const refusal r = refuse(file_of(header, "a"));
        BOOST_TEST(r.message == syntax);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(escaped_lone_surrogates_are_refused) {
  // Boost.JSON names the broken rule when it can tell: a low surrogate first, or a high one
  // followed by another escape.
  const std::vector<std::pair<std::string, std::string>> cases{
      {"\\ud800", "syntax error"},
      {"x\\ud83d", "syntax error"},
      {"\\ud800x", "syntax error"},
      {"\\udc00", "illegal leading surrogate"},
      {"\\ude00\\ud83d", "illegal leading surrogate"},
      {"\\ud800\\u0041", "illegal trailing surrogate"},
      {"\\ud83d\\ud83d", "illegal trailing surrogate"},
  };
  for (const auto& [name, why] : cases) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST(refuse(file_of("{" + entry(name, "U8", "[1]", 0, 1) + "}", "a")).message ==
                 msg("the header is not valid JSON (" + why + ")"));
    }
  }
}

BOOST_AUTO_TEST_CASE(save_refuses_names_nobody_could_read) {
  // Boost.JSON would copy the bytes into the header as they are, and every reader, ckpt's
  // included, would then refuse the file: better to refuse the save, naming the entry.
  const temp_dir dir;
  const fs::path path = dir.path() / "bad.safetensors";
  for (const auto& [kind, bad] : invalid_utf8) {
    BOOST_TEST_CONTEXT(kind) {
      const std::string name = "layer." + bad;
      std::string shown = "layer.";
      for (const char c : bad) {
        static constexpr char hex[] = "0123456789abcdef";
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x80) shown += c;
        else shown += std::string("\\x") + hex[byte >> 4] + hex[byte & 0xf];
      }
      const std::string suffix = ": it is not valid UTF-8 (byte 6 of " + std::to_string(name.size()) +
                                 ") and safetensors headers are JSON";
      BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::save(path, ckpt::of_int(name, 1)); }) ==
                 "ckpt: cannot save the entry name '" + shown + "'" + suffix);
      BOOST_TEST(message_of<std::invalid_argument>([&] {
                   ckpt::save(path, ckpt::of_int("ok", 1).with_metadata({{name, "v"}}));
                 }) == "ckpt: cannot save the '__metadata__' key '" + shown + "'" + suffix);
      BOOST_TEST(message_of<std::invalid_argument>([&] {
                   ckpt::save(path, ckpt::of_int("ok", 1).with_metadata({{"k", name}}));
                 }) == "ckpt: cannot save the '__metadata__' value of 'k' '" + shown + "'" + suffix);
      // save of sections writes through the same header.
      const std::map<std::string, float> params{{bad, 1.0f}};
      BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::save(path, {{params, "layer"}}); }) ==
                 "ckpt: cannot save the entry name '" + shown + "'" + suffix);
      // Nothing was written: no file, no temporary.
      BOOST_TEST(fs::is_empty(dir.path()));
    }
  }
}

BOOST_AUTO_TEST_CASE(save_refusal_shows_the_valid_parts_of_a_name) {
  const temp_dir dir;
  // Valid multi-byte characters stay as they are; control bytes and the broken bytes are escaped.
  const std::string name = "caf\xc3\xa9\t\xe6\xa8\x01";
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::save(dir.path() / "x.safetensors", ckpt::of_int(name, 1)); }) ==
             "ckpt: cannot save the entry name 'caf\xc3\xa9\\x09\\xe6\\xa8\\x01': it is not valid UTF-8 (byte 6 of "
             "9) and safetensors headers are JSON");
}

BOOST_AUTO_TEST_SUITE_END()  // test_untrusted
