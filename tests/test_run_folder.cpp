// A manager touches its own run folder and nothing else, never blocks on what it cannot delete,
// and never calls a good step damaged (issue 35; tests/RELIABILITY.md, "The run folder"). Each
// case is a finding of an adversarial review of the manager, reproduced: a path switched to
// another run or a run moved away while a manager is open, a lock file or a step that is a
// symbolic link, a step the retention cannot delete, steps that cannot be read for a permission,
// a memory or descriptor limit, and a checkpoint of many shards under a descriptor limit.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/detail/pages.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/params.hpp>
#include <ckpt/sharded.hpp>

#include <Eigen/Core>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_run_folder)

namespace fs = std::filesystem;

namespace {

using ckpt_test::folder_listing;
using ckpt_test::message_of;
using ckpt_test::read_bytes;
using ckpt_test::temp_dir;
using step_state = ckpt::checkpoint_manager::step_state;

struct model {
  Eigen::MatrixXf w;
  Eigen::VectorXf b;
};

// The model saved at `step`: every value depends on the step, so a wrong step cannot pass.
model model_at(std::int64_t step) {
  model m{Eigen::MatrixXf(8, 6), Eigen::VectorXf(6)};
  for (Eigen::Index i = 0; i < m.w.size(); ++i) m.w.data()[i] = static_cast<float>(step * 100 + i);
  for (Eigen::Index i = 0; i < m.b.size(); ++i) m.b(i) = static_cast<float>(step) + 0.5f * static_cast<float>(i);
  return m;
}

bool same(const model& a, const model& b) { return a.w == b.w && a.b == b.b; }

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  BOOST_TEST_REQUIRE(out.good());
}

model restored(const ckpt::checkpoint& t) { return ckpt::to_params(t, model_at(0), {.prefix = "model"}); }

void save_steps(const fs::path& folder, std::initializer_list<std::int64_t> steps) {
  ckpt::checkpoint_manager m(folder, {.max_to_keep = 0});
  for (const std::int64_t step : steps) {
    const model x = model_at(step);
    m.save(step, {{x, "model"}});
  }
}

// The bytes of every file of `folder`, by name: what must not change.
std::map<std::string, std::string> contents_of(const fs::path& folder) {
  std::map<std::string, std::string> out;
  for (const std::string& name : folder_listing(folder))
    if (fs::is_regular_file(folder / name)) out.emplace(name, read_bytes(folder / name));
  return out;
}

// Makes `link` a symbolic link to `target`, replacing a link there atomically (`ln -sfn`).
void point(const fs::path& link, const fs::path& target) {
  const fs::path next = link.string() + ".next";
  fs::create_directory_symlink(target, next);
  fs::rename(next, link);
}

// Runs `f` in a child process (support.hpp's in_child), and returns what it returned, or
// "threw <what>".
std::string in_child(const std::function<std::string()>& f) {
  return ckpt_test::in_child([&] {
    try {
      return f();
    } catch (const std::exception& e) {
      return std::string("threw ") + e.what();
    }
  });
}

void set_limit(int resource, rlim_t value) {
  rlimit limit{};
  ::getrlimit(resource, &limit);
  limit.rlim_cur = value;
  if (::setrlimit(resource, &limit) != 0) throw std::runtime_error(std::string("setrlimit: ") + std::strerror(errno));
}

}  // namespace

// Finding 2: a job opened on `current -> runA`, then `ln -sfn runB current`, replaced runB's step
// and deleted runB's older steps, bypassing runB's lock.
BOOST_AUTO_TEST_CASE(a_manager_keeps_to_the_folder_it_opened_when_its_path_is_switched_to_another_run) {
  const temp_dir s;
  const fs::path run_a = s.path() / "runA", run_b = s.path() / "runB", current = s.path() / "current";
  save_steps(run_a, {1, 2});
  save_steps(run_b, {10, 11, 12});
  const std::map<std::string, std::string> b_before = contents_of(run_b);
  point(current, "runA");
  ckpt::checkpoint_manager job(current, {.max_to_keep = 2});
  ckpt::checkpoint_manager owner_of_b(run_b, {.max_to_keep = 0});  // runB's own writer holds its lock
  point(current, "runB");

  const model x = model_at(13);
  BOOST_TEST(job.save(13, {{x, "model"}}));
  // runA got step 13, and its retention dropped step 1 there; runB is as it was.
  BOOST_TEST(folder_listing(run_a) == (std::vector<std::string>{".ckpt-manager.lock", "ckpt-0000000002.safetensors",
                                                                 "ckpt-0000000013.safetensors"}));
  BOOST_TEST(same(restored(ckpt::load(run_a / "ckpt-0000000013.safetensors")), model_at(13)));
  BOOST_TEST((contents_of(run_b) == b_before));
  BOOST_TEST(job.steps() == (std::vector<std::int64_t>{2, 13}));
  BOOST_TEST(same(restored(job.load(2)), model_at(2)));
}

// Finding 2: a run folder moved away and a new run started at the same path: the old job
// destroyed the new run's steps.
BOOST_AUTO_TEST_CASE(a_run_moved_away_and_a_new_run_at_its_path_each_keep_their_own_steps) {
  const temp_dir s;
  const fs::path run = s.path() / "run", moved = s.path() / "run.old";
  save_steps(run, {1, 2, 3});
  ckpt::checkpoint_manager old_job(run, {.max_to_keep = 3});
  fs::rename(run, moved);
  save_steps(run, {1, 2, 3});  // a new run at the same path, by its own manager
  const std::map<std::string, std::string> new_run = contents_of(run);

  const model x = model_at(4);
  BOOST_TEST(old_job.save(4, {{x, "model"}}));
  BOOST_TEST((contents_of(run) == new_run));
  BOOST_TEST(folder_listing(moved) ==
             (std::vector<std::string>{".ckpt-manager.lock", "ckpt-0000000002.safetensors", "ckpt-0000000003.safetensors",
                                       "ckpt-0000000004.safetensors"}));
  BOOST_TEST(same(restored(ckpt::load(moved / "ckpt-0000000004.safetensors")), model_at(4)));
}

// Finding 7: a `.ckpt-manager.lock` that is a symbolic link made a writing manager create the
// link's target outside the run.
BOOST_AUTO_TEST_CASE(a_lock_file_that_is_a_symbolic_link_is_refused_and_its_target_never_created) {
  const temp_dir s;
  const fs::path run = s.path() / "run", outside = s.path() / "outside";
  fs::create_directories(run);
  fs::create_directories(outside);
  fs::create_symlink("../outside/planted", run / ".ckpt-manager.lock");
  BOOST_TEST(message_of<ckpt::io_error>([&] { ckpt::checkpoint_manager m(run); }) ==
             "ckpt: cannot open the lock file '" + (run / ".ckpt-manager.lock").string() +
                 "': Too many levels of symbolic links");
  BOOST_TEST(folder_listing(outside).empty());
}

// Finding 1, for the file steps of checkpoint_manager: a forked run whose step is a link to
// another run's step reads it through the link, and its retention deletes the link, never what
// it points at.
BOOST_AUTO_TEST_CASE(a_forked_runs_linked_step_is_read_through_and_only_the_link_is_deleted) {
  const temp_dir s;
  const fs::path run_a = s.path() / "runA", run_b = s.path() / "runB";
  save_steps(run_a, {1000});
  const std::map<std::string, std::string> a_before = contents_of(run_a);
  fs::create_directories(run_b);
  fs::create_symlink("../runA/ckpt-0000001000.safetensors", run_b / "ckpt-0000001000.safetensors");
  {
    ckpt::checkpoint_manager fork(run_b, {.max_to_keep = 1});
    const auto latest = fork.load_latest();
    BOOST_TEST_REQUIRE(latest.has_value());
    BOOST_TEST(latest.step == 1000);
    BOOST_TEST(same(restored(*latest), model_at(1000)));
    const model x = model_at(1001);
    BOOST_TEST(fork.save(1001, {{x, "model"}}));
  }
  BOOST_TEST(folder_listing(run_b) == (std::vector<std::string>{".ckpt-manager.lock", "ckpt-0000001001.safetensors"}));
  BOOST_TEST((contents_of(run_a) == a_before));
  ckpt::checkpoint_manager original(run_a, {.max_to_keep = 1});
  BOOST_TEST(same(restored(*original.load_latest()), model_at(1000)));
}

// Finding 3: `ckpt-0000000001.safetensors` a folder, keep 3: save 4 was written and still threw
// "Is a directory", and every later save threw before writing, across restarts.
BOOST_AUTO_TEST_CASE(a_step_the_retention_cannot_delete_never_blocks_a_save) {
  const temp_dir s;
  save_steps(s.path(), {2, 3, 4});
  const fs::path folder_step = s.path() / "ckpt-0000000001.safetensors";
  fs::create_directory(folder_step);
  write_text(folder_step / "notes.txt", "not a checkpoint");
  for (const std::int64_t step : {5, 6}) {  // two runs in a row, each a save
    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 3});
    const model x = model_at(step);
    BOOST_TEST(m.save(step, {{x, "model"}}));
    BOOST_TEST(m.steps() == (std::vector<std::int64_t>{step - 2, step - 1, step}));
    const std::vector<ckpt::checkpoint_manager::step_status> status = m.status();
    BOOST_TEST_REQUIRE(status.size() == 4u);
    BOOST_TEST((status[0].step == 1 && status[0].state == step_state::damaged));
    BOOST_TEST(status[0].path == fs::path(folder_step.string() + ".damaged"));
  }
  // Set aside with what it holds, never deleted.
  BOOST_TEST(read_bytes(s.path() / "ckpt-0000000001.safetensors.damaged" / "notes.txt") == "not a checkpoint");
}

// Finding 4: steps owned by root with mode 0600, resumed by user nobody, were set aside as
// damaged, and the trainer started afresh over them. A permission is an error naming the file,
// and every step stays in place under its own name.
BOOST_AUTO_TEST_CASE(a_step_that_cannot_be_read_for_a_permission_is_an_error_not_damage) {
  const temp_dir s;
  save_steps(s.path(), {1, 2, 3});
  const std::map<std::string, std::string> before = contents_of(s.path());
  const bool root = ::geteuid() == 0;
  for (const std::string& name : folder_listing(s.path()))
    if (name.starts_with("ckpt-")) fs::permissions(s.path() / name, root ? fs::perms::owner_read | fs::perms::owner_write : fs::perms::none);
  // As root, another user (nobody) opens the folder, which it may write into but whose steps it
  // cannot read; as another user, the steps' modes refuse their owner.
  fs::permissions(s.path(), fs::perms::all);
  fs::permissions(s.path() / ".ckpt-manager.lock", fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                                                       fs::perms::group_write | fs::perms::others_read |
                                                       fs::perms::others_write);
  const std::string outcome = in_child([&] {
    if (root && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return std::string("setuid failed");
    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
    try {
      static_cast<void>(m.load_latest());
    } catch (const ckpt::io_error& e) {
      return std::string(e.what()) + (m.status().size() == 3 && m.steps().size() == 3 ? "; 3 steps" : "; steps lost");
    }
    return std::string("loaded");
  });
  BOOST_TEST(outcome == "ckpt: cannot open '" + (s.path() / "ckpt-0000000003.safetensors").string() +
                            "': Permission denied; 3 steps");
  for (const std::string& name : folder_listing(s.path())) fs::permissions(s.path() / name, fs::perms::owner_all);
  std::map<std::string, std::string> after = contents_of(s.path());
  after.erase(".ckpt-manager.lock");
  std::map<std::string, std::string> expected = before;
  expected.erase(".ckpt-manager.lock");
  BOOST_TEST((after == expected));  // nothing renamed, nothing changed
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CKPT_RUN_FOLDER_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CKPT_RUN_FOLDER_SANITIZED 1
#endif
#endif

// A sanitizer's shadow memory cannot run under an address-space limit: left to the plain build.
#ifndef CKPT_RUN_FOLDER_SANITIZED
// Finding 4: a std::bad_alloc under `ulimit -v` set steps aside. Running out of memory is an
// error, not damage.
BOOST_AUTO_TEST_CASE(a_load_that_runs_out_of_memory_is_an_error_not_damage) {
  const temp_dir s;
  {
    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
    const Eigen::VectorXf big = Eigen::VectorXf::Constant(16 << 20, 1.0f);  // 64 MiB
    m.save(1, {{big, "big"}});
  }
  const std::string outcome = in_child([&] {
    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
    Eigen::VectorXf into(16 << 20);
    set_limit(RLIMIT_AS, 1);  // no new mapping at all
    std::string what;
    try {
      const auto latest = m.load_latest();
      what = latest ? "loaded" : "nothing loaded";
    } catch (const std::bad_alloc&) {
      what = "bad_alloc";
    } catch (const ckpt::io_error& e) {
      what = e.code() == std::errc::not_enough_memory ? "ENOMEM" : e.what();
    }
    set_limit(RLIMIT_AS, RLIM_INFINITY);
    return what + (m.steps() == std::vector<std::int64_t>{1} && m.status().size() == 1 ? "; step kept" : "; step lost");
  });
  BOOST_TEST((outcome == "bad_alloc; step kept" || outcome == "ENOMEM; step kept"), outcome);
  BOOST_TEST(fs::exists(s.path() / "ckpt-0000000001.safetensors"));
}
#endif

// Finding 4: a load holding a descriptor for every shard failed with "Too many open files" (and
// the managers called such steps damaged). A process keeps a bounded number of its loaded
// files' descriptors, so a checkpoint of more shards than its descriptor limit loads whole.
BOOST_AUTO_TEST_CASE(a_checkpoint_of_many_shards_loads_under_a_low_descriptor_limit) {
  const temp_dir s;
  std::vector<ckpt::checkpoint> parts;
  for (int i = 0; i < 200; ++i)
    parts.push_back(ckpt::of_tensor("w." + std::to_string(1000 + i),
                                    ckpt::tensor::make(ckpt::dtype::i32, {64}, [i](std::span<std::byte> out) {
                                      for (std::size_t k = 0; k < out.size() / 4; ++k) {
                                        const std::int32_t v = i * 1000 + static_cast<std::int32_t>(k);
                                        std::memcpy(out.data() + 4 * k, &v, 4);
                                      }
                                    })));
  const ckpt::checkpoint whole = ckpt::concat(parts);
  const auto files = ckpt::save_sharded(s.path(), whole, 256, {.save = {.digest = true}});
  BOOST_TEST_REQUIRE(files.shards.size() == 200u);
  const std::string outcome = in_child([&] {
    set_limit(RLIMIT_NOFILE, 64);
    const ckpt::checkpoint t = ckpt::load(files.index);
    std::size_t right = 0;
    for (const auto& [name, x] : whole) {
      const ckpt::tensor copy = ckpt::detail::tensor_access::in_memory(t.get(name));  // read from the file
      right += std::ranges::equal(copy.bytes(), x.bytes()) ? 1 : 0;
    }
    return std::to_string(right) + " of " + std::to_string(whole.size());
  });
  BOOST_TEST(outcome == "200 of 200");
}

// A reader that listed steps a writer's retention deleted since: a step deleted is gone, not
// damaged (the tool's review: evaluation jobs were told such steps were damaged).
BOOST_AUTO_TEST_CASE(a_step_deleted_since_a_reader_listed_it_is_gone_not_damaged) {
  const temp_dir s;
  save_steps(s.path(), {1, 2, 3});
  ckpt::checkpoint_manager reader(s.path(), {.read_only = true});
  {
    ckpt::checkpoint_manager writer(s.path(), {.max_to_keep = 1});  // drops 1 and 2 as it opens
    const model x = model_at(4);
    writer.save(4, {{x, "model"}});                                  // and 3 after this save
  }
  BOOST_TEST(reader.steps() == (std::vector<std::int64_t>{1, 2, 3}));
  BOOST_TEST(message_of<ckpt::io_error>([&] { static_cast<void>(reader.load(2)); }) ==
             "ckpt: cannot open '" + (s.path() / "ckpt-0000000002.safetensors").string() + "': No such file or directory");
  const auto latest = reader.load_latest();
  BOOST_TEST(!latest.has_value());
  BOOST_TEST(latest.skipped.empty());
  BOOST_TEST(reader.steps().empty());
  BOOST_TEST(reader.status().empty());  // nothing damaged
}

BOOST_AUTO_TEST_SUITE_END()  // test_run_folder
