// Hugging Face sharded checkpoints: save_sharded and ckpt::load of an index or a
// folder, their exact file names and index text, laziness, errors and atomicity, and the memory
// the index's reader takes.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include "format/hf_index.hpp"  // read_weight_map and index_text (src/)
#include "io/io_hooks.hpp"  // the build's private seam (src/)
#include "run/store.hpp"  // a run's store: the read of a small file of it (src/)
#include "allocation_watch.hpp"  // this executable's operator new, counting the heap's peak
#include <ckpt/file.hpp>
#include <ckpt/sharded.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_sharded)

namespace {

using ckpt_test::folder_listing;
using ckpt_test::message_of;
using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

// A 1-D F32 tensor of `n` elements start, start + 1, ...: 4 n bytes.
ckpt::tensor run(std::size_t n, float start) {
  return ckpt::tensor::make(ckpt::dtype::f32, {static_cast<std::int64_t>(n)}, [&](std::span<std::byte> out) {
    for (std::size_t i = 0; i < n; ++i) {
      const float v = start + static_cast<float>(i);
      std::memcpy(out.data() + i * 4, &v, 4);
    }
  });
}

// Entries of 16, 16, 40 and 8 bytes: with a 32-byte limit, c (over the limit) gets the first shard
// of its own when it is met, a and b fill the second, d would take it over and starts the third.
// (huggingface_hub's split_state_dict_into_shards gives the same.)
const ckpt::metadata_map meta{{"format", "pt"}, {"run", "7"}};
ckpt::checkpoint sample() {
  return ckpt::checkpoint({{"a", run(4, 0)}, {"b", run(4, 10)}, {"c", run(10, 20)}, {"d", run(2, 40)}}, meta);
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  BOOST_REQUIRE(out.good());
}

void check_same(const ckpt::checkpoint& got, const ckpt::checkpoint& expected) {
  BOOST_TEST(got.names() == expected.names());
  for (const auto& [name, x] : expected) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_REQUIRE(got.find(name) != nullptr);
      BOOST_TEST((got.get(name) == x));
    }
  }
}

// True if `address` lies in a mapping of the file `file` (from /proc/self/maps).
bool is_mapped_from(const void* address, const std::filesystem::path& file) {
  const std::string wanted = std::filesystem::canonical(file).string();
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  for (std::string line; std::getline(maps, line);) {
    std::istringstream fields(line);
    std::string range, perms, offset, device, inode, path;
    fields >> range >> perms >> offset >> device >> inode;
    std::getline(fields >> std::ws, path);
    if (path != wanted) continue;
    const std::uintptr_t begin = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const std::uintptr_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    if (at >= begin && at < end) return true;
  }
  return false;
}

// The save id an index records ("" if none).
std::string save_id_of(const std::filesystem::path& index) {
  std::string id;
  static_cast<void>(ckpt::detail::read_weight_map(index, &id));
  return id;
}

// The index of sample() with a limit of 32, as transformers writes it, and with the save id
// `id` as save_sharded adds it.
std::string expected_index(const std::string& id) {
  return R"({
  "metadata": {
)" + (id.empty() ? "" : "    \"ckpt.save_id\": \"" + id + "\",\n") + R"(    "total_size": 80
  },
  "weight_map": {
    "a": "model-00002-of-00003.safetensors",
    "b": "model-00002-of-00003.safetensors",
    "c": "model-00001-of-00003.safetensors",
    "d": "model-00003-of-00003.safetensors"
  }
}
)";
}

}  // namespace

BOOST_AUTO_TEST_CASE(writes_hugging_face_names_and_index_and_loads_back) {
  const temp_dir dir;
  const ckpt::sharded_files files = ckpt::save_sharded(dir.path(), sample(), 32, {.save = {.digest = false}});
  BOOST_TEST(folder_listing(dir.path()) ==
             (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                       "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  BOOST_TEST(files.index == dir.path() / "model.safetensors.index.json");
  BOOST_TEST(files.shards == (std::vector<std::filesystem::path>{dir.path() / "model-00001-of-00003.safetensors",
                                                                 dir.path() / "model-00002-of-00003.safetensors",
                                                                 dir.path() / "model-00003-of-00003.safetensors"}));
  const std::string id = save_id_of(files.index);
  BOOST_TEST(id.size() == 12u);
  BOOST_TEST(read_bytes(files.index) == expected_index(id));

  // Each shard is an ordinary safetensors file with its entries, the checkpoint's metadata and
  // the save's id.
  const ckpt::checkpoint second = ckpt::load(files.shards[1]);
  BOOST_TEST(second.names() == (std::vector<std::string>{"a", "b"}));
  ckpt::metadata_map with_id = meta;
  with_id.emplace("ckpt.save_id", id);
  BOOST_TEST(second.metadata() == with_id);
  BOOST_TEST(ckpt::load(files.shards[0]).names() == std::vector<std::string>{"c"});

  for (const auto& path : {files.index, dir.path()}) {
    BOOST_TEST_CONTEXT(path) {
      const ckpt::checkpoint t = ckpt::load(path);
      check_same(t, sample());
      BOOST_TEST(t.metadata() == meta);
    }
  }
}

// The index text is json.dumps(index, indent=2, sort_keys=True) + "\n", as transformers writes
// it, byte for byte, escapes included; the expected text is Python's own output.
BOOST_AUTO_TEST_CASE(the_index_escapes_names_as_python_does) {
  const temp_dir dir;
  const ckpt::checkpoint t({{"caf\u00e9.w", run(1, 0)}, {"emoji \U0001F642", run(1, 1)},
                            {"q\"uote\\back\ttab\x7f", run(1, 2)}});
  const auto files = ckpt::save_sharded(dir.path(), t, 1000);
  BOOST_TEST(read_bytes(files.index) == R"({
  "metadata": {
    "ckpt.save_id": ")" + save_id_of(files.index) + R"(",
    "total_size": 12
  },
  "weight_map": {
    "caf\u00e9.w": "model-00001-of-00001.safetensors",
    "emoji \ud83d\ude42": "model-00001-of-00001.safetensors",
    "q\"uote\\back\ttab\u007f": "model-00001-of-00001.safetensors"
  }
}
)");
  check_same(ckpt::load(files.index), t);
}

BOOST_AUTO_TEST_CASE(shards_are_mapped_lazily_and_outlive_the_checkpoint) {
  const temp_dir dir;
  const ckpt::sharded_files files = ckpt::save_sharded(dir.path(), sample(), 32);
  ckpt::tensor d;
  {
    const ckpt::checkpoint t = ckpt::load(files.index);
    BOOST_TEST(is_mapped_from(t.get("a").bytes().data(), files.shards[1]));
    BOOST_TEST(is_mapped_from(t.get("c").bytes().data(), files.shards[0]));
    BOOST_TEST(is_mapped_from(t.get("d").bytes().data(), files.shards[2]));
    d = t.get("d");
  }
  BOOST_TEST(is_mapped_from(d.bytes().data(), files.shards[2]));
  BOOST_TEST(d.as<float>()[1] == 41.0f);
}

BOOST_AUTO_TEST_CASE(an_entry_over_the_limit_gets_a_shard_of_its_own) {
  const temp_dir dir;
  // 8, 400, 8 bytes with a 16-byte limit: the big one gets the first shard when it is met, and
  // the small ones before and after it share the second.
  const ckpt::checkpoint t({{"a", run(2, 0)}, {"b", run(100, 0)}, {"c", run(2, 5)}});
  const auto files = ckpt::save_sharded(dir.path(), t, 16);
  BOOST_TEST(files.shards.size() == 2u);
  BOOST_TEST(ckpt::load(files.shards[0]).names() == std::vector<std::string>{"b"});
  BOOST_TEST(ckpt::load(files.shards[1]).names() == (std::vector<std::string>{"a", "c"}));
  check_same(ckpt::load(dir.path()), t);
  // A limit that holds everything makes one shard, still with an index.
  const temp_dir one;
  const auto single = ckpt::save_sharded(one.path(), t, 1'000'000);
  BOOST_TEST(folder_listing(one.path()) ==
             (std::vector<std::string>{"model-00001-of-00001.safetensors", "model.safetensors.index.json"}));
  BOOST_TEST(single.shards.size() == 1u);
  check_same(ckpt::load(one.path()), t);
}

BOOST_AUTO_TEST_CASE(the_base_name_is_an_option) {
  const temp_dir dir;
  ckpt::save_sharded(dir.path() / "unet", sample(), 40, {.base_name = "diffusion_pytorch_model"});
  BOOST_TEST(folder_listing(dir.path() / "unet") ==
             (std::vector<std::string>{"diffusion_pytorch_model-00001-of-00003.safetensors",
                                       "diffusion_pytorch_model-00002-of-00003.safetensors",
                                       "diffusion_pytorch_model-00003-of-00003.safetensors",
                                       "diffusion_pytorch_model.safetensors.index.json"}));
  check_same(ckpt::load(dir.path() / "unet"), sample());
}

BOOST_AUTO_TEST_CASE(an_empty_checkpoint_is_an_index_alone) {
  const temp_dir dir;
  const auto files = ckpt::save_sharded(dir.path(), ckpt::checkpoint({}, meta), 32);
  BOOST_TEST(files.shards.empty());
  BOOST_TEST(read_bytes(files.index) == "{\n  \"metadata\": {\n    \"ckpt.save_id\": \"" + save_id_of(files.index) +
                                            "\",\n    \"total_size\": 0\n  },\n  \"weight_map\": {}\n}\n");
  BOOST_TEST(ckpt::load(dir.path()).empty());
}

BOOST_AUTO_TEST_CASE(a_new_save_removes_the_shards_of_the_previous_one) {
  const temp_dir dir;
  ckpt::save_sharded(dir.path(), sample(), 32);
  write_text(dir.path() / "model-notes.txt", "mine");
  write_text(dir.path() / "model-1-of-3.safetensors", "not a shard name of ours");
  const ckpt::checkpoint smaller({{"a", run(4, 1)}});
  ckpt::save_sharded(dir.path(), smaller, 32);
  BOOST_TEST(folder_listing(dir.path()) ==
             (std::vector<std::string>{"model-00001-of-00001.safetensors", "model-1-of-3.safetensors",
                                       "model-notes.txt", "model.safetensors.index.json"}));
  check_same(ckpt::load(dir.path()), smaller);
  // Unless told to keep them: the index, not the folder, says what the checkpoint is.
  ckpt::save_sharded(dir.path(), sample(), 32, {.remove_stale_shards = false});
  ckpt::save_sharded(dir.path(), smaller, 32, {.remove_stale_shards = false});
  BOOST_TEST(folder_listing(dir.path()).size() == 7u);
  check_same(ckpt::load(dir.path()), smaller);
}

BOOST_AUTO_TEST_CASE(per_shard_digests_are_checked_and_not_merged) {
  const temp_dir dir;
  const auto files = ckpt::save_sharded(dir.path(), sample(), 32, {.save = {.digest = true}});
  BOOST_TEST(ckpt::load(files.shards[0]).metadata().contains("ckpt.xxh3_64_file"));
  const ckpt::checkpoint t = ckpt::load(dir.path());
  BOOST_TEST(t.metadata() == meta);  // each shard's digest describes that file only
  // Flip the last data byte of the last shard: its digest no longer matches.
  {
    std::fstream f(files.shards[2], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(last ^ 1));
  }
  BOOST_CHECK_THROW(static_cast<void>(ckpt::load(dir.path())), ckpt::integrity_error);
  BOOST_TEST(ckpt::load(dir.path(), {.verify_digest = false}).size() == 4u);
}

// One sharded checkpoint is one save. A load of a folder that save_sharded writes over while it
// is read (here from the digest's progress report of the first shard, once it is open) meets a
// shard of the newer save, reads the index again, and returns the newer save whole: never the
// first shard of one save and the others of the other.
BOOST_AUTO_TEST_CASE(a_load_during_a_save_over_it_reads_one_save) {
  const temp_dir dir;
  const ckpt::checkpoint newer({{"a", run(4, 100)}, {"b", run(4, 110)}, {"c", run(10, 120)}, {"d", run(2, 140)}}, meta);
  const auto files = ckpt::save_sharded(dir.path(), sample(), 32, {.save = {.digest = true}});
  bool saved = false;
  const auto save_over = [&](std::uint64_t, std::uint64_t) {
    if (!std::exchange(saved, true)) ckpt::save_sharded(dir.path(), newer, 32, {.save = {.digest = true}});
  };
  const ckpt::checkpoint t = ckpt::load(files.index, {.progress = save_over});
  BOOST_TEST(saved);
  check_same(t, newer);
  BOOST_TEST(t.metadata() == meta);  // without the save id
}

// A shard of another save under an index (B's second shard copied over A's, or a shard without
// an id) fails the load, the index read again included: a mixed_save_error naming the shard and
// both saves, which is not a format_error (the files are not damaged). An index without an id
// (Hugging Face's, or one ckpt wrote before it wrote ids) is read as it always was.
BOOST_AUTO_TEST_CASE(a_shard_of_another_save_is_refused_naming_both_saves) {
  const temp_dir a, b;
  const auto files = ckpt::save_sharded(a.path(), sample(), 32);
  const auto other = ckpt::save_sharded(b.path(), sample(), 32);
  const std::string id = save_id_of(files.index), other_id = save_id_of(other.index);
  BOOST_TEST(id != other_id);
  std::filesystem::copy_file(other.shards[1], files.shards[1], std::filesystem::copy_options::overwrite_existing);
  const auto refusal = [&](const ckpt::load_options& options) {
    try {
      static_cast<void>(ckpt::load(files.index, options));
    } catch (const ckpt::mixed_save_error& e) {
      BOOST_TEST(e.path() == files.index);
      BOOST_TEST(e.shard() == files.shards[1]);
      BOOST_TEST(e.index_save() == id);
      BOOST_TEST(dynamic_cast<const ckpt::format_error*>(&e) == nullptr);
      return std::make_pair(e.shard_save(), std::string(e.what()));
    }
    BOOST_FAIL("a shard of another save was loaded");
    return std::make_pair(std::string(), std::string());
  };
  const ckpt::name_pattern only_b("^b$"), only_c("^c$");
  for (const ckpt::load_options& options : {ckpt::load_options{}, ckpt::load_options{.only = only_b}}) {
    const auto [theirs, message] = refusal(options);
    BOOST_TEST(theirs == other_id);
    BOOST_TEST(message == "ckpt: the shard '" + files.shards[1].string() + "' is of save " + other_id +
                              ", not of save " + id + " that its index '" + files.index.string() +
                              "' names: the sharded checkpoint was saved again while it was read (load it again)");
  }
  // A shard the index does not read is not checked.
  check_same(ckpt::load(files.index, {.only = only_c}), ckpt::select(sample(), only_c));

  ckpt::save(files.shards[1], ckpt::checkpoint({{"a", run(4, 0)}, {"b", run(4, 10)}}, meta));
  const auto [none, message] = refusal({});
  BOOST_TEST(none.empty());
  BOOST_TEST(message.find("is of a save without an id, not of save " + id) != std::string::npos, message);

  write_text(files.index, expected_index(""));
  check_same(ckpt::load(files.index), sample());
  BOOST_TEST(ckpt::load(files.index).metadata() == meta);
}

BOOST_AUTO_TEST_CASE(save_sharded_refuses_a_bad_limit_base_name_or_name_and_writes_nothing) {
  const temp_dir dir;
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::save_sharded(dir.path(), sample(), 0); }) ==
             "ckpt: save_sharded: max_shard_bytes must be positive, got 0");
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               ckpt::save_sharded(dir.path(), sample(), 32, {.base_name = "a/b"});
             }) == "ckpt: save_sharded: the base name 'a/b' is not a plain file name part");
  BOOST_TEST(message_of<std::invalid_argument>([&] {
               ckpt::save_sharded(dir.path(), sample(), 32, {.base_name = "caf\xe9"});  // Latin-1
             }) == "ckpt: cannot save the name 'caf\\xe9': it is not valid UTF-8 (byte 3 of 4) and a sharded "
                   "checkpoint's index holds UTF-8 names");
  BOOST_TEST(folder_listing(dir.path()).empty());
}

// Hugging Face's reader selects by weight_map: shards written by another implementation (the
// reference Rust crate), with an index in the layout transformers writes (json.dumps, indent 2).
BOOST_AUTO_TEST_CASE(loads_shards_written_elsewhere_by_the_weight_map) {
  const std::filesystem::path fixtures = CKPT_FIXTURES_DIR;
  const temp_dir dir;
  std::filesystem::copy_file(fixtures / "valid/dtype_F32.safetensors", dir.path() / "model-00001-of-00002.safetensors");
  std::filesystem::copy_file(fixtures / "valid/ranks.safetensors", dir.path() / "model-00002-of-00002.safetensors");
  write_text(dir.path() / "model.safetensors.index.json", R"({
  "metadata": {
    "total_size": 4242
  },
  "weight_map": {
    "r1": "model-00002-of-00002.safetensors",
    "r4_i8": "model-00002-of-00002.safetensors",
    "v": "model-00001-of-00002.safetensors",
    "x": "model-00001-of-00002.safetensors"
  }
}
)");
  const ckpt::checkpoint t = ckpt::load(dir.path());
  BOOST_TEST(t.names() == (std::vector<std::string>{"r1", "r4_i8", "v", "x"}));  // s, r2... are not in the map
  const ckpt::checkpoint f32 = ckpt::load(fixtures / "valid/dtype_F32.safetensors");
  const ckpt::checkpoint ranks = ckpt::load(fixtures / "valid/ranks.safetensors");
  BOOST_TEST((t.get("x") == f32.get("x")));
  BOOST_TEST((t.get("v") == f32.get("v")));
  BOOST_TEST((t.get("r4_i8") == ranks.get("r4_i8")));
}

BOOST_AUTO_TEST_SUITE(broken_indexes)

struct folder {
  temp_dir dir;
  ckpt::sharded_files files = ckpt::save_sharded(dir.path(), sample(), 32);
  [[nodiscard]] std::string index_message() const {
    return message_of<ckpt::format_error>([&] { static_cast<void>(ckpt::load(files.index)); });
  }
  [[nodiscard]] std::string prefix() const {
    return "ckpt: '" + files.index.string() + "' is not a valid sharded checkpoint index: ";
  }
};

BOOST_FIXTURE_TEST_CASE(a_missing_shard_is_an_io_error_naming_it, folder) {
  std::filesystem::remove(files.shards[1]);
  BOOST_TEST(message_of<ckpt::io_error>([&] { static_cast<void>(ckpt::load(dir.path())); }) ==
             "ckpt: cannot open '" + files.shards[1].string() + "': No such file or directory");
}

BOOST_FIXTURE_TEST_CASE(an_entry_missing_from_its_shard_is_a_format_error_naming_both, folder) {
  std::string text = read_bytes(files.index);
  const std::string from = R"("c": "model-00001-of-00003.safetensors")";
  text.replace(text.find(from), from.size(), R"("c": "model-00003-of-00003.safetensors")");
  write_text(files.index, text);
  BOOST_TEST(index_message() == prefix() + "the entry 'c' is not in its shard 'model-00003-of-00003.safetensors'");
}

BOOST_FIXTURE_TEST_CASE(shard_names_must_stay_in_the_folder, folder) {
  for (const std::string shard : {"../model-00001-of-00003.safetensors", "/etc/passwd", "..", "", "sub/x.safetensors"}) {
    BOOST_TEST_CONTEXT(shard) {
      write_text(files.index, R"({"weight_map": {"a": ")" + shard + R"("}})");
      BOOST_TEST(index_message() == prefix() + "the weight_map entry 'a' names the shard \"" + shard +
                                        "\", which is not a file name in the index's folder");
    }
  }
}

BOOST_FIXTURE_TEST_CASE(malformed_json_or_structure_is_a_format_error_naming_the_rule, folder) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"weight_map": {"a": "x.safetensors",})", "it is not JSON: syntax error"},
      {"", "it is not JSON: incomplete JSON"},
      {R"(["weight_map"])", "it is not a JSON object"},
      {R"({"metadata": {"total_size": 1}})", "it has no 'weight_map'"},
      {R"({"weight_map": ["a"]})", "its 'weight_map' is not an object"},
      {R"({"metadata": 3, "weight_map": {}})", "its 'metadata' is not an object"},
      {R"({"weight_map": {"a": 1}})", "the weight_map entry 'a' is 1, not a shard file name"},
      {R"({"weight_map": {"": "x.safetensors"}})", "the weight_map entry '' is not a valid entry name"},
      {R"({"weight_map": {"__metadata__": "x.safetensors"}})",
       "the weight_map entry '__metadata__' is not a valid entry name"},
  };
  for (const auto& [text, rule] : cases) {
    BOOST_TEST_CONTEXT(text) {
      write_text(files.index, text);
      BOOST_TEST(index_message() == prefix() + rule);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_folder_must_hold_exactly_one_index) {
  const temp_dir dir;
  BOOST_TEST(message_of<ckpt::error>([&] { static_cast<void>(ckpt::load(dir.path())); }) ==
             "ckpt: the folder '" + dir.path().string() + "' holds no sharded checkpoint index (*.safetensors.index.json)");
  ckpt::save_sharded(dir.path(), sample(), 32);
  ckpt::save_sharded(dir.path(), sample(), 32, {.base_name = "other"});
  BOOST_TEST(message_of<ckpt::error>([&] { static_cast<void>(ckpt::load(dir.path())); }) ==
             "ckpt: the folder '" + dir.path().string() +
                 "' holds 2 sharded checkpoint indexes ('model.safetensors.index.json', "
                 "'other.safetensors.index.json'); load the one you mean");
  BOOST_TEST(ckpt::load(dir.path() / "other.safetensors.index.json").size() == 4u);
}

BOOST_AUTO_TEST_CASE(a_missing_index_is_an_io_error) {
  const temp_dir dir;
  const auto index = dir.path() / "model.safetensors.index.json";
  BOOST_TEST(message_of<ckpt::io_error>([&] { static_cast<void>(ckpt::load(index)); }) ==
             "ckpt: cannot open '" + index.string() + "': No such file or directory");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(atomicity)

// Fault injection through the writer's system-call table: the k-th writev fails with EIO, or
// the rename of the index.
int writes_left = 0;
ssize_t failing_writev(int fd, const iovec* pieces, int count) {
  if (writes_left-- <= 0) {
    errno = EIO;
    return -1;
  }
  return ckpt::detail::system_hooks().writev(fd, pieces, count);
}
// The target of a temporary file descriptor, from /proc/self/fd.
std::string path_of(int fd) {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/fd/" + std::to_string(fd), ec).string();
}
ssize_t failing_index_writev(int fd, const iovec* pieces, int count) {
  if (path_of(fd).find(".index.json.tmp-") != std::string::npos) {
    errno = EIO;
    return -1;
  }
  return ckpt::detail::system_hooks().writev(fd, pieces, count);
}
int failing_index_rename(int from_folder, const char* from, int to_folder, const char* to) {
  if (std::string_view(to).ends_with(".index.json")) {
    errno = EIO;
    return -1;
  }
  return ckpt::detail::system_hooks().renameat(from_folder, from, to_folder, to);
}

ckpt::checkpoint second_version() {
  return ckpt::checkpoint({{"a", run(4, 100)}, {"b", run(4, 110)}, {"c", run(10, 120)}, {"d", run(2, 140)}});
}

BOOST_AUTO_TEST_CASE(a_failing_shard_leaves_the_previous_save_whole) {
  const temp_dir dir;
  const auto files = ckpt::save_sharded(dir.path(), sample(), 32);
  const std::string before = read_bytes(files.index);
  const std::vector<std::string> listing = folder_listing(dir.path());
  {
    ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
    hooks.writev = failing_writev;
    writes_left = 1;  // the first shard (c) goes through, the second (a, b) fails
    const ckpt::detail::io_hooks_guard guard(hooks);
    const std::string message =
        message_of<ckpt::io_error>([&] { ckpt::save_sharded(dir.path(), second_version(), 32); });
    // The shard was being written in the staging folder.
    BOOST_TEST(message.starts_with("ckpt: cannot write '" + (dir.path() / ".ckpt-staging-").string()));
    BOOST_TEST(message.ends_with("/model-00002-of-00003.safetensors': Input/output error"));
  }
  BOOST_TEST(read_bytes(files.index) == before);
  BOOST_TEST(folder_listing(dir.path()) == listing);  // no staging folder, no temporary left behind
  // Nothing of the failed save was moved into place: the previous save loads whole.
  const ckpt::checkpoint previous = ckpt::load(dir.path());
  for (const auto& [name, x] : sample()) BOOST_TEST((previous.get(name) == x), name);
}

// Hostile inputs, round two: `ckpt convert X --shard-size N` into a sharded folder, failing on
// the third shard (a name that is not UTF-8), used to leave the old index over two new shards
// and one old one, which verify passed and diff read as a checkpoint that never existed.
BOOST_AUTO_TEST_CASE(a_name_that_fails_the_third_shard_leaves_the_previous_save_whole) {
  const temp_dir dir;
  const auto files = ckpt::save_sharded(dir.path(), sample(), 32, {.save = {.digest = true}});
  const std::string before = read_bytes(files.index);
  const std::vector<std::string> listing = folder_listing(dir.path());
  ckpt::checkpoint bad({{"a", run(4, 100)}, {"b", run(4, 110)}, {"c", run(10, 120)}, {"d", run(2, 140)},
                        {"\xff", run(2, 150)}});  // sorts last: the third shard holds d and it
  BOOST_TEST(message_of<std::invalid_argument>([&] { ckpt::save_sharded(dir.path(), bad, 32); })
                 .find("is not valid UTF-8") != std::string::npos);
  BOOST_TEST(read_bytes(files.index) == before);
  BOOST_TEST(folder_listing(dir.path()) == listing);
  const ckpt::checkpoint previous = ckpt::load(dir.path(), {.verify_digest = true});
  BOOST_TEST(previous.size() == sample().size());
  for (const auto& [name, x] : sample()) BOOST_TEST((previous.get(name) == x), name);
}

int failing_third_shard_rename(int from_folder, const char* from, int to_folder, const char* to) {
  // The move out of the staging folder (into another folder), not the save's own rename inside it.
  if (std::string_view(to) == "model-00003-of-00003.safetensors" && from_folder != to_folder) {
    errno = EIO;
    return -1;
  }
  return ckpt::detail::system_hooks().renameat(from_folder, from, to_folder, to);
}

// Once the shards are written, moving them into place replaces the previous save's shards of
// the same names: its index goes first, so that an interruption there leaves no index (refused
// by load) rather than an index over shards of two saves.
BOOST_AUTO_TEST_CASE(an_interrupted_move_into_place_leaves_no_index_rather_than_a_mixed_one) {
  const temp_dir dir;
  const auto files = ckpt::save_sharded(dir.path(), sample(), 32);
  {
    ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
    hooks.renameat = failing_third_shard_rename;
    const ckpt::detail::io_hooks_guard guard(hooks);
    BOOST_TEST(message_of<ckpt::io_error>([&] { ckpt::save_sharded(dir.path(), second_version(), 32); }) ==
               "ckpt: cannot move a new shard into place as '" + files.shards[2].string() + "': Input/output error");
  }
  BOOST_TEST(!std::filesystem::exists(files.index));
  BOOST_TEST(message_of<ckpt::error>([&] { static_cast<void>(ckpt::load(dir.path())); }).find("holds no sharded checkpoint index") !=
             std::string::npos);
  // No staging folder is left behind; the next save succeeds.
  for (const auto& name : folder_listing(dir.path())) BOOST_TEST(!name.starts_with(".ckpt-staging-"), name);
  ckpt::save_sharded(dir.path(), second_version(), 32);
  const ckpt::checkpoint now = ckpt::load(dir.path());
  for (const auto& [name, x] : second_version()) BOOST_TEST((now.get(name) == x), name);
}

BOOST_AUTO_TEST_CASE(a_failing_index_write_leaves_the_previous_index_in_place) {
  const ckpt::checkpoint bigger({{"a", run(4, 0)}, {"b", run(4, 10)}, {"c", run(10, 20)}, {"d", run(2, 40)},
                                 {"e", run(8, 50)}});
  ckpt::detail::io_hooks failing_write = ckpt::detail::system_hooks();
  failing_write.writev = failing_index_writev;
  ckpt::detail::io_hooks failing_rename = ckpt::detail::system_hooks();
  failing_rename.renameat = failing_index_rename;
  for (const auto& [hooks, operation] : {std::pair{failing_write, "write"},
                                         std::pair{failing_rename, "rename a temporary file over"}}) {
    BOOST_TEST_CONTEXT(operation) {
      const temp_dir dir;
      const auto files = ckpt::save_sharded(dir.path(), sample(), 32);
      const std::string before = read_bytes(files.index);
      {
        const ckpt::detail::io_hooks_guard guard(hooks);
        BOOST_TEST(message_of<ckpt::io_error>([&] { ckpt::save_sharded(dir.path(), bigger, 32); }) ==
                   "ckpt: cannot " + std::string(operation) + " '" + files.index.string() + "': Input/output error");
      }
      BOOST_TEST(read_bytes(files.index) == before);
      // The new shards are there (4 now, so other names) but nothing names them, the old ones
      // were not removed, and no temporary is left: the previous checkpoint still loads whole.
      BOOST_TEST(folder_listing(dir.path()) ==
                 (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00001-of-00004.safetensors",
                                           "model-00002-of-00003.safetensors", "model-00002-of-00004.safetensors",
                                           "model-00003-of-00003.safetensors", "model-00003-of-00004.safetensors",
                                           "model-00004-of-00004.safetensors", "model.safetensors.index.json"}));
      check_same(ckpt::load(dir.path()), sample());
      // The next successful save cleans up.
      ckpt::save_sharded(dir.path(), bigger, 32);
      BOOST_TEST(folder_listing(dir.path()).size() == 5u);
      check_same(ckpt::load(dir.path()), bigger);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// The weight_map's names are keys of a JSON object: one given twice (which a DOM reader would
// merge, the last one winning) is refused, naming both shards it is given to, as a safetensors
// header refuses a name given twice.
BOOST_AUTO_TEST_CASE(duplicate_weight_map_keys_are_refused_naming_both_shards) {
  const temp_dir dir;
  const auto files = ckpt::save_sharded(dir.path(), sample(), 32);
  const auto message = [&](const std::string& text) {
    write_text(files.index, text);
    return message_of<ckpt::format_error>([&] { static_cast<void>(ckpt::load(files.index)); });
  };
  const std::string prefix = "ckpt: '" + files.index.string() + "' is not a valid sharded checkpoint index: ";
  BOOST_TEST(message(R"({"weight_map": {"a": "model-00002-of-00003.safetensors",
                        "c": "model-00001-of-00003.safetensors", "a": "model-00003-of-00003.safetensors"}})") ==
             prefix + "the weight_map entry 'a' appears twice, in 'model-00002-of-00003.safetensors' and "
                      "'model-00003-of-00003.safetensors'");
  BOOST_TEST(message(R"({"weight_map": {"b": "model-00002-of-00003.safetensors",
                        "a": "model-00002-of-00003.safetensors", "b": "model-00002-of-00003.safetensors"}})") ==
             prefix + "the weight_map entry 'b' appears twice, both times in 'model-00002-of-00003.safetensors'");
  // The same name, spelled with an escape the second time.
  BOOST_TEST(message(R"({"weight_map": {"d": "model-00003-of-00003.safetensors",
                        "\u0064": "model-00001-of-00003.safetensors", "d": "model-00002-of-00003.safetensors"}})") ==
             prefix + "the weight_map entry 'd' appears 3 times, the first two in 'model-00003-of-00003.safetensors' "
                      "and 'model-00001-of-00003.safetensors'");
  BOOST_TEST(message(R"({"weight_map": {"b": "model-00002-of-00003.safetensors",
                        "b": "model-00002-of-00003.safetensors", "b": "model-00002-of-00003.safetensors"}})") ==
             prefix + "the weight_map entry 'b' appears 3 times, the first two both in 'model-00002-of-00003.safetensors'");
  // `metadata` and `weight_map` themselves may appear once each.
  BOOST_TEST(message(R"({"weight_map": {"a": "model-00002-of-00003.safetensors"}, "weight_map": {}})") ==
             prefix + "its 'weight_map' appears twice");
  BOOST_TEST(message(R"({"metadata": {}, "weight_map": {}, "metadata": {"total_size": 3}})") ==
             prefix + "its 'metadata' appears twice");
}

// Members of the index other than `weight_map` are skipped, whatever they hold, and so is the
// content of `metadata`; a weight_map value that is not a string is shown as JSON, compactly.
BOOST_AUTO_TEST_CASE(other_members_are_skipped_and_a_value_that_is_not_a_shard_is_shown) {
  const temp_dir dir;
  const auto files = ckpt::save_sharded(dir.path(), sample(), 32);
  write_text(files.index, R"({"format": ["pt", {"weight_map": 5, "a": [[], {}]}], "metadata": {"total_size": 80,
    "weight_map": {"x": 1}, "nested": [1, 2.5, null, {"metadata": true}]}, "weight_map": {
    "a": "model-00002-of-00003.safetensors", "b": "model-00002-of-00003.safetensors",
    "c": "model-00001-of-00003.safetensors", "d": "model-00003-of-00003.safetensors"}, "zzz": "\u00e9"})");
  check_same(ckpt::load(files.index), sample());
  write_text(files.index, R"({"weight_map": {"a": [1, {"k": "v\n", "w": [true, null]}, 2.5, -3], "b": 5}})");
  BOOST_TEST(message_of<ckpt::format_error>([&] { static_cast<void>(ckpt::load(files.index)); }) ==
             "ckpt: '" + files.index.string() + "' is not a valid sharded checkpoint index: "
             R"(the weight_map entry 'a' is [1,{"k":"v\n","w":[true,null]},2.5E0,-3], not a shard file name)");
}

// The parse keeps a nesting limit without recursing: JSON nested 100,000 levels deep, as the
// whole index or as a weight_map value, is refused as not JSON.
BOOST_AUTO_TEST_CASE(deeply_nested_json_is_refused_as_not_json) {
  const temp_dir dir;
  const std::filesystem::path index = dir.path() / "model.safetensors.index.json";
  for (const std::string& text : {std::string(100'000, '['), R"({"weight_map": {"a": )" + std::string(100'000, '[')}) {
    write_text(index, text);
    BOOST_TEST(message_of<ckpt::format_error>([&] { static_cast<void>(ckpt::load(index)); }) ==
               "ckpt: '" + index.string() + "' is not a valid sharded checkpoint index: it is not JSON: too deep");
  }
}

// The index is parsed as it is read, a piece at a time, into the weight_map directly: the heap
// holds neither its text nor a DOM of it (the DOM reader it replaced peaked at 4 times this
// index's size). Some 300,000 names over 4 shards, as transformers writes them: at the heap's
// peak, read_weight_map holds at most 3 times the index's size (1.5 when this was written), and
// it reads every name, across the pieces' seams.
BOOST_AUTO_TEST_CASE(reading_a_large_index_takes_at_most_three_times_its_size) {
  const temp_dir dir;
  const std::filesystem::path index = dir.path() / "model.safetensors.index.json";
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::map<std::string, std::vector<std::string>, std::less<>> expected;
  for (int layer = 0; layer < 64; ++layer) {
    const std::string shard = "model-0000" + std::to_string(layer / 16 + 1) + "-of-00004.safetensors";
    for (int expert = 0; expert < 512; ++expert)
      for (const char* projection : {"gate_proj", "up_proj", "down_proj"})
        for (const char* part : {"weight", "scales", "biases"})
          weight_map.emplace_back("model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) +
                                      "." + projection + "." + part,
                                  shard);
  }
  std::sort(weight_map.begin(), weight_map.end());
  for (const auto& [name, shard] : weight_map) expected[shard].push_back(name);
  write_text(index, ckpt::detail::index_text(123'456'789, weight_map));
  const std::uintmax_t size = std::filesystem::file_size(index);
  BOOST_TEST_REQUIRE(size > 20'000'000u);

  std::map<std::string, std::vector<std::string>, std::less<>> by_shard;
  std::size_t peak = 0;
  {
    const ckpt_test::peak_watch watch;
    by_shard = ckpt::detail::read_weight_map(index);
    peak = watch.peak();
  }
  BOOST_TEST_MESSAGE("an index of " << size << " bytes, " << weight_map.size() << " names: read_weight_map's peak "
                                    << peak << " bytes, " << static_cast<double>(peak) / static_cast<double>(size)
                                    << " times its size");
  BOOST_TEST(peak <= 3 * size);
  BOOST_TEST((by_shard == expected));
}

// A store reads a small file of a run (a step folder's index, every MPI step a manager lists) into
// memory of its size, not of the limit it is read against (100 MB for an index); past the limit
// it is refused.
BOOST_AUTO_TEST_CASE(a_store_reads_a_small_file_into_memory_of_its_size) {
  const temp_dir d;
  write_text(d.path() / "index.json", std::string(300, 'x'));
  const std::unique_ptr<ckpt::detail::store> store = ckpt::detail::open_folder_store(d.path(), false);
  std::optional<std::string> text;
  std::size_t peak = 0;
  {
    const ckpt_test::peak_watch watch;
    text = store->read("index.json", 100'000'000);
    peak = watch.peak();
  }
  BOOST_TEST_REQUIRE(text.has_value());
  BOOST_TEST(*text == std::string(300, 'x'));
  BOOST_TEST(peak < 64u * 1024u, peak);
  BOOST_TEST(!store->read("absent.json", 1000).has_value());
  BOOST_TEST(message_of<ckpt::error>([&] { static_cast<void>(store->read("index.json", 299)); }).find(
                 "is longer than the 299 bytes such a file holds") != std::string::npos);
  BOOST_TEST(store->read("index.json", 300).value().size() == 300u);
}

BOOST_AUTO_TEST_SUITE_END()  // test_sharded
