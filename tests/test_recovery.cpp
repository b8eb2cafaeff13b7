// Recovery: a damaged step never blocks a resume. Each kind of damage to a manager's folder, the
// states status() reports, keep-best with an unreadable header, read-only managers, and a
// corruption campaign (random faults, then resume) whose counts tests/RELIABILITY.md reports.
// CKPT_RECOVERY_ROUNDS=N runs N rounds of the campaign instead of the default.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/params.hpp>

#include <Eigen/Core>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>

BOOST_AUTO_TEST_SUITE(test_recovery)

namespace fs = std::filesystem;

namespace {

using ckpt_test::folder_listing;
using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

struct model {
  Eigen::MatrixXf w;
  Eigen::VectorXd b;
  std::int64_t count = 0;
};

// The model saved at `step`: every value depends on the step, so a wrong step cannot pass.
model model_at(std::int64_t step, Eigen::Index rows = 24) {
  model m{Eigen::MatrixXf(rows, 16), Eigen::VectorXd(16), step};
  for (Eigen::Index i = 0; i < m.w.size(); ++i) m.w.data()[i] = static_cast<float>(step * 1000 + i);
  for (Eigen::Index i = 0; i < m.b.size(); ++i) m.b(i) = static_cast<double>(step) / 7.0 + static_cast<double>(i);
  return m;
}

bool same(const model& a, const model& b) { return a.w == b.w && a.b == b.b && a.count == b.count; }

model restored(const ckpt::checkpoint& t) { return ckpt::to_params(t, model_at(0), {.prefix = "model"}); }

void save_steps(const fs::path& folder, std::initializer_list<std::int64_t> steps,
                ckpt::checkpoint_manager::options options = {.max_to_keep = 0}) {
  ckpt::checkpoint_manager m(folder, options);
  for (const std::int64_t step : steps) {
    const model x = model_at(step);
    m.save(step, {{x, "model"}}, {{"loss", std::to_string(100 - step)}});
  }
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  BOOST_TEST_REQUIRE(out.good());
}

void flip(const fs::path& path, std::size_t at) {
  std::string bytes = read_bytes(path);
  bytes.at(at) = static_cast<char>(bytes[at] ^ 0x10);
  write_bytes(path, bytes);
}

std::size_t header_end(const fs::path& path) {
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  return 8 + static_cast<std::size_t>(n);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_damaged_newest_step_is_set_aside_and_its_number_saved_again) {
  const temp_dir s;
  save_steps(s.path(), {80, 90, 100});
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
  const fs::path newest = m.path_of(100);
  flip(newest, header_end(newest) + 5);  // a byte of the data
  const std::string damaged_bytes = read_bytes(newest);

  const ckpt::checkpoint_manager::latest latest = m.load_latest();
  BOOST_TEST_REQUIRE(latest.has_value());
  BOOST_TEST(latest.step == 90);
  BOOST_TEST(same(restored(*latest), model_at(90)));
  BOOST_TEST_REQUIRE(latest.skipped.size() == 1u);
  BOOST_TEST(latest.skipped[0].step == 100);
  BOOST_TEST((latest.skipped[0].state == ckpt::checkpoint_manager::step_state::damaged));
  BOOST_TEST(latest.skipped[0].path == fs::path(newest.string() + ".damaged"));
  BOOST_TEST(latest.skipped[0].reason.find("is corrupted") != std::string::npos);
  BOOST_TEST(read_bytes(latest.skipped[0].path) == damaged_bytes);  // moved, not changed
  BOOST_TEST(m.steps() == (std::vector<std::int64_t>{80, 90}));

  // The run goes on: step 100 is saved again.
  const model x = model_at(100);
  BOOST_TEST(m.save(100, {{x, "model"}}));
  BOOST_TEST(same(restored(m.load(100)), model_at(100)));
  const std::vector<ckpt::checkpoint_manager::step_status> status = m.status();
  BOOST_TEST_REQUIRE(status.size() == 4u);
  BOOST_TEST((status[0].state == ckpt::checkpoint_manager::step_state::unchecked));  // 80: never loaded
  BOOST_TEST((status[1].state == ckpt::checkpoint_manager::step_state::intact));     // 90: loaded
  BOOST_TEST((status[2].step == 100 && status[2].state == ckpt::checkpoint_manager::step_state::damaged));
  BOOST_TEST((status[3].step == 100 && status[3].state == ckpt::checkpoint_manager::step_state::intact));
}

BOOST_AUTO_TEST_CASE(every_kind_of_damage_falls_back_to_the_newest_intact_step) {
  const std::map<std::string, std::function<void(const fs::path&)>> damage = {
      {"truncated", [](const fs::path& p) { fs::resize_file(p, fs::file_size(p) / 2); }},
      {"broken header", [](const fs::path& p) { flip(p, 12); }},
      {"empty file", [](const fs::path& p) { write_bytes(p, ""); }},
      {"a folder", [](const fs::path& p) { fs::remove(p); fs::create_directory(p); }},
      {"a symlink to nowhere", [](const fs::path& p) { fs::remove(p); fs::create_symlink(p.string() + ".gone", p); }},
  };
  for (const auto& [kind, apply] : damage) {
    BOOST_TEST_CONTEXT(kind) {
      const temp_dir s;
      save_steps(s.path(), {1, 2, 3});
      apply(s.path() / "ckpt-0000000003.safetensors");
      write_bytes(s.path() / ".ckpt-0000000004.safetensors.tmp-AbC123", "half a save");  // debris
      ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
      const ckpt::checkpoint_manager::latest latest = m.load_latest();
      BOOST_TEST(latest.step == 2);
      BOOST_TEST(same(restored(*latest), model_at(2)));
      BOOST_TEST_REQUIRE(latest.skipped.size() == 1u);
      BOOST_TEST(latest.skipped[0].step == 3);
      BOOST_TEST(fs::exists(fs::symlink_status(s.path() / "ckpt-0000000003.safetensors.damaged")));
      BOOST_TEST(folder_listing(s.path()) ==
                 (std::vector<std::string>{".ckpt-manager.lock", "ckpt-0000000001.safetensors",
                                           "ckpt-0000000002.safetensors", "ckpt-0000000003.safetensors.damaged"}));
    }
  }
}

BOOST_AUTO_TEST_CASE(keep_best_opens_a_folder_with_a_broken_header) {
  const temp_dir s;
  const ckpt::checkpoint_manager::options options{.max_to_keep = 1, .keep_best = 1, .best_metric = "loss"};
  save_steps(s.path(), {1, 2, 3}, {.max_to_keep = 0});
  flip(s.path() / "ckpt-0000000001.safetensors", 12);
  {
    ckpt::checkpoint_manager m(s.path(), options);  // does not throw
    // Step 2 is neither the newest nor the best (3 has the lower loss): the retention rules drop
    // it when the folder opens.
    BOOST_TEST(m.steps() == (std::vector<std::int64_t>{3}));
    const std::vector<ckpt::checkpoint_manager::step_status> status = m.status();
    BOOST_TEST_REQUIRE(status.size() == 2u);
    BOOST_TEST((status[0].step == 1 && status[0].state == ckpt::checkpoint_manager::step_state::damaged));
    BOOST_TEST(status[0].reason.find("ckpt-0000000001.safetensors") != std::string::npos);
    BOOST_TEST(fs::exists(s.path() / "ckpt-0000000001.safetensors.damaged"));
  }

  // A manager opened later lists the set-aside step as damaged, and keeps it (never deleted).
  {
    ckpt::checkpoint_manager again(s.path(), options);
    const model x = model_at(4);
    again.save(4, {{x, "model"}}, {{"loss", "50"}});
    const std::vector<ckpt::checkpoint_manager::step_status> later = again.status();
    BOOST_TEST((later.front().step == 1 && later.front().state == ckpt::checkpoint_manager::step_state::damaged));
    BOOST_TEST(later.front().reason == "set aside as damaged by an earlier run");
  }
  BOOST_TEST(fs::exists(s.path() / "ckpt-0000000001.safetensors.damaged"));
}

BOOST_AUTO_TEST_CASE(a_read_only_manager_skips_damaged_steps_and_moves_nothing) {
  const temp_dir s;
  save_steps(s.path(), {1, 2});
  flip(s.path() / "ckpt-0000000002.safetensors", header_end(s.path() / "ckpt-0000000002.safetensors"));
  const std::vector<std::string> before = folder_listing(s.path());
  ckpt::checkpoint_manager reader(s.path(), {.read_only = true});
  const ckpt::checkpoint_manager::latest latest = reader.load_latest();
  BOOST_TEST(latest.step == 1);
  BOOST_TEST_REQUIRE(latest.skipped.size() == 1u);
  BOOST_TEST(latest.skipped[0].path == s.path() / "ckpt-0000000002.safetensors");
  BOOST_TEST(folder_listing(s.path()) == before);
  BOOST_TEST(reader.steps() == (std::vector<std::int64_t>{1}));
}

BOOST_AUTO_TEST_CASE(a_step_both_a_file_and_an_mpi_folder_is_refused_by_name) {
  const temp_dir s;
  save_steps(s.path(), {1, 2});
  fs::create_directory(s.path() / "step-0000000002");
  write_bytes(s.path() / "step-0000000002" / "model.safetensors.index.json", "{}");
  ckpt::checkpoint_manager reader(s.path(), {.read_only = true});
  BOOST_TEST(reader.steps() == (std::vector<std::int64_t>{1}));
  const std::vector<ckpt::checkpoint_manager::step_status> status = reader.status();
  BOOST_TEST_REQUIRE(status.size() == 2u);
  BOOST_TEST((status[1].state == ckpt::checkpoint_manager::step_state::damaged));
  BOOST_TEST(status[1].reason ==
             "step 2 is both the file 'ckpt-0000000002.safetensors' and the MPI step folder 'step-0000000002': remove "
             "or rename one of them");
}

BOOST_AUTO_TEST_CASE(a_load_that_runs_out_of_a_resource_is_not_damage) {
  const temp_dir s;
  save_steps(s.path(), {1});
  // No file descriptor left: the load fails with EMFILE, which is thrown, and nothing moves.
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
  {
    struct rlimit_guard {
      rlimit old{};
      rlimit_guard() {
        ::getrlimit(RLIMIT_NOFILE, &old);
        rlimit low = old;
        low.rlim_cur = 3;  // stdin, stdout, stderr
        ::setrlimit(RLIMIT_NOFILE, &low);
      }
      ~rlimit_guard() { ::setrlimit(RLIMIT_NOFILE, &old); }
    };
    // Descriptors above the limit stay open, so the lock file's does not matter.
    const rlimit_guard guard;
    BOOST_CHECK_THROW((void)m.load_latest(), ckpt::io_error);
  }
  BOOST_TEST(m.steps() == (std::vector<std::int64_t>{1}));
  BOOST_TEST(fs::exists(s.path() / "ckpt-0000000001.safetensors"));
}

// The campaign: a folder of 6 steps, 1 to 3 random faults, then a resume by a new manager. Every
// round must resume from the newest step that was not touched, load it exactly, never load a
// damaged step, and leave every untouched step's file as it was.
BOOST_AUTO_TEST_CASE(random_damage_resumes_from_the_newest_intact_step_and_leaves_intact_files_alone) {
  const char* env = std::getenv("CKPT_RECOVERY_ROUNDS");
  const int rounds = env != nullptr ? std::atoi(env) : 60;
  enum kind { header_byte, data_byte, truncation, deletion, emptied, folder, dangling_symlink, stray_temporary, kinds };
  const char* names[kinds] = {"header byte", "data byte", "truncation", "deleted file", "empty file",
                              "folder",      "dangling symlink", "stray temporary"};
  std::map<int, int> applied;
  int resumes = 0, fresh_starts = 0, wrong = 0;
  std::mt19937_64 rng(20261204);
  for (int round = 0; round < rounds; ++round) {
    const temp_dir s;
    const std::vector<std::int64_t> steps = {10, 20, 30, 40, 50, 60};
    {
      ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
      for (const std::int64_t step : steps) {
        const model x = model_at(step, 24 + 8 * (step % 3));
        m.save(step, {{x, "model"}}, {{"loss", std::to_string(100 - step)}});
      }
    }
    std::map<std::int64_t, bool> damaged;
    const int faults = 1 + static_cast<int>(rng() % 3);
    for (int f = 0; f < faults; ++f) {
      const auto k = static_cast<kind>(rng() % kinds);
      // Mostly the newest steps, where damage hurts.
      const std::int64_t step = steps[steps.size() - 1 - std::min<std::size_t>(rng() % 8, steps.size() - 1)];
      const fs::path path = s.path() / ("ckpt-00000000" + std::to_string(step) + ".safetensors");
      if (damaged[step] && k != stray_temporary) continue;  // one fault a step
      ++applied[k];
      if (k == stray_temporary) {
        write_bytes(s.path() / (".ckpt-00000000" + std::to_string(step + 5) + ".safetensors.tmp-Xy12Z9"), "partial");
        continue;
      }
      damaged[step] = true;
      const std::size_t size = fs::file_size(path), data = header_end(path);
      switch (k) {
        case header_byte: flip(path, rng() % data); break;
        case data_byte: flip(path, data + rng() % (size - data)); break;
        case truncation: fs::resize_file(path, rng() % size); break;
        case deletion: fs::remove(path); break;
        case emptied: write_bytes(path, ""); break;
        case folder: fs::remove(path); fs::create_directory(path); break;
        case dangling_symlink: fs::remove(path); fs::create_symlink(s.path() / "nowhere", path); break;
        default: break;
      }
    }
    std::map<std::int64_t, std::string> intact_bytes;
    for (const std::int64_t step : steps)
      if (!damaged[step]) intact_bytes[step] = read_bytes(s.path() / ("ckpt-00000000" + std::to_string(step) + ".safetensors"));
    std::int64_t expected = -1;
    for (const std::int64_t step : steps)
      if (!damaged[step]) expected = step;

    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0, .keep_best = static_cast<std::size_t>(round % 2), .best_metric = "loss"});
    const ckpt::checkpoint_manager::latest latest = m.load_latest();
    const bool right = expected < 0 ? !latest.has_value()
                                    : latest.step == expected &&
                                          ckpt::to_params(*latest, model_at(expected, 24 + 8 * (expected % 3)),
                                                          {.prefix = "model"})
                                                  .w == model_at(expected, 24 + 8 * (expected % 3)).w;
    if (!right) ++wrong;
    BOOST_TEST(right, "round " << round << ": expected step " << expected << ", loaded " << latest.step);
    if (latest) ++resumes;
    else ++fresh_starts;
    for (const auto& [step, bytes] : intact_bytes)
      BOOST_TEST((read_bytes(s.path() / ("ckpt-00000000" + std::to_string(step) + ".safetensors")) == bytes),
                 "round " << round << ": intact step " << step << " changed or vanished");
  }
  std::string counts;
  for (const auto& [k, n] : applied) counts += std::string(counts.empty() ? "" : ", ") + names[k] + " " + std::to_string(n);
  BOOST_TEST_MESSAGE("recovery campaign: " << rounds << " rounds; faults: " << counts << "; resumes " << resumes
                                           << ", fresh starts (every step damaged) " << fresh_starts << ", wrong "
                                           << wrong);
  BOOST_TEST(wrong == 0);
}

BOOST_AUTO_TEST_SUITE_END()  // test_recovery
