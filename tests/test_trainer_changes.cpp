// examples/mlp_trainer run as a program when the model changes (issue 36): `--resume --adapt`
// across a wider `--hidden`, the warm start `--init-from RUN`, and `--params-out` showing what was
// carried over, checked entry by entry against the checkpoints they read; and the folders the
// trainer refuses, left as they were.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include "mlp.hpp"

#include <ckpt/file.hpp>
#include <ckpt/params.hpp>

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <sys/wait.h>

BOOST_AUTO_TEST_SUITE(test_trainer_changes)

#ifndef CKPT_MLP_TRAINER
#error "CKPT_MLP_TRAINER must name the example binary (tests/trainer_changes.cmake)"
#endif

namespace fs = std::filesystem;
using namespace mlp_example;

namespace {

using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

constexpr int narrow = 4, wide = 7;  // --hidden of the run saved, and of the run that reads it

struct outcome {
  int status = -1;
  std::string out, err;
};

// Runs the example binary with `args`, its stdout and stderr into files of `logs`.
outcome trainer(const std::string& args, const fs::path& logs) {
  static int runs = 0;
  const std::string n = std::to_string(++runs);
  const fs::path out = logs / ("run" + n + ".out"), err = logs / ("run" + n + ".err");
  const std::string command = std::string("'") + CKPT_MLP_TRAINER + "' " + args + " > '" + out.string() + "' 2> '" +
                              err.string() + "'";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read_bytes(out), read_bytes(err)};
}

std::string quoted(const fs::path& p) { return "'" + p.string() + "'"; }

// Small and fast: a run of 60 steps, saved at 30 and 60.
std::string flags(const fs::path& dir, int hidden, std::int64_t steps, int seed = 5) {
  return "--seed " + std::to_string(seed) + " --batch 32 --save-every 30 --keep 0 --log-every 1000 --hidden " + std::to_string(hidden) +
         " --ckpt-dir " + quoted(dir) + " --steps " + std::to_string(steps);
}

fs::path step_file(const fs::path& dir, std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%010lld.safetensors", static_cast<long long>(step));
  return dir / name;
}

// Every file of a folder and its bytes: what "left as it was" means.
std::map<std::string, std::string> contents(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = read_bytes(e.path());
  return out;
}

// The parameters a file holds under model.*, read into an MLP of `hidden` units.
mlp model_of(const fs::path& file, int hidden) {
  return ckpt::to_params(ckpt::load(file), init_mlp(0, hidden), {.prefix = "model", .strict = true});
}

bool same_bits(const Eigen::MatrixXf& a, const Eigen::MatrixXf& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(float)) == 0;
}

// The entries of `t` named `prefix.*`.
std::vector<std::string> names_under(const ckpt::checkpoint& t, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& name : t.names())
    if (name.starts_with(prefix + ".")) out.push_back(name);
  return out;
}

}  // namespace

// (a) A run saved with --hidden 4, resumed with --hidden 7: refused without --adapt, naming every
// entry and both shapes; with --adapt the saved block is copied bit for bit, the new units keep the
// values a fresh run of the same seed starts from, and --params-out shows exactly that.
BOOST_AUTO_TEST_CASE(adapt_resumes_a_wider_model_from_the_saved_block) {
  const temp_dir s;
  const fs::path a = s.path() / "a";
  BOOST_REQUIRE(trainer(flags(a, narrow, 60), s.path()).status == 0);
  const auto saved = contents(a);

  const outcome strict = trainer(flags(a, wide, 60) + " --resume", s.path());
  BOOST_TEST(strict.status == 1, strict.err);
  for (const std::string& part :
       {"cannot read " + step_file(a, 60).string() + " into the model (--hidden 7)", std::string("9 entries of another shape"),
        std::string("'model.l1.b' [4] (the template's [7])"), std::string("'model.l1.w' [4, 2] (the template's [7, 2])"),
        std::string("'model.l2.w' [2, 4] (the template's [2, 7])"),
        std::string("'optim.mu.l1.w' [4, 2] (the template's [7, 2])"),
        std::string("'optim.nu.l2.w' [2, 4] (the template's [2, 7])"), std::string("--adapt")})
    BOOST_TEST(strict.err.find(part) != std::string::npos, part + " in: " + strict.err);
  BOOST_TEST(strict.out.find("resumed from") == std::string::npos, strict.out);
  BOOST_TEST((contents(a) == saved));  // nothing read, nothing written

  // --steps at the saved step: nothing is trained, F holds what the resume carried over.
  const fs::path f = s.path() / "f.safetensors";
  const outcome adapted = trainer(flags(a, wide, 60) + " --resume --adapt --params-out " + quoted(f), s.path());
  BOOST_REQUIRE_MESSAGE(adapted.status == 0, adapted.err);
  BOOST_TEST(adapted.out.find("resumed from " + step_file(a, 60).string() + " at step 60\n"
                              "restored 6 entries as saved\n"
                              "copied 9 entries partly: 'model.l1.b' [4] -> [7], 'model.l1.w' [4, 2] -> [7, 2], "
                              "'model.l2.w' [2, 4] -> [2, 7], 'optim.mu.l1.b' [4] -> [7],") != std::string::npos,
             adapted.out);
  BOOST_TEST(!fs::exists(step_file(a, 61)));
  BOOST_TEST(read_bytes(step_file(a, 60)) == saved.at(step_file(a, 60).filename().string()));

  // The values a fresh run of the same seed (the checkpoint's) and width starts from.
  const fs::path g = s.path() / "g.safetensors";
  BOOST_REQUIRE(trainer(flags(s.path() / "fresh", wide, 0) + " --params-out " + quoted(g), s.path()).status == 0);

  const ckpt::checkpoint file = ckpt::load(f);
  BOOST_TEST(!file.metadata().contains("step"));  // the parameters alone, not a checkpoint of the run
  BOOST_TEST(!file.metadata().contains("seed"));
  BOOST_TEST((file.names() == std::vector<std::string>{"model.l1.b", "model.l1.w", "model.l2.b", "model.l2.w"}));
  const mlp got = model_of(f, wide), old = model_of(step_file(a, 60), narrow), init = model_of(g, wide);
  BOOST_TEST(same_bits(got.l1.w.topRows(narrow), old.l1.w));
  BOOST_TEST(same_bits(got.l1.w.bottomRows(wide - narrow), init.l1.w.bottomRows(wide - narrow)));
  BOOST_TEST(same_bits(got.l1.b.head(narrow), old.l1.b));
  BOOST_TEST(same_bits(got.l1.b.tail(wide - narrow), init.l1.b.tail(wide - narrow)));
  BOOST_TEST(same_bits(got.l2.w.leftCols(narrow), old.l2.w));
  BOOST_TEST(same_bits(got.l2.w.rightCols(wide - narrow), init.l2.w.rightCols(wide - narrow)));
  BOOST_TEST(same_bits(got.l2.b, old.l2.b));
  // The new weights are not zeros: the fresh initialization is really what they kept.
  BOOST_TEST(init.l1.w.bottomRows(wide - narrow).norm() > 0.f);
  BOOST_TEST(!same_bits(got.l1.w.topRows(narrow), init.l1.w.topRows(narrow)));

  // Training on saves the wider model; from then on a strict resume reads it, and says so.
  BOOST_REQUIRE(trainer(flags(a, wide, 70) + " --resume --adapt", s.path()).status == 0);
  BOOST_TEST(ckpt::to_int("optim.step", ckpt::load(step_file(a, 70))) == 70);
  const outcome again = trainer(flags(a, wide, 80) + " --resume", s.path());
  BOOST_REQUIRE_MESSAGE(again.status == 0, again.err);
  BOOST_TEST(again.out.find("at step 70\nrestored 15 entries as saved\n") != std::string::npos, again.out);
  BOOST_TEST(again.out.find("copied") == std::string::npos, again.out);
}

// (b) --init-from A into B: B starts at step 0 with A's newest model bit for bit, a fresh Adam
// state and the data order of its own seed; A is only read.
BOOST_AUTO_TEST_CASE(init_from_takes_the_model_alone_and_starts_adam_fresh) {
  const temp_dir s;
  const fs::path a = s.path() / "a", b = s.path() / "b", c = s.path() / "c";
  BOOST_REQUIRE(trainer(flags(a, narrow, 60), s.path()).status == 0);
  const auto saved = contents(a);
  const ckpt::checkpoint source = ckpt::load(step_file(a, 60));

  const fs::path f = s.path() / "f.safetensors";
  const outcome warm = trainer(flags(b, narrow, 0, 9) + " --init-from " + quoted(a) + " --params-out " + quoted(f),
                               s.path());
  BOOST_REQUIRE_MESSAGE(warm.status == 0, warm.err);
  BOOST_TEST(warm.out.find("initialized the model from " + step_file(a, 60).string() + " (step 60 of " + a.string() +
                           "); Adam's state and the step count start fresh\nrestored 4 entries as saved\n") !=
                 std::string::npos,
             warm.out);
  BOOST_TEST((contents(a) == saved));  // no lock, nothing set aside, nothing written

  const ckpt::checkpoint file = ckpt::load(f);
  BOOST_TEST(file.names() == names_under(source, "model"));
  for (const std::string& name : file.names()) BOOST_TEST((*file.find(name) == *source.find(name)), name);

  // B's step 0: A's model, zero moments, step 0, its own seed, and where it came from.
  const ckpt::checkpoint start = ckpt::load(step_file(b, 0));
  for (const std::string& name : names_under(source, "model")) BOOST_TEST((*start.find(name) == *source.find(name)), name);
  BOOST_TEST(ckpt::to_int("optim.step", start) == 0);
  for (const std::string prefix : {"optim.mu", "optim.nu"}) {
    BOOST_TEST(names_under(start, prefix).size() == 4u);
    for (const std::string& name : names_under(start, prefix)) {
      const auto values = start.find(name)->as<float>();
      BOOST_TEST(std::all_of(values.begin(), values.end(), [](float x) { return x == 0.f; }), name);
    }
  }
  BOOST_TEST(start.metadata().at("seed") == "9");
  BOOST_TEST(start.metadata().at("init_from") == step_file(a, 60).string());

  // One step in C: Adam's first step from zero moments, m = (1 - b1) g and v = (1 - b2) g^2, so
  // v = 0.1 m^2 for every element (A's moments, carried over, would break it).
  BOOST_REQUIRE(trainer(flags(c, narrow, 1, 9) + " --init-from " + quoted(a), s.path()).status == 0);
  const ckpt::checkpoint one = ckpt::load(step_file(c, 1));
  BOOST_TEST(ckpt::to_int("optim.step", one) == 1);
  for (const std::string& name : names_under(one, "optim.mu")) {
    const auto m = one.find(name)->as<float>();
    const auto v = one.find("optim.nu" + name.substr(std::string("optim.mu").size()))->as<float>();
    BOOST_REQUIRE(m.size() == v.size());
    for (std::size_t k = 0; k < m.size(); ++k)
      BOOST_TEST(std::abs(v[k] - 0.1f * m[k] * m[k]) <= 1e-4f * v[k] + 1e-30f, name << "[" << k << "]");
  }
  BOOST_TEST(ckpt::load(step_file(c, 1)).metadata().at("init_from") == step_file(a, 60).string());

  // The same command line with --resume continues B (from its step 0) and does not read A again:
  // its step 1 is C's, entry for entry.
  const outcome resumed = trainer(flags(b, narrow, 1, 9) + " --resume --init-from " + quoted(a), s.path());
  BOOST_REQUIRE_MESSAGE(resumed.status == 0, resumed.err);
  BOOST_TEST(resumed.out.find("--init-from " + a.string() + " not used: " + b.string() +
                              " holds steps, and --resume continues them") != std::string::npos,
             resumed.out);
  BOOST_TEST(resumed.out.find("restored 15 entries as saved") != std::string::npos, resumed.out);
  const ckpt::checkpoint b1 = ckpt::load(step_file(b, 1));
  BOOST_TEST(b1.names() == one.names());
  for (const std::string& name : one.names()) BOOST_TEST((*b1.find(name) == *one.find(name)), name);
  BOOST_TEST(b1.metadata().at("init_from") == step_file(a, 60).string());  // carried on by the resume
  BOOST_TEST((contents(a) == saved));
}

// A warm start across a change of --hidden: refused as a resume is, and with --adapt the overlap.
BOOST_AUTO_TEST_CASE(init_from_another_width_needs_adapt) {
  const temp_dir s;
  const fs::path a = s.path() / "a", b = s.path() / "b";
  BOOST_REQUIRE(trainer(flags(a, narrow, 60), s.path()).status == 0);
  const outcome strict = trainer(flags(b, wide, 0) + " --init-from " + quoted(a), s.path());
  BOOST_TEST(strict.status == 1);
  BOOST_TEST(strict.err.find("3 entries of another shape: 'model.l1.b' [4] (the template's [7])") != std::string::npos,
             strict.err);
  BOOST_TEST(!fs::exists(b));  // refused before --ckpt-dir was made

  const fs::path f = s.path() / "f.safetensors";
  const outcome adapted = trainer(flags(b, wide, 0) + " --init-from " + quoted(a) + " --adapt --params-out " + quoted(f),
                                  s.path());
  BOOST_REQUIRE_MESSAGE(adapted.status == 0, adapted.err);
  BOOST_TEST(adapted.out.find("restored 1 entry as saved\ncopied 3 entries partly: 'model.l1.b' [4] -> [7], "
                              "'model.l1.w' [4, 2] -> [7, 2], 'model.l2.w' [2, 4] -> [2, 7]\n") != std::string::npos,
             adapted.out);
  const mlp got = model_of(f, wide), old = model_of(step_file(a, 60), narrow), init = init_mlp(5, wide);
  BOOST_TEST(same_bits(got.l1.w.topRows(narrow), old.l1.w));
  BOOST_TEST(same_bits(got.l1.w.bottomRows(wide - narrow), init.l1.w.bottomRows(wide - narrow)));
  BOOST_TEST(same_bits(got.l2.w.leftCols(narrow), old.l2.w));
}

// (c) The folders a warm start refuses, each left as it was, and the flags that need another.
BOOST_AUTO_TEST_CASE(init_from_refuses_its_own_folder_and_a_folder_with_steps) {
  const temp_dir s;
  const fs::path a = s.path() / "a", b = s.path() / "b";
  BOOST_REQUIRE(trainer(flags(a, narrow, 60), s.path()).status == 0);
  BOOST_REQUIRE(trainer(flags(b, narrow, 30), s.path()).status == 0);
  const auto saved_a = contents(a), saved_b = contents(b);

  for (const fs::path& same : {a, a / ".", s.path() / "x" / ".." / "a"}) {
    fs::create_directories(s.path() / "x");
    const outcome o = trainer(flags(same, narrow, 90) + " --init-from " + quoted(a), s.path());
    BOOST_TEST(o.status == 2, same);
    BOOST_TEST(o.err.find("are the same folder") != std::string::npos, o.err);
    BOOST_TEST((contents(a) == saved_a));
  }

  const outcome held = trainer(flags(b, narrow, 90) + " --init-from " + quoted(a), s.path());
  BOOST_TEST(held.status == 2);
  BOOST_TEST(held.err.find(b.string() + " already holds checkpoints (up to step 30): --init-from starts a new run") !=
                 std::string::npos,
             held.err);
  BOOST_TEST((contents(b) == saved_b));

  const outcome nowhere = trainer(flags(s.path() / "c", narrow, 10) + " --init-from " + quoted(s.path() / "none"), s.path());
  BOOST_TEST(nowhere.status == 1);
  BOOST_TEST(nowhere.err.find("mlp_trainer: --init-from " + (s.path() / "none").string() + ": ") != std::string::npos,
             nowhere.err);
  BOOST_TEST(!fs::exists(s.path() / "c"));

  const outcome empty = trainer(flags(s.path() / "c", narrow, 10) + " --init-from " + quoted(s.path() / "x"), s.path());
  BOOST_TEST(empty.status == 1);
  BOOST_TEST(empty.err.find("no step of it loads (it holds none)") != std::string::npos, empty.err);

  const outcome alone = trainer(flags(s.path() / "c", narrow, 10) + " --adapt", s.path());
  BOOST_TEST(alone.status == 2);
  BOOST_TEST(alone.err.find("--adapt needs --resume or --init-from") != std::string::npos, alone.err);
  BOOST_TEST(!fs::exists(s.path() / "c"));
}

// A new run refused over a folder that holds steps leaves every step there, whatever its --keep
// (the trainer used to open the folder for writing first, which applied --keep before refusing).
BOOST_AUTO_TEST_CASE(a_refused_run_applies_no_retention) {
  const temp_dir s;
  const fs::path a = s.path() / "a";
  BOOST_REQUIRE(trainer(flags(a, narrow, 90), s.path()).status == 0);  // steps 30, 60, 90, --keep 0
  const auto saved = contents(a);
  const outcome o = trainer("--keep 1 --log-every 1000 --hidden 4 --steps 120 --ckpt-dir " + quoted(a), s.path());
  BOOST_TEST(o.status == 2);
  BOOST_TEST(o.err.find("already holds checkpoints (up to step 90): pass --resume") != std::string::npos, o.err);
  BOOST_TEST((contents(a) == saved));
}

// --help documents the three flags.
BOOST_AUTO_TEST_CASE(help_documents_the_flags) {
  const temp_dir s;
  const outcome o = trainer("--help", s.path());
  BOOST_TEST(o.status == 0);
  for (const char* flag : {"--init-from RUN", "--adapt", "--params-out F", "not read", "another --hidden"})
    BOOST_TEST(o.out.find(flag) != std::string::npos, flag);
}

BOOST_AUTO_TEST_SUITE_END()  // test_trainer_changes
