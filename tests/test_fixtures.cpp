// The fixtures of tests/fixtures/ (see its README): files written by other
// implementations. Every valid/ file loads and matches its JSON sidecar tensor by tensor (dtype,
// shape, size, SHA-256, raw bytes, decoded values, metadata); every layouts/ file gets the verdict
// EXPECTED.json gives it (a malformed one is refused with a ckpt::format_error naming the file
// and the broken rule); every wild/ file loads with the listed tensors; and every loadable file
// survives save(load(f)) unchanged.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <boost/json.hpp>  // declarations only: the test links Boost::json

#include <ckpt/file.hpp>

#include <openssl/evp.h>

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_fixtures)

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

using ckpt_test::temp_dir;

const fs::path fixtures_dir = CKPT_FIXTURES_DIR;

// How many fixtures each folder holds today: a wrong path or a broken glob must not make the
// tests pass over zero files. New fixtures raise the count and are picked up automatically.
constexpr std::size_t valid_fixture_count = 37;
constexpr std::size_t layout_fixture_count = 23;
constexpr std::size_t wild_fixture_count = 5;

json::value read_json(const fs::path& path) { return json::parse(ckpt_test::read_bytes(path)); }

std::string str(const json::value& v) {
  const json::string& s = v.as_string();
  return std::string(s.data(), s.size());
}

std::string hex_of(std::span<const unsigned char> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 0xF];
  }
  return out;
}

std::string hex_of(std::span<const std::byte> bytes) {
  return hex_of(std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(bytes.data()),
                                               bytes.size()));
}

std::string sha256_hex(std::span<const std::byte> bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("EVP_Digest(SHA-256) failed");
  return hex_of(std::span<const unsigned char>(digest, size));
}

// "[2,2]": how EXPECTED.json spells shapes.
std::string compact(std::span<const std::int64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

ckpt::dims dims_of(const json::value& v) {
  ckpt::dims out;
  for (const json::value& extent : v.as_array()) out.push_back(extent.to_number<std::int64_t>());
  return out;
}

ckpt::dims dims_of(std::span<const std::int64_t> shape) { return {shape.begin(), shape.end()}; }

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

// The files of `folder` whose name ends with `suffix`, sorted.
std::vector<fs::path> files_in(const fs::path& folder, std::string_view suffix) {
  std::vector<fs::path> out;
  for (const fs::directory_entry& e : fs::directory_iterator(folder)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// --- Decoded values ------------------------------------------------------------------------

// The sidecar's number as a double: a JSON number, or "nan", "inf", "-inf".
double expected_double(const json::value& v) {
  if (v.is_string()) {
    const std::string s = str(v);
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    throw std::runtime_error("unexpected value string '" + s + "'");
  }
  return v.to_number<double>();
}

// Same value, or both NaN; zeros must agree in sign too.
template <class F>
bool same_value(F actual, F expected) {
  if (std::isnan(expected)) return std::isnan(actual);
  return actual == expected && std::signbit(actual) == std::signbit(expected);
}

// F64 values: Boost.JSON 1.81 does not round every decimal correctly to a double (its
// `number_precision::precise` arrived in 1.83), so allow the neighbouring double as well. The raw
// bytes are checked exactly against `hex` and `sha256` anyway.
bool same_double(double actual, double expected) {
  if (same_value(actual, expected)) return true;
  return std::isfinite(expected) && expected != 0 &&
         (actual == std::nextafter(expected, std::numeric_limits<double>::infinity()) ||
          actual == std::nextafter(expected, -std::numeric_limits<double>::infinity()));
}

template <class T>
void check_integers(const ckpt::tensor& x, const json::array& values) {
  const std::span<const T> got = x.as<T>();
  for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == values[i].to_number<T>(), "element " << i);
}

template <class T>
void check_floats(const ckpt::tensor& x, const json::array& values) {
  const std::span<const T> got = x.as<T>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto actual = static_cast<float>(got[i]);
    const auto expected = static_cast<float>(expected_double(values[i]));
    BOOST_TEST(same_value(actual, expected), "element " << i << ": " << actual << " != " << expected);
  }
}

void check_values(const ckpt::tensor& x, const json::array& values) {
  if (values.size() != static_cast<std::size_t>(x.numel())) {
    BOOST_ERROR(values.size() << " values for " << x.numel() << " elements");
    return;
  }
  switch (x.dtype()) {
    case ckpt::dtype::boolean: {
      const std::span<const bool> got = x.as<bool>();
      for (std::size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == values[i].as_bool(), "element " << i);
      break;
    }
    case ckpt::dtype::u8: check_integers<std::uint8_t>(x, values); break;
    case ckpt::dtype::i8: check_integers<std::int8_t>(x, values); break;
    case ckpt::dtype::u16: check_integers<std::uint16_t>(x, values); break;
    case ckpt::dtype::i16: check_integers<std::int16_t>(x, values); break;
    case ckpt::dtype::u32: check_integers<std::uint32_t>(x, values); break;
    case ckpt::dtype::i32: check_integers<std::int32_t>(x, values); break;
    case ckpt::dtype::u64: check_integers<std::uint64_t>(x, values); break;
    case ckpt::dtype::i64: check_integers<std::int64_t>(x, values); break;
    case ckpt::dtype::f16: check_floats<Eigen::half>(x, values); break;
    case ckpt::dtype::bf16: check_floats<Eigen::bfloat16>(x, values); break;
    case ckpt::dtype::f32: check_floats<float>(x, values); break;
    case ckpt::dtype::f64: {
      const std::span<const double> got = x.as<double>();
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double expected = expected_double(values[i]);
        BOOST_TEST(same_double(got[i], expected), "element " << i << ": " << got[i] << " != " << expected);
      }
      break;
    }
    case ckpt::dtype::c64: {
      const std::span<const std::complex<float>> got = x.as<std::complex<float>>();
      for (std::size_t i = 0; i < got.size(); ++i) {
        const json::array& pair = values[i].as_array();
        if (pair.size() != 2) {
          BOOST_ERROR("element " << i << " is not [re, im]");
          continue;
        }
        const auto re = static_cast<float>(expected_double(pair[0]));
        const auto im = static_cast<float>(expected_double(pair[1]));
        BOOST_TEST(same_value(got[i].real(), re), "element " << i << " (real part)");
        BOOST_TEST(same_value(got[i].imag(), im), "element " << i << " (imaginary part)");
      }
      break;
    }
    default:
      // The F8/F6/F4 formats have no scalar: the sidecars give no values for them.
      BOOST_ERROR("unexpected 'values' for dtype " << ckpt::to_string(x.dtype()));
  }
}

// --- Checks shared by the folders ----------------------------------------------------------

// `c` holds exactly the tensors EXPECTED.json lists as [name, dtype, "[shape]", sha256].
void check_listed(const ckpt::checkpoint& c, const json::array& listed) {
  std::vector<std::string> names;
  for (const json::value& row : listed) {
    const json::array& t = row.as_array();
    BOOST_TEST_REQUIRE(t.size() == 4u);
    const std::string name = str(t[0]);
    names.push_back(name);
    BOOST_TEST_CONTEXT("tensor '" << name << "'") {
      const ckpt::tensor* x = c.find(name);
      if (x == nullptr) {
        BOOST_ERROR("no entry '" << name << "'");
        continue;
      }
      BOOST_TEST(ckpt::to_string(x->dtype()) == str(t[1]));
      BOOST_TEST(compact(x->shape()) == str(t[2]));
      BOOST_TEST(sha256_hex(x->bytes()) == str(t[3]));
    }
  }
  BOOST_TEST(c.names() == sorted(names), boost::test_tools::per_element());
}

// save(load(f)) then load again: the same names, dtypes, shapes, bytes and metadata (and
// "format": "pt" where the file had no "format": every save writes it).
void check_round_trip(const ckpt::checkpoint& original, const temp_dir& dir) {
  const fs::path copy = dir.path() / "round_trip.safetensors";
  ckpt::save(copy, original, {.digest = false});  // the metadata as given
  const ckpt::checkpoint again = ckpt::load(copy);
  BOOST_TEST(again.names() == original.names(), boost::test_tools::per_element());
  for (const auto& [name, x] : original) {
    BOOST_TEST_CONTEXT("round trip of '" << name << "'") {
      const ckpt::tensor* y = again.find(name);
      if (y == nullptr) {
        BOOST_ERROR("no entry '" << name << "' after the round trip");
        continue;
      }
      BOOST_TEST(ckpt::to_string(y->dtype()) == ckpt::to_string(x.dtype()));
      BOOST_TEST(dims_of(y->shape()) == dims_of(x.shape()), boost::test_tools::per_element());
      BOOST_TEST(hex_of(y->bytes()) == hex_of(x.bytes()));
      BOOST_TEST((*y == x));
    }
  }
  ckpt::metadata_map expected = original.metadata();
  expected.try_emplace("format", "pt");
  BOOST_TEST((again.metadata() == expected));
}

// The message of the format_error that loading `path` raises, or a description of what
// happened instead.
std::string rejection_of(const fs::path& path) {
  try {
    const ckpt::checkpoint c = ckpt::load(path);
    return "<accepted with " + std::to_string(c.size()) + " entries>";
  } catch (const ckpt::format_error& e) {
    BOOST_TEST(e.path() == path);
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a ckpt::format_error: ") + e.what() + ">";
  } catch (...) {
    return "<not a std::exception>";
  }
}

}  // namespace

// -------------------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(hash_helper_is_sha256) {
  BOOST_TEST(sha256_hex({}) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  BOOST_TEST(sha256_hex(std::as_bytes(std::span(abc))) ==
             "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

BOOST_AUTO_TEST_CASE(valid_files_match_their_sidecars) {
  const std::vector<fs::path> files = files_in(fixtures_dir / "valid", ".safetensors");
  BOOST_TEST_REQUIRE(files.size() >= valid_fixture_count, "fixtures found in " << (fixtures_dir / "valid"));
  temp_dir dir;
  std::size_t tensors_checked = 0, values_checked = 0, hex_checked = 0;
  for (const fs::path& file : files) {
    BOOST_TEST_CONTEXT(file.filename().string()) {
      fs::path sidecar_path = file;
      sidecar_path.replace_extension(".json");
      BOOST_TEST_REQUIRE(fs::exists(sidecar_path));
      const json::object sidecar = read_json(sidecar_path).as_object();
      BOOST_TEST(sidecar.at("file_size").to_number<std::uintmax_t>() == fs::file_size(file));

      ckpt::checkpoint c;
      try {
        c = ckpt::load(file);
      } catch (const std::exception& e) {
        BOOST_ERROR("load failed: " << e.what());
        continue;
      }

      const json::array& tensors = sidecar.at("tensors_in_offset_order").as_array();
      std::vector<std::string> names;
      for (const json::value& v : tensors) names.push_back(str(v.as_object().at("name")));
      BOOST_TEST(c.names() == sorted(names), boost::test_tools::per_element());
      BOOST_TEST(c.size() == tensors.size());

      for (const json::value& v : tensors) {
        const json::object& t = v.as_object();
        const std::string name = str(t.at("name"));
        BOOST_TEST_CONTEXT("tensor '" << name << "'") {
          const ckpt::tensor* x = c.find(name);
          if (x == nullptr) {
            BOOST_ERROR("no entry '" << name << "'");
            continue;
          }
          ++tensors_checked;
          BOOST_TEST(ckpt::to_string(x->dtype()) == str(t.at("dtype")));
          const ckpt::dims shape = dims_of(t.at("shape"));
          BOOST_TEST(dims_of(x->shape()) == shape, boost::test_tools::per_element());
          BOOST_TEST(x->nbytes() == t.at("nbytes").to_number<std::size_t>());
          BOOST_TEST(x->bytes().size() == x->nbytes());
          BOOST_TEST(sha256_hex(x->bytes()) == str(t.at("sha256")));
          if (const json::value* hex = t.if_contains("hex")) {
            BOOST_TEST(hex_of(x->bytes()) == str(*hex));
            ++hex_checked;
          }
          if (const json::value* values = t.if_contains("values")) {
            check_values(*x, values->as_array());
            ++values_checked;
          }
        }
      }

      ckpt::metadata_map expected_metadata;
      if (const json::value& m = sidecar.at("metadata"); !m.is_null())
        for (const auto& kv : m.as_object())
          expected_metadata.emplace(std::string(kv.key()), str(kv.value()));
      BOOST_TEST((c.metadata() == expected_metadata));

      check_round_trip(c, dir);
    }
  }
  // The README promises hex and values for the small tensors: make sure the checks ran.
  BOOST_TEST(tensors_checked > 600u);
  BOOST_TEST(hex_checked > 100u);
  BOOST_TEST(values_checked > 50u);
}

BOOST_AUTO_TEST_CASE(every_dtype_has_a_fixture) {
  // dtype_<D>.safetensors exists for each of the 22 dtypes and holds D only.
  for (std::size_t i = 0; i < ckpt::detail::dtype_count; ++i) {
    const std::string spelling(ckpt::to_string(static_cast<ckpt::dtype>(i)));
    BOOST_TEST_CONTEXT(spelling) {
      const fs::path file = fixtures_dir / "valid" / ("dtype_" + spelling + ".safetensors");
      BOOST_TEST_REQUIRE(fs::exists(file));
      const ckpt::checkpoint c = ckpt::load(file);
      BOOST_TEST(c.size() >= 2u);
      for (const auto& [name, x] : c) BOOST_TEST(ckpt::to_string(x.dtype()) == spelling);
    }
  }
}

BOOST_AUTO_TEST_CASE(layouts_get_their_verdicts) {
  const fs::path folder = fixtures_dir / "layouts";
  const json::array expected = read_json(folder / "EXPECTED.json").as_array();
  BOOST_TEST_REQUIRE(expected.size() >= layout_fixture_count);

  // Every file of the folder is listed, so that a new one cannot go untested.
  std::set<std::string> listed;
  for (const json::value& v : expected) listed.insert(str(v.as_object().at("file")));
  const std::vector<fs::path> present = files_in(folder, ".safetensors");
  BOOST_TEST(present.size() >= layout_fixture_count);
  for (const fs::path& p : present)
    BOOST_TEST(listed.contains(p.filename().string()), p.filename() << " is listed in EXPECTED.json");

  // What the message must say for some files: the rule they break.
  const std::map<std::string, std::string> rules = {
      {"bad_header_len_2pow63.safetensors",
       "the header length 9223372036854775808 exceeds the limit of 100000000 bytes"},
      {"bad_header_len_exceeds_file.safetensors", "runs past the end of the"},
      {"bad_header_len_zero.safetensors", "not valid JSON"},
      {"bad_file_empty.safetensors", "the file has 0 bytes"},
      {"bad_non_json_header.safetensors", "not valid JSON"},
      {"bad_header_trailing_garbage.safetensors", "after its JSON object"},
      {"bad_header_not_object.safetensors", "not an object"},
      {"bad_trailing_bytes.safetensors", "8 trailing bytes"},
      {"bad_truncated_buffer.safetensors", "past the end of the 17-byte data buffer"},
      {"bad_overlapping_offsets.safetensors", "entry 'b' overlaps entry 'a'"},
      {"bad_offsets_gap.safetensors", "bytes 16 to 24 of the data buffer belong to no entry"},
      {"bad_offsets_not_from_zero.safetensors", "bytes 0 to 8 of the data buffer belong to no entry"},
      {"bad_offsets_end_lt_begin.safetensors", "end before they begin"},
      {"bad_shape_mismatch.safetensors", "needs 24 bytes but its data_offsets span 16"},
      {"bad_shape_not_array.safetensors", "as 'shape' instead of an array"},
      {"bad_missing_dtype.safetensors", "entry 'a' has no 'dtype'"},
      {"bad_metadata_non_string_value.safetensors", "instead of a string"},
      {"bad_dup_tensor_conflict.safetensors", "the entry name 'a' appears twice"},
  };

  temp_dir dir;
  std::size_t accepted = 0, rejected = 0;
  for (const json::value& v : expected) {
    const json::object& entry = v.as_object();
    const std::string file = str(entry.at("file"));
    const std::string verdict = str(entry.at("verdict"));
    const fs::path path = folder / file;
    BOOST_TEST_CONTEXT(file << " (" << verdict << ": " << str(entry.at("why")) << ")") {
      BOOST_TEST_REQUIRE(fs::exists(path));
      if (verdict == "accept") {
        ++accepted;
        ckpt::checkpoint c;
        try {
          c = ckpt::load(path);
        } catch (const std::exception& e) {
          BOOST_ERROR("load failed: " << e.what());
          continue;
        }
        check_listed(c, entry.at("tensors").as_array());
        check_round_trip(c, dir);
      } else if (verdict == "reject") {
        ++rejected;
        const std::string message = rejection_of(path);
        BOOST_TEST(message.starts_with("ckpt: '" + path.string() + "' is not a valid safetensors file: "),
                   message);
        BOOST_TEST(message.find(file) != std::string::npos, message);
        if (const auto rule = rules.find(file); rule != rules.end())
          BOOST_TEST(message.find(rule->second) != std::string::npos,
                     "'" << message << "' says '" << rule->second << "'");
      } else {
        // "either": whichever policy, never a crash nor another kind of exception.
        BOOST_TEST(verdict == "either");
        const std::string message = rejection_of(path);
        BOOST_TEST(!message.starts_with("<not"), message);
      }
    }
  }
  BOOST_TEST(accepted >= 4u);
  BOOST_TEST(rejected >= 19u);
  // Every rule above was exercised by a listed file.
  for (const auto& [file, rule] : rules) BOOST_TEST(listed.contains(file), file);
}

BOOST_AUTO_TEST_CASE(wild_files_load) {
  const fs::path folder = fixtures_dir / "wild";
  const json::array expected = read_json(folder / "EXPECTED.json").as_array();
  BOOST_TEST_REQUIRE(expected.size() >= wild_fixture_count);
  BOOST_TEST(files_in(folder, ".safetensors").size() == expected.size());
  temp_dir dir;
  for (const json::value& v : expected) {
    const json::object& entry = v.as_object();
    const std::string file = str(entry.at("file"));
    BOOST_TEST_CONTEXT(file << " from " << str(entry.at("repo")) << " " << str(entry.at("path"))) {
      const fs::path path = folder / file;
      BOOST_TEST(fs::file_size(path) == entry.at("bytes").to_number<std::uintmax_t>());
      ckpt::checkpoint c;
      try {
        c = ckpt::load(path);
      } catch (const std::exception& e) {
        BOOST_ERROR("load failed: " << e.what());
        continue;
      }
      check_listed(c, entry.at("tensors").as_array());
      check_round_trip(c, dir);
    }
  }
}

BOOST_AUTO_TEST_CASE(unaligned_data_reads_as_typed_spans) {
  // valid_unpadded_header puts the data at an odd offset into the file: the typed views must
  // still be aligned for their scalar and hold the right values.
  const ckpt::checkpoint c = ckpt::load(fixtures_dir / "layouts" / "valid_unpadded_header.safetensors");
  const std::span<const float> a = c.get("a").as<float>();
  const std::span<const std::int16_t> b = c.get("b").as<std::int16_t>();
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(a.data()) % alignof(float) == 0u);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(b.data()) % alignof(std::int16_t) == 0u);
  BOOST_TEST(a.size() == 4u);
  BOOST_TEST(b.size() == 3u);
  // The same tensors as in the padded file.
  const ckpt::checkpoint padded = ckpt::load(fixtures_dir / "layouts" / "valid_header_trailing_spaces.safetensors");
  BOOST_TEST((c.get("a") == padded.get("a")));
  BOOST_TEST((c.get("b") == padded.get("b")));
}

BOOST_AUTO_TEST_SUITE_END()  // test_fixtures
