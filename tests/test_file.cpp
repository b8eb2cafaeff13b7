// save and load: round trips, metadata, the exact bytes of the file, atomic replacement.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/detail/pages.hpp>
#include <ckpt/ckpt.hpp>

#include "io/io_hooks.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <complex>
#include <functional>
#include <future>
#include <cstring>
#include <fstream>
#include <string>

BOOST_AUTO_TEST_SUITE(test_file)

namespace {

namespace fs = std::filesystem;

using ckpt_test::folder_listing;
using ckpt_test::read_bytes;
using ckpt_test::rss_file_kib;
using ckpt_test::temp_dir;

}  // namespace

BOOST_AUTO_TEST_CASE(save_writes_the_exact_c_order_file) {
  const temp_dir s;
  Eigen::MatrixXf w(2, 2);  // column-major
  w << 1, 2, 3, 4;
  const auto t = ckpt::concat({ckpt::of_params(w, "w"), ckpt::of_int("a", 5)});
  ckpt::save(s.path() / "x.safetensors", t, {.digest = false});  // the exact bytes, without a digest
  const std::string bytes = read_bytes(s.path() / "x.safetensors");
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]},)"
      R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[4,20]}})";
  const std::size_t padded = (header.size() + 7) / 8 * 8;
  BOOST_REQUIRE(bytes.size() == 8 + padded + 20);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  BOOST_TEST(n == padded);
  BOOST_TEST(bytes.substr(8, header.size()) == header);
  BOOST_TEST(bytes.substr(8 + header.size(), padded - header.size()) == std::string(padded - header.size(), ' '));
  std::array<float, 4> data{};
  std::memcpy(data.data(), bytes.data() + 8 + padded + 4, 16);
  BOOST_TEST(data == (std::array<float, 4>{1, 2, 3, 4}));
}

BOOST_AUTO_TEST_CASE(metadata_round_trips) {
  const temp_dir s;
  const ckpt::metadata_map meta{{"format", "pt"}, {"note", "quote \" backslash \\ newline \n \xc3\xa9"}, {"", ""}};
  ckpt::save(s.path() / "m.safetensors", ckpt::of_int("step", 1).with_metadata(meta), {.digest = false});
  const auto loaded = ckpt::load(s.path() / "m.safetensors");
  BOOST_TEST((loaded.metadata() == meta));
  BOOST_TEST(ckpt::to_int("step", loaded) == 1);
}

BOOST_AUTO_TEST_CASE(names_are_written_as_json_escapes_them) {
  const temp_dir s;
  // Plain names are written as they are; a quote, a backslash or a control byte is escaped.
  const auto t = ckpt::concat({ckpt::of_int("caf\xc3\xa9", 1), ckpt::of_int("q\"b\\n\nt\x01", 2)});
  ckpt::save(s.path() / "j.safetensors", t);
  const std::string bytes = read_bytes(s.path() / "j.safetensors");
  BOOST_TEST(bytes.find("\"caf\xc3\xa9\":{\"dtype\":\"I32\"") != std::string::npos);
  BOOST_TEST(bytes.find(R"("q\"b\\n\nt\u0001":{"dtype":"I32")") != std::string::npos);
  const auto back = ckpt::load(s.path() / "j.safetensors");
  BOOST_TEST(back.names() == t.names());
  BOOST_TEST(ckpt::to_int("q\"b\\n\nt\x01", back) == 2);
}

BOOST_AUTO_TEST_CASE(empty_checkpoint_round_trips) {
  const temp_dir s;
  ckpt::save(s.path() / "e.safetensors", ckpt::checkpoint{}, {.digest = false});
  // Only what every save without a digest writes (see ckpt::save): "format": "pt", for
  // transformers' readers.
  BOOST_TEST(read_bytes(s.path() / "e.safetensors").substr(8) == R"({"__metadata__":{"format":"pt"}})");
  BOOST_TEST(ckpt::load(s.path() / "e.safetensors").empty());
}

BOOST_AUTO_TEST_CASE(zero_size_and_scalar_entries_round_trip) {
  const temp_dir s;
  const auto t = ckpt::concat({ckpt::of_params(Eigen::MatrixXd(0, 3), "empty"), ckpt::of_params(2.5, "s"),
                               ckpt::of_params(Eigen::VectorXf(0), "z")});
  ckpt::save(s.path() / "z.safetensors", t);
  const auto back = ckpt::load(s.path() / "z.safetensors");
  BOOST_TEST(back.names() == t.names());
  for (const auto& [name, x] : t) BOOST_TEST((back.get(name) == x));
}

BOOST_AUTO_TEST_CASE(save_replaces_an_existing_file) {
  const temp_dir s;
  ckpt::save(s.path() / "r.safetensors", ckpt::of_int("v", 1));
  ckpt::save(s.path() / "r.safetensors", ckpt::of_int("v", 2));
  BOOST_TEST(ckpt::to_int("v", ckpt::load(s.path() / "r.safetensors")) == 2);
  BOOST_TEST(folder_listing(s.path()) == std::vector<std::string>{"r.safetensors"});
}

BOOST_AUTO_TEST_CASE(loaded_tensors_outlive_the_checkpoint_and_the_file) {
  const temp_dir s;
  ckpt::save(s.path() / "k.safetensors", ckpt::of_params(Eigen::Vector4d(1, 2, 3, 4), "v"));
  ckpt::tensor kept;
  {
    const auto loaded = ckpt::load(s.path() / "k.safetensors");
    kept = loaded.get("v");
  }
  fs::remove(s.path() / "k.safetensors");
  BOOST_TEST(kept.as<double>()[3] == 4.0);
  BOOST_TEST(ckpt::detail::tensor_access::file_of(kept) != nullptr);
  BOOST_TEST(ckpt::detail::tensor_access::file_of(ckpt::of_int("v", 1).get("v")) == nullptr);
}

BOOST_AUTO_TEST_CASE(a_failed_rename_leaves_no_temporary_file) {
  const temp_dir s;
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.renameat = [](int, const char*, int, const char*) {
    errno = EXDEV;
    return -1;
  };
  try {
    const ckpt::detail::io_hooks_guard guard(hooks);
    ckpt::save(s.path() / "taken", ckpt::of_int("v", 1));
    BOOST_FAIL("no exception");
  } catch (const ckpt::io_error& e) {
    BOOST_TEST(std::string(e.what()).find("cannot rename a temporary file over '" + (s.path() / "taken").string() + "'") !=
               std::string::npos);
    BOOST_TEST(e.path() == s.path() / "taken");
  }
  BOOST_TEST(folder_listing(s.path()).empty());
}

// Hostile inputs, round two (tests/RELIABILITY.md). A FIFO where a checkpoint or an index should
// be is refused at once, naming it; before, open() waited for a writer forever. The loads run in
// a thread with a deadline, so that a regression fails instead of hanging the suite.
template <class Load>
std::string refusal_within_seconds(const fs::path& fifo, Load load) {
  auto result = std::async(std::launch::async, [load] {
    try {
      load();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  });
  if (result.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    // A writer appears, which ends the wait of the reader's open, so that the thread ends.
    const int writer = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    result.wait();
    if (writer >= 0) ::close(writer);
    BOOST_FAIL("the load of '" + fifo.string() + "' waited on the FIFO");
  }
  return result.get();
}

BOOST_AUTO_TEST_CASE(a_fifo_is_refused_without_waiting) {
  const temp_dir s;
  const fs::path fifo = s.path() / "m.safetensors", index = s.path() / "model.safetensors.index.json",
                 pt = s.path() / "m.pt";
  for (const auto& p : {fifo, index, pt}) BOOST_REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
  BOOST_TEST(refusal_within_seconds(fifo, [&] { (void)ckpt::load(fifo); }) ==
             "ckpt: '" + fifo.string() + "' is not a valid safetensors file: it is not a regular file");
  BOOST_TEST(refusal_within_seconds(index, [&] { (void)ckpt::load(index); }) ==
             "ckpt: '" + index.string() + "' is not a valid sharded checkpoint index: it is not a regular file");
  BOOST_TEST(refusal_within_seconds(index, [&] { (void)ckpt::load(s.path()); }) ==
             "ckpt: '" + index.string() + "' is not a valid sharded checkpoint index: it is not a regular file");
  // A FIFO cannot be told a torch.save file by its content without waiting on it: load leaves it
  // to the safetensors reader, whatever its name, which refuses it by name.
  BOOST_TEST(refusal_within_seconds(pt, [&] { (void)ckpt::load(pt); }) ==
             "ckpt: '" + pt.string() + "' is not a valid safetensors file: it is not a regular file");
  // A symlink to a regular file is followed, as ever (the Hugging Face cache is made of them).
  ckpt::save(s.path() / "real.safetensors", ckpt::of_int("v", 3));
  fs::create_symlink(s.path() / "real.safetensors", s.path() / "link.safetensors");
  BOOST_TEST(ckpt::load(s.path() / "link.safetensors").get("v").as<std::int32_t>()[0] == 3);
}

// A save refuses a target that exists and is not a regular file: it would replace a device
// node (as root, `convert x /dev/null` replaced the real /dev/null) or a FIFO.
BOOST_AUTO_TEST_CASE(a_save_refuses_a_target_that_is_not_a_regular_file) {
  const temp_dir s;
  const auto refusal = [&](const fs::path& target) {
    try {
      ckpt::save(target, ckpt::of_int("v", 1));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("saved");
  };
  const auto rule = [](const fs::path& p, const std::string& kind) {
    return "ckpt: will not save over '" + p.string() + "': it is " + kind +
           ", not a regular file (a save replaces the file at its path)";
  };
  BOOST_REQUIRE(::mkfifo((s.path() / "fifo").c_str(), 0600) == 0);
  BOOST_TEST(refusal(s.path() / "fifo") == rule(s.path() / "fifo", "a FIFO"));
  BOOST_TEST(fs::is_fifo(s.path() / "fifo"));
  fs::create_directory(s.path() / "folder");
  BOOST_TEST(refusal(s.path() / "folder") == rule(s.path() / "folder", "a folder"));
  // A character device: made with mknod where the test may (as root), else /dev/null's symlink
  // stands for it, refused through the link.
  const fs::path device = s.path() / "null";
  if (::mknod(device.c_str(), S_IFCHR | 0600, makedev(1, 3)) != 0) fs::create_symlink("/dev/null", device);
  BOOST_TEST(refusal(device) == rule(device, "a character device"));
  BOOST_TEST(!fs::is_regular_file(device));
  // Symlinks to regular files keep working: the link is replaced by the new file.
  ckpt::save(s.path() / "old.safetensors", ckpt::of_int("v", 1));
  fs::create_symlink(s.path() / "old.safetensors", s.path() / "link.safetensors");
  BOOST_TEST(refusal(s.path() / "link.safetensors") == "saved");
  BOOST_TEST(ckpt::load(s.path() / "link.safetensors").get("v").as<std::int32_t>()[0] == 1);
  BOOST_TEST(folder_listing(s.path()) ==
             (std::vector<std::string>{"fifo", "folder", "link.safetensors", "null", "old.safetensors"}));
}

BOOST_AUTO_TEST_CASE(a_save_into_a_missing_folder_names_it) {
  const temp_dir s;
  try {
    ckpt::save(s.path() / "missing" / "x.safetensors", ckpt::of_int("v", 1));
    BOOST_FAIL("no exception");
  } catch (const ckpt::io_error& e) {
    BOOST_TEST(std::string(e.what()) == "ckpt: cannot create a temporary file beside '" +
                                            (s.path() / "missing" / "x.safetensors").string() +
                                            "': No such file or directory");
  }
}

namespace {
// Saves `t` at `path` in a child process whose file size limit is `limit` bytes, with SIGXFSZ
// ignored: write() then fails with EFBIG once the file would pass the limit, as on a full disk.
// Returns what the save threw ("" if it succeeded).
std::string save_under_file_size_limit(const fs::path& path, const ckpt::checkpoint& t, bool digest, rlim_t limit) {
  return ckpt_test::in_child([&] {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlimit rl{limit, limit};
    ::setrlimit(RLIMIT_FSIZE, &rl);
    try {
      ckpt::save(path, t, {.digest = digest});
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
    return std::string();
  });
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_write_failing_part_way_keeps_the_old_file) {
  const temp_dir s;
  const fs::path path = s.path() / "old.safetensors";
  ckpt::save(path, ckpt::of_int("v", 1));
  const std::string before = read_bytes(path);
  const auto big = ckpt::concat({ckpt::of_params(Eigen::VectorXf::Ones(100000).eval(), "big"),
                                 ckpt::of_params(Eigen::MatrixXd::Constant(30, 40, 0.5).eval(), "m")});
  for (const bool digest : {false, true}) {
    ckpt::save(s.path() / "size.safetensors", big, {.digest = digest});
    const std::string whole = read_bytes(s.path() / "size.safetensors");
    fs::remove(s.path() / "size.safetensors");
    const auto size = static_cast<rlim_t>(whole.size());
    std::uint64_t header = 0;
    std::memcpy(&header, whole.data(), 8);
    header += 8;
    // Inside the header, at the first data byte, in the middle of the data, at the last byte.
    for (const rlim_t limit : {rlim_t{16}, static_cast<rlim_t>(header), size / 2, size - 1}) {
      BOOST_TEST_CONTEXT("digest " << digest << ", file size limit " << limit << " of " << size) {
        BOOST_TEST(save_under_file_size_limit(path, big, digest, limit) ==
                   "ckpt: cannot write '" + path.string() + "': File too large");
        BOOST_TEST(read_bytes(path) == before);
        BOOST_TEST(folder_listing(s.path()) == std::vector<std::string>{"old.safetensors"});
      }
    }
    // The limits were tight: the whole file fits exactly.
    BOOST_TEST(save_under_file_size_limit(s.path() / "fits.safetensors", big, digest, size) == "");
    BOOST_TEST(fs::file_size(s.path() / "fits.safetensors") == size);
    fs::remove(s.path() / "fits.safetensors");
  }
}

BOOST_AUTO_TEST_CASE(load_names_a_missing_file) {
  const temp_dir s;
  try {
    (void)ckpt::load(s.path() / "nope.safetensors");
    BOOST_FAIL("no exception");
  } catch (const ckpt::io_error& e) {
    BOOST_TEST(std::string(e.what()) == "ckpt: cannot open '" + (s.path() / "nope.safetensors").string() +
                                            "': No such file or directory");
    BOOST_TEST((e.code() == std::errc::no_such_file_or_directory));
  }
}

BOOST_AUTO_TEST_CASE(load_refuses_a_folder) {
  const temp_dir s;
  // A folder is either a sharded checkpoint (an index inside) or refused, naming it.
  BOOST_CHECK_THROW((void)ckpt::load(s.path()), ckpt::error);
}


// Extraction copies a loaded file's entries out with pread (ckpt/detail/pages.hpp), never
// through the mapping: the process does not hold the file's pages besides its leaves.
BOOST_AUTO_TEST_CASE(extraction_does_not_touch_the_mapping) {
  const temp_dir s;
  struct big {
    std::vector<Eigen::MatrixXf> blocks;                                      // column-major
    std::vector<Eigen::Matrix<float, -1, -1, Eigen::RowMajor>> rows;         // row-major
    std::vector<Eigen::VectorXf> small;                                        // staged
  };
  big original;
  for (int i = 0; i < 4; ++i) {
    original.blocks.push_back(Eigen::MatrixXf::Constant(1024, 1024, static_cast<float>(i)));
    original.rows.push_back(Eigen::Matrix<float, -1, -1, Eigen::RowMajor>::Constant(1024, 1024, static_cast<float>(i)));
  }
  for (int i = 0; i < 1000; ++i) original.small.push_back(Eigen::VectorXf::Constant(1000, static_cast<float>(i)));
  ckpt::save(s.path() / "big.safetensors", ckpt::of_params(original));
  const auto loaded = ckpt::load(s.path() / "big.safetensors", {.verify_digest = true});
  const long before = rss_file_kib();
  const big copy = ckpt::to_params(loaded, original);
  big in_place = original;
  ckpt::read_params(loaded, in_place);
  const long after = rss_file_kib();
  BOOST_TEST(after - before < 1024, "mapping resident after extraction: " << after - before << " KiB of 36 MiB");
  BOOST_TEST((copy.blocks[3] == original.blocks[3] && in_place.blocks[3] == original.blocks[3]));
  BOOST_TEST((copy.rows[2] == original.rows[2] && in_place.rows[2] == original.rows[2]));
  BOOST_TEST((copy.small[999] == original.small[999] && in_place.small[500] == original.small[500]));
  // The views still read the file through the mapping, which the user asked for.
  BOOST_TEST(loaded.get("blocks.3").as<float>()[12345] == 3.0f);
  BOOST_TEST(rss_file_kib() - before >= 4);
}

namespace {
// Entries that read_params takes from the file's descriptor rather than its mapping (256 KiB
// and more; 1 MiB and more on two threads), behind a small entry so that none starts on a page.
struct large_entries {
  Eigen::Vector3i head;
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> split;  // 1.01 MiB
  Eigen::VectorXd whole;                                                         // 280 KiB
  Eigen::VectorXf small;                                                         // 4 KiB: mapped
};

large_entries random_large_entries() {
  return {Eigen::Vector3i(1, 2, 3), Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>::Random(513, 517),
          Eigen::VectorXd::Random(35'001), Eigen::VectorXf::Random(1000)};
}

large_entries zeros_like_large_entries() {
  return {Eigen::Vector3i::Zero(), Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>::Zero(513, 517),
          Eigen::VectorXd::Zero(35'001), Eigen::VectorXf::Zero(1000)};
}

bool same(const large_entries& a, const large_entries& b) {
  return a.head == b.head && a.split == b.split && a.whole == b.whole && a.small == b.small;
}
}  // namespace

BOOST_AUTO_TEST_CASE(large_entries_are_read_whole_from_the_file) {
  const temp_dir s;
  const large_entries original = random_large_entries();
  ckpt::save(s.path() / "l.safetensors", ckpt::of_params(original));
  large_entries loaded = zeros_like_large_entries();
  ckpt::read_params(ckpt::load(s.path() / "l.safetensors"), loaded);
  BOOST_TEST(same(loaded, original));
  BOOST_TEST(same(ckpt::to_params(ckpt::load(s.path() / "l.safetensors"), zeros_like_large_entries()), original));
}

BOOST_AUTO_TEST_CASE(a_loaded_checkpoint_keeps_reading_the_file_it_loaded_after_a_save_replaces_it) {
  const temp_dir s;
  const large_entries first = random_large_entries(), second = random_large_entries();
  ckpt::save(s.path() / "l.safetensors", ckpt::of_params(first));
  const auto loaded = ckpt::load(s.path() / "l.safetensors");
  ckpt::save(s.path() / "l.safetensors", ckpt::of_params(second));  // a new file renamed over it
  large_entries out = zeros_like_large_entries();
  ckpt::read_params(loaded, out);
  BOOST_TEST(same(out, first));
  fs::remove(s.path() / "l.safetensors");
  out = zeros_like_large_entries();
  ckpt::read_params(loaded, out);
  BOOST_TEST(same(out, first));
}

BOOST_AUTO_TEST_CASE(a_file_truncated_after_load_is_refused_by_name_before_any_leaf_is_written) {
  const temp_dir s;
  const fs::path path = s.path() / "l.safetensors";
  ckpt::save(path, ckpt::of_params(random_large_entries()));
  const auto loaded = ckpt::load(path);
  fs::resize_file(path, 4096);  // the header stays, the data goes: the mapping would SIGBUS
  large_entries out = zeros_like_large_entries();
  for (int i = 0; i < 2; ++i)
    BOOST_CHECK_EXCEPTION(i == 0 ? (void)ckpt::read_params(loaded, out) : (void)ckpt::to_params(loaded, out),
                          ckpt::format_error, [&](const ckpt::format_error& e) {
                            return e.path() == path && e.rule() == "the file shrank since it was loaded";
                          });
  BOOST_TEST(same(out, zeros_like_large_entries()));
}

// Issue 25, class 5 (tests/RELIABILITY.md): a file truncated while a load reads it. Every copy
// out of a loaded file reads with pread, never through the mapping, so the truncation is a
// format_error naming the file where it used to be a SIGBUS. The hook truncates the file at the
// first read of its data, after the checks extraction makes before writing any leaf.
namespace {
fs::path truncated_path;
bool truncate_armed = false;
ssize_t truncating_pread(int fd, void* out, std::size_t size, off_t offset) {
  if (truncate_armed) {
    truncate_armed = false;
    if (::truncate(truncated_path.c_str(), 4096) != 0) return -1;  // the header stays, the data go
  }
  return ::pread(fd, out, size, offset);
}

// Column-major leaves of each element size, shaped to need several staging bands (whole rows,
// and rows longer than a band's share of 64 rows), a rank-3 tensor, and small entries.
struct all_orders {
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic> wide;          // 70 x 5000: 40 KB rows
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic> tall;           // 3000 x 200: 800 B rows
  Eigen::Matrix<Eigen::half, Eigen::Dynamic, Eigen::Dynamic> half;     // 700 x 900
  Eigen::Matrix<std::int8_t, Eigen::Dynamic, Eigen::Dynamic> bytes;    // 1200 x 1100
  Eigen::Matrix<std::complex<float>, Eigen::Dynamic, Eigen::Dynamic> complex;  // 400 x 333
  Eigen::Tensor<float, 3> cube;                                        // 40 x 90 x 150
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows;  // 600 x 700
  Eigen::VectorXf small;
  std::int64_t scalar = 0;
};

all_orders shaped_all_orders() {
  all_orders x{Eigen::MatrixXd(70, 5000), Eigen::MatrixXf(3000, 200), {}, {}, {}, Eigen::Tensor<float, 3>(40, 90, 150),
               {}, Eigen::VectorXf(78), 0};
  x.half.resize(700, 900);
  x.bytes.resize(1200, 1100);
  x.complex.resize(400, 333);
  x.rows.resize(600, 700);
  return x;
}

all_orders random_all_orders() {
  all_orders x = shaped_all_orders();
  x.wide.setRandom();
  x.tall.setRandom();
  x.half = Eigen::MatrixXf::Random(700, 900).cast<Eigen::half>();
  x.bytes = Eigen::MatrixXi::Random(1200, 1100).cast<std::int8_t>();
  x.complex.setRandom();
  x.cube.setRandom();
  x.rows.setRandom();
  x.small.setRandom();
  x.scalar = 0x123456789;
  return x;
}

// Leaves that view a loaded file's entries.
struct loaded_leaves {
  ckpt::tensor wide, rows;
};

bool same(const all_orders& a, const all_orders& b) {
  const bool cubes = a.cube.dimensions() == b.cube.dimensions() &&
                     std::equal(a.cube.data(), a.cube.data() + a.cube.size(), b.cube.data());
  return a.wide == b.wide && a.tall == b.tall && a.half == b.half && a.bytes == b.bytes && a.complex == b.complex &&
         cubes && a.rows == b.rows && a.small == b.small && a.scalar == b.scalar;
}
}  // namespace

BOOST_AUTO_TEST_CASE(every_storage_order_reads_bit_exact_from_a_file_in_bands) {
  const temp_dir s;
  const all_orders original = random_all_orders();
  ckpt::save(s.path() / "o.safetensors", ckpt::of_params(original));
  const auto loaded = ckpt::load(s.path() / "o.safetensors");
  all_orders out = shaped_all_orders();
  ckpt::read_params(loaded, out);
  BOOST_TEST(same(out, original));
  BOOST_TEST(same(ckpt::to_params(loaded, shaped_all_orders()), original));
  // Cast on the way in: every band converted as it is read.
  const ckpt::tensor wide = ckpt::cast(loaded.get("wide"), ckpt::dtype::f32);
  BOOST_TEST(ckpt::detail::tensor_access::file_of(wide) == nullptr);
  BOOST_TEST((wide == ckpt::of_params(Eigen::MatrixXf(original.wide.cast<float>()), "w").get("w")));
}

BOOST_AUTO_TEST_CASE(a_file_truncated_while_it_is_read_is_an_error_naming_it_not_a_signal) {
  const temp_dir s;
  const fs::path path = s.path() / "t.safetensors";
  const all_orders original = random_all_orders();
  // Each copy out of `t`, a load of the file (not verified) made before the hook is armed.
  using copy_function = std::function<void(const ckpt::checkpoint& t)>;
  const std::vector<std::pair<std::string, copy_function>> copies = {
      {"read_params", [](const ckpt::checkpoint& t) { all_orders out = shaped_all_orders(); ckpt::read_params(t, out); }},
      {"to_params", [](const ckpt::checkpoint& t) { (void)ckpt::to_params(t, shaped_all_orders()); }},
      {"to_params with a cast", [](const ckpt::checkpoint& t) {
         (void)ckpt::to_params(t, Eigen::MatrixXd(3000, 200), {.prefix = "tall", .cast = true});
       }},
      {"a column-major leaf", [](const ckpt::checkpoint& t) {
         (void)ckpt::to_params(t, Eigen::MatrixXd(70, 5000), {.prefix = "wide"});
       }},
      {"a rank-3 leaf", [](const ckpt::checkpoint& t) {
         (void)ckpt::to_params(t, Eigen::Tensor<float, 3>(40, 90, 150), {.prefix = "cube"});
       }},
      {"small entries", [](const ckpt::checkpoint& t) {
         (void)ckpt::to_params(t, Eigen::VectorXf(78), {.prefix = "small"});
       }},
      {"cast", [](const ckpt::checkpoint& t) { (void)ckpt::cast(t.get("rows"), ckpt::dtype::f64); }},
      {"digest verification", [&](const ckpt::checkpoint&) { (void)ckpt::load(path, {.verify_digest = true}); }},
      // ckpt convert: the entries are read from the file as they are written, and hashed.
      {"a save of the loaded entries", [&](const ckpt::checkpoint& t) {
         ckpt::save(s.path() / "copy.safetensors", t, {.digest = true});
       }},
      {"adapters", [](const ckpt::checkpoint& t) { (void)ckpt::transpose(t, "rows"); }},
      // A structure whose ckpt::tensor leaves are the loaded entries, saved live and snapshot.
      {"a save of sections holding loaded tensors", [&](const ckpt::checkpoint& t) {
         const loaded_leaves leaves{t.get("wide"), t.get("rows")};
         ckpt::save(s.path() / "copy.safetensors", {{leaves, "model"}}, {}, {.digest = true});
       }},
      {"a snapshot of loaded tensors", [](const ckpt::checkpoint& t) {
         const loaded_leaves leaves{t.get("wide"), t.get("rows")};
         ckpt::snapshot_arena arena;
         (void)arena.snapshot({{leaves, "model"}});
       }},
  };
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.pread = truncating_pread;
  truncated_path = path;
  for (const auto& [name, copy] : copies) {
    BOOST_TEST_CONTEXT(name) {
      ckpt::save(path, ckpt::of_params(original), {.digest = true});
      const ckpt::checkpoint t = ckpt::load(path, {.verify_digest = false});
      // Every entry is copied out of the file, not out of memory (none is misaligned).
      for (const auto& [entry, x] : t) BOOST_REQUIRE(ckpt::detail::tensor_access::file_of(x) != nullptr);
      const ckpt::detail::io_hooks_guard guard(hooks);
      truncate_armed = true;
      BOOST_CHECK_EXCEPTION(copy(t), ckpt::format_error, [&](const ckpt::format_error& e) {
        return e.path() == path && e.rule() == "the file shrank while it was being read";
      });
      BOOST_TEST(!truncate_armed);
    }
  }
  // The failed save left nothing behind.
  BOOST_TEST(!fs::exists(s.path() / "copy.safetensors"));
  BOOST_TEST(std::distance(fs::directory_iterator(s.path()), fs::directory_iterator()) == 1);
}

BOOST_AUTO_TEST_CASE(a_file_unreadable_while_it_is_read_is_an_io_error_naming_it) {
  const temp_dir s;
  const fs::path path = s.path() / "e.safetensors";
  ckpt::save(path, ckpt::of_params(random_all_orders()), {.digest = true});
  const auto loaded = ckpt::load(path, {.verify_digest = false});
  ckpt::detail::io_hooks hooks = ckpt::detail::system_hooks();
  hooks.pread = [](int, void*, std::size_t, off_t) -> ssize_t {
    errno = EIO;
    return -1;
  };
  const ckpt::detail::io_hooks_guard guard(hooks);
  all_orders out = shaped_all_orders();
  BOOST_CHECK_EXCEPTION(ckpt::read_params(loaded, out), ckpt::io_error,
                        [&](const ckpt::io_error& e) { return e.path() == path && e.code().value() == EIO; });
  BOOST_CHECK_EXCEPTION((void)ckpt::load(path), ckpt::io_error, [&](const ckpt::io_error& e) { return e.path() == path; });
}

BOOST_AUTO_TEST_CASE(save_reports_its_progress_up_to_the_file_size) {
  const temp_dir s;
  // 120 MiB in three entries: more than one 64 MiB report is due.
  const Eigen::VectorXf part = Eigen::VectorXf::Constant(10 << 20, 1.5f);
  const ckpt::checkpoint t = ckpt::concat(
      {ckpt::of_params(part, "a"), ckpt::of_params(part, "b"), ckpt::of_params(part, "c")});
  for (const bool digest : {false, true}) {
    BOOST_TEST_CONTEXT("digest " << digest) {
      std::vector<std::pair<std::uint64_t, std::uint64_t>> reports;
      const fs::path path = s.path() / "p.safetensors";
      ckpt::save(path, t, {.digest = digest, .progress = [&](std::uint64_t written, std::uint64_t total) {
                             reports.emplace_back(written, total);
                           }});
      const std::uint64_t size = fs::file_size(path);
      BOOST_TEST_REQUIRE(reports.size() >= 2u);
      BOOST_TEST(reports.back().first == size);
      std::uint64_t previous = 0;
      for (const auto& [written, total] : reports) {
        BOOST_TEST(total == size);
        BOOST_TEST(written > previous);
        BOOST_TEST(written - previous <= std::uint64_t{64 + 40} << 20, "a report " << written - previous << " bytes after the last");
        previous = written;
      }
    }
  }
  // save of sections, through the reorder of a column-major leaf, too.
  std::vector<std::uint64_t> written_so_far;
  const Eigen::MatrixXd column_major = Eigen::MatrixXd::Constant(300, 200, 2.0);
  ckpt::save(s.path() / "q.safetensors", {{column_major, "w"}}, {},
                    {.progress = [&](std::uint64_t written, std::uint64_t) { written_so_far.push_back(written); }});
  BOOST_TEST_REQUIRE(!written_so_far.empty());
  BOOST_TEST(written_so_far.back() == fs::file_size(s.path() / "q.safetensors"));
}

BOOST_AUTO_TEST_CASE(an_exception_from_the_progress_callback_abandons_the_save) {
  const temp_dir s;
  const fs::path path = s.path() / "c.safetensors";
  ckpt::save(path, ckpt::of_int("v", 1));
  const std::string before = read_bytes(path);
  struct cancelled {};
  BOOST_CHECK_THROW(ckpt::save(path, ckpt::of_int("v", 2), {.progress = [](std::uint64_t, std::uint64_t) {
                                 throw cancelled{};
                               }}),
                    cancelled);
  BOOST_TEST((read_bytes(path) == before));
  BOOST_TEST(folder_listing(s.path()) == std::vector<std::string>{"c.safetensors"});
}

// Issue 35, finding 7: a valid file name of 244 to 255 bytes could not be saved: the temporary's
// name (`.<name>.tmp-XXXXXX`) was 12 bytes longer than a folder takes. It is cut in the
// temporary (at a character's start), never in the target.
BOOST_AUTO_TEST_CASE(a_file_name_as_long_as_a_folder_takes_is_saved) {
  const temp_dir s;
  const std::string ascii(255, 'a');
  // 2-byte characters, so that the cut falls inside one unless it is made at a character's start.
  std::string accents;
  while (accents.size() + 2 <= 254) accents += "\xc3\xa9";  // é
  accents += "x";
  for (const std::string& name : {ascii, accents}) {
    BOOST_TEST_REQUIRE(name.size() == 255u);
    ckpt::save(s.path() / name, ckpt::of_int("v", 7));
    BOOST_TEST(ckpt::to_int("v", ckpt::load(s.path() / name)) == 7);
    ckpt::save(s.path() / name, ckpt::of_int("v", 8));  // replaced, as any file
    BOOST_TEST(ckpt::to_int("v", ckpt::load(s.path() / name)) == 8);
  }
  BOOST_TEST(folder_listing(s.path()) == (std::vector<std::string>{ascii, accents}));
  // One byte more is the file system's refusal, naming the file.
  const std::string too_long(256, 'b');
  BOOST_TEST(ckpt_test::message_of<ckpt::io_error>([&] { ckpt::save(s.path() / too_long, ckpt::of_int("v", 1)); }) ==
             "ckpt: cannot rename a temporary file over '" + (s.path() / too_long).string() + "': File name too long");
  BOOST_TEST(folder_listing(s.path()).size() == 2u);
}

// load_options::only: the entries a pattern matches, wherever the file is (a file, bytes in memory,
// a sharded index, a manager's step), their bytes as a whole load gives them; the digest, which
// covers the whole file, is not checked, so a flipped byte in an entry left out does not stop it.
BOOST_AUTO_TEST_CASE(a_load_of_chosen_entries_holds_them_only) {
  const temp_dir s;
  Eigen::MatrixXf w(3, 5);  // column-major: stored transposed
  for (Eigen::Index i = 0; i < w.size(); ++i) w.data()[i] = static_cast<float>(i) * 0.25f;
  const ckpt::checkpoint t = ckpt::concat({ckpt::of_params(w, "model.w"),
                                           ckpt::of_params(Eigen::VectorXd::LinSpaced(7, -1, 1).eval(), "model.b"),
                                           ckpt::of_params(Eigen::VectorXf::Constant(9, 2.0f).eval(), "optim.mu"),
                                           ckpt::of_int("optim.step", 12)})
                                 .with_metadata({{"note", "hello"}});
  const fs::path path = s.path() / "f.safetensors";
  ckpt::save(path, t, {.digest = true});
  const ckpt::load_options model_only{.only = ckpt::name_pattern(R"(^model\.)")};
  const auto check = [&](const ckpt::checkpoint& got) {
    BOOST_TEST(got.size() == 2u);
    BOOST_TEST((got.get("model.w") == t.get("model.w")));
    BOOST_TEST((got.get("model.b") == t.get("model.b")));
    BOOST_TEST(got.find("optim.mu") == nullptr);
    BOOST_TEST(got.metadata().at("note") == "hello");
  };
  check(ckpt::load(path, model_only));
  std::string bytes = read_bytes(path);
  check(ckpt::parse(std::as_bytes(std::span(bytes)), "mem", model_only));

  // A flipped byte in the last entry (optim.step, in name order): a whole load refuses the file,
  // a load of the model's entries does not read those bytes, nor the digest.
  bytes.back() = static_cast<char>(bytes.back() ^ 1);
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  BOOST_CHECK_THROW(static_cast<void>(ckpt::load(path)), ckpt::integrity_error);
  check(ckpt::load(path, model_only));
  BOOST_TEST(ckpt::load(path, {.only = ckpt::name_pattern("^nothing$")}).size() == 0u);

  // A sharded checkpoint, and a manager's step.
  static_cast<void>(ckpt::save_sharded(s.path() / "sharded", t, 64));
  check(ckpt::load(s.path() / "sharded", model_only));
  ckpt::checkpoint_manager manager(s.path() / "run");
  manager.save(3, {ckpt::section(t)}, {{"note", "hello"}}, true);
  check(manager.load(3, model_only));
  check(*manager.load_latest(model_only));
}

BOOST_AUTO_TEST_SUITE_END()  // test_file
