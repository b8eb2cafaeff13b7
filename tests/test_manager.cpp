// checkpoint_manager: file naming, metadata, retention rules together, crash leftovers, the
// advisory lock against a second writer, background saves and their errors, resuming.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/adam.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/section.hpp>
#include <ckpt/sharded.hpp>

#include <Eigen/Core>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

BOOST_AUTO_TEST_SUITE(test_manager)

namespace fs = std::filesystem;

namespace {

using ckpt_test::folder_listing;
using ckpt_test::temp_dir;

ckpt::checkpoint value(float x) {
  return ckpt::of_tensor("w", ckpt::detail::to_tensor(Eigen::VectorXf::Constant(3, x).eval()));
}

std::vector<std::int64_t> ints(std::initializer_list<std::int64_t> xs) { return xs; }

void touch(const fs::path& path, const std::string& text = "x") { std::ofstream(path) << text; }

}  // namespace

BOOST_AUTO_TEST_CASE(files_are_numbered_and_carry_metadata) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
  BOOST_TEST(!m.latest_step().has_value());
  BOOST_TEST(!m.load_latest().has_value());
  BOOST_TEST(m.save(42, {value(1.0f)}, {{"loss", "0.5"}}));
  BOOST_TEST(fs::exists(s.path() / "ckpt-0000000042.safetensors"));
  BOOST_TEST(m.path_of(42) == s.path() / "ckpt-0000000042.safetensors");
  const ckpt::checkpoint c = ckpt::load(s.path() / "ckpt-0000000042.safetensors");
  BOOST_TEST(c.metadata().at("step") == "42");
  BOOST_TEST(c.metadata().at("loss") == "0.5");
  const std::string& t = c.metadata().at("wall_time");
  BOOST_TEST(t.size() == 24u);  // 2024-05-01T12:00:00.000Z
  BOOST_TEST(t.back() == 'Z');
  BOOST_TEST((m.latest_step() == 42));
  // One file, read from the manager's folder.
  const auto latest = m.load_latest();
  BOOST_TEST_REQUIRE(latest.sources.size() == 1u);
  BOOST_TEST(latest.sources[0].file == "ckpt-0000000042.safetensors");
  BOOST_TEST(ckpt::to_string(latest.sources[0].from) == "folder");
  BOOST_TEST(latest.sources[0].node == 0);
  BOOST_TEST(m.load(42).get("w").as<float>()[0] == 1.0f);
  BOOST_CHECK_THROW((void)m.load(41), std::invalid_argument);
  BOOST_CHECK_THROW(m.save(41, {value(0)}), std::invalid_argument);  // older than the latest
  BOOST_CHECK_THROW(m.save(-1, {value(0)}), std::invalid_argument);
  // A saved step is never rewritten (the rule of both managers), in the background neither.
  const std::string again = "ckpt: checkpoint_manager: step 42 is not newer than the latest step in '" +
                            s.path().string() + "' (step 42)";
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { m.save(42, {value(2.0f)}); }) == again);
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { m.save_async(42, {value(2.0f)}); }) == again);
  BOOST_TEST(m.load(42).get("w").as<float>()[0] == 1.0f);
}

BOOST_AUTO_TEST_CASE(sections_built_at_run_time_are_saved_now_and_in_the_background) {
  // A std::vector of sections, as a program builds it at run time (a section per layer), goes to
  // save and save_async as a braced list does.
  const temp_dir s(temp_dir::absent);
  std::vector<Eigen::VectorXf> layers;
  for (int i = 0; i < 3; ++i) layers.push_back(Eigen::VectorXf::Constant(2, static_cast<float>(i)));
  std::vector<ckpt::section> sections;
  for (std::size_t i = 0; i < layers.size(); ++i) sections.emplace_back(layers[i], "layers." + std::to_string(i));
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0});
  BOOST_TEST(m.save(1, sections, {{"loss", "0.5"}}));
  layers[2].setConstant(7);  // the background save copies the leaves before it returns
  BOOST_TEST(m.save_async(2, sections));
  layers[2].setConstant(-1);
  m.wait();
  const std::vector<std::string> names{"layers.0", "layers.1", "layers.2"};
  const ckpt::checkpoint first = m.load(1), second = m.load(2);
  BOOST_TEST(first.names() == names);
  BOOST_TEST(first.metadata().at("loss") == "0.5");
  BOOST_TEST(first.get("layers.2").as<float>()[1] == 2.0f);
  BOOST_TEST(second.names() == names);
  BOOST_TEST(second.get("layers.2").as<float>()[1] == 7.0f);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_section_brings_its_metadata_to_the_step) {
  // As ckpt::save of sections: the checkpoint sections' metadata, the call's over them, and the
  // manager's step and wall_time over both; now and in the background.
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 0, .keep_best = 1, .best_metric = "loss"});
  const ckpt::checkpoint t = value(1.0f).with_metadata({{"lr", "0.1"}, {"loss", "0.9"}, {"step", "7"}});
  const Eigen::VectorXf ema = Eigen::VectorXf::Ones(2);
  BOOST_TEST(m.save(1, {t, {ema, "ema"}}));
  BOOST_TEST(m.save_async(2, {t}, {{"lr", "0.2"}}));
  m.wait();
  const ckpt::checkpoint first = m.load(1), second = m.load(2);
  BOOST_TEST(first.metadata().at("lr") == "0.1");
  BOOST_TEST(first.metadata().at("loss") == "0.9");  // the keep-best metric, from the checkpoint
  BOOST_TEST(first.metadata().at("step") == "1");    // the manager's own key goes over the checkpoint's
  BOOST_TEST(first.metadata().contains("ckpt.xxh3_64_file"));
  BOOST_TEST(second.metadata().at("lr") == "0.2");
  BOOST_TEST(second.metadata().at("step") == "2");
  // Two checkpoint sections that disagree: refused before anything is written, both ways.
  const ckpt::checkpoint other = ckpt::of_int("n", 1).with_metadata({{"lr", "0.3"}});
  const std::string expected = "ckpt: checkpoint_manager: save: metadata key 'lr' has two different values ('0.1' "
                               "and '0.3') in the checkpoint sections";
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { m.save(3, {t, other}); }) == expected);
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { m.save_async(3, {t, other}); }) ==
             "ckpt: checkpoint_manager: save_async: metadata key 'lr' has two different values ('0.1' and '0.3') "
             "in the checkpoint sections");
  m.wait();
  BOOST_TEST(m.steps() == ints({1, 2}));
  BOOST_TEST(!fs::exists(m.path_of(3)));
}

BOOST_AUTO_TEST_CASE(save_interval_skips_other_steps_unless_forced) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager m(s.path(), {.save_interval_steps = 10});
  BOOST_TEST(m.should_save(0));
  BOOST_TEST(!m.should_save(5));
  BOOST_TEST(m.should_save(20));
  BOOST_TEST(!m.save(5, {value(0)}));
  BOOST_TEST(m.save(10, {value(0)}));
  BOOST_TEST(!m.save_async(15, {value(0)}));
  BOOST_TEST(m.save(17, {value(0)}, {}, true));
  BOOST_TEST(m.steps() == ints({10, 17}));
}

// max_to_keep = 2, keep_every_n_steps = 40, keep the best 2 by min "val_loss".
BOOST_AUTO_TEST_CASE(retention_keeps_the_newest_every_nth_and_best_steps_and_leaves_other_files_alone) {
  const temp_dir s(temp_dir::absent);
  const ckpt::checkpoint_manager::options options{.max_to_keep = 2,
                                                 .keep_every_n_steps = 40,
                                                 .keep_best = 2,
                                                 .best_metric = "val_loss",
                                                 .best_mode = ckpt::checkpoint_manager::metric_mode::min};
  {
    ckpt::checkpoint_manager m(s.path(), options);
    const std::vector<std::pair<std::int64_t, std::string>> saves = {
        {10, "0.9"}, {20, "0.3"}, {30, "0.8"}, {40, "0.7"}, {50, "0.2"},
        {60, "0.6"}, {70, "0.5"}, {80, "0.95"}, {90, "0.4"}, {100, "0.45"}};
    for (const auto& [step, loss] : saves) m.save(step, {value(0)}, {{"val_loss", loss}});
    // newest 2: 90, 100; multiples of 40: 40, 80; best 2: 50 (0.2), 20 (0.3).
    BOOST_TEST(m.steps() == ints({20, 40, 50, 80, 90, 100}));
    BOOST_CHECK_THROW(m.save(110, {value(0)}, {{"val_loss", "low"}}), std::invalid_argument);
  }
  touch(s.path() / "notes.txt");
  touch(s.path() / "ckpt-7.safetensors");  // not our spelling: not ours
  {
    // A new manager ranks the existing files by the metric in their headers.
    ckpt::checkpoint_manager m(s.path(), options);
    BOOST_TEST(m.steps() == ints({20, 40, 50, 80, 90, 100}));
    m.save(110, {value(0)}, {{"val_loss", "0.1"}});
    m.save(120, {value(0)});  // no metric: does not compete
    // newest 2: 110, 120; multiples of 40: 40, 80, 120; best 2: 110 (0.1), 50 (0.2).
    BOOST_TEST(m.steps() == ints({40, 50, 80, 110, 120}));
  }
  BOOST_TEST(fs::exists(s.path() / "notes.txt"));
  BOOST_TEST(fs::exists(s.path() / "ckpt-7.safetensors"));
  {
    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 1, .best_mode = ckpt::checkpoint_manager::metric_mode::max});
    m.save(130, {value(0)});
    BOOST_TEST(m.steps() == ints({130}));
  }
  BOOST_TEST(folder_listing(s.path()) == (std::vector<std::string>{".ckpt-manager.lock", "ckpt-0000000130.safetensors",
                                                                   "ckpt-7.safetensors", "notes.txt"}));
}

BOOST_AUTO_TEST_CASE(keep_best_by_max_keeps_the_highest_metric_beside_the_newest) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 1, .keep_best = 1, .best_metric = "acc",
                                        .best_mode = ckpt::checkpoint_manager::metric_mode::max});
  m.save(1, {value(0)}, {{"acc", "0.5"}});
  m.save(2, {value(0)}, {{"acc", "0.9"}});
  m.save(3, {value(0)}, {{"acc", "0.7"}});
  m.save(4, {value(0)}, {{"acc", "0.6"}});
  BOOST_TEST(m.steps() == ints({2, 4}));
}

BOOST_AUTO_TEST_CASE(latest_after_a_crash_ignores_and_cleans_temporaries) {
  const temp_dir s(temp_dir::absent);
  {
    ckpt::checkpoint_manager m(s.path());
    m.save(100, {value(1.0f)});
  }
  // What a save killed before its rename leaves: a partial temporary of a newer step.
  touch(s.path() / ".ckpt-0000000200.safetensors.tmp-Ab3dEf", "partial");
  touch(s.path() / ".other.safetensors.tmp-Ab3dEf", "someone else's");
  ckpt::checkpoint_manager m(s.path());
  BOOST_TEST((m.latest_step() == 100));
  BOOST_TEST(m.load_latest()->get("w").as<float>()[0] == 1.0f);
  BOOST_TEST(!fs::exists(s.path() / ".ckpt-0000000200.safetensors.tmp-Ab3dEf"));
  BOOST_TEST(fs::exists(s.path() / ".other.safetensors.tmp-Ab3dEf"));
}

BOOST_AUTO_TEST_CASE(a_second_writer_is_refused) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager m(s.path());
  // In this process: a second manager opens the lock file anew and is refused.
  try {
    ckpt::checkpoint_manager second(s.path());
    BOOST_FAIL("the second manager was not refused");
  } catch (const ckpt::lock_error& e) {
    BOOST_TEST(std::string(e.what()).find("'" + s.path().string() + "'") != std::string::npos);
    BOOST_TEST(e.path() == s.path());
  }
  // In another process. The child reports through its exit status: 0 refused, 1 not refused,
  // 2 another exception.
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    int code = 1;
    try {
      ckpt::checkpoint_manager other(s.path());
    } catch (const ckpt::lock_error&) {
      code = 0;
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
  // Once the first manager is gone, the folder is free again.
  { ckpt::checkpoint_manager moved = std::move(m); }
  ckpt::checkpoint_manager third(s.path());
  BOOST_TEST(third.steps().empty());
}

BOOST_AUTO_TEST_CASE(async_saves_complete_in_order) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 3});
  Eigen::VectorXf live = Eigen::VectorXf::Zero(1000);
  for (int step = 1; step <= 6; ++step) {
    live.setConstant(static_cast<float>(step));
    BOOST_TEST(m.save_async(step, {ckpt::of_tensor("w", ckpt::detail::to_tensor(live))}));
    live.setConstant(-1.0f);  // the snapshot is already taken
  }
  m.wait();
  BOOST_TEST(m.steps() == ints({4, 5, 6}));
  BOOST_TEST(m.load(6).get("w").as<float>()[999] == 6.0f);
  BOOST_TEST(m.load(4).get("w").as<float>()[0] == 4.0f);
}

BOOST_AUTO_TEST_CASE(a_background_save_is_committed_by_the_next_call) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 1});
  BOOST_TEST(m.save_async(1, {value(1.0f)}));
  BOOST_TEST(m.steps().empty());  // written in the background, not yet committed
  m.wait();
  BOOST_TEST(m.steps() == ints({1}));
  BOOST_TEST(m.save_async(2, {value(2.0f)}));
  BOOST_TEST(m.steps() == ints({1}));
  BOOST_TEST(m.load(2).get("w").as<float>()[0] == 2.0f);  // load commits it, and the retention runs
  BOOST_TEST(m.steps() == ints({2}));
  BOOST_TEST(!fs::exists(m.path_of(1)));
  BOOST_TEST(m.save_async(3, {value(3.0f)}));
}  // the destructor commits step 3

BOOST_AUTO_TEST_CASE(async_errors_surface_at_wait_and_at_the_next_call) {
  const temp_dir s(temp_dir::absent);
  {
    ckpt::checkpoint_manager m(s.path());
    m.save(1, {value(0)});
    // The folder vanishes under the manager (tests run as root, so permissions would not stop
    // the write): the background write cannot create its file.
    fs::remove_all(s.path());
    BOOST_TEST(m.save_async(2, {value(0)}));
    BOOST_CHECK_THROW(m.wait(), ckpt::io_error);
    m.wait();  // reported once

    BOOST_TEST(m.save_async(3, {value(0)}));
    BOOST_TEST(m.steps() == ints({1}));  // the queries never wait: step 3 is not committed
    BOOST_TEST((m.latest_step() == 1));
    BOOST_CHECK_THROW((void)m.load_latest(), ckpt::io_error);  // surfaces at the next call
    BOOST_TEST(m.steps() == ints({1}));
    BOOST_TEST(m.save_async(4, {value(0)}));
    BOOST_CHECK_THROW(m.save(5, {value(0)}), ckpt::io_error);  // step 4's error, before saving 5
    BOOST_CHECK_THROW(m.save(5, {value(0)}), ckpt::io_error);  // step 5's own error
    BOOST_TEST(m.save_async(6, {value(0)}));
  }  // the destructor waits and reports the uncollected error on stderr
}

BOOST_AUTO_TEST_CASE(a_folder_that_cannot_exist_is_refused) {
  const temp_dir s(temp_dir::absent);
  fs::create_directories(s.path());
  touch(s.path() / "file");
  BOOST_CHECK_THROW(ckpt::checkpoint_manager(s.path() / "file" / "run"), ckpt::io_error);
  BOOST_CHECK_THROW(ckpt::checkpoint_manager(s.path(), {.save_interval_steps = 0}), std::invalid_argument);
  BOOST_CHECK_THROW(ckpt::checkpoint_manager(s.path(), {.keep_best = 1}), std::invalid_argument);
}

BOOST_AUTO_TEST_CASE(resuming_from_the_latest_checkpoint_repeats_the_next_step_bit_for_bit) {
  const temp_dir s(temp_dir::absent);
  struct linear {
    Eigen::MatrixXf w;
    Eigen::VectorXf b;
  };
  const ckpt::adam opt{.lr = 0.1};
  linear p{Eigen::MatrixXf::Constant(2, 2, 1.0f), Eigen::VectorXf::Constant(2, 1.0f)};
  const linear g{Eigen::MatrixXf::Constant(2, 2, 0.5f), Eigen::VectorXf::Constant(2, -0.5f)};
  auto st = opt.init(p);
  {
    ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 2, .save_interval_steps = 2});
    for (int i = 0; i < 5; ++i) {
      opt.update(p, g, st);
      m.save_async(st.step, ckpt::training_state(p, st));
    }
  }  // destruction waits
  linear q{Eigen::MatrixXf::Zero(2, 2), Eigen::VectorXf::Zero(2)};
  ckpt::adam_state<linear> back;
  ckpt::checkpoint_manager m(s.path(), {.max_to_keep = 2, .save_interval_steps = 2});
  BOOST_TEST(m.steps() == ints({2, 4}));
  const auto latest = m.load_latest();
  BOOST_REQUIRE(latest.has_value());
  BOOST_TEST(ckpt::read_params(*latest, ckpt::training_state(q, back)).exact());
  BOOST_TEST(back.step == 4);
  BOOST_TEST(latest->metadata().at("step") == "4");
  opt.update(q, g, back);
  BOOST_TEST((q.w.array() == p.w.array()).all());  // step 5 again, bit for bit
  BOOST_TEST((q.b.array() == p.b.array()).all());
}

// Read-only access: an evaluation job opening a run's folder while the trainer writes into it.
BOOST_AUTO_TEST_CASE(a_read_only_manager_takes_no_lock_and_changes_nothing) {
  const temp_dir s;
  ckpt::checkpoint_manager writer(s.path(), {.max_to_keep = 2});
  BOOST_TEST(writer.save(1, {value(1.0f)}));
  BOOST_TEST(writer.save(2, {value(2.0f)}));
  const fs::path leftover = s.path() / ".ckpt-0000000003.safetensors.tmp-abcdef";  // a crashed save's
  touch(leftover);
  const std::vector<std::string> before = folder_listing(s.path());

  // The writer holds the lock, and the reader opens anyway: it takes none.
  ckpt::checkpoint_manager reader(s.path(), {.read_only = true});
  BOOST_TEST(reader.steps() == ints({1, 2}));
  BOOST_TEST(reader.load_latest()->get("w").as<float>()[0] == 2.0f);
  BOOST_TEST(reader.load(1).get("w").as<float>()[0] == 1.0f);
  const std::string refused = "ckpt: checkpoint_manager: save: the folder '" + s.path().string() + "' was opened read-only";
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { reader.save(3, {value(3.0f)}); }) == refused);
  BOOST_TEST(ckpt_test::message_of<std::invalid_argument>([&] { reader.save_async(3, {value(3.0f)}); }) ==
             "ckpt: checkpoint_manager: save_async: the folder '" + s.path().string() + "' was opened read-only");
  BOOST_TEST(folder_listing(s.path()) == before);  // the leftover stays: it may be a live save's
  BOOST_TEST(fs::exists(leftover));

  // The writer goes on; its retention deletes step 1, which the reader listed: loading it is an
  // error naming the file, not a crash.
  BOOST_TEST(writer.save(3, {value(3.0f)}));
  BOOST_TEST(!fs::exists(s.path() / "ckpt-0000000001.safetensors"));
  try {
    (void)reader.load(1);
    BOOST_FAIL("a deleted step loaded");
  } catch (const ckpt::io_error& e) {
    BOOST_TEST(e.path() == s.path() / "ckpt-0000000001.safetensors");
  }
  // A second reader, and a second writer once the first is gone, are not in each other's way.
  ckpt::checkpoint_manager another(s.path(), {.read_only = true});
  BOOST_TEST(another.steps() == ints({2, 3}));
}

BOOST_AUTO_TEST_CASE(a_read_only_manager_does_not_create_its_folder) {
  const temp_dir s(temp_dir::absent);
  try {
    ckpt::checkpoint_manager reader(s.path(), {.read_only = true});
    BOOST_FAIL("a missing folder opened");
  } catch (const ckpt::io_error& e) {
    BOOST_TEST(e.path() == s.path());
  }
  BOOST_TEST(!fs::exists(s.path()));
}

BOOST_AUTO_TEST_CASE(a_read_only_manager_reads_an_mpi_jobs_folder_without_mpi) {
  // The layout of ckpt::mpi::checkpoint_manager: a folder per step, committed by its index; a
  // step folder without its index (a save in progress, or a crashed one) is not a step.
  const temp_dir s;
  ckpt::save_sharded(s.path() / "step-0000000010", value(10.0f), 1 << 20);
  ckpt::save_sharded(s.path() / "step-0000000020", value(20.0f), 1 << 20);
  fs::create_directory(s.path() / "step-0000000030");
  ckpt::save(s.path() / "step-0000000030" / "model-00001-of-00001.safetensors", value(30.0f));
  ckpt::checkpoint_manager reader(s.path(), {.read_only = true});
  BOOST_TEST(reader.steps() == ints({10, 20}));
  BOOST_TEST(reader.path_of(20) == s.path() / "step-0000000020");
  BOOST_TEST(reader.load_latest()->get("w").as<float>()[0] == 20.0f);
  BOOST_TEST(reader.load(10).get("w").as<float>()[0] == 10.0f);
}

// A manager moves with its folder, lock and background save; move-assigned over another, it
// first commits that one's background save and releases its folder. (An MPI manager moved into a
// ckpt::checkpoint_manager stays the MPI manager: tests/mpi/test_mpi_manager.cpp.)
BOOST_AUTO_TEST_CASE(a_moved_manager_keeps_its_folder_and_commits_the_one_it_replaces) {
  static_assert(std::is_nothrow_move_constructible_v<ckpt::checkpoint_manager>);
  static_assert(std::is_nothrow_move_assignable_v<ckpt::checkpoint_manager>);
  static_assert(!std::is_copy_constructible_v<ckpt::checkpoint_manager>);
  static_assert(!std::is_copy_assignable_v<ckpt::checkpoint_manager>);
  const temp_dir a(temp_dir::absent);
  const temp_dir b(temp_dir::absent);
  ckpt::checkpoint_manager m(a.path());
  BOOST_TEST(m.save_async(1, {value(1.0f)}));
  ckpt::checkpoint_manager moved = std::move(m);  // takes over the background save
  BOOST_TEST(moved.load_latest()->get("w").as<float>()[0] == 1.0f);
  ckpt::checkpoint_manager other(b.path());
  BOOST_TEST(other.save_async(5, {value(5.0f)}));
  other = std::move(moved);  // commits step 5 in b and releases b
  BOOST_TEST(other.folder() == a.path());
  BOOST_TEST(ckpt::checkpoint_manager(b.path()).steps() == ints({5}));
  BOOST_TEST(other.save(2, {value(2.0f)}));
  BOOST_TEST(other.steps() == ints({1, 2}));
  BOOST_CHECK_THROW(ckpt::checkpoint_manager(a.path()), ckpt::lock_error);  // still held
}

BOOST_AUTO_TEST_SUITE_END()  // test_manager
