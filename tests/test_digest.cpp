// The optional digest of the whole file (`ckpt.xxh3_64_file`: XXH3-64 of the header with the
// digest's digits zeroed, then of each MiB of data, then of those hashes): where it is stored,
// that it matches the file as an independent hash computes it, that every single-byte change
// anywhere in a digested file is caught (exhaustively on a small file, at 10,000 random places
// of a multi-MiB one) and can be let through on request, that the digests of earlier versions
// are recognized but not verified, who writes it (save, save of sections, the manager), and the
// "format": "pt" every save writes.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_digest)

namespace {

namespace fs = std::filesystem;

using ckpt_test::folder_listing;
using ckpt_test::message_of;
using ckpt_test::read_bytes;
using ckpt_test::rss_file_kib;
using ckpt_test::temp_dir;

const std::string key = "ckpt.xxh3_64_file";  // the file format's key (docs/guide.md)

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

// Where the digest's 16 digits start in `file`: after the one `"ckpt.xxh3_64_file":"` of its
// header that `before` precedes (the files of these tests have no look-alike there).
std::size_t digest_at(const std::string& file, const std::string& before = "") {
  const std::string field = before + "\"" + key + "\":\"";
  const std::size_t at = file.find(field);
  BOOST_TEST_REQUIRE(at != std::string::npos);
  BOOST_TEST_REQUIRE(file.find(field, at + 1) == std::string::npos);
  BOOST_TEST_REQUIRE(at + field.size() + 16 < data_start(file));
  return at + field.size();
}

// The digest of `file`, computed here from its raw bytes as ckpt::save's documentation spells
// it: H = XXH3-64 of the 8 + N header bytes with the digits at `at` zeroed, C_i = XXH3-64 of each
// MiB of data, then XXH3-64 of H, C_1, ..., C_n as little-endian bytes.
std::string digest_of(const std::string& file, std::size_t at) {
  std::string header = file.substr(0, data_start(file));
  header.replace(at, 16, 16, '0');
  std::string hashes;
  const auto append = [&hashes](std::uint64_t h) {
    for (int b = 0; b < 8; ++b, h >>= 8) hashes.push_back(static_cast<char>(h & 0xff));
  };
  append(XXH3_64bits(header.data(), header.size()));
  const std::size_t chunk = std::size_t{1} << 20;
  for (std::size_t first = header.size(); first < file.size(); first += chunk)
    append(XXH3_64bits(file.data() + first, std::min(chunk, file.size() - first)));
  return hex(XXH3_64bits(hashes.data(), hashes.size()));
}
std::string digest_of(const std::string& file) { return digest_of(file, digest_at(file)); }

// A checkpoint of a few entries, a column-major matrix among them, with some metadata.
ckpt::checkpoint sample() {
  Eigen::MatrixXf w(3, 5);
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>(i) * 0.5f;
  return ckpt::concat({ckpt::of_params(w, "w"), ckpt::of_params(Eigen::VectorXd::LinSpaced(7, -1, 1).eval(), "b"),
                       ckpt::of_int("step", 12)})
      .with_metadata({{"note", "hello"}});
}

std::string corrupted_message(const fs::path& path, const std::string& computed, const std::string& recorded) {
  return "ckpt: '" + path.string() + "' is corrupted: its bytes hash to " + computed +
         " but its __metadata__ entry 'ckpt.xxh3_64_file' records " + recorded;
}

std::string format_message(const fs::path& path, const std::string& rule) {
  return "ckpt: '" + path.string() + "' is not a valid safetensors file: " + rule;
}

std::span<const std::byte> bytes_of(const std::string& s) { return std::as_bytes(std::span(s)); }

// For load_options::skipped: a changed dtype can be one the format does not define (F33).
void ignore(std::string_view, std::string_view) {}

// What loading a damaged file did: threw an integrity_error, another format_error, or nothing.
enum class outcome { integrity, format, loaded };
outcome load_outcome(const auto& load) {
  try {
    (void)load();
  } catch (const ckpt::integrity_error&) {
    return outcome::integrity;
  } catch (const ckpt::format_error&) {
    return outcome::format;
  }
  return outcome::loaded;
}

// Tallies the outcomes of a campaign of changed bytes, with the first positions that loaded.
struct tally {
  std::size_t integrity = 0, format = 0;
  std::vector<std::size_t> undetected;
  void add(outcome o, std::size_t at) {
    if (o == outcome::integrity) ++integrity;
    else if (o == outcome::format) ++format;
    else undetected.push_back(at);
  }
  [[nodiscard]] std::size_t total() const { return integrity + format + undetected.size(); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(the_digest_covers_the_whole_file_and_sits_in_the_metadata) {
  const temp_dir s;
  const fs::path path = s.path() / "d.safetensors";
  ckpt::save(path, sample(), {.digest = true});
  const std::string file = read_bytes(path);
  // A reader that knows nothing of digests sees one more string in __metadata__.
  const ckpt::checkpoint plain = ckpt::load(path, {.verify_digest = false});
  BOOST_TEST(plain.metadata() == (ckpt::metadata_map{{"format", "pt"}, {"note", "hello"}, {key, digest_of(file)}}));
  // Its value: the zeroed digits are part of what was hashed, the digits themselves are not.
  std::string zeroed = file;
  zeroed.replace(digest_at(file), 16, 16, '0');
  BOOST_TEST(digest_of(zeroed) == digest_of(file));
  // The data are those of the file without a digest: only the header differs.
  ckpt::save(s.path() / "plain.safetensors", sample(), {.digest = false});
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
  BOOST_TEST(ckpt::load(path).metadata().at(key) == digest_of(file));
  // The header alone is hashed: a changed byte of it is caught.
  std::string bad = file;
  bad[bad.find("\"pt\"") + 1] = 'q';
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::parse(bytes_of(bad), "mem"); }) ==
             corrupted_message("mem", digest_of(bad), digest_of(file)));
}

// Every byte of a small digested file (2.6 KiB: five entries, three metadata entries), each
// changed three ways: XOR 0x01 (a digit to its neighbour, a letter to another), XOR 0x20 (a
// letter's case, a space to NUL) and replaced by a backslash (which can start a JSON escape, the
// way a key or a value could change length). Every change must make the load throw.
BOOST_AUTO_TEST_CASE(every_single_byte_change_of_a_small_file_is_caught) {
  Eigen::MatrixXf m(20, 24);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(i) * 0.25f;
  const ckpt::checkpoint t = ckpt::concat({sample(), ckpt::of_params(m, "layer.0.weight"),
                                           ckpt::of_params(Eigen::VectorXf::LinSpaced(24, 0, 1).eval(),
                                                           "layer.0.bias")})
                                 .with_metadata({{"note", "hello"}, {"epoch", "3"}});
  const temp_dir s;
  ckpt::save(s.path() / "small.safetensors", t, {.digest = true});
  const std::string good = read_bytes(s.path() / "small.safetensors");
  BOOST_TEST_REQUIRE(good.size() >= 2048u);
  BOOST_TEST_REQUIRE(good.size() <= 4096u);
  BOOST_TEST_REQUIRE(ckpt::parse(bytes_of(good)).names() == t.names());
  tally header, data;
  std::string bad = good;
  for (std::size_t at = 0; at < good.size(); ++at) {
    const char original = good[at];
    for (const int change : {0x01, 0x20, -1}) {
      bad[at] = change < 0 ? '\\' : static_cast<char>(original ^ change);
      if (bad[at] == original) continue;
      (at < data_start(good) ? header : data).add(load_outcome([&] { return ckpt::parse(bytes_of(bad), "mem", {.skipped = ignore}); }), at);
      bad[at] = original;
    }
  }
  BOOST_TEST_MESSAGE("small file of " << good.size() << " bytes (" << data_start(good) << " of header): header "
                                      << header.total() << " changes, " << header.format << " format_error, "
                                      << header.integrity << " integrity_error; data " << data.total() << " changes, "
                                      << data.integrity << " integrity_error");
  BOOST_TEST(header.undetected.empty(), "undetected header changes, first at byte "
                                            << (header.undetected.empty() ? 0 : header.undetected[0]));
  BOOST_TEST(data.undetected.empty(), "undetected data changes, first at byte "
                                          << (data.undetected.empty() ? 0 : data.undetected[0]));
  BOOST_TEST(header.total() + data.total() > 2 * good.size());  // a backslash is not changed to itself
  BOOST_TEST(data.integrity == data.total());  // data carry no format: the digest alone catches them
  BOOST_TEST(header.integrity > 0u);           // whitespace, digits of shapes and offsets, names...
}

// 10,000 random single-byte changes (random place, random XOR mask; fixed seed) of a 2.1 MiB file
// (three chunks) of six entries, loaded through its mapping. The file is changed in place and
// restored: no copy of it per load.
BOOST_AUTO_TEST_CASE(ten_thousand_random_single_byte_changes_of_a_larger_file_are_caught) {
  std::vector<ckpt::checkpoint> parts{sample()};
  for (int i = 0; i < 3; ++i) {
    Eigen::MatrixXf m(256, 700 + 10 * i);
    for (Eigen::Index k = 0; k < m.size(); ++k) m.data()[k] = static_cast<float>((k * 7 + i) % 1013);
    parts.push_back(ckpt::of_params(m, "layer." + std::to_string(i) + ".weight"));
  }
  const temp_dir s;
  const fs::path path = s.path() / "large.safetensors";
  ckpt::save(path, ckpt::concat(parts).with_metadata({{"note", "hello"}}), {.digest = true});
  const std::string good = read_bytes(path);
  BOOST_TEST_REQUIRE(good.size() > std::size_t{2} << 20);
  const int fd = ::open(path.c_str(), O_WRONLY);
  BOOST_TEST_REQUIRE(fd >= 0);
  const auto put = [fd](std::size_t at, char c) {
    BOOST_TEST_REQUIRE(::pwrite(fd, &c, 1, static_cast<off_t>(at)) == 1);
  };
  std::mt19937_64 random(20261204);
  std::uniform_int_distribution<std::size_t> place(0, good.size() - 1);
  std::uniform_int_distribution<int> mask(1, 255);
  tally header, data;
  for (int round = 0; round < 10'000; ++round) {
    const std::size_t at = place(random);
    put(at, static_cast<char>(good[at] ^ mask(random)));
    (at < data_start(good) ? header : data).add(load_outcome([&] { return ckpt::load(path, {.skipped = ignore}); }), at);
    put(at, good[at]);
  }
  ::close(fd);
  BOOST_TEST_MESSAGE("random changes of a " << good.size() << "-byte file: header " << header.total()
                                             << " (" << header.format << " format_error), data " << data.total()
                                             << " (" << data.integrity << " integrity_error)");
  BOOST_TEST(header.total() + data.total() == 10'000u);
  BOOST_TEST(header.undetected.empty());
  BOOST_TEST(data.undetected.empty());
  BOOST_TEST((read_bytes(path) == good));
  BOOST_TEST(ckpt::load(path).names() == ckpt::concat(parts).names());
}

BOOST_AUTO_TEST_CASE(a_swapped_shape_is_caught) {
  // A shape whose dimensions are swapped keeps the byte count: only the digest can tell.
  Eigen::MatrixXf m(12, 32);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<float>(i);
  std::string good;
  {
    const temp_dir s;
    ckpt::save(s.path() / "s.safetensors", ckpt::of_params(m, "m"), {.digest = true});
    good = read_bytes(s.path() / "s.safetensors");
  }
  std::string bad = good;
  const std::size_t at = bad.find("\"shape\":[12,32]");
  BOOST_TEST_REQUIRE(at < data_start(good));
  bad.replace(at, 15, "\"shape\":[32,12]");
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::parse(bytes_of(bad), "mem"); }) ==
             corrupted_message("mem", digest_of(bad), digest_of(good)));
  BOOST_TEST((ckpt::parse(bytes_of(bad), "mem", {.verify_digest = false}).get("m").shape()[0] == 32));
}

BOOST_AUTO_TEST_CASE(a_flipped_byte_in_the_data_is_caught_and_can_be_let_through) {
  const temp_dir s;
  const fs::path path = s.path() / "f.safetensors";
  ckpt::save(path, sample(), {.digest = true});
  const std::string good = read_bytes(path);
  const std::string recorded = ckpt::load(path).metadata().at(key);
  const std::size_t start = data_start(good);
  for (const std::size_t at : {start, start + (good.size() - start) / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(static_cast<unsigned char>(bad[at]) ^ 0x80);
    write_bytes(path, bad);
    const std::string computed = digest_of(bad);
    BOOST_TEST(computed != recorded);
    BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::load(path); }) ==
               corrupted_message(path, computed, recorded));
    BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::parse(bytes_of(bad), "mem"); }) ==
               corrupted_message("mem", computed, recorded));
    // Verification can be skipped: the flipped byte is then what the entry holds.
    for (const ckpt::checkpoint& trusted : {ckpt::load(path, {.verify_digest = false}),
                                            ckpt::parse(bytes_of(bad), "mem", {.verify_digest = false})}) {
      std::string data;  // the entries in file order (name order, as save lays them out)
      for (const auto& [name, x] : trusted)
        data.append(reinterpret_cast<const char*>(x.bytes().data()), x.bytes().size());
      BOOST_TEST((data == bad.substr(start)));
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
    BOOST_TEST(integrity->computed() == digest_of(bad));
    BOOST_TEST(e.path() == path);
  }
}

BOOST_AUTO_TEST_CASE(each_mib_is_hashed_and_the_order_of_the_mibs_counts) {
  const temp_dir s;
  const fs::path path = s.path() / "c.safetensors";
  // 9.5 MiB and 4 bytes of data: ten chunks, the last short, hashed on two threads (from 8 MiB).
  Eigen::VectorXf v((std::size_t{19} << 17) + 1);
  for (Eigen::Index i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  ckpt::save(path, ckpt::of_params(v, "v"), {.digest = true});
  const std::string good = read_bytes(path);
  const std::size_t start = data_start(good), mib = std::size_t{1} << 20;
  BOOST_TEST_REQUIRE(good.size() - start == v.size() * sizeof(float));
  const std::string recorded = ckpt::load(path).metadata().at(key);
  BOOST_TEST(recorded == digest_of(good));
  // Bytes on either side of chunk boundaries, in both threads' halves, and the very last one.
  for (const std::size_t at : {start + mib - 1, start + mib, start + 5 * mib - 1, start + 5 * mib, start + 9 * mib,
                               good.size() - 1}) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x20);
    write_bytes(path, bad);
    BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::load(path); }) ==
               corrupted_message(path, digest_of(bad), recorded));
    BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::parse(bytes_of(bad), "mem"); }) ==
               corrupted_message("mem", digest_of(bad), recorded));
  }
  // Two whole chunks swapped: every chunk's hash is still recorded, but not in that order.
  std::string swapped = good;
  std::copy_n(good.begin() + static_cast<std::ptrdiff_t>(start), mib, swapped.begin() + static_cast<std::ptrdiff_t>(start + mib));
  std::copy_n(good.begin() + static_cast<std::ptrdiff_t>(start + mib), mib, swapped.begin() + static_cast<std::ptrdiff_t>(start));
  write_bytes(path, swapped);
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::load(path); }) ==
             corrupted_message(path, digest_of(swapped), recorded));
}

// tests/fixtures/ckpt/ holds files of earlier versions, whose digests cover the data only:
// whole_digest.safetensors (commit 63087c2, `ckpt.xxh3_64`) and per_mib_digest.safetensors
// (commit eaa36c4, `ckpt.xxh3_64_per_mib`), both `ckpt::save(path, sample(), {.digest = true})`.
BOOST_AUTO_TEST_CASE(digests_of_earlier_versions_are_recognized_not_verified) {
  const temp_dir s;
  for (const auto& [file, old_key] : {std::pair{"whole_digest.safetensors", "ckpt.xxh3_64"},
                                      std::pair{"per_mib_digest.safetensors", "ckpt.xxh3_64_per_mib"}}) {
    BOOST_TEST_CONTEXT(file) {
      const std::string good = read_bytes(fs::path(CKPT_FIXTURES_DIR) / "ckpt" / file);
      const ckpt::checkpoint t = ckpt::parse(bytes_of(good));
      BOOST_TEST(t.metadata().size() == 2u);
      BOOST_TEST(t.metadata().at("note") == "hello");
      BOOST_TEST(t.metadata().contains(old_key));
      for (const auto& [name, x] : sample()) BOOST_TEST((t.get(name) == x));
      // Not verified: a changed data byte, or a digest that is not one, loads all the same.
      std::string bad = good;
      bad.back() = static_cast<char>(bad.back() ^ 0x01);
      BOOST_TEST(ckpt::parse(bytes_of(bad)).metadata().at(std::string(old_key)) == t.metadata().at(std::string(old_key)));
      bad = good;
      bad[good.find(t.metadata().at(std::string(old_key)))] = 'X';
      BOOST_TEST(ckpt::parse(bytes_of(bad)).metadata().at(std::string(old_key)).starts_with("X"));
      // Saved again, the checkpoint gets the current digest, never the old one back.
      const fs::path path = s.path() / file;
      ckpt::save(path, t, {.digest = true});
      const std::string resaved = read_bytes(path);
      BOOST_TEST(ckpt::load(path).metadata() ==
                 (ckpt::metadata_map{{"format", "pt"}, {"note", "hello"}, {key, digest_of(resaved)}}));
      ckpt::save(path, t, {.digest = false});
      BOOST_TEST(ckpt::load(path).metadata() == (ckpt::metadata_map{{"format", "pt"}, {"note", "hello"}}));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_changed_digest_is_caught_and_a_malformed_one_refused) {
  const temp_dir s;
  const fs::path path = s.path() / "m.safetensors";
  ckpt::save(path, sample(), {.digest = true});
  const std::string good = read_bytes(path);
  const std::string recorded = ckpt::load(path).metadata().at(key);
  const std::size_t at = digest_at(good);
  BOOST_TEST(good.substr(at, 16) == recorded);
  // Another valid digest: the file no longer matches it.
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
    const std::string expected = format_message(path, "the __metadata__ entry 'ckpt.xxh3_64_file' is \"" +
                                                          bad.substr(at, 16) + "\", not 16 lowercase hex digits");
    BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::load(path); }) == expected);
    BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::load(path, {.verify_digest = false}); }) == expected);
  }
  // 16 lowercase hex digits, but one spelled as a JSON escape: ckpt writes them plain, and could
  // not hash the header without them.
  std::string json = good.substr(8, data_start(good) - 8);
  json.erase(json.find_last_not_of(' ') + 1);
  char escape[7];
  std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned>(good[at]));
  json.replace(at - 8, 1, escape);
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string escaped(8, '\0');
  const std::uint64_t n = json.size();
  std::memcpy(escaped.data(), &n, 8);
  escaped += json + good.substr(data_start(good));
  for (const bool verify : {true, false})
    BOOST_TEST(message_of<ckpt::format_error>([&] {
                 (void)ckpt::parse(bytes_of(escaped), "mem", {.verify_digest = verify});
               }) == format_message("mem", "the __metadata__ entry 'ckpt.xxh3_64_file' spells its digits with JSON "
                                           "escapes, where ckpt writes them plain"));
}

BOOST_AUTO_TEST_CASE(a_damaged_digest_key_is_refused_not_taken_for_a_file_without_digest) {
  const std::string good = [] {
    const temp_dir s;
    ckpt::save(s.path() / "k.safetensors", sample(), {.digest = true});
    return read_bytes(s.path() / "k.safetensors");
  }();
  const std::size_t key_at = digest_at(good) - 3 - key.size();
  BOOST_TEST_REQUIRE(good.substr(key_at, key.size()) == key);
  // A letter changed, or the case of one; or two bytes of the key turned into one escape: '_f'
  // into '\f' (a form feed) leaves a key of 16 bytes that JSON spells in 17.
  for (const auto& [at, c, shown] : {std::tuple{key.size() - 1, 'f', std::string("'ckpt.xxh3_64_filf'")},
                                     std::tuple{std::size_t{0}, 'C', std::string("'Ckpt.xxh3_64_file'")},
                                     std::tuple{key.size() - 5, '\\', std::string("'ckpt.xxh3_64\\x0cile'")}}) {
    std::string bad = good;
    bad[key_at + at] = c;
    const std::string expected =
        format_message("mem", "the __metadata__ key " + shown +
                                  " differs from 'ckpt.xxh3_64_file' in one byte and maps to 16 hex digits: "
                                  "a damaged digest entry");
    BOOST_TEST(message_of<ckpt::format_error>([&] { (void)ckpt::parse(bytes_of(bad), "mem"); }) == expected);
    BOOST_TEST(message_of<ckpt::format_error>([&] {
                 (void)ckpt::parse(bytes_of(bad), "mem", {.verify_digest = false});
               }) == expected);
  }
  // save refuses to write such an entry (the file could not be loaded); keys further off are
  // anybody's.
  BOOST_TEST(message_of<std::invalid_argument>([] {
               const temp_dir s;
               ckpt::save(s.path() / "x.safetensors", sample().with_metadata({{"ckpt.xxh3_64_fild", "0123456789ABCDEF"}}));
             }) == "ckpt: cannot save the '__metadata__' key 'ckpt.xxh3_64_fild' with 16 hex digits: it differs from "
                   "'ckpt.xxh3_64_file' in one byte, and ckpt reads such an entry as a damaged digest");
  const temp_dir s;
  const ckpt::metadata_map others{{"ckpt.xxh3_64_fi", "0123456789abcdef"},
                                  {"ckpt.xxh3_64_fild", "not hex"},
                                  {"ckpt.xxh3_64_fxxx", "0123456789abcdef"}};
  ckpt::save(s.path() / "y.safetensors", sample().with_metadata(others), {.digest = true});
  BOOST_TEST(ckpt::load(s.path() / "y.safetensors").metadata().at("ckpt.xxh3_64_fild") == "not hex");
}

BOOST_AUTO_TEST_CASE(a_stale_digest_in_the_metadata_is_not_saved) {
  const temp_dir s;
  const fs::path first = s.path() / "a.safetensors", second = s.path() / "b.safetensors";
  ckpt::save(first, sample(), {.digest = true});
  // Load, change an entry, save again: the loaded digest must not describe the new file.
  const ckpt::checkpoint loaded = ckpt::load(first);
  const ckpt::checkpoint changed =
      ckpt::concat({ckpt::of_int("step", 13), ckpt::of_tensor("w", loaded.get("w")), ckpt::of_tensor("b", loaded.get("b"))})
          .with_metadata(loaded.metadata());
  ckpt::save(second, changed, {.digest = false});
  BOOST_TEST(!ckpt::load(second).metadata().contains(key));
  BOOST_TEST(ckpt::load(second).metadata().at("note") == "hello");
  ckpt::save(second, changed, {.digest = true});
  BOOST_TEST(ckpt::load(second).metadata().at(key) == digest_of(read_bytes(second)));
  BOOST_TEST(ckpt::load(second).metadata().at(key) != loaded.metadata().at(key));
  // The keys of earlier versions are dropped too.
  ckpt::save(second, changed.with_metadata({{"ckpt.xxh3_64", "0123456789abcdef"}, {"ckpt.xxh3_64_per_mib", "x"}}),
             {.digest = false});
  BOOST_TEST(ckpt::load(second).metadata() == (ckpt::metadata_map{{"format", "pt"}}));
}

BOOST_AUTO_TEST_CASE(every_save_writes_format_pt_unless_the_metadata_have_a_format) {
  const temp_dir s;
  const fs::path path = s.path() / "f.safetensors";
  ckpt::save(path, sample(), {.digest = false});
  BOOST_TEST(ckpt::load(path).metadata() == (ckpt::metadata_map{{"format", "pt"}, {"note", "hello"}}));
  BOOST_TEST(read_bytes(path).find("{\"__metadata__\":{\"format\":\"pt\",\"note\":\"hello\"},") == 8u);
  ckpt::save(path, sample().with_metadata({{"format", "np"}}), {.digest = true});
  BOOST_TEST(ckpt::load(path).metadata().at("format") == "np");
  ckpt::save(path, ckpt::checkpoint{}, {.digest = false});
  BOOST_TEST(ckpt::load(path).metadata() == (ckpt::metadata_map{{"format", "pt"}}));
  // Sections, and each shard of a sharded checkpoint, which keeps it as metadata all shards share.
  ckpt::save(path, {{ckpt::of_int("step", 3)}}, {{"k", "v"}}, {.digest = false});
  BOOST_TEST(ckpt::load(path).metadata() == (ckpt::metadata_map{{"format", "pt"}, {"k", "v"}}));
  const ckpt::sharded_files files = ckpt::save_sharded(
      s.path() / "sharded", ckpt::concat({ckpt::of_int("a", 1), ckpt::of_int("b", 2)}).with_metadata({{"k", "v"}}), 4,
      {.save = {.digest = true}});
  BOOST_TEST_REQUIRE(files.shards.size() == 2u);
  for (const fs::path& shard : files.shards) BOOST_TEST(ckpt::load(shard).metadata().at("format") == "pt");
  BOOST_TEST(ckpt::load(files.index).metadata() == (ckpt::metadata_map{{"format", "pt"}, {"k", "v"}}));
}

BOOST_AUTO_TEST_CASE(names_that_look_like_the_digest_field_do_not_confuse_the_writer_or_the_reader) {
  const temp_dir s;
  const fs::path path = s.path() / "n.safetensors";
  // Keys and names whose JSON spelling contains `"ckpt.xxh3_64_file":"` before the real field.
  const ckpt::checkpoint t =
      ckpt::concat({ckpt::of_int("a\"ckpt.xxh3_64_file", 1), ckpt::of_int("z", 2)})
          .with_metadata({{"a\"ckpt.xxh3_64_file", "0000000000000000"},
                          {"b", "\"ckpt.xxh3_64_file\":\"ffffffffffffffff"}});
  ckpt::save(path, t, {.digest = true});
  const std::string file = read_bytes(path);
  const ckpt::checkpoint back = ckpt::load(path);
  BOOST_TEST(back.metadata().at("a\"ckpt.xxh3_64_file") == "0000000000000000");
  BOOST_TEST(back.metadata().at(key) == digest_of(file, digest_at(file, ",")));
  // A change of a look-alike's digits is a change of the header like any other.
  std::string bad = file;
  bad[file.find("0000000000000000")] = '1';
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { (void)ckpt::parse(bytes_of(bad), "mem"); }) ==
             corrupted_message("mem", digest_of(bad, digest_at(file, ",")), back.metadata().at(key)));
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
  BOOST_TEST(ckpt::load(s.path() / "p.safetensors").metadata().at(key) == digest_of(p));
}

BOOST_AUTO_TEST_CASE(the_manager_writes_digests_by_default_and_verifies_them) {
  const temp_dir s(temp_dir::absent);
  {
    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
    m.save(1, {sample()});
    const fs::path path = m.path_of(1);
    std::string file = read_bytes(path);
    BOOST_TEST(ckpt::load(path).metadata().at(key) == digest_of(file));
    const std::string recorded = ckpt::load(path).metadata().at(key);
    file[file.size() - 1] = static_cast<char>(file[file.size() - 1] ^ 0x04);
    write_bytes(path, file);
    BOOST_TEST(m.load(1, {.verify_digest = false}).names() == sample().names());
    // The damaged step is set aside, not loaded, and the error is its reason.
    const ckpt::checkpoint_manager::latest latest = m.load_latest();
    BOOST_TEST(!latest);
    BOOST_TEST_REQUIRE(latest.skipped.size() == 1u);
    BOOST_TEST(latest.skipped[0].reason == corrupted_message(path, digest_of(file), recorded));
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
  ckpt::save(path, ckpt::of_params(Eigen::VectorXf::Constant(24 << 18, 1.0f).eval(), "x"), {.digest = true});  // 24 MiB
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
  ckpt::save(path, ckpt::of_params(Eigen::VectorXf::Constant(25 << 20, 2.0f).eval(), "x"), {.digest = true});
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

namespace {

struct three {
  Eigen::VectorXf a_small;                                                 // staged with its neighbours
  Eigen::MatrixXf b_col;                                                   // column-major: read in bands
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> c_row;  // read straight into place
};

three three_of(float seed) {
  three x{Eigen::VectorXf(64), Eigen::MatrixXf(1024, 1024), decltype(three::c_row)(512, 512)};
  for (Eigen::Index i = 0; i < x.a_small.size(); ++i) x.a_small(i) = seed + static_cast<float>(i);
  for (Eigen::Index i = 0; i < x.b_col.size(); ++i) x.b_col.data()[i] = seed * 2 + static_cast<float>(i % 4099);
  for (Eigen::Index i = 0; i < x.c_row.size(); ++i) x.c_row.data()[i] = seed * 3 - static_cast<float>(i % 1021);
  return x;
}

bool same(const three& x, const three& y) { return x.a_small == y.a_small && x.b_col == y.b_col && x.c_row == y.c_row; }

// Writes `bytes` over the file at `offset`, in place (same inode, same size), as `dd
// conv=notrunc` does.
void rewrite_in_place(const fs::path& path, std::size_t offset, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  BOOST_TEST_REQUIRE(fd >= 0);
  BOOST_TEST_REQUIRE(::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(offset)) == static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

}  // namespace

// Issue 35, finding 5: the digest was checked when the file was opened and the data read later,
// so a same-size rewrite in place between the two (`load`, then `dd conv=notrunc`, then
// `to_params`) handed out bytes that were never verified, and `ckpt convert` wrote them into a
// file with a fresh, valid digest. Every copy out of a verified load is checked against the
// hashes the verification computed.
BOOST_AUTO_TEST_CASE(bytes_rewritten_in_place_after_a_verified_load_are_never_handed_out) {
  const temp_dir s;
  const fs::path path = s.path() / "m.safetensors";
  const three original = three_of(1);
  ckpt::save(path, ckpt::of_params(original, "m"), {.digest = true});
  const std::string bytes = read_bytes(path);
  const std::size_t start = data_start(bytes);
  // Two MiB into the data: inside b_col (the entries lie in name order), chunk 2 of the digest.
  const std::size_t at = start + (std::size_t{2} << 20) + 100;
  const ckpt::checkpoint verified = ckpt::load(path);
  const ckpt::checkpoint unverified = ckpt::load(path, {.verify_digest = false});

  rewrite_in_place(path, at, std::string(64, '\x7f'));
  const std::string expected_start = "ckpt: '" + path.string() + "' is corrupted: it changed after its digest was verified: chunk 2 of its data";
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { static_cast<void>(ckpt::to_params(verified, three_of(0), {.prefix = "m"})); })
                 .starts_with(expected_start));
  three into = three_of(0);
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { ckpt::read_params(verified, into, {.prefix = "m"}); })
                 .starts_with(expected_start));
  // A save of the loaded entries (what `ckpt convert` does) writes nothing.
  const fs::path out = s.path() / "converted.safetensors";
  BOOST_TEST(message_of<ckpt::integrity_error>([&] { ckpt::save(out, verified, {.digest = true}); }).starts_with(expected_start));
  BOOST_TEST(folder_listing(s.path()) == (std::vector<std::string>{"m.safetensors"}));
  // Entries in chunks that did not change still come out (the check is a chunk's, 1 MiB).
  Eigen::VectorXf small(64);
  ckpt::read_params(verified, small, {.prefix = "m.a_small"});
  BOOST_TEST(small == original.a_small);
  // A load without verification promises nothing: it reads what the file holds now.
  const three now = ckpt::to_params(unverified, three_of(0), {.prefix = "m"});
  BOOST_TEST(!same(now, original));
  // And a new verified load refuses the file as it is now.
  BOOST_CHECK_THROW(static_cast<void>(ckpt::load(path)), ckpt::integrity_error);

  // The bytes put back: what was verified comes out again.
  rewrite_in_place(path, at, bytes.substr(at, 64));
  BOOST_TEST(same(ckpt::to_params(verified, three_of(0), {.prefix = "m"}), original));
  ckpt::save(out, verified, {.digest = true});
  BOOST_TEST(same(ckpt::to_params(ckpt::load(out), three_of(0), {.prefix = "m"}), original));
}

BOOST_AUTO_TEST_SUITE_END()  // test_digest
