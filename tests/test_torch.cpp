// torch.save files read without Python: every fixture of tests/fixtures/torch/ (written by
// PyTorch 1.13 through make_fixtures.py) loads with exactly the bytes, shapes, dtypes and
// metadata its expected.json gives, or is refused with the expected message; the restricted
// unpickler never runs anything and never crashes on damaged files.
#include <boost/test/unit_test.hpp>

#include "fuzz/exercise_torch.hpp"
#include "io/io_hooks.hpp"
#include "support.hpp"

#include <boost/json.hpp>  // declarations only: the test links Boost::json

#include <ckpt/detail/pages.hpp>
#include <ckpt/file.hpp>
#include <ckpt/torch.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_torch)

namespace fs = std::filesystem;
namespace json = boost::json;

namespace {

using ckpt_test::message_of;

// CKPT_TORCH_FIXTURES_DIR in the environment points the suite at freshly generated fixtures
// (the opt-in test torch_fixtures_regenerated does so).
fs::path fixtures_dir() {
  if (const char* dir = std::getenv("CKPT_TORCH_FIXTURES_DIR"); dir != nullptr && *dir != '\0') return dir;
  return CKPT_TORCH_FIXTURES;
}

json::object expected() {
  return json::parse(ckpt_test::read_bytes(fixtures_dir() / "expected.json")).as_object();
}

std::string str(const json::value& v) { return std::string(v.as_string()); }

std::vector<std::byte> bytes_of(const fs::path& path) {
  const std::string text = ckpt_test::read_bytes(path);
  const auto* first = reinterpret_cast<const std::byte*>(text.data());
  return {first, first + text.size()};
}

std::string hex_of(std::span<const std::byte> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  for (const std::byte b : bytes) {
    out += digits[std::to_integer<unsigned>(b) >> 4];
    out += digits[std::to_integer<unsigned>(b) & 15];
  }
  return out;
}

void check_matches(const ckpt::checkpoint& t, const json::object& want, const std::string& file) {
  const json::object& entries = want.at("entries").as_object();
  BOOST_TEST_CONTEXT(file) {
    BOOST_TEST(t.size() == entries.size());
    for (const auto& [name, spec] : entries) {
      BOOST_TEST_CONTEXT(std::string(name)) {
        const ckpt::tensor* x = t.find(name);
        BOOST_TEST_REQUIRE(x != nullptr);
        BOOST_TEST(std::string(ckpt::to_string(x->dtype())) == str(spec.at("dtype")));
        std::vector<std::int64_t> shape;
        for (const auto& d : spec.at("shape").as_array()) shape.push_back(d.as_int64());
        BOOST_TEST(std::vector<std::int64_t>(x->shape().begin(), x->shape().end()) == shape, boost::test_tools::per_element());
        BOOST_TEST(hex_of(x->bytes()) == str(spec.at("hex")));
      }
    }
    ckpt::metadata_map metadata;
    for (const auto& [key, value] : want.at("metadata").as_object()) metadata.emplace(std::string(key), str(value));
    BOOST_TEST(t.metadata() == metadata);
  }
}

BOOST_AUTO_TEST_CASE(every_fixture_loads_as_its_expectation_says) {
  const json::object all = expected();
  // A wrong path or a broken expected.json must not pass over zero files.
  BOOST_TEST_REQUIRE(all.size() >= 11u);
  for (const auto& [file, want] : all) {
    const fs::path path = fixtures_dir() / std::string(file);
    if (want.as_object().contains("error")) {
      const std::string message = message_of<ckpt::format_error>([&] { (void)ckpt::load(path); });
      BOOST_TEST_CONTEXT(message) {
        BOOST_TEST(message.starts_with("ckpt: '" + path.string() + "' is not a readable PyTorch file: "));
        BOOST_TEST(message.find(str(want.at("error"))) != std::string::npos);
      }
    } else {
      check_matches(ckpt::load(path), want.as_object(), std::string(file));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_pickled_call_is_refused_by_name_and_never_run) {
  const fs::path path = fixtures_dir() / "evil.pt";
  const std::string message = message_of<ckpt::format_error>([&] { (void)ckpt::load(path); });
  BOOST_TEST(message == "ckpt: '" + path.string() +
                            "' is not a readable PyTorch file: evil/data.pkl: it refers to the global "
                            "'posix.system', which is not one of the tensor-rebuilding functions and storage "
                            "types a torch.save state dict uses; nothing in the file was run");
}

BOOST_AUTO_TEST_CASE(contiguous_tensors_view_the_mapping_and_views_are_materialized) {
  const ckpt::checkpoint mlp = ckpt::load(fixtures_dir() / "mlp_f32.bin");
  for (const auto& [name, x] : mlp) BOOST_TEST(ckpt::detail::tensor_access::file_of(x) != nullptr, name);
  const ckpt::checkpoint views = ckpt::load(fixtures_dir() / "views.pt");
  BOOST_TEST(ckpt::detail::tensor_access::file_of(views.get("x")) != nullptr);
  BOOST_TEST(ckpt::detail::tensor_access::file_of(views.get("t")) == nullptr);  // transposed: copied in C order
  // The transpose of x (4 x 6, 0..23) starts 0, 6, 12, 18, 1, ...
  const auto t = views.get("t").as<float>();
  BOOST_TEST(t[0] == 0.0f);
  BOOST_TEST(t[1] == 6.0f);
  BOOST_TEST(t[4] == 1.0f);
  // Tied weights: one storage, two entries holding the same values.
  const ckpt::checkpoint tied = ckpt::load(fixtures_dir() / "tied.pt");
  BOOST_TEST((tied.get("embed.weight") == tied.get("out.weight")));
}

namespace {
fs::path shrinking_path;
// A pread that first empties the file at `shrinking_path`.
ssize_t shrinking_pread(int fd, void* out, std::size_t size, off_t offset) {
  if (!shrinking_path.empty() && ::truncate(shrinking_path.c_str(), 0) != 0) return -1;
  shrinking_path.clear();
  return ::pread(fd, out, size, offset);
}
}  // namespace

// Issue 25, class 5: a view copied at load (the transpose) is read with pread, not through the
// mapping, so that a file truncated meanwhile is an error naming it, not a SIGBUS.
BOOST_AUTO_TEST_CASE(a_file_truncated_while_a_view_is_copied_is_an_error_naming_it) {
  const ckpt_test::temp_dir d;
  const fs::path path = d.path() / "views.pt";
  fs::copy_file(fixtures_dir() / "views.pt", path);
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.pread = shrinking_pread;
  const ckpt::detail::io_hooks_guard guard(hooks);
  shrinking_path = path;
  BOOST_CHECK_EXCEPTION((void)ckpt::load(path), ckpt::format_error, [&](const ckpt::format_error& e) {
    return e.path() == path && e.rule() == "the file shrank while it was being read";
  });
  BOOST_TEST(shrinking_path.empty());  // the copy read the file
}

BOOST_AUTO_TEST_CASE(bytes_in_memory_load_as_the_file_does) {
  const fs::path path = fixtures_dir() / "adam.pt";
  const std::vector<std::byte> bytes = bytes_of(path);
  const ckpt::checkpoint from_memory = ckpt::parse(bytes, "in memory");
  const ckpt::checkpoint from_file = ckpt::load(path);
  BOOST_TEST(from_memory.names() == from_file.names(), boost::test_tools::per_element());
  for (const auto& [name, x] : from_file) BOOST_TEST((from_memory.get(name) == x), name);
  BOOST_TEST(from_memory.metadata() == from_file.metadata());
  // The overload with the reader's options reads the same bytes with them.
  std::vector<std::vector<std::string>> tied;
  const ckpt::checkpoint untied = ckpt::parse(bytes_of(fixtures_dir() / "tied.pt"), "tied in memory", {},
                                              {.keep_tied = false, .tied = [&](const std::vector<std::string>& names) {
                                                 tied.push_back(names);
                                               }});
  BOOST_TEST(untied.names() == std::vector<std::string>{"embed.weight"}, boost::test_tools::per_element());
  BOOST_TEST(tied.size() == 1u);
}

// parse, as load, tells a torch.save file from a safetensors one by its content: the format
// before PyTorch 1.6 (a bare pickle) too, which it refuses saying so, not as a broken
// safetensors file.
BOOST_AUTO_TEST_CASE(bytes_are_recognized_by_content_as_files_are) {
  const fs::path legacy = fixtures_dir() / "legacy.pt";
  for (const auto& read : {std::function<void()>([&] { (void)ckpt::load(legacy); }),
                           std::function<void()>([&] { (void)ckpt::parse(bytes_of(legacy), legacy); })}) {
    const std::string message = message_of<ckpt::format_error>(read);
    BOOST_TEST(message.starts_with("ckpt: '" + legacy.string() + "' is not a readable PyTorch file: it is not a zip file "
                                   "(torch.save files before PyTorch 1.6 are not read"),
               message);
  }
  // A torch.save zip cut to its first bytes is still one, refused as such.
  const std::vector<std::byte> mlp = bytes_of(fixtures_dir() / "mlp_f32.bin");
  BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::parse(std::span(mlp).first(4), "cut.pt"); })
                 .starts_with("ckpt: 'cut.pt' is not a readable PyTorch file: "));
  // Anything else is read as safetensors, with its messages.
  BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::parse(std::span(mlp).subspan(1), "shifted"); })
                 .starts_with("ckpt: 'shifted' is not a valid safetensors file: "));
}

BOOST_AUTO_TEST_CASE(a_converted_file_loads_back_entry_by_entry) {
  ckpt_test::temp_dir dir;
  const ckpt::checkpoint original = ckpt::load(fixtures_dir() / "dtypes.pt");
  ckpt::save(dir.path() / "dtypes.safetensors", original);
  const ckpt::checkpoint back = ckpt::load(dir.path() / "dtypes.safetensors");
  BOOST_TEST(back.names() == original.names(), boost::test_tools::per_element());
  for (const auto& [name, x] : original) BOOST_TEST((back.get(name) == x), name);
  // And the bytes of the safetensors file parse as safetensors.
  const ckpt::checkpoint parsed = ckpt::parse(bytes_of(dir.path() / "dtypes.safetensors"), "dtypes.safetensors");
  BOOST_TEST(parsed.names() == original.names(), boost::test_tools::per_element());
  for (const auto& [name, x] : original) BOOST_TEST((parsed.get(name) == x), name);
}

BOOST_AUTO_TEST_CASE(damaged_files_are_refused_never_crash) {
  // Every truncation, and every byte of the file flipped in turn: each either loads or is refused
  // with a ckpt::error (never another exception, a crash or a sanitizer report).
  const std::vector<std::byte> original = bytes_of(fixtures_dir() / "mlp_f32.bin");
  const ckpt::checkpoint whole = ckpt::parse(original, "whole");
  std::size_t refused = 0, loaded = 0;
  for (std::size_t size = 0; size < original.size(); ++size) {
    try {
      const ckpt::checkpoint t = ckpt::parse(std::span(original).first(size), "truncated");
      // Only the zip's last records can go (its zip64 end record still locates the central
      // directory): then nothing is lost.
      BOOST_TEST(size + 64 > original.size());
      BOOST_TEST(t.names() == whole.names(), boost::test_tools::per_element());
    } catch (const ckpt::error&) {
      ++refused;
    }
  }
  BOOST_TEST(refused + 64 > original.size());
  refused = 0;
  for (std::size_t at = 0; at < original.size(); ++at) {
    std::vector<std::byte> damaged = original;
    damaged[at] ^= std::byte{0xff};
    try {
      (void)ckpt::parse(damaged, "flipped");
      ++loaded;
    } catch (const ckpt::error&) {
      ++refused;
    }
  }
  BOOST_TEST(loaded > 0u);  // flips inside the tensor data change values, not validity
  BOOST_TEST(refused > 0u);
}

namespace {

// What the reader makes of one input, as a line of tests/fuzz/torch_corpus.expected: "refused", or
// "loaded", the number of entries and an FNV-1a hash of every entry's name, dtype, shape and bytes.
std::string outcome(std::span<const std::byte> bytes) {
  ckpt::checkpoint t;
  try {
    t = ckpt::parse(bytes, "corpus.pt");
  } catch (const ckpt::error&) {
    return "refused";
  }
  std::uint64_t hash = 14695981039346656037ull;
  const auto add = [&hash](std::span<const std::byte> part) {
    for (const std::byte b : part) hash = (hash ^ std::to_integer<std::uint64_t>(b)) * 1099511628211ull;
    hash = (hash ^ 0xffu) * 1099511628211ull;  // ends each part
  };
  const auto add_text = [&add](std::string_view text) { add(std::as_bytes(std::span(text.data(), text.size()))); };
  for (const auto& [name, x] : t) {
    add_text(name);
    add_text(ckpt::to_string(x.dtype()));
    for (const std::int64_t d : x.shape()) add_text(std::to_string(d));
    add(x.bytes());
  }
  char text[64];
  std::snprintf(text, sizeof text, "loaded %zu %016llx", t.size(), static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_fuzzing_corpus_replays) {
  // tests/corpus/torch: the minimized corpus of a fuzz_torch run (tests/corpus/README.md). Each
  // input keeps the outcome recorded in tests/fuzz/torch_corpus.expected (file name, outcome); with
  // CKPT_TORCH_CORPUS_RECORD=FILE in the environment, the outcomes are written to FILE instead.
  const char* record = std::getenv("CKPT_TORCH_CORPUS_RECORD");
  const bool recording = record != nullptr && *record != '\0';
  std::map<std::string, std::string> expected_outcome;
  if (!recording) {
    std::ifstream in(CKPT_TORCH_CORPUS_EXPECTED);
    BOOST_REQUIRE(in);
    for (std::string name, result; in >> name && std::getline(in >> std::ws, result);) expected_outcome[name] = result;
  }
  std::map<std::string, std::string> seen;
  std::size_t loaded = 0;
  for (const auto& entry : fs::directory_iterator(CKPT_TORCH_CORPUS)) {
    const std::string name = entry.path().filename().string();
    const std::vector<std::byte> bytes = bytes_of(entry.path());
    BOOST_TEST_CONTEXT(name) {
      bool ok = false;
      BOOST_CHECK_NO_THROW(ok = ckpt_fuzz::exercise_torch(bytes));  // the rules the reader promises
      loaded += ok ? 1 : 0;
      seen[name] = outcome(bytes);
      if (!recording) BOOST_TEST(seen[name] == expected_outcome[name]);
    }
  }
  if (recording) {
    std::ofstream out(record);
    for (const auto& [name, result] : seen) out << name << ' ' << result << '\n';
  } else {
    BOOST_TEST(seen.size() == expected_outcome.size());
  }
  BOOST_TEST(seen.size() >= 100u);
  BOOST_TEST(loaded > 0u);
  BOOST_TEST(loaded < seen.size());
}

// The central-directory entry of `record` in a zip (its "PK\1\2" signature), or npos.
std::size_t central_entry(const std::vector<std::byte>& zip, std::string_view record) {
  for (std::size_t at = 0; at + 46 + record.size() <= zip.size(); ++at) {
    if (zip[at] != std::byte{'P'} || zip[at + 1] != std::byte{'K'} || zip[at + 2] != std::byte{1} || zip[at + 3] != std::byte{2})
      continue;
    const std::string_view name(reinterpret_cast<const char*>(zip.data() + at + 46), record.size());
    if (name == record) return at;
  }
  return std::string_view::npos;
}

void put32(std::vector<std::byte>& zip, std::size_t at, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) zip[at + static_cast<std::size_t>(i)] = static_cast<std::byte>((value >> (8 * i)) & 0xff);
}

std::uint32_t get32(const std::vector<std::byte>& zip, std::size_t at) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | std::to_integer<std::uint32_t>(zip[at + static_cast<std::size_t>(i)]);
  return value;
}

BOOST_AUTO_TEST_CASE(a_record_claiming_more_than_the_file_or_another_s_bytes_is_refused) {
  const std::vector<std::byte> original = bytes_of(fixtures_dir() / "mlp_f32.bin");
  const std::size_t entry = central_entry(original, "mlp_f32/data/0");
  BOOST_TEST_REQUIRE(entry != std::string_view::npos);
  // A zip-bomb claim: 2 GiB in a file of 1.6 KB, stored and unpacked sizes alike.
  std::vector<std::byte> bomb = original;
  put32(bomb, entry + 20, 0x7ffffff0u);
  put32(bomb, entry + 24, 0x7ffffff0u);
  BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::parse(bomb, "bomb.pt"); }) ==
             "ckpt: 'bomb.pt' is not a readable PyTorch file: record 'mlp_f32/data/0' claims 2147483632 bytes past "
             "the end of the file");
  // data/1's directory entry pointing at data/0's local header: two names for one set of bytes.
  std::vector<std::byte> aliased = original;
  const std::size_t other = central_entry(original, "mlp_f32/data/1");
  BOOST_TEST_REQUIRE(other != std::string_view::npos);
  put32(aliased, other + 42, get32(original, entry + 42));
  BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::parse(aliased, "aliased.pt"); }) ==
             "ckpt: 'aliased.pt' is not a readable PyTorch file: records 'mlp_f32/data/0' and 'mlp_f32/data/1' overlap");
}

BOOST_AUTO_TEST_CASE(a_missing_file_is_an_io_error_naming_it) {
  const std::string message = message_of<ckpt::io_error>([] { (void)ckpt::load("/nonexistent/model.pt"); });
  BOOST_TEST(message.find("'/nonexistent/model.pt'") != std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Hostile inputs, round two (tests/RELIABILITY.md): budgets in proportion to the input, tied
// names. The crafted files are tests/fixtures/torch/hostile/ (make_hostile.py there).

fs::path hostile(const std::string& name) { return fixtures_dir() / "hostile" / name; }

std::string budget_rule(const std::string& what, std::size_t limit, std::size_t factor, const std::string& input,
                        int base_mib, const std::string& option) {
  return what + " take more than " + std::to_string(limit) + " bytes (" + std::to_string(factor) + " per byte of " +
         input + ", plus " + std::to_string(base_mib) + " MiB: the budget torch_options::" + option +
         "; raise it to read this file, in the ckpt tool with --torch-budget)";
}

std::size_t pickle_size(const fs::path& file) {
  // The one data.pkl of the crafted files, as stored (the reader's input for two budgets).
  const std::vector<std::byte> bytes = bytes_of(file);
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  const std::size_t name = text.find("archive/data.pkl");
  BOOST_TEST_REQUIRE(name != std::string_view::npos);
  std::uint32_t size = 0;  // the local header's stored size, 12 bytes before its name
  for (int i = 3; i >= 0; --i) size = (size << 8) | std::to_integer<std::uint32_t>(bytes[name - 12 + static_cast<std::size_t>(i)]);
  return size;
}

BOOST_AUTO_TEST_CASE(a_key_reused_at_every_level_is_refused_by_the_name_budget) {
  // One 10,000-character key at 60 levels: a 600 KB name, 18 MB of partial paths, from 10 KB.
  const fs::path file = hostile("deep_names.pt");
  const std::size_t pickle = pickle_size(file);
  BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::load(file); }) ==
             "ckpt: '" + file.string() + "' is not a readable PyTorch file: " +
                 budget_rule("its names", 16 * pickle + (1u << 20), 16, "its pickle", 1, "name_budget"));
  // Raised, as a user who trusts the file would: it loads, its one name as long as promised.
  const ckpt::checkpoint t = ckpt::load(file, {}, {.name_budget = 4096});
  BOOST_TEST_REQUIRE(t.size() == 1u);
  BOOST_TEST(t.begin()->first.size() == 60u * 10000 + 59);
}

BOOST_AUTO_TEST_CASE(thousands_of_names_on_one_storage_are_refused_by_the_data_budget) {
  // 5,000 names on one 64 KiB tensor: 320 MB of entries from a file of 125 KB.
  const fs::path file = hostile("many_names.pt");
  const auto size = static_cast<std::size_t>(fs::file_size(file));
  BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::load(file); }) ==
             "ckpt: '" + file.string() + "' is not a readable PyTorch file: " +
                 budget_rule("its tensors' bytes", 16 * size + (16u << 20), 16, "the file", 16, "data_budget"));
  // They are one tensor, tied: keeping the first name alone costs its bytes once.
  std::vector<std::vector<std::string>> tied;
  const ckpt::checkpoint first =
      ckpt::load(file, {}, {.keep_tied = false, .tied = [&](const std::vector<std::string>& names) { tied.push_back(names); }});
  BOOST_TEST(first.size() == 1u);
  BOOST_TEST(first.contains("w0"));
  BOOST_TEST_REQUIRE(tied.size() == 1u);
  BOOST_TEST(tied[0].size() == 5000u);
  BOOST_TEST(tied[0].front() == "w0");
}

BOOST_AUTO_TEST_CASE(an_expand_past_memory_is_refused_naming_the_file) {
  // One F64 element expanded to 2^61: 2^64 bytes, which overflowed into a tiny copy size and
  // then an invalid_argument without the file's name.
  const fs::path file = hostile("expand_2p61.pt");
  BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::load(file); }) ==
             "ckpt: '" + file.string() + "' is not a readable PyTorch file: archive/data.pkl: a tensor of storage '0' "
             "has 2305843009213693952 elements of F64, more bytes than memory has");
}

// A stored zip of `records` laid out as torch.save lays them out (CRCs left 0: the reader reads
// stored records raw and does not check them).
std::vector<std::byte> stored_zip(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out, directory;
  const auto put = [](std::string& to, std::uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) to += static_cast<char>((value >> (8 * i)) & 0xff);
  };
  for (const auto& [name, data] : records) {
    const std::size_t offset = out.size();
    put(out, 0x04034b50, 4), put(out, 20, 2), put(out, 0, 2), put(out, 0, 2), put(out, 0, 4), put(out, 0, 4);
    put(out, data.size(), 4), put(out, data.size(), 4), put(out, name.size(), 2), put(out, 0, 2);
    out += name + data;
    put(directory, 0x02014b50, 4), put(directory, 20, 2), put(directory, 20, 2), put(directory, 0, 2), put(directory, 0, 2);
    put(directory, 0, 4), put(directory, 0, 4), put(directory, data.size(), 4), put(directory, data.size(), 4);
    put(directory, name.size(), 2), put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 2), put(directory, 0, 2);
    put(directory, 0, 4), put(directory, offset, 4);
    directory += name;
  }
  const std::size_t at = out.size();
  out += directory;
  put(out, 0x06054b50, 4), put(out, 0, 2), put(out, 0, 2), put(out, records.size(), 2), put(out, records.size(), 2);
  put(out, directory.size(), 4), put(out, at, 4), put(out, 0, 2);
  const auto* first = reinterpret_cast<const std::byte*>(out.data());
  return {first, first + out.size()};
}

BOOST_AUTO_TEST_CASE(objects_the_unpickler_builds_are_refused_by_the_object_budget) {
  // {"k": [[], [], ...]}: an empty list built and appended for every 2 bytes of the pickle; the
  // objects cost ~300 bytes each before (a 12 MB pickle reached 3.6 GB).
  std::string pickle("\x80\x02}(X\x01\x00\x00\x00k]", 11);
  for (int i = 0; i < 500'000; ++i) pickle += "]a";
  pickle += "u.";
  const std::vector<std::byte> file = stored_zip({{"archive/data.pkl", pickle}});
  // Within the default budget (64 bytes per byte of the pickle, plus 64 MiB): it loads, empty.
  BOOST_TEST(ckpt::parse(file, "objects.pt").size() == 0u);
  BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::parse(file, "objects.pt", {}, {.object_budget = 0}); }) ==
             "ckpt: 'objects.pt' is not a readable PyTorch file: " +
                 budget_rule("the objects its pickle builds", 64u << 20, 0, "its pickle", 64, "object_budget"));
}

BOOST_AUTO_TEST_CASE(tied_names_are_reported_and_kept_or_left_to_the_first) {
  // tied.pt: out.weight is embed.weight (one Parameter, two names).
  std::vector<std::vector<std::string>> tied;
  const ckpt::checkpoint both =
      ckpt::load(fixtures_dir() / "tied.pt", {}, {.tied = [&](const std::vector<std::string>& names) { tied.push_back(names); }});
  BOOST_TEST(both.size() == 2u);
  BOOST_TEST((tied == std::vector<std::vector<std::string>>{{"embed.weight", "out.weight"}}));
  // One tensor: the two entries view the same bytes.
  BOOST_TEST(both.get("embed.weight").bytes().data() == both.get("out.weight").bytes().data());
  const ckpt::checkpoint first = ckpt::load(fixtures_dir() / "tied.pt", {}, {.keep_tied = false});
  BOOST_TEST(first.size() == 1u);
  BOOST_TEST((first.get("embed.weight") == both.get("out.weight")));
  // Different views of one storage are not tied: views.pt reports nothing.
  tied.clear();
  const ckpt::checkpoint views =
      ckpt::load(fixtures_dir() / "views.pt", {}, {.tied = [&](const std::vector<std::string>& names) { tied.push_back(names); }});
  BOOST_TEST(tied.empty());
  BOOST_TEST(views.size() > 2u);
}

BOOST_AUTO_TEST_CASE(the_crafted_files_replay_through_the_fuzz_checks) {
  // The fuzz target's checks, which bound what a loaded file may hold by the same budgets.
  for (const char* name : {"deep_names.pt", "many_names.pt", "expand_2p61.pt", "control_names.pt"})
    BOOST_CHECK_NO_THROW(static_cast<void>(ckpt_fuzz::exercise_torch(bytes_of(hostile(name)))));
}

}  // namespace

BOOST_AUTO_TEST_SUITE_END()  // test_torch
