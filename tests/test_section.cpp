// save of sections writes live leaves without a snapshot: the file must be byte-identical to the one
// save writes for the same entries, whatever the leaves' storage order and size.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/ckpt.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

struct model {
  Eigen::MatrixXf col_major;                                                  // reordered in bands
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> row;  // written in place
  Eigen::Matrix<Eigen::half, 3, 5> small_fixed;
  Eigen::VectorXd vec;
  Eigen::Tensor<float, 2> t2;
  Eigen::Tensor<std::int16_t, 3> t3;
  Eigen::Tensor<float, 3, Eigen::RowMajor> t3_row;
  Eigen::Matrix<bool, 2, 3> mask;
  std::vector<float> scalars;
  ckpt::ptree extra;
};

model make_model(Eigen::Index big) {
  model m;
  m.col_major = Eigen::MatrixXf::Random(big, big + 3);
  m.row = Eigen::MatrixXd::Random(5, 7);
  for (Eigen::Index i = 0; i < m.small_fixed.size(); ++i) m.small_fixed.data()[i] = Eigen::half(static_cast<float>(i) / 4);
  m.vec = Eigen::VectorXd::LinSpaced(9, -1, 1);
  m.t2 = Eigen::Tensor<float, 2>(7, 300);
  m.t2.setRandom();
  m.t3 = Eigen::Tensor<std::int16_t, 3>(3, big, 5);
  m.t3.setRandom();
  m.t3_row = Eigen::Tensor<float, 3, Eigen::RowMajor>(2, 3, 4);
  m.t3_row.setRandom();
  m.mask << true, false, true, false, false, true;
  m.scalars = {1.5f, -2.0f};
  m.extra = ckpt::ptree::dict({{"k", ckpt::ptree::tensor(Eigen::Vector2f(3, 4))}});
  return m;
}

// Tensor types of a user's own: a column-major matrix whose traits stream it by rows (and give
// its bytes in place when it is a single row or column), and one whose traits have neither hook.
struct streamed_matrix {
  std::size_t rows = 0, cols = 0;
  std::vector<float> data;  // column-major
};
struct plain_matrix {
  streamed_matrix m;
};

struct hook_calls {
  int contiguous = 0, write_rows = 0, write = 0;
  int fail_at_write_rows = -1;  // the call of write_rows that throws, if any
};
hook_calls calls;

void write_c_order_rows(const streamed_matrix& m, std::size_t first, std::size_t count, std::byte* out) {
  for (std::size_t r = first; r < first + count; ++r)
    for (std::size_t c = 0; c < m.cols; ++c)
      std::memcpy(out + ((r - first) * m.cols + c) * sizeof(float), &m.data[c * m.rows + r], sizeof(float));
}

streamed_matrix make_streamed(std::size_t rows, std::size_t cols) {
  streamed_matrix m{rows, cols, std::vector<float>(rows * cols)};
  for (std::size_t i = 0; i < m.data.size(); ++i) m.data[i] = static_cast<float>(i) / 8;
  return m;
}

}  // namespace

template <>
struct ckpt::leaf_traits<streamed_matrix> {
  static ckpt::dtype dtype(const streamed_matrix&) { return ckpt::dtype::f32; }
  static ckpt::dims shape(const streamed_matrix& m) {
    return {static_cast<std::int64_t>(m.rows), static_cast<std::int64_t>(m.cols)};
  }
  static std::span<const std::byte> contiguous(const streamed_matrix& m) {
    ++calls.contiguous;
    if (m.rows != 1 && m.cols != 1) return {};
    return std::as_bytes(std::span(m.data));
  }
  static void write_rows(const streamed_matrix& m, std::size_t first, std::size_t count, std::byte* out) {
    if (calls.write_rows++ == calls.fail_at_write_rows) throw std::runtime_error("row writer failed");
    write_c_order_rows(m, first, count, out);
  }
  static void write(const streamed_matrix& m, std::span<std::byte> out) {
    ++calls.write;
    write_c_order_rows(m, 0, m.rows, out.data());
  }
  static void read(streamed_matrix&, const ckpt::tensor&) {}
};

// A leaf type whose `contiguous` hook is wrong: two floats declared, one given.
struct short_leaf {
  float values[2] = {1, 2};
};

template <>
struct ckpt::leaf_traits<short_leaf> {
  static ckpt::dtype dtype(const short_leaf&) { return ckpt::dtype::f32; }
  static ckpt::dims shape(const short_leaf&) { return {2}; }
  static std::span<const std::byte> contiguous(const short_leaf& x) { return std::as_bytes(std::span(x.values, 1)); }
  static void write(const short_leaf& x, std::span<std::byte> out) { std::memcpy(out.data(), x.values, out.size()); }
  static void read(short_leaf&, const ckpt::tensor&) {}
};

template <>
struct ckpt::leaf_traits<plain_matrix> {
  static ckpt::dtype dtype(const plain_matrix&) { return ckpt::dtype::f32; }
  static ckpt::dims shape(const plain_matrix& p) { return ckpt::leaf_traits<streamed_matrix>::shape(p.m); }
  static void write(const plain_matrix& p, std::span<std::byte> out) {
    ++calls.write;
    write_c_order_rows(p.m, 0, p.m.rows, out.data());
  }
  static void read(plain_matrix&, const ckpt::tensor&) {}
};

// The suite opens after the types above and their leaf_traits (which are specialized at global
// scope): this file is compiled on its own, not in a unity batch (tests/CMakeLists.txt).
BOOST_AUTO_TEST_SUITE(test_section)

BOOST_AUTO_TEST_CASE(live_save_equals_snapshot_save) {
  const temp_dir s;
  const model m = make_model(64);
  ckpt::save(s.path() / "live.safetensors", {{m, "model"}, {m.vec, "optim.v"}, {ckpt::of_int("step", 9)}},
             {{"k", "v"}});
  ckpt::save(s.path() / "snap.safetensors",
             ckpt::concat({ckpt::of_params(m, "model"), ckpt::of_params(m.vec, "optim.v"), ckpt::of_int("step", 9)})
                 .with_metadata({{"k", "v"}}));
  BOOST_TEST((read_bytes(s.path() / "live.safetensors") == read_bytes(s.path() / "snap.safetensors")));
}

BOOST_AUTO_TEST_CASE(every_form_of_the_call_picks_the_intended_save) {
  // One section, several, a checkpoint as a section, a checkpoint alone (Raven's Kaun.Checkpoint
  // call) with and without options: each writes the same bytes as the snapshot path.
  const temp_dir s;
  const model m = make_model(8);
  const ckpt::checkpoint t = ckpt::of_params(m, "model");
  ckpt::save(s.path() / "one.safetensors", {{m, "model"}});
  ckpt::save(s.path() / "as_section.safetensors", {t});
  ckpt::save(s.path() / "checkpoint.safetensors", t);
  ckpt::save(s.path() / "options.safetensors", t, {.digest = true});  // the default, spelled
  const std::string expected = read_bytes(s.path() / "checkpoint.safetensors");
  for (const char* file : {"one.safetensors", "as_section.safetensors", "options.safetensors"})
    BOOST_TEST((read_bytes(s.path() / file) == expected), file);
  ckpt::save(s.path() / "two.safetensors", {{m.vec, "a"}, {m.row, "b"}});
  BOOST_TEST(ckpt::load(s.path() / "two.safetensors").names() == (std::vector<std::string>{"a", "b"}));
  // A string is not a section: `save(path, {m, "model"})` (one brace level) does not compile.
  static_assert(!std::is_constructible_v<ckpt::section, const char*>);
}

BOOST_AUTO_TEST_CASE(sections_built_at_run_time_are_any_contiguous_range) {
  // A program that learns its sections at run time (a table per name, a section per layer) builds
  // a std::vector of them: the file is the one the braced list writes.
  const temp_dir s;
  const model m = make_model(8);
  const std::map<std::string, Eigen::VectorXd> tables{{"b", Eigen::VectorXd::Ones(3)}, {"a", Eigen::VectorXd::Zero(2)}};
  std::vector<ckpt::section> sections{{m, "model"}};
  for (const auto& [name, table] : tables) sections.emplace_back(table, "embed." + name);
  sections.emplace_back(ckpt::of_int("step", 4));
  ckpt::save(s.path() / "vector.safetensors", sections, {{"k", "v"}});
  ckpt::save(s.path() / "list.safetensors",
             {{m, "model"}, {tables.at("a"), "embed.a"}, {tables.at("b"), "embed.b"}, {ckpt::of_int("step", 4)}},
             {{"k", "v"}});
  BOOST_TEST((read_bytes(s.path() / "vector.safetensors") == read_bytes(s.path() / "list.safetensors")));
  // Any contiguous range: an array, part of the vector.
  const std::array<ckpt::section, 2> pair{ckpt::section(m.vec, "a"), ckpt::section(m.row, "b")};
  ckpt::save(s.path() / "array.safetensors", pair);
  BOOST_TEST(ckpt::load(s.path() / "array.safetensors").names() == (std::vector<std::string>{"a", "b"}));
  ckpt::save(s.path() / "first.safetensors", std::span(sections).first(1));
  ckpt::save(s.path() / "model.safetensors", {{m, "model"}});
  BOOST_TEST((read_bytes(s.path() / "first.safetensors") == read_bytes(s.path() / "model.safetensors")));
  // The names are checked across the range as across a list.
  const std::vector<ckpt::section> twice{{m.vec, "a"}, {m.vec, "a"}};
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { ckpt::save(s.path() / "x.safetensors", twice); }) ==
             "ckpt: save: two leaves are named 'a'");
  BOOST_TEST(!fs::exists(s.path() / "x.safetensors"));
}

BOOST_AUTO_TEST_CASE(the_save_of_a_checkpoint_is_the_one_section_case) {
  // `save(path, t)` writes what the save of the one section {t} with t's metadata writes.
  const temp_dir s;
  const model m = make_model(8);
  const ckpt::checkpoint t = ckpt::of_params(m, "model").with_metadata({{"k", "v"}});
  ckpt::save(s.path() / "checkpoint.safetensors", t);
  ckpt::save(s.path() / "section.safetensors", std::vector<ckpt::section>{t}, t.metadata());
  BOOST_TEST((read_bytes(s.path() / "checkpoint.safetensors") == read_bytes(s.path() / "section.safetensors")));
  ckpt::save(s.path() / "checkpoint.safetensors", t, {.digest = false});
  ckpt::save(s.path() / "section.safetensors", {t}, t.metadata(), {.digest = false});
  BOOST_TEST((read_bytes(s.path() / "checkpoint.safetensors") == read_bytes(s.path() / "section.safetensors")));
}

BOOST_AUTO_TEST_CASE(a_checkpoint_section_brings_its_metadata) {
  // save(path, t) is save(path, {t}): the section made from t carries t's metadata, so both
  // spellings (and a range of one section, with options alone or none) write the same bytes.
  const temp_dir s;
  const model m = make_model(8);
  const ckpt::checkpoint t = ckpt::of_params(m, "model").with_metadata({{"k", "v"}, {"lr", "0.1"}});
  ckpt::save(s.path() / "checkpoint.safetensors", t);
  const std::vector<ckpt::section> one{t};
  ckpt::save(s.path() / "range.safetensors", one);
  ckpt::save(s.path() / "list.safetensors", {t}, ckpt::metadata_map{});
  const std::string expected = read_bytes(s.path() / "checkpoint.safetensors");
  BOOST_TEST((read_bytes(s.path() / "range.safetensors") == expected));
  BOOST_TEST((read_bytes(s.path() / "list.safetensors") == expected));
  BOOST_TEST(ckpt::load(s.path() / "range.safetensors").metadata().at("lr") == "0.1");
  ckpt::save(s.path() / "checkpoint.safetensors", t, {.digest = false});
  ckpt::save(s.path() / "range.safetensors", one, {.digest = false});
  BOOST_TEST((read_bytes(s.path() / "range.safetensors") == read_bytes(s.path() / "checkpoint.safetensors")));

  // The metadata argument goes over the checkpoints' (a key both give: the argument's value), and
  // the metadata of several checkpoint sections are merged; a structure's section brings none.
  ckpt::save(s.path() / "merged.safetensors",
             {{t}, {ckpt::of_int("step", 3).with_metadata({{"run", "a"}, {"k", "v"}})}, {m.vec, "optim.v"}},
             {{"lr", "0.2"}});
  const ckpt::metadata_map got = ckpt::load(s.path() / "merged.safetensors").metadata();
  BOOST_TEST(got.at("k") == "v");
  BOOST_TEST(got.at("lr") == "0.2");
  BOOST_TEST(got.at("run") == "a");

  // Loaded files bring their digests, each file's own: dropped, never a conflict.
  ckpt::save(s.path() / "a.safetensors", ckpt::of_int("a", 1));
  ckpt::save(s.path() / "b.safetensors", ckpt::of_int("b", 2));
  const ckpt::checkpoint a = ckpt::load(s.path() / "a.safetensors"), b = ckpt::load(s.path() / "b.safetensors");
  BOOST_TEST(a.metadata().at("ckpt.xxh3_64_file") != b.metadata().at("ckpt.xxh3_64_file"));
  ckpt::save(s.path() / "ab.safetensors", {a, b});
  BOOST_TEST(ckpt::load(s.path() / "ab.safetensors").names() == (std::vector<std::string>{"a", "b"}));
}

BOOST_AUTO_TEST_CASE(two_checkpoint_sections_that_disagree_on_a_metadata_key_are_refused) {
  const temp_dir s;
  const ckpt::checkpoint first = ckpt::of_int("a", 1).with_metadata({{"lr", "0.1"}});
  const ckpt::checkpoint second = ckpt::of_int("b", 2).with_metadata({{"lr", "0.2"}});
  const std::string expected =
      "ckpt: save: metadata key 'lr' has two different values ('0.1' and '0.2') in the checkpoint sections";
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { ckpt::save(s.path() / "x.safetensors", {first, second}); }) ==
             expected);
  // Even when the argument gives the key: the sections themselves disagree. Nothing is written.
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] {
               ckpt::save(s.path() / "x.safetensors", {first, second}, {{"lr", "0.3"}});
             }) == expected);
  BOOST_TEST(!fs::exists(s.path() / "x.safetensors"));
  BOOST_TEST(fs::is_empty(s.path()));
}

BOOST_AUTO_TEST_CASE(a_save_of_sections_takes_its_options_alone) {
  // As a save of a checkpoint does: `save(path, {{big, "big"}}, {.digest = true})` compiles, with
  // no metadata before the options, for a braced list and a range.
  const temp_dir s;
  const Eigen::MatrixXf big = Eigen::MatrixXf::Constant(64, 32, 0.5f);
  ckpt::save(s.path() / "digest.safetensors", {{big, "big"}}, {.digest = true});
  ckpt::save(s.path() / "plain.safetensors", {{big, "big"}}, {.digest = false});
  const std::vector<ckpt::section> sections{{big, "big"}};
  std::uint64_t last = 0;
  const auto progress = [&](std::uint64_t written, std::uint64_t) { last = written; };
  ckpt::save(s.path() / "range.safetensors", sections, {.digest = false, .progress = progress});
  BOOST_TEST(ckpt::load(s.path() / "digest.safetensors").metadata().contains("ckpt.xxh3_64_file"));
  BOOST_TEST(!ckpt::load(s.path() / "plain.safetensors").metadata().contains("ckpt.xxh3_64_file"));
  BOOST_TEST((read_bytes(s.path() / "range.safetensors") == read_bytes(s.path() / "plain.safetensors")));
  BOOST_TEST(last == fs::file_size(s.path() / "range.safetensors"));
  // The digest is on by default, for sections as for a checkpoint.
  ckpt::save(s.path() / "default.safetensors", {{big, "big"}});
  BOOST_TEST((read_bytes(s.path() / "default.safetensors") == read_bytes(s.path() / "digest.safetensors")));
}

BOOST_AUTO_TEST_CASE(a_section_of_a_temporary_checkpoint_outlives_it) {
  // The list is kept past the full expression that made the temporaries: the section owns the
  // shared bytes of the counter, so the file holds 300, not what the freed memory held.
  const temp_dir s;
  const model m = make_model(3);
  // (Under AddressSanitizer, a section that kept only a view would be a use after free here.)
  const std::initializer_list<ckpt::section> sections = {{m, "model"}, {ckpt::of_int("step", 300)}};
  const std::vector<std::int64_t> churn(1 << 16, -1);  // reuses what the temporary freed, if anything
  ckpt::save(s.path() / "kept.safetensors", sections);
  BOOST_TEST(ckpt::to_int("step", ckpt::load(s.path() / "kept.safetensors")) == 300);
}

BOOST_AUTO_TEST_CASE(leaves_larger_than_the_reorder_buffer_are_written_in_several_bands) {
  // A 2100 x 2103 column-major float matrix (17 MiB) goes out in 2 MiB bands of 249 rows.
  const temp_dir s;
  const model m = make_model(2100);
  ckpt::save(s.path() / "live.safetensors", {{m}});
  ckpt::save(s.path() / "snap.safetensors", ckpt::of_params(m));
  BOOST_TEST((read_bytes(s.path() / "live.safetensors") == read_bytes(s.path() / "snap.safetensors")));
  const model back = ckpt::to_params(ckpt::load(s.path() / "live.safetensors"), make_model(2100));
  BOOST_TEST((back.col_major == m.col_major));
}

BOOST_AUTO_TEST_CASE(names_are_checked_across_sections) {
  const temp_dir s;
  const Eigen::Vector2f v(1, 2);
  try {
    ckpt::save(s.path() / "x.safetensors", {{v, "a"}, {ckpt::of_params(v, "a")}});
    BOOST_FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "ckpt: save: two leaves are named 'a'");
  }
  BOOST_CHECK_THROW(ckpt::save(s.path() / "x.safetensors", {{v}}), std::invalid_argument);
  BOOST_CHECK_THROW(ckpt::save(s.path() / "x.safetensors", {{v, "__metadata__"}}), std::invalid_argument);
  BOOST_TEST(!fs::exists(s.path() / "x.safetensors"));
}

BOOST_AUTO_TEST_CASE(entries_are_laid_out_in_byte_wise_name_order) {
  // Names that share long prefixes, differ within and past the 8 bytes after them, end early,
  // hold bytes above 0x7f, and are walked out of order (`v.10` comes after `v.9`).
  struct state {
    std::vector<float> v;
    std::map<std::string, float> k;
  };
  state x;
  for (int i = 0; i < 1200; ++i) x.v.push_back(static_cast<float>(i));
  for (const std::string key : {"shared_prefix_0123456789a", "shared_prefix_0123456789", "shared_prefix_0123456789b",
                                "shared_prefix_01234567", "shared", "shared_prefix_\xc3\xa9", "shared_prefix_z", "a"})
    x.k.emplace(key, static_cast<float>(key.size()));
  const temp_dir s;
  const fs::path live = s.path() / "live.safetensors", copy = s.path() / "copy.safetensors";
  ckpt::save(live, {{x, "m"}, {ckpt::of_int("z.m.v.1", 7)}});
  ckpt::save(copy, ckpt::concat({ckpt::of_params(x, "m"), ckpt::of_int("z.m.v.1", 7)}));
  BOOST_TEST((read_bytes(live) == read_bytes(copy)));
  // The entries' bytes lie in the file in the order of their names, compared as bytes.
  const ckpt::checkpoint t = ckpt::load(live);
  std::vector<std::string> by_name = t.names(), by_place = t.names();
  std::ranges::sort(by_name, [](const std::string& a, const std::string& b) {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(),
                                        [](char p, char q) { return static_cast<unsigned char>(p) < static_cast<unsigned char>(q); });
  });
  std::ranges::sort(by_place, std::less<>{}, [&](const std::string& n) { return t.get(n).bytes().data(); });
  BOOST_TEST(by_place.size() == 1200u + 8u + 1u);
  BOOST_TEST(by_place == by_name);
  BOOST_TEST(by_place.front() == "m.k.a");
  BOOST_TEST(by_place[1] == "m.k.shared");
}

BOOST_AUTO_TEST_CASE(a_user_leaf_with_a_row_writer_is_streamed_through_it) {
  // 70 rows of 65,536 floats (256 KiB each): 8 rows fill a 2 MiB band, so nine bands.
  const temp_dir s;
  const streamed_matrix m = make_streamed(70, 65536);
  calls = {};
  ckpt::save(s.path() / "live.safetensors", {{m, "w"}});
  BOOST_TEST(calls.contiguous == 1);
  BOOST_TEST(calls.write_rows == 9);
  BOOST_TEST(calls.write == 0);  // never snapshotted
  ckpt::save(s.path() / "snap.safetensors", ckpt::of_params(m, "w"));
  BOOST_TEST((read_bytes(s.path() / "live.safetensors") == read_bytes(s.path() / "snap.safetensors")));
  // A single column is C order already: written from its storage, no row written.
  const streamed_matrix column = make_streamed(5, 1);
  calls = {};
  ckpt::save(s.path() / "column.safetensors", {{column, "c"}});
  BOOST_TEST(calls.contiguous == 1);
  BOOST_TEST(calls.write_rows == 0);
  BOOST_TEST(calls.write == 0);
  BOOST_TEST((ckpt::load(s.path() / "column.safetensors").get("c").as<float>()[4] == column.data[4]));
}

BOOST_AUTO_TEST_CASE(a_user_leaf_without_the_hooks_is_snapshotted_through_write) {
  const temp_dir s;
  const plain_matrix p{make_streamed(6, 4)};
  calls = {};
  ckpt::save(s.path() / "live.safetensors", {{p, "w"}});
  BOOST_TEST(calls.write == 1);
  ckpt::save(s.path() / "snap.safetensors", ckpt::of_params(p.m, "w"));
  BOOST_TEST((read_bytes(s.path() / "live.safetensors") == read_bytes(s.path() / "snap.safetensors")));
}

BOOST_AUTO_TEST_CASE(consecutive_reordered_leaves_share_bands_and_other_entries_keep_their_place) {
  // 45 column-major 100 x 128 matrices (50 KiB each) fill a 2 MiB band with 40 of them and 96
  // rows of the 41st; the next band has its last 4 rows and four more. A row-major leaf and an
  // empty one sit between them and the next reordered leaves.
  struct mixed {
    std::vector<streamed_matrix> first;
    Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> row_major;
    Eigen::MatrixXf empty;
    Eigen::MatrixXd col_major;
    std::vector<streamed_matrix> last;
  };
  mixed m;
  for (int i = 0; i < 45; ++i) m.first.push_back(make_streamed(100, 128));
  m.row_major = Eigen::MatrixXf::Random(30, 40);
  m.empty.resize(0, 5);
  m.col_major = Eigen::MatrixXd::Random(300, 17);
  m.last = {make_streamed(7, 9), make_streamed(1, 1)};
  const temp_dir s;
  calls = {};
  ckpt::save(s.path() / "live.safetensors", {{m, "m"}});
  BOOST_TEST(calls.write_rows == 45 + 1 + 1);  // the 41st in two calls; the 1 x 1 is in place
  BOOST_TEST(calls.write == 0);
  ckpt::save(s.path() / "snap.safetensors", ckpt::of_params(m, "m"));
  BOOST_TEST((read_bytes(s.path() / "live.safetensors") == read_bytes(s.path() / "snap.safetensors")));
  // Rows larger than a band (2.4 MiB) go out one a band.
  const streamed_matrix wide = make_streamed(3, 600000);
  calls = {};
  ckpt::save(s.path() / "live.safetensors", {{wide, "w"}});
  BOOST_TEST(calls.write_rows == 3);
  ckpt::save(s.path() / "snap.safetensors", ckpt::of_params(wide, "w"));
  BOOST_TEST((read_bytes(s.path() / "live.safetensors") == read_bytes(s.path() / "snap.safetensors")));
}

BOOST_AUTO_TEST_CASE(a_row_writer_that_throws_fails_the_save_and_leaves_the_old_file) {
  // Thrown on the caller's thread (4 KiB to reorder: no helper) or on the helper thread that makes
  // the bands (16 matrices of 256 KiB): the save rethrows it, the previous file stays and no
  // temporary is left.
  for (const std::size_t side : {std::size_t{16}, std::size_t{256}}) {
    const temp_dir s;
    const Eigen::Vector2f before_value(1, 2);
    ckpt::save(s.path() / "m.safetensors", {{before_value, "before"}});
    const std::string before = read_bytes(s.path() / "m.safetensors");
    const std::vector<streamed_matrix> m(side == 16 ? 4 : 16, make_streamed(side, side));
    calls = {};
    calls.fail_at_write_rows = side == 16 ? 2 : 10;
    try {
      ckpt::save(s.path() / "m.safetensors", {{m, "m"}});
      BOOST_FAIL("no exception");
    } catch (const std::runtime_error& e) {
      BOOST_TEST(std::string(e.what()) == "row writer failed");
    }
    calls.fail_at_write_rows = -1;
    BOOST_TEST(read_bytes(s.path() / "m.safetensors") == before);
    BOOST_TEST(std::distance(fs::directory_iterator(s.path()), fs::directory_iterator()) == 1);
  }
}

BOOST_AUTO_TEST_CASE(a_contiguous_hook_of_the_wrong_size_is_refused_by_name) {
  const temp_dir s;
  const short_leaf x;
  try {
    ckpt::save(s.path() / "x.safetensors", {{x, "w"}});
    BOOST_FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "ckpt: save: leaf_traits::contiguous gave 4 bytes for entry 'w' of 8 bytes");
  }
  BOOST_TEST(!fs::exists(s.path() / "x.safetensors"));
  try {
    (void)ckpt::of_params(x, "w");
    BOOST_FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    BOOST_TEST(std::string(e.what()) == "ckpt: of_params: leaf_traits::contiguous gave 4 bytes for entry 'w' of 8 bytes");
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_section
