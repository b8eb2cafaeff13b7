// Faults while saving, through the I/O seam (src/io/io_hooks.hpp): the system calls
// a save issues and their order (the fsyncs that make the rename durable), short and interrupted
// writes, and EIO/ENOSPC injected at every stage: the error names the file and the system error,
// the previous file is intact byte for byte, and no temporary is left behind. Then the managers'
// background saves, written with direct I/O: the same file as a save through the page cache, the
// fallback where direct I/O is refused, and a failed write.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/ckpt.hpp>
#include "io/io_hooks.hpp"  // the build's private seam (src/)

#include <Eigen/Core>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_faults)

namespace {

namespace fs = std::filesystem;

using ckpt_test::folder_listing;
using ckpt_test::message_of;
using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

// What the hooks saw and what they are told to do. Plain globals: the hooks are function
// pointers, and every save in this file runs on the test's own thread.
struct fault_plan {
  std::vector<std::string> events;  // "writev", "pwrite", "fsync file <inode>", "fsync folder <inode>", ...
  int writev_calls = 0;
  int fail_writev_at = 0;  // 1-based call number, 0 = never
  int writev_errno = EIO;
  std::size_t max_write = 16 << 10;  // bytes a writev may take at once: short writes otherwise
  int fail_pwrite = 0, fail_file_fsync = 0, fail_folder_fsync = 0, fail_rename = 0, fail_unlink = 0;  // errno or 0
  int direct_writes = 0;              // writev and pwrite calls done on a descriptor in direct I/O
  bool refuse_direct_writes = false;  // writes in direct I/O fail with EINVAL, as some file systems do
  std::vector<std::thread::id> unlink_threads;  // the thread of each unlink
};
fault_plan plan;

ino_t inode_of_fd(int fd) {
  struct stat info {};
  ::fstat(fd, &info);
  return info.st_ino;
}

ino_t inode_of(const fs::path& path) {
  struct stat info {};
  ::stat(path.c_str(), &info);
  return info.st_ino;
}

bool is_folder(int fd) {
  struct stat info {};
  ::fstat(fd, &info);
  return S_ISDIR(info.st_mode);
}

bool is_direct(int fd) { return (::fcntl(fd, F_GETFL) & O_DIRECT) != 0; }

ssize_t test_writev(int fd, const iovec* pieces, int count) {
  if (++plan.writev_calls == plan.fail_writev_at) {
    errno = plan.writev_errno;
    return -1;
  }
  if (is_direct(fd)) {
    if (plan.refuse_direct_writes) {
      errno = EINVAL;
      return -1;
    }
    ++plan.direct_writes;
  }
  if (plan.events.empty() || plan.events.back() != "writev") plan.events.emplace_back("writev");
  std::vector<iovec> part;
  std::size_t total = 0;
  for (int i = 0; i < count && total < plan.max_write; ++i) {
    const std::size_t n = std::min(pieces[i].iov_len, plan.max_write - total);
    part.push_back({pieces[i].iov_base, n});
    total += n;
  }
  return ::writev(fd, part.data(), static_cast<int>(part.size()));
}

ssize_t test_pwrite(int fd, const void* data, std::size_t size, off_t offset) {
  plan.events.emplace_back("pwrite");
  if (plan.fail_pwrite != 0) {
    errno = plan.fail_pwrite;
    return -1;
  }
  if (is_direct(fd)) ++plan.direct_writes;
  return ::pwrite(fd, data, size, offset);
}

int test_fsync(int fd) {
  const bool folder = is_folder(fd);
  plan.events.push_back((folder ? "fsync folder " : "fsync file ") + std::to_string(inode_of_fd(fd)));
  if (const int code = folder ? plan.fail_folder_fsync : plan.fail_file_fsync; code != 0) {
    errno = code;
    return -1;
  }
  return ::fsync(fd);
}

// Names relative to the folders the library holds: the events show the names.
int test_rename(int from_folder, const char* from, int to_folder, const char* to) {
  plan.events.push_back(std::string("rename ") + from + " " + to);
  if (plan.fail_rename != 0) {
    errno = plan.fail_rename;
    return -1;
  }
  return ::renameat(from_folder, from, to_folder, to);
}

int test_unlink(int folder, const char* name, int flags) {
  plan.events.push_back(std::string("unlink ") + name);
  plan.unlink_threads.push_back(std::this_thread::get_id());
  if (plan.fail_unlink != 0) {
    errno = plan.fail_unlink;
    return -1;
  }
  return ::unlinkat(folder, name, flags);
}

// Installs the test hooks with a fresh plan for one test case.
struct hooked {
  hooked() : guard({.writev = test_writev, .pwrite = test_pwrite, .fsync = test_fsync, .renameat = test_rename,
                    .unlinkat = test_unlink, .pread = ::pread, .setpriority = ::setpriority}) {
    plan = {};
  }
  ckpt::detail::io_hooks_guard guard;
};

// About 0.85 MiB over several entries, so that a save takes many (16 KiB) writes.
struct state {
  Eigen::MatrixXf w;  // column-major: reordered through the writer's buffer
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r;  // written in place
  Eigen::VectorXd b;
};

state make_state(float seed) {
  state s{Eigen::MatrixXf(300, 500), decltype(state::r)(200, 300), Eigen::VectorXd(1000)};
  for (Eigen::Index i = 0; i < s.w.size(); ++i) s.w.data()[i] = seed + static_cast<float>(i % 1013);
  for (Eigen::Index i = 0; i < s.r.size(); ++i) s.r.data()[i] = seed - static_cast<float>(i % 511);
  for (Eigen::Index i = 0; i < s.b.size(); ++i) s.b[i] = seed * 0.5 + static_cast<double>(i);
  return s;
}

ckpt::checkpoint as_checkpoint(const state& s) { return ckpt::of_params(s, "m"); }

// The folder holds exactly `names` (no temporary).
void require_listing(const fs::path& folder, std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  BOOST_TEST(folder_listing(folder) == names);
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(seam, hooked)

BOOST_AUTO_TEST_CASE(a_save_fsyncs_the_file_then_renames_then_fsyncs_the_folder) {
  const temp_dir s;
  const fs::path path = s.path() / "c.safetensors";
  for (const bool digest : {false, true}) {
    plan = {};
    ckpt::save(path, as_checkpoint(make_state(1)), {.digest = digest});
    const std::string file = "fsync file " + std::to_string(inode_of(path));
    const std::string folder = "fsync folder " + std::to_string(inode_of(s.path()));
    BOOST_REQUIRE(plan.events.size() == (digest ? 5u : 4u));
    std::vector<std::string> expected{"writev"};
    if (digest) expected.emplace_back("pwrite");  // the digest patched into the header
    // The inode fsynced is the one the name now points at: the data were durable before the rename.
    expected.push_back(file);
    BOOST_TEST(plan.events[expected.size()].starts_with("rename .c.safetensors.tmp-"));
    BOOST_TEST(plan.events[expected.size()].ends_with(" c.safetensors"));
    expected.push_back(plan.events[expected.size()]);
    expected.push_back(folder);
    BOOST_TEST(plan.events == expected);
    BOOST_TEST(plan.writev_calls >= static_cast<int>(fs::file_size(path) / plan.max_write));  // 16 KiB at a time
  }
}

BOOST_AUTO_TEST_CASE(the_manager_deletes_old_checkpoints_only_after_the_new_one_is_durable) {
  const temp_dir s;
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 1});
  m.save(1, {as_checkpoint(make_state(1))});
  plan.events.clear();
  m.save(2, {as_checkpoint(make_state(2))});
  const fs::path second = m.path_of(2);
  BOOST_REQUIRE(plan.events.size() == 6u);
  BOOST_TEST(plan.events[0] == "writev");
  BOOST_TEST(plan.events[1] == "pwrite");  // the manager writes digests by default
  BOOST_TEST(plan.events[2] == "fsync file " + std::to_string(inode_of(second)));
  BOOST_TEST(plan.events[3].ends_with(" " + second.filename().string()));
  BOOST_TEST(plan.events[4] == "fsync folder " + std::to_string(inode_of(s.path())));
  BOOST_TEST(plan.events[5] == "unlink " + m.path_of(1).filename().string());
  require_listing(s.path(), {".ckpt-manager.lock", "ckpt-0000000002.safetensors"});
}

BOOST_AUTO_TEST_CASE(a_background_save_deletes_the_steps_it_drops_on_its_own_thread_once_it_is_durable) {
  const temp_dir s;
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 1});
  m.save(1, {as_checkpoint(make_state(1))});
  plan = {};
  const state live = make_state(2);
  BOOST_TEST(m.save_async(2, {{live, "m"}}));
  m.wait();
  const std::string folder = "fsync folder " + std::to_string(inode_of(s.path()));
  const std::string unlink = "unlink " + m.path_of(1).filename().string();
  // The unlink comes after the new step's folder fsync, from the background thread; the commit's
  // retention then finds nothing left to delete.
  const auto synced = std::find(plan.events.begin(), plan.events.end(), folder);
  BOOST_REQUIRE((synced != plan.events.end()));
  BOOST_TEST((std::find(plan.events.begin(), synced, unlink) == synced));
  BOOST_TEST(std::count(synced, plan.events.end(), unlink) == 1);
  BOOST_REQUIRE(plan.unlink_threads.size() == 1u);
  BOOST_TEST((plan.unlink_threads[0] != std::this_thread::get_id()));
  require_listing(s.path(), {".ckpt-manager.lock", "ckpt-0000000002.safetensors"});
  BOOST_TEST(m.steps() == (std::vector<std::int64_t>{2}));
}

BOOST_AUTO_TEST_CASE(a_retention_a_crash_interrupted_is_finished_when_the_folder_opens) {
  // A writer killed between its rename and its deletions leaves max_to_keep + 1 checkpoints; the
  // next manager finishes the retention when it opens the folder, before anything is written
  // (repeated crashes would pile them up), as the MPI manager does.
  const temp_dir s;
  {
    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
    for (std::int64_t step = 1; step <= 3; ++step) m.save(step, {as_checkpoint(make_state(1))});
  }
  plan = {};
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 2});
  BOOST_TEST(plan.events == (std::vector<std::string>{"unlink " + m.path_of(1).filename().string()}));
  BOOST_TEST(m.steps() == (std::vector<std::int64_t>{2, 3}));
  plan = {};
  m.save(4, {as_checkpoint(make_state(4))});
  BOOST_REQUIRE(plan.events.size() >= 2u);
  BOOST_TEST(plan.events.front() == "writev");
  BOOST_TEST(plan.events.back() == "unlink " + m.path_of(2).filename().string());
  BOOST_TEST(m.steps() == (std::vector<std::int64_t>{3, 4}));
}

BOOST_AUTO_TEST_CASE(short_and_interrupted_writes_still_write_the_whole_file) {
  const temp_dir s;
  const state x = make_state(3);
  {
    const ckpt::detail::io_hooks_guard plain(ckpt::detail::system_hooks());
    ckpt::save(s.path() / "reference.safetensors", {{x, "m"}}, {}, {.digest = true});
  }
  plan.max_write = 4093;  // odd-sized pieces: every write ends inside an iovec
  ckpt::save(s.path() / "short.safetensors", {{x, "m"}}, {}, {.digest = true});
  BOOST_TEST(plan.writev_calls >= static_cast<int>(fs::file_size(s.path() / "short.safetensors") / plan.max_write));
  BOOST_TEST((read_bytes(s.path() / "short.safetensors") == read_bytes(s.path() / "reference.safetensors")));
  // EINTR is retried, wherever it falls.
  for (const int at : {1, 2, 100}) {
    plan = {};
    plan.fail_writev_at = at;
    plan.writev_errno = EINTR;
    ckpt::save(s.path() / "eintr.safetensors", {{x, "m"}}, {}, {.digest = true});
    BOOST_TEST((read_bytes(s.path() / "eintr.safetensors") == read_bytes(s.path() / "reference.safetensors")));
  }
}

BOOST_AUTO_TEST_CASE(a_write_failing_at_any_point_keeps_the_old_file) {
  const temp_dir s;
  const fs::path path = s.path() / "c.safetensors";
  const state next = make_state(5);
  ckpt::save(path, as_checkpoint(make_state(4)));
  const std::string before = read_bytes(path);
  // How many writes a whole save takes, to fail the first, the second, one in the middle, the last.
  plan = {};
  ckpt::save(s.path() / "count.safetensors", {{next, "m"}}, {}, {.digest = true});
  const int calls = plan.writev_calls;
  fs::remove(s.path() / "count.safetensors");
  BOOST_REQUIRE(calls > 20);
  for (const int at : {1, 2, calls / 2, calls}) {
    for (const auto& [code, text] : {std::pair{EIO, "Input/output error"}, std::pair{ENOSPC, "No space left on device"}}) {
      BOOST_TEST_CONTEXT("write " << at << " of " << calls << " fails with " << text) {
        plan = {};
        plan.fail_writev_at = at;
        plan.writev_errno = code;
        BOOST_TEST(message_of<ckpt::io_error>([&] {
                     ckpt::save(path, {{next, "m"}}, {}, {.digest = true});
                   }) == "ckpt: cannot write '" + path.string() + "': " + text);
        BOOST_TEST(plan.writev_calls == at);  // nothing more was attempted
        BOOST_TEST((read_bytes(path) == before));
        require_listing(s.path(), {"c.safetensors"});
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_failing_digest_patch_fsync_or_rename_keeps_the_old_file) {
  const temp_dir s;
  const fs::path path = s.path() / "c.safetensors";
  ckpt::save(path, as_checkpoint(make_state(6)));
  const std::string before = read_bytes(path);
  const ckpt::checkpoint next = as_checkpoint(make_state(7));
  const auto attempt = [&](int fault_plan::*stage, int code) {
    plan = {};
    plan.*stage = code;
    return message_of<ckpt::io_error>([&] { ckpt::save(path, next, {.digest = true}); });
  };
  BOOST_TEST(attempt(&fault_plan::fail_pwrite, ENOSPC) == "ckpt: cannot write '" + path.string() + "': No space left on device");
  BOOST_TEST((read_bytes(path) == before));
  require_listing(s.path(), {"c.safetensors"});
  BOOST_TEST(attempt(&fault_plan::fail_file_fsync, EIO) == "ckpt: cannot fsync '" + path.string() + "': Input/output error");
  BOOST_TEST(plan.events.back().starts_with("fsync file "));  // no rename after a failed fsync
  BOOST_TEST((read_bytes(path) == before));
  require_listing(s.path(), {"c.safetensors"});
  BOOST_TEST(attempt(&fault_plan::fail_rename, EIO) ==
             "ckpt: cannot rename a temporary file over '" + path.string() + "': Input/output error");
  BOOST_TEST((read_bytes(path) == before));
  require_listing(s.path(), {"c.safetensors"});
}

BOOST_AUTO_TEST_CASE(a_failing_folder_fsync_is_reported_with_the_new_file_in_place) {
  // The rename happened, so the new file is there (and not a temporary); but its durability was
  // not confirmed, which the caller must hear about.
  const temp_dir s;
  const fs::path path = s.path() / "c.safetensors";
  ckpt::save(path, as_checkpoint(make_state(8)));
  plan = {};
  plan.fail_folder_fsync = EIO;
  BOOST_TEST(message_of<ckpt::io_error>([&] { ckpt::save(path, as_checkpoint(make_state(9)), {.digest = true}); }) ==
             "ckpt: cannot fsync folder '" + s.path().string() + "': Input/output error");
  BOOST_TEST((ckpt::to_params(ckpt::load(path), make_state(0), {.prefix = "m"}).b == make_state(9).b));
  require_listing(s.path(), {"c.safetensors"});
}

BOOST_AUTO_TEST_CASE(a_manager_save_that_fails_keeps_every_checkpoint) {
  const temp_dir s;
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 2});
  m.save(1, {as_checkpoint(make_state(1))});
  m.save(2, {as_checkpoint(make_state(2))});
  const std::string one = read_bytes(m.path_of(1)), two = read_bytes(m.path_of(2));
  plan = {};
  plan.fail_writev_at = 3;
  plan.writev_errno = ENOSPC;
  BOOST_TEST(message_of<ckpt::io_error>([&] { m.save(3, {as_checkpoint(make_state(3))}); }) ==
             "ckpt: cannot write '" + m.path_of(3).string() + "': No space left on device");
  BOOST_TEST(m.steps() == (std::vector<std::int64_t>{1, 2}));
  BOOST_TEST((read_bytes(m.path_of(1)) == one));
  BOOST_TEST((read_bytes(m.path_of(2)) == two));
  require_listing(s.path(), {".ckpt-manager.lock", "ckpt-0000000001.safetensors", "ckpt-0000000002.safetensors"});
  // The same in the background: the error surfaces at wait().
  plan = {};
  plan.fail_file_fsync = EIO;
  m.save_async(3, {as_checkpoint(make_state(3))});
  BOOST_TEST(message_of<ckpt::io_error>([&] { m.wait(); }) ==
             "ckpt: cannot fsync '" + m.path_of(3).string() + "': Input/output error");
  BOOST_TEST(m.steps() == (std::vector<std::int64_t>{1, 2}));
  require_listing(s.path(), {".ckpt-manager.lock", "ckpt-0000000001.safetensors", "ckpt-0000000002.safetensors"});
  // A deletion that fails does not fail the save: the new checkpoint is in place, the old one
  // still listed, and status() says why it is still there.
  plan = {};
  plan.fail_unlink = EIO;
  BOOST_TEST(m.save(3, {as_checkpoint(make_state(3))}));
  BOOST_TEST(m.steps() == (std::vector<std::int64_t>{1, 2, 3}));
  const std::vector<ckpt::checkpoint_manager::step_status> status = m.status();
  BOOST_REQUIRE(status.size() == 3u);
  BOOST_TEST((status[0].state == ckpt::checkpoint_manager::step_state::undeletable));
  BOOST_TEST(status[0].reason == "the retention rules drop it, but it could not be deleted: ckpt: cannot remove '" +
                                     m.path_of(1).string() + "': Input/output error");
  BOOST_TEST((status[2].state == ckpt::checkpoint_manager::step_state::unchecked));
  plan = {};
  m.save(4, {as_checkpoint(make_state(4))});  // and the next save's retention catches up
  BOOST_TEST(m.steps() == (std::vector<std::int64_t>{3, 4}));
  BOOST_TEST((ckpt::to_params(*m.load_latest(), make_state(0), {.prefix = "m"}).w == make_state(4).w));
}

BOOST_AUTO_TEST_SUITE_END()

// The managers' background saves, written with direct I/O.
namespace {

// A private folder under the working directory (ctest's: the build tree), which is more likely
// than the temporary folder (often tmpfs) to be on a file system that takes direct I/O.
class local_dir {
 public:
  local_dir() {
    std::string pattern = (fs::current_path() / "ckpt-direct-XXXXXX").string();
    BOOST_REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  local_dir(const local_dir&) = delete;
  local_dir& operator=(const local_dir&) = delete;
  ~local_dir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  [[nodiscard]] const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Whether the file system of `folder` takes O_DIRECT.
bool takes_direct_io(const fs::path& folder) {
  const fs::path probe = folder / "probe";
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_DIRECT, 0600);
  if (fd >= 0) ::close(fd);
  fs::remove(probe);
  return fd >= 0;
}

// Bytes of odd sizes (none a multiple of 4096), a column-major matrix among them (reordered
// through the writer's bands), `size` scaling them.
struct odd_state {
  Eigen::MatrixXf w;                                                         // column-major
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r;  // written in place
  Eigen::Matrix<std::int16_t, Eigen::Dynamic, 1> v;
};

odd_state make_odd_state(Eigen::Index size, int seed) {
  odd_state s{Eigen::MatrixXf(size + 3, 2 * size + 1), decltype(odd_state::r)(size + 1, size / 2 + 5),
              Eigen::Matrix<std::int16_t, Eigen::Dynamic, 1>(size * 3 + 7)};
  for (Eigen::Index i = 0; i < s.w.size(); ++i) s.w.data()[i] = static_cast<float>(seed) + static_cast<float>(i) * 0.25f;
  for (Eigen::Index i = 0; i < s.r.size(); ++i) s.r.data()[i] = seed - static_cast<double>(i) / 3;
  for (Eigen::Index i = 0; i < s.v.size(); ++i) s.v[i] = static_cast<std::int16_t>((i * 7 + seed) % 30011);
  return s;
}

// Checkpoints of every size class: the header alone, one entry of 5 bytes, a few KiB, several MiB.
std::vector<std::pair<std::string, ckpt::checkpoint>> checkpoints_of_odd_sizes() {
  std::vector<std::pair<std::string, ckpt::checkpoint>> out;
  out.emplace_back("header only", ckpt::checkpoint());
  const std::array<std::uint8_t, 5> five{1, 2, 3, 4, 5};
  out.emplace_back("5 bytes", ckpt::of_tensor("five", ckpt::tensor::copy_of(ckpt::dtype::u8, {5}, std::as_bytes(std::span(five)))));
  out.emplace_back("KiB", ckpt::of_params(make_odd_state(17, 1), "m"));
  out.emplace_back("MiB", ckpt::of_params(make_odd_state(1111, 2), "m"));  // about 11.5 MiB: two staging buffers and more
  return out;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(direct_io, hooked)

BOOST_AUTO_TEST_CASE(a_background_save_writes_with_direct_io_the_file_a_save_through_the_cache_writes) {
  const local_dir s;
  const bool direct = takes_direct_io(s.path());
  if (!direct) BOOST_TEST_MESSAGE("the file system of " << s.path() << " refuses O_DIRECT: only the fallback is tested");
  ckpt::checkpoint_manager m(s.path() / "run", {.max_to_keep = 0});
  std::int64_t step = 0;
  for (const auto& [what, t] : checkpoints_of_odd_sizes()) {
    BOOST_TEST_CONTEXT(what) {
      plan = {};
      m.save_async(++step, {t});
      m.wait();
      if (direct) BOOST_TEST(plan.direct_writes >= 2);  // the data, then the patched digest block
      const fs::path saved = m.path_of(step);
      const std::string bytes = read_bytes(saved);
      BOOST_TEST(bytes.size() % 4096 != 0);  // cut to its size, not left padded
      // Read back bit-exact, the digest verified.
      const ckpt::checkpoint loaded = ckpt::load(saved, {.verify_digest = true});
      BOOST_TEST(loaded.metadata().contains("ckpt.xxh3_64_file"));
      BOOST_TEST(loaded.size() == t.size());
      for (const std::string& name : t.names()) {
        BOOST_TEST_CONTEXT(name) {
          BOOST_REQUIRE(loaded.contains(name));
          BOOST_TEST((loaded.get(name) == t.get(name)));  // dtype, shape and bytes
        }
      }
      // The same checkpoint (its metadata the step's) saved through the page cache: the same
      // bytes, digest included.
      plan = {};
      ckpt::save(s.path() / "cached.safetensors", loaded, {.digest = true});
      BOOST_TEST(plan.direct_writes == 0);
      BOOST_TEST((read_bytes(s.path() / "cached.safetensors") == bytes));
    }
  }
}

BOOST_AUTO_TEST_CASE(where_direct_io_is_refused_a_background_save_goes_through_the_page_cache) {
  const local_dir s;
  const ckpt::checkpoint t = ckpt::of_params(make_odd_state(1111, 3), "m");
  ckpt::checkpoint_manager m(s.path() / "run");
  // Refused when asked for (tmpfs, say), then refused at the first write (a file system that
  // takes the flag but not the writes).
  std::int64_t step = 0;
  for (const bool at_write : {false, true}) {
    BOOST_TEST_CONTEXT((at_write ? "refused at the first write" : "refused when asked for")) {
      plan = {};
      plan.refuse_direct_writes = at_write;
      ckpt::detail::io_hooks refusing = ckpt::detail::hooks();
      refusing.refuse_direct = !at_write;
      {
        const ckpt::detail::io_hooks_guard refused(refusing);
        m.save_async(++step, {t});
        m.wait();
      }
      BOOST_TEST(plan.direct_writes == 0);
      const ckpt::checkpoint loaded = ckpt::load(m.path_of(step), {.verify_digest = true});
      ckpt::save(s.path() / "cached.safetensors", loaded, {.digest = true});
      BOOST_TEST((read_bytes(s.path() / "cached.safetensors") == read_bytes(m.path_of(step))));
      BOOST_TEST((loaded.get("m.w") == t.get("m.w")));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_direct_write_that_fails_leaves_no_file_and_surfaces_at_wait) {
  const local_dir s;
  const bool direct = takes_direct_io(s.path());
  ckpt::checkpoint_manager m(s.path() / "run");
  m.save(1, {ckpt::of_params(make_odd_state(20, 1), "m")});
  const std::string one = read_bytes(m.path_of(1));
  const ckpt::checkpoint t = ckpt::of_params(make_odd_state(1111, 4), "m");
  // The second data write, then the patch of the digest's block (the last write).
  for (const bool patch : {false, true}) {
    BOOST_TEST_CONTEXT((patch ? "the digest's block" : "a data write")) {
      plan = {};
      if (patch) plan.fail_pwrite = ENOSPC;
      else plan.fail_writev_at = 2;
      m.save_async(2, {t});
      BOOST_TEST(message_of<ckpt::io_error>([&] { m.wait(); }) ==
                 "ckpt: cannot write '" + m.path_of(2).string() + "': " +
                     (patch ? "No space left on device" : "Input/output error"));
      if (direct && !patch) BOOST_TEST(plan.direct_writes == 1);
      if (!patch) BOOST_TEST(plan.writev_calls == 2);  // nothing more was attempted
      BOOST_TEST(m.steps() == (std::vector<std::int64_t>{1}));
      BOOST_TEST((read_bytes(m.path_of(1)) == one));
      require_listing(s.path() / "run", {".ckpt-manager.lock", "ckpt-0000000001.safetensors"});
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_faults
