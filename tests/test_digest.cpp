// The optional digest of the data section (XXH3-64 of each MiB, then of those hashes): where it is
// stored, that it matches the data as an independent hash of the file computes it, that a flipped
// byte anywhere in the data is caught (and can be let through on request), that files of earlier
// versions (one XXH3-64 of the whole section) are still verified, and who writes it (save, save of
// sections, the manager).
#define BOOST_TEST_MODULE digest
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;

using ckpt_test::folder_listing;
using ckpt_test::message_of;
using ckpt_test::read_bytes;
using ckpt_test::rss_file_kib;
using ckpt_test::temp_dir;

const std::string key(ckpt::digest_key);

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Where the data section of a whole file starts.
std::size_t data_start(const std::string& file) {
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  return 8 + static_cast<std::size_t>(n);
}

std::string hex(XXH64_hash_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

// The digest of a file's data section (ckpt::digest_key), computed here from the raw bytes as
// the key's documentation spells it: XXH3-64 of each MiB, then of those hashes' little-endian bytes.
std::string digest_of_data(const std::string& file) {
  const std::size_t start = data_start(file), chunk = std::size_t{1} << 20;
  std::string hashes;
  for (std::size_t at = start; at < file.size(); at += chunk) {
    std::uint64_t h = XXH3_64bits(file.data() + at, std::min(chunk, file.size() - at));
    for (int b = 0; b < 8; ++b, h >>= 8) hashes.push_back(static_cast<char>(h & 0xff));
  }
  return hex(XXH3_64bits(hashes.data(), hashes.size()));
}

// The digest of earlier versions (ckpt::whole_digest_key): XXH3-64 of the whole data section.
std::string whole_digest_of_data(const std::string& file) {
  const std::size_t start = data_start(file);
  return hex(XXH3_64bits(file.data() + start, file.size() - start));
}

// A checkpoint of a few entries, a column-major matrix among them, with some metadata.
ckpt::checkpoint sample() {
  Eigen::MatrixXf w(3, 5);
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>(i) * 0.5f;
  return ckpt::concat({ckpt::of_tensor("w", w), ckpt::of_tensor("b", Eigen::VectorXd::LinSpaced(7, -1, 1).eval()),
                       ckpt::of_int("step", 12)})
      .with_metadata({{"note", "hello"}});
}

std::string corrupted_message(const fs::path& path, const std::string& computed, const std::string& recorded,
                              const std::string& under = "ckpt.xxh3_64_per_mib") {
  return "ckpt: '" + path.string() + "' is corrupted: its data section hashes to " + computed +
         " but its __metadata__ entry '" + under + "' records " + recorded;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_digest_is_xxh3_of_the_data_section_in_the_metadata) {
  const temp_dir s;
  const fs::path path = s.path() / "d.safetensors";
  ckpt::save(path, sample(), {.digest = true});
  const std::string file = read_bytes(path);
  // A reader that knows nothing of digests sees one more string in __metadata__.
  const ckpt::checkpoint plain = ckpt::load(path, {.verify_digest = false});
  BOOST_TEST(plain.metadata().size() == 2u);
  BOOST_TEST(plain.metadata().at("note") == "hello");
  BOOST_TEST(plain.metadata().at(key) == digest_of_data(file));
  // The data are those of the file without a digest: only the header differs.
  ckpt::save(s.path() / "plain.safetensors", sample());
  const std::string without = read_bytes(s.path() / "plain.safetensors");
  BOOST_TEST(without.substr(data_start(without)) == file.substr(data_start(file)));
  BOOST_TEST(!ckpt::load(s.path() / "plain.safetensors").metadata().contains(key));
  const ckpt::checkpoint verified = ckpt::load(path);
  for (const auto& [name, x] : sample()) BOOST_TEST((verified.get(name) == x));
}

BOOST_AUTO_TEST_CASE(an_empty_data_section_has_a_digest_too) {
  const temp_dir s;
  const fs::path path = s.path() / "e.safetensors";
  ckpt::save(path, ckpt::checkpoint{}, {.digest = true});
  const std::string file = read_bytes(path);
  BOOST_TEST(data_start(file) == file.size());
  BOOST_TEST(ckpt::load(path).metadata().at(key) == digest_of_data(file));
}

BOOST_AUTO_TEST_CASE(a_flipped_byte_anywhere_in_the_data_is_caught) {
  const temp_dir s;
  const fs::path path = s.path() / "f.safetensors";
  ckpt::save(path, sample(), {.digest = true});
  const std::string good = read_bytes(path);
  const std::string recorded = ckpt::load(path).metadata().at(key);
  const std::size_t start = data_start(good);
  for (const std::size_t at : {start, start + (good.size() - start) / 2, good.size() - 1}) {
    for (const int mask : {0x01, 0x80}) {
      std::string bad = good;
      bad[at] = static_cast<char>(static_cast<unsigned char>(bad[at]) ^ mask);
      write_bytes(path, bad);
      const std::string computed = digest_of_data(bad);
      BOOST_TEST(computed != recorded);
      BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::load(path); }) ==
                 corrupted_message(path, computed, recorded));
      // The same rule for bytes in memory.
      BOOST_TEST(message_of<ckpt::integrity_error>([&] {
                   (void)ckpt::parse(std::as_bytes(std::span(bad)), "mem");
                 }) == corrupted_message("mem", computed, recorded));
      // Verification can be skipped: the flipped byte is then what the entry holds.
      for (const ckpt::checkpoint& trusted : {ckpt::load(path, {.verify_digest = false}),
                                              ckpt::parse(std::as_bytes(std::span(bad)), "mem", {.verify_digest = false})}) {
        std::string data;  // the entries in file order (name order, as save lays them out)
        for (const auto& [name, x] : trusted)
          data.append(reinterpret_cast<const char*>(x.bytes().data()), x.bytes().size());
        BOOST_TEST((data == bad.substr(start)));
      }
    }
  }
  // An integrity_error is a format_error with the details at hand.
  std::string bad = good;
  bad[start] = static_cast<char>(bad[start] ^ 0x10);
  write_bytes(path, bad);
  try {
    (void)ckpt::load(path);
    BOOST_FAIL("no exception");
  } catch (const ckpt::format_error& e) {
    const auto* integrity = dynamic_cast<const ckpt::integrity_error*>(&e);
    BOOST_REQUIRE(integrity != nullptr);
    BOOST_TEST(integrity->expected() == recorded);
    BOOST_TEST(integrity->computed() == digest_of_data(bad));
    BOOST_TEST(e.path() == path);
  }
}

BOOST_AUTO_TEST_CASE(each_mib_is_hashed_and_the_order_of_the_mibs_counts) {
  const temp_dir s;
  const fs::path path = s.path() / "c.safetensors";
  // 9.5 MiB and 4 bytes of data: ten chunks, the last short, hashed on two threads (from 8 MiB).
  Eigen::VectorXf v((std::size_t{19} << 17) + 1);
  for (Eigen::Index i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  ckpt::save(path, ckpt::of_tensor("v", v), {.digest = true});
  const std::string good = read_bytes(path);
  const std::size_t start = data_start(good), mib = std::size_t{1} << 20;
  BOOST_TEST_REQUIRE(good.size() - start == v.size() * sizeof(float));
  const std::string recorded = ckpt::load(path).metadata().at(key);
  BOOST_TEST(recorded == digest_of_data(good));
  BOOST_TEST(recorded != whole_digest_of_data(good));  // not the whole-section hash of earlier versions
  // Bytes on either side of chunk boundaries, in both threads' halves, and the very last one.
  for (const std::size_t at : {start + mib - 1, start + mib, start + 5 * mib - 1, start + 5 * mib, start + 9 * mib,
                               good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x20);
    write_bytes(path, bad);
    BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::load(path); }) ==
               corrupted_message(path, digest_of_data(bad), recorded));
    BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::parse(std::as_bytes(std::span(bad)), "mem"); }) ==
               corrupted_message("mem", digest_of_data(bad), recorded));
  }
  // Two whole chunks swapped: every chunk's hash is still recorded, but not in that order.
  std::string swapped = good;
  std::copy_n(good.begin() + static_cast<std::ptrdiff_t>(start), mib, swapped.begin() + static_cast<std::ptrdiff_t>(start + mib));
  std::copy_n(good.begin() + static_cast<std::ptrdiff_t>(start + mib), mib, swapped.begin() + static_cast<std::ptrdiff_t>(start));
  write_bytes(path, swapped);
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::load(path); }) ==
             corrupted_message(path, digest_of_data(swapped), recorded));
}

// tests/fixtures/ckpt/whole_digest.safetensors was written by ckpt at commit 63087c2, before the
// per-MiB digest: `ckpt::save(path, sample(), {.digest = true})`.
BOOST_AUTO_TEST_CASE(files_of_earlier_versions_are_verified_by_their_whole_digest) {
  const temp_dir s;
  const fs::path fixture = fs::path(CKPT_FIXTURES_DIR) / "ckpt" / "whole_digest.safetensors";
  const std::string good = read_bytes(fixture);
  const std::string old_key(ckpt::whole_digest_key);
  const ckpt::checkpoint t = ckpt::load(fixture);
  BOOST_TEST(t.metadata() == (ckpt::metadata_map{{"note", "hello"}, {old_key, whole_digest_of_data(good)}}));
  for (const auto& [name, x] : sample()) BOOST_TEST((t.get(name) == x));
  // A flipped byte is caught, and the error names the old key.
  const fs::path path = s.path() / "old.safetensors";
  std::string bad = good;
  bad[good.size() - 1] = static_cast<char>(bad[good.size() - 1] ^ 0x01);
  write_bytes(path, bad);
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::load(path); }) ==
             corrupted_message(path, whole_digest_of_data(bad), t.metadata().at(old_key), old_key));
  BOOST_TEST(ckpt::load(path, {.verify_digest = false}).metadata().at(old_key) == t.metadata().at(old_key));
  // Malformed, it is refused like the current key.
  std::string malformed = good;
  malformed[good.find(t.metadata().at(old_key))] = 'X';
  write_bytes(path, malformed);
  BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::load(path, {.verify_digest = false}); })
                 .find("the __metadata__ entry 'ckpt.xxh3_64' is \"X") != std::string::npos);
  // Saved again, the checkpoint gets the current digest, never the old one back.
  ckpt::save(path, t, {.digest = true});
  const ckpt::checkpoint resaved = ckpt::load(path);
  BOOST_TEST(resaved.metadata() == (ckpt::metadata_map{{"note", "hello"}, {key, digest_of_data(read_bytes(path))}}));
  ckpt::save(path, t);
  BOOST_TEST(ckpt::load(path).metadata() == (ckpt::metadata_map{{"note", "hello"}}));
}

BOOST_AUTO_TEST_CASE(a_changed_digest_is_caught_and_a_malformed_one_refused) {
  const temp_dir s;
  const fs::path path = s.path() / "m.safetensors";
  ckpt::save(path, sample(), {.digest = true});
  const std::string good = read_bytes(path);
  const std::string recorded = ckpt::load(path).metadata().at(key);
  const std::size_t at = good.find(recorded);
  BOOST_REQUIRE(at != std::string::npos);
  BOOST_REQUIRE(at < data_start(good));
  // Another valid digest: the data no longer match it.
  std::string other = good;
  other[at] = recorded[0] == '0' ? '1' : '0';
  write_bytes(path, other);
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::load(path); }) ==
             corrupted_message(path, recorded, other.substr(at, 16)));
  // Not 16 lowercase hex digits: the file breaks ckpt's rule, verified or not.
  for (const char c : {'A', 'g', ' '}) {
    std::string bad = good;
    bad[at + 15] = c;
    write_bytes(path, bad);
    const std::string expected = "ckpt: '" + path.string() +
                                 "' is not a valid safetensors file: the __metadata__ entry 'ckpt.xxh3_64_per_mib' is \"" +
                                 bad.substr(at, 16) + "\", not 16 lowercase hex digits";
    BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::load(path); }) == expected);
    BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::load(path, {.verify_digest = false}); }) == expected);
  }
}

BOOST_AUTO_TEST_CASE(a_stale_digest_in_the_metadata_is_not_saved) {
  const temp_dir s;
  const fs::path first = s.path() / "a.safetensors", second = s.path() / "b.safetensors";
  ckpt::save(first, sample(), {.digest = true});
  // Load, change an entry, save again: the loaded digest must not describe the new data.
  const ckpt::checkpoint loaded = ckpt::load(first);
  const ckpt::checkpoint changed =
      ckpt::concat({ckpt::of_int("step", 13), ckpt::of_tensor("w", loaded.get("w")), ckpt::of_tensor("b", loaded.get("b"))})
          .with_metadata(loaded.metadata());
  ckpt::save(second, changed);
  BOOST_TEST(!ckpt::load(second).metadata().contains(key));
  BOOST_TEST(ckpt::load(second).metadata().at("note") == "hello");
  ckpt::save(second, changed, {.digest = true});
  BOOST_TEST(ckpt::load(second).metadata().at(key) == digest_of_data(read_bytes(second)));
  BOOST_TEST(ckpt::load(second).metadata().at(key) != loaded.metadata().at(key));
}

BOOST_AUTO_TEST_CASE(names_that_look_like_the_digest_field_do_not_confuse_the_writer) {
  const temp_dir s;
  const fs::path path = s.path() / "n.safetensors";
  // Keys and names whose JSON spelling contains `"ckpt.xxh3_64_per_mib":"` before the real field.
  const ckpt::checkpoint t =
      ckpt::concat({ckpt::of_int("a\"ckpt.xxh3_64_per_mib", 1), ckpt::of_int("z", 2)})
          .with_metadata({{"a\"ckpt.xxh3_64_per_mib", "0000000000000000"},
                          {"b", "\"ckpt.xxh3_64_per_mib\":\"ffffffffffffffff"}});
  ckpt::save(path, t, {.digest = true});
  const ckpt::checkpoint back = ckpt::load(path);
  BOOST_TEST(back.metadata().at("a\"ckpt.xxh3_64_per_mib") == "0000000000000000");
  BOOST_TEST(back.metadata().at(key) == digest_of_data(read_bytes(path)));
}

BOOST_AUTO_TEST_CASE(sections_are_hashed_as_reordered_leaves_go_out) {
  const temp_dir s;
  struct state {
    Eigen::MatrixXf big;   // column-major, 9 MB: reordered in 2 MiB bands on the writer's helper thread
    Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r;  // straight from memory
    Eigen::VectorXf v;
  };
  state x{Eigen::MatrixXf(1500, 1500), Eigen::MatrixXd::Constant(3, 4, 2.5), Eigen::VectorXf::LinSpaced(9, 0, 1)};
  for (Eigen::Index i = 0; i < x.big.size(); ++i) x.big.data()[i] = static_cast<float>(i % 977);
  ckpt::save(s.path() / "p.safetensors", {{x, "m"}, {ckpt::of_int("step", 3)}}, {{"k", "v"}}, {.digest = true});
  ckpt::save(s.path() / "s.safetensors", ckpt::concat({ckpt::of_params(x, "m"), ckpt::of_int("step", 3)}).with_metadata({{"k", "v"}}),
             {.digest = true});
  const std::string p = read_bytes(s.path() / "p.safetensors");
  BOOST_TEST((p == read_bytes(s.path() / "s.safetensors")));
  BOOST_TEST(ckpt::load(s.path() / "p.safetensors").metadata().at(key) == digest_of_data(p));
}

BOOST_AUTO_TEST_CASE(the_manager_writes_digests_by_default_and_verifies_them) {
  const temp_dir s(temp_dir::absent);
  {
    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
    m.save(1, {sample()});
    const fs::path path = m.path_of(1);
    std::string file = read_bytes(path);
    BOOST_TEST(ckpt::load(path).metadata().at(key) == digest_of_data(file));
    const std::string recorded = ckpt::load(path).metadata().at(key);
    file[file.size() - 1] = static_cast<char>(file[file.size() - 1] ^ 0x04);
    write_bytes(path, file);
    BOOST_TEST(m.load(1, {.verify_digest = false}).names() == sample().names());
    // The damaged step is set aside, not loaded, and the error is its reason.
    const ckpt::latest_checkpoint latest = m.load_latest();
    BOOST_TEST(!latest);
    BOOST_TEST_REQUIRE(latest.skipped.size() == 1u);
    BOOST_TEST(latest.skipped[0].reason == corrupted_message(path, digest_of_data(file), recorded));
    BOOST_TEST(latest.skipped[0].path == fs::path(path.string() + ".damaged"));
    BOOST_TEST(read_bytes(latest.skipped[0].path) == file);
  }
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0, .digest = false});
  m.save(2, {sample()});
  BOOST_TEST(!m.load(2).metadata().contains(key));
  BOOST_TEST(folder_listing(s.path()) ==
             (std::vector<std::string>{".ckpt-manager.lock", "ckpt-0000000001.safetensors.damaged",
                                       "ckpt-0000000002.safetensors"}));
}


BOOST_AUTO_TEST_CASE(verifying_does_not_leave_the_file_mapped_in_memory) {
  const temp_dir s;
  const fs::path path = s.path() / "big.safetensors";
  ckpt::save(path, ckpt::of_tensor("x", Eigen::VectorXf::Constant(24 << 18, 1.0f).eval()), {.digest = true});  // 24 MiB
  const long before = rss_file_kib();
  const ckpt::checkpoint t = ckpt::load(path);  // hashes all 24 MiB through the mapping
  const long verified = rss_file_kib();
  BOOST_TEST(verified - before < 4 * 1024, "resident after verification: " << verified - before << " KiB");
  double sum = 0;  // the measure works: reading the entry makes it resident
  for (const float v : t.get("x").as<float>()) sum += v;
  BOOST_TEST(sum == static_cast<double>(24 << 18));
  BOOST_TEST(rss_file_kib() - before > 20 * 1024);
}

BOOST_AUTO_TEST_CASE(verification_reports_its_progress_per_file) {
  const temp_dir s;
  // 100 MiB.
  const fs::path path = s.path() / "p.safetensors";
  ckpt::save(path, ckpt::of_tensor("x", Eigen::VectorXf::Constant(25 << 20, 2.0f).eval()), {.digest = true});
  const std::uint64_t data_bytes = std::uint64_t{100} << 20;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> reports;
  const auto record = [&](std::uint64_t hashed, std::uint64_t total) { reports.emplace_back(hashed, total); };
  // Two threads hash 50 MiB each: the loading thread reports after its window the bytes both
  // have hashed (50 MiB, or all 100 if the helper was done first), then all of them once.
  const auto check_reports = [&] {
    BOOST_TEST_REQUIRE(!reports.empty());
    BOOST_TEST(reports.size() <= 2u);
    BOOST_TEST(reports.front().first >= std::uint64_t{50} << 20);
    BOOST_TEST(reports.back().first == data_bytes);
    for (std::size_t i = 0; i < reports.size(); ++i) {
      BOOST_TEST(reports[i].second == data_bytes);
      if (i > 0) BOOST_TEST(reports[i].first > reports[i - 1].first);
    }
  };
  (void)ckpt::load(path, {.progress = record});
  check_reports();
  // In memory too; and nothing to report when nothing is verified.
  reports.clear();
  const std::string file = read_bytes(path);
  (void)ckpt::parse(std::as_bytes(std::span(file)), path, {.progress = record});
  check_reports();
  reports.clear();
  (void)ckpt::load(path, {.verify_digest = false, .progress = record});
  BOOST_TEST(reports.empty());

  // A sharded checkpoint: each shard in turn, each with its own total.
  const ckpt::sharded_files files = ckpt::save_sharded(
      s.path() / "sharded", ckpt::concat({ckpt::of_int("a", 1), ckpt::of_int("b", 2), ckpt::of_int("c", 3)}), 4,
      {.save = {.digest = true}});
  reports.clear();
  (void)ckpt::load(files.index, {.progress = record});
  BOOST_TEST(reports.size() == files.shards.size());
  for (const auto& [hashed, total] : reports) BOOST_TEST(hashed == total);

  // Throwing from it abandons the load.
  struct cancelled {};
  BOOST_CHECK_THROW((void)ckpt::load(path, {.progress = [](std::uint64_t, std::uint64_t) { throw cancelled{}; }}),
                    cancelled);
}
