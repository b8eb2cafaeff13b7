// Crash safety: a child process saves checkpoints of several MiB through a checkpoint_manager in
// a loop and is SIGKILLed at random moments, again and again. After every kill: the latest
// checkpoint loads and its digest verifies, every checkpoint listed is complete (its contents
// are those of its step), never does the latest step go back, the folder holds nothing but
// checkpoints, the lock file and temporaries of the interrupted save, and a new manager removes
// those temporaries.
//
// Where each kill landed (inside a write, an fsync, the rename, a deletion...) is recorded by
// the child through the I/O seam in a page shared with the parent, and reported.
//
// CKPT_CRASH_KILLS=<n> changes the number of kills (default 100), for long campaigns outside CI.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/ckpt.hpp>
#include "io/io_hooks.hpp"  // the build's private seam (src/)

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_crash)

namespace {

namespace fs = std::filesystem;

using ckpt_test::temp_dir;

#if defined(__SANITIZE_ADDRESS__)
#define CKPT_CRASH_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CKPT_CRASH_ASAN 1
#endif
#endif

// Entries of 1 MiB: a checkpoint of 4 of them (1 under ASan, whose memory checks slow the fill).
constexpr std::size_t entry_values = std::size_t{1} << 18;
#ifdef CKPT_CRASH_ASAN
constexpr int entries_per_checkpoint = 1;
#else
constexpr int entries_per_checkpoint = 4;
#endif
constexpr std::size_t max_to_keep = 3;

// What the child is doing, as the I/O seam sees it.
enum phase : int { starting, computing, writing, patching, fsync_file, renaming, renamed, fsync_folder, deleting, phases };
constexpr std::array<const char*, phases> phase_names{
    "manager_open", "other(fill,hash,header)", "writev", "digest_pwrite", "fsync_file",
    "rename",       "after_rename",            "fsync_folder", "unlink_old"};

// Shared with the child (MAP_SHARED before fork): the phase it is in, and whether it is ready.
struct shared_state {
  std::atomic<int> phase;
  std::atomic<std::int64_t> saves;
};
shared_state* shared = nullptr;

// The seam in the child: mark the phase, then make the real call.
struct phase_scope {
  explicit phase_scope(phase p) { shared->phase.store(p); }
  ~phase_scope() { shared->phase.store(computing); }
  phase_scope(const phase_scope&) = delete;
  phase_scope& operator=(const phase_scope&) = delete;
};
ssize_t marked_writev(int fd, const iovec* pieces, int count) {
  const phase_scope p(writing);
  return ::writev(fd, pieces, count);
}
ssize_t marked_pwrite(int fd, const void* data, std::size_t size, off_t offset) {
  const phase_scope p(patching);
  return ::pwrite(fd, data, size, offset);
}
int marked_fsync(int fd) {
  // The file's fsync comes before the rename, the folder's after it.
  const phase_scope p(shared->phase.load() == renamed ? fsync_folder : fsync_file);
  return ::fsync(fd);
}
int marked_rename(int from_folder, const char* from, int to_folder, const char* to) {
  shared->phase.store(renaming);
  const int result = ::renameat(from_folder, from, to_folder, to);
  shared->phase.store(renamed);  // until the folder's fsync is done
  return result;
}
int marked_unlink(int folder, const char* name, int flags) {
  const phase_scope p(deleting);
  return ::unlinkat(folder, name, flags);
}

// The value of element `i` of entry `e` of `step`'s checkpoint: every element tells its step.
std::uint32_t expected_value(std::int64_t step, int e, std::size_t i) {
  return static_cast<std::uint32_t>(step) * 2654435761u + static_cast<std::uint32_t>(e) * 40503u +
         static_cast<std::uint32_t>(i);
}

ckpt::checkpoint checkpoint_of(std::int64_t step) {
  std::vector<ckpt::checkpoint> parts;
  for (int e = 0; e < entries_per_checkpoint; ++e) {
    std::vector<std::uint32_t> values(entry_values);
    for (std::size_t i = 0; i < entry_values; ++i) values[i] = expected_value(step, e, i);
    parts.push_back(ckpt::of_tensor(
        "e" + std::to_string(e),
        ckpt::tensor::copy_of(ckpt::dtype::u32, {static_cast<std::int64_t>(entry_values)}, std::as_bytes(std::span(values)))));
  }
  return ckpt::concat(parts);
}

// The child: saves step after step until it is killed. Never returns.
[[noreturn]] void run_writer(const fs::path& folder, bool background) {
  int code = 0;
  try {
    ckpt::detail::hooks() = {.writev = marked_writev, .pwrite = marked_pwrite, .fsync = marked_fsync,
                             .renameat = marked_rename, .unlinkat = marked_unlink, .pread = ::pread,
                             .setpriority = ::setpriority};
    ckpt::checkpoint_manager manager(folder, {.max_to_keep = max_to_keep});
    std::int64_t step = manager.latest_step().value_or(0);
    shared->phase.store(computing);
    for (;;) {
      ++step;
      const ckpt::checkpoint t = checkpoint_of(step);
      if (background) manager.save_async(step, {t});
      else manager.save(step, {t});
      shared->saves.fetch_add(1);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash writer: %s\n", e.what());
    code = 3;
  }
  ::_exit(code);
}

// Checks one checkpoint file completely: loads it (verifying the digest, which must be there),
// and compares its step metadata and every element with what that step saved.
void check_checkpoint(const fs::path& path, std::int64_t step) {
  const ckpt::checkpoint t = ckpt::load(path);
  BOOST_TEST_REQUIRE(t.metadata().contains("ckpt.xxh3_64_file"));
  BOOST_TEST_REQUIRE(t.metadata().at("step") == std::to_string(step));
  BOOST_TEST_REQUIRE(t.size() == static_cast<std::size_t>(entries_per_checkpoint));
  for (int e = 0; e < entries_per_checkpoint; ++e) {
    const auto values = t.get("e" + std::to_string(e)).as<std::uint32_t>();
    BOOST_TEST_REQUIRE(values.size() == entry_values);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < entry_values; ++i) wrong += values[i] != expected_value(step, e, i) ? 1 : 0;
    BOOST_TEST_REQUIRE(wrong == 0u, path << ": entry e" << e << " has " << wrong << " wrong elements");
  }
}

int kills_wanted() {
  const char* text = std::getenv("CKPT_CRASH_KILLS");
  return text != nullptr ? std::max(1, std::atoi(text)) : 100;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sigkill_at_random_moments_never_loses_the_latest_checkpoint) {
  const temp_dir s;
  const fs::path folder = s.path() / "run";
  void* page = ::mmap(nullptr, sizeof(shared_state), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  BOOST_REQUIRE(page != MAP_FAILED);
  shared = new (page) shared_state{};

  fs::create_directories(folder);  // the first kill may come before the writer creates it
  const int kills = kills_wanted();
  std::mt19937_64 random(std::random_device{}());
  std::array<int, phases> landed{};
  std::int64_t latest = 0, leftovers_seen = 0, extra_kept = 0;
  // How long a save takes, measured as the campaign goes: the kill delays span a few saves.
  double save_seconds = 0.02;
  const auto start = std::chrono::steady_clock::now();

  for (int round = 0; round < kills; ++round) {
    BOOST_TEST_CONTEXT("kill " << round + 1 << " of " << kills) {
      shared->phase.store(starting);
      shared->saves.store(0);
      const bool background = round % 2 == 1;
      const pid_t child = ::fork();
      BOOST_REQUIRE(child >= 0);
      if (child == 0) run_writer(folder, background);

      // Wait for the child to get going, then a random moment within its next few saves; one
      // kill in ten lands at once, while the manager opens and removes the last leftovers.
      const auto forked = std::chrono::steady_clock::now();
      double waited = 0;
      if (round % 10 != 0) {
        while (shared->phase.load() == starting) {
          int status = 0;
          BOOST_REQUIRE_MESSAGE(::waitpid(child, &status, WNOHANG) == 0, "the writer exited early");
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        std::uniform_real_distribution<double> delay(0, 3 * save_seconds);
        waited = delay(random);
        std::this_thread::sleep_for(std::chrono::duration<double>(waited));
      }
      const int at = shared->phase.load();
      ::kill(child, SIGKILL);
      int status = 0;
      BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
      BOOST_REQUIRE_MESSAGE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the writer died on its own");
      ++landed[static_cast<std::size_t>(at)];
      if (const std::int64_t saves = shared->saves.load(); saves > 0) {
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - forked).count();
        save_seconds = 0.5 * save_seconds + 0.5 * seconds / static_cast<double>(saves);
      } else if (waited > save_seconds) {
        // No save finished in longer than a save should take: on a busy machine saves are slower
        // than measured so far, so the delays grow until saves finish again (else no step lands).
        save_seconds = std::min(2 * save_seconds, 2.0);
      }

      // What the folder holds: checkpoints, the lock file and temporaries of ours, nothing else.
      std::map<std::int64_t, fs::path> listed;
      std::vector<std::string> temporaries;
      for (const auto& entry : fs::directory_iterator(folder)) {
        const std::string name = entry.path().filename().string();
        if (name == ".ckpt-manager.lock") continue;
        if (name.starts_with("ckpt-") && name.ends_with(".safetensors") && name.size() == 27) {
          listed.emplace(std::stoll(name.substr(5, 10)), entry.path());
        } else {
          BOOST_TEST_REQUIRE((name.starts_with(".ckpt-") && name.find(".safetensors.tmp-") == 16 && name.size() == 39),
                             "unexpected file " << name);
          temporaries.push_back(name);
        }
      }
      leftovers_seen += static_cast<std::int64_t>(temporaries.size());
      BOOST_TEST_REQUIRE(temporaries.size() <= 1u);  // at most the one save interrupted
      // One more than max_to_keep if the kill fell between the rename and the deletion.
      BOOST_TEST_REQUIRE(listed.size() <= max_to_keep + 1);
      extra_kept += listed.size() > max_to_keep ? 1 : 0;
      if (latest > 0) BOOST_TEST_REQUIRE(!listed.empty());
      for (const auto& [step, path] : listed) check_checkpoint(path, step);
      const std::int64_t now = listed.empty() ? 0 : listed.rbegin()->first;
      BOOST_TEST_REQUIRE(now >= latest, "the latest step went back from " << latest << " to " << now);
      latest = now;

      // A new manager sees these checkpoints (the newest max_to_keep: opening finishes the
      // retention a kill interrupted), removes the temporaries, and loads the latest.
      {
        ckpt::checkpoint_manager manager(folder, {.max_to_keep = max_to_keep});
        std::vector<std::int64_t> steps;
        for (const auto& [step, path] : listed) steps.push_back(step);
        if (steps.size() > max_to_keep) steps.erase(steps.begin(), steps.end() - static_cast<std::ptrdiff_t>(max_to_keep));
        BOOST_TEST_REQUIRE(manager.steps() == steps);
        for (const std::string& name : temporaries) BOOST_TEST_REQUIRE(!fs::exists(folder / name));
        if (latest > 0) BOOST_TEST_REQUIRE(manager.load_latest()->metadata().at("step") == std::to_string(latest));
      }
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string histogram;
  for (std::size_t p = 0; p < phases; ++p) histogram += std::string(" ") + phase_names[p] + "=" + std::to_string(landed[p]);
  BOOST_TEST_MESSAGE("crash campaign: " << kills << " kills in " << seconds << " s, " << entries_per_checkpoint
                                        << " MiB checkpoints, reached step " << latest << ", " << leftovers_seen
                                        << " temporaries left and cleaned, " << extra_kept
                                        << " times one checkpoint over max_to_keep; kills landed in:" << histogram);
  // The delays must land kills inside saves, before their rename, not only between them.
  BOOST_TEST(leftovers_seen > 0);
  BOOST_TEST(latest > 0);
  ::munmap(page, sizeof(shared_state));
}

BOOST_AUTO_TEST_SUITE_END()  // test_crash
