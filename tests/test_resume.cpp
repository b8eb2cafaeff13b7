// Bit-exact resume: N steps in one run and N/2 + stop + resume for the rest give byte-identical
// parameter files, through the library API and through the example binary; and the control,
// resuming without the optimizer state, does not.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include "mlp.hpp"

#include <ckpt/adam.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/snapshot.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

BOOST_AUTO_TEST_SUITE(test_resume)

namespace fs = std::filesystem;
using namespace mlp_example;

namespace {

using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

constexpr std::uint64_t seed = 7;
constexpr int batch = 32;
constexpr std::int64_t total = 400;
const ckpt::adam opt{.lr = 0.01};

struct run {
  dataset data = two_spirals(seed);
  shuffled_batches order{seed, static_cast<int>(data.x.cols()), batch};
  mlp params = init_mlp(seed);
  ckpt::adam_state<mlp> state = opt.init(params);

  void train_to(std::int64_t steps) {
    while (state.step < steps) train_step(data, order, opt, params, state);
  }
  // What the example trainer saves: the training state and the data position.
  [[nodiscard]] std::vector<ckpt::section> sections() {
    std::vector<ckpt::section> out = ckpt::training_state(params, state);
    out.emplace_back(order.position(), "data");
    return out;
  }
  void save(ckpt::checkpoint_manager& manager) { manager.save_async(state.step, sections()); }
  // As the trainer reads it back (strict), or the training state alone.
  void restore(const ckpt::checkpoint& t, bool with_data_position = true) {
    std::vector<ckpt::section> read = ckpt::training_state(params, state);
    data_position position = order.position();
    if (with_data_position) read.emplace_back(position, "data");
    // Strict: the data entries are outside the sections read when the data position is not.
    BOOST_TEST(ckpt::read_params(t, read).restored == (with_data_position ? 15u : 13u));
    if (with_data_position) order.restore(position);
  }
};

// The final parameters as the file a user would compare.
std::string params_file(const mlp& params, const fs::path& path) {
  ckpt::save(path, ckpt::of_params(params, "model"));
  return read_bytes(path);
}

}  // namespace

BOOST_AUTO_TEST_CASE(library_api_resume_is_bit_exact) {
  const temp_dir s;
  run straight;
  straight.train_to(total);
  const std::string expected = params_file(straight.params, s.path() / "straight.safetensors");

  {
    run first_half;
    first_half.train_to(total / 2);
    ckpt::checkpoint_manager manager(s.path() / "ckpt", {.max_to_keep = 2});
    first_half.save(manager);
  }  // the process "stops": everything of the first run is gone

  run resumed;  // fresh parameters: only the template of the restore
  ckpt::checkpoint_manager manager(s.path() / "ckpt", {.max_to_keep = 2});
  const auto latest = manager.load_latest();
  BOOST_REQUIRE(latest.has_value());
  resumed.restore(*latest);
  BOOST_TEST(resumed.state.step == total / 2);
  // Mid-epoch: the data position holds the engine of the epoch and how far into it the run got.
  BOOST_TEST(ckpt::to_int("data.served", *latest) == (total / 2) % (1000 / batch));
  resumed.train_to(total);
  BOOST_TEST(params_file(resumed.params, s.path() / "resumed.safetensors") == expected);
}

// Resuming with the parameters and step but a fresh Adam state gives other parameters, so the
// test above really depends on restoring the optimizer.
BOOST_AUTO_TEST_CASE(control_resume_without_optimizer_state_differs) {
  const temp_dir s;
  run straight;
  straight.train_to(total);
  const std::string expected = params_file(straight.params, s.path() / "straight.safetensors");

  run first_half;
  first_half.train_to(total / 2);
  const ckpt::checkpoint saved = ckpt::snapshot_arena().snapshot(first_half.sections());

  run resumed;
  resumed.restore(saved);
  const std::int64_t step = resumed.state.step;
  resumed.state = opt.init(resumed.params);  // same batches, fresh moments
  resumed.state.step = step;
  resumed.train_to(total);
  BOOST_TEST(params_file(resumed.params, s.path() / "control.safetensors") != expected);

  // And the data order alone matters as well: the full training state without the data position
  // (the loader starts its first epoch again) differs too.
  run restarted;
  restarted.restore(saved, /*with_data_position=*/false);
  restarted.train_to(total);
  BOOST_TEST(params_file(restarted.params, s.path() / "restarted.safetensors") != expected);

  // And with both, the same run continues.
  run complete;
  complete.restore(saved);
  complete.train_to(total);
  BOOST_TEST(params_file(complete.params, s.path() / "complete.safetensors") == expected);
}

#ifdef CKPT_MLP_TRAINER

namespace {

// Runs the example binary with `args`, its output into `log`; returns its exit status.
int trainer(const std::string& args, const fs::path& log) {
  const std::string command = std::string("'") + CKPT_MLP_TRAINER + "' " + args + " > '" + log.string() + "' 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string flags(const fs::path& dir, std::int64_t steps, std::int64_t save_every = 100) {
  return "--seed 3 --batch 48 --lr 0.02 --save-every " + std::to_string(save_every) + " --keep 2 --log-every 1000 --ckpt-dir '" +
         dir.string() + "' --steps " + std::to_string(steps);
}

std::string checkpoint_name(std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%010lld.safetensors", static_cast<long long>(step));
  return name;
}

// Every entry (not the metadata, which holds the wall time) of two checkpoints is identical.
void same_entries(const fs::path& a, const fs::path& b) {
  const ckpt::checkpoint x = ckpt::load(a), y = ckpt::load(b);
  BOOST_TEST(x.names() == y.names());
  for (const auto& [name, t] : x) BOOST_TEST((y.find(name) && *y.find(name) == t), name);
}

}  // namespace

BOOST_AUTO_TEST_CASE(example_binary_resume_is_bit_exact) {
  const temp_dir s;
  const fs::path a = s.path() / "a", b = s.path() / "b";
  BOOST_REQUIRE(trainer(flags(a, 600) + " --params-out '" + (s.path() / "a.safetensors").string() + "'", s.path() / "a.log") == 0);
  // Step 300 ends an epoch (1000 points: 20 batches of 48): the resumed run starts the next one
  // from the engine the checkpoint holds. The library test above resumes mid-epoch.
  BOOST_REQUIRE(trainer(flags(b, 300), s.path() / "b1.log") == 0);
  BOOST_REQUIRE(trainer(flags(b, 600) + " --resume --params-out '" + (s.path() / "b.safetensors").string() + "'",
                        s.path() / "b2.log") == 0);
  BOOST_TEST(read_bytes(s.path() / "a.safetensors") == read_bytes(s.path() / "b.safetensors"));
  same_entries(a / checkpoint_name(600), b / checkpoint_name(600));
  BOOST_TEST(read_bytes(a / "loss.csv") == read_bytes(b / "loss.csv"));
  BOOST_TEST(read_bytes(s.path() / "b2.log").find("resumed from") != std::string::npos);
  // Without --resume an existing run is not overwritten.
  BOOST_TEST(trainer(flags(b, 700), s.path() / "b3.log") == 2);
}

// A damaged newest step: --resume continues from the step before it, with nothing done by hand,
// and reaches the parameters of an uninterrupted run.
BOOST_AUTO_TEST_CASE(example_binary_resumes_past_a_damaged_newest_step) {
  const temp_dir s;
  const fs::path a = s.path() / "a", b = s.path() / "b";
  BOOST_REQUIRE(trainer(flags(a, 400) + " --params-out '" + (s.path() / "a.safetensors").string() + "'", s.path() / "a.log") == 0);
  BOOST_REQUIRE(trainer(flags(b, 300), s.path() / "b1.log") == 0);
  {
    // One byte of the data of step 300 (the last one) flipped.
    std::fstream f(b / checkpoint_name(300), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-40, std::ios::end);
    const char c = static_cast<char>(f.get());
    f.seekp(-40, std::ios::end);
    f.put(static_cast<char>(c ^ 1));
  }
  BOOST_REQUIRE(trainer(flags(b, 400) + " --resume --params-out '" + (s.path() / "b.safetensors").string() + "'",
                        s.path() / "b2.log") == 0);
  const std::string log = read_bytes(s.path() / "b2.log");
  BOOST_TEST(log.find("skipped damaged step 300 (set aside as ckpt-0000000300.safetensors.damaged)") != std::string::npos, log);
  BOOST_TEST(log.find("at step 200") != std::string::npos, log);
  BOOST_TEST(read_bytes(s.path() / "a.safetensors") == read_bytes(s.path() / "b.safetensors"));
  BOOST_TEST(fs::exists(b / (checkpoint_name(300) + ".damaged")));
}

BOOST_AUTO_TEST_CASE(example_binary_resume_from_empty_folder_starts_fresh) {
  const temp_dir s;
  BOOST_REQUIRE(trainer(flags(s.path() / "a", 50) + " --resume", s.path() / "a.log") == 0);
  BOOST_TEST(read_bytes(s.path() / "a.log").find("starting fresh") != std::string::npos);
  BOOST_TEST(fs::exists(s.path() / "a" / checkpoint_name(50)));
}

// Issue 35, finding 3: a folder under the name of step 100's file, keep 2: `mlp_trainer --resume`
// exited 1 at its second save on every attempt. Retention never blocks a save: the folder is set
// aside (it is not a checkpoint) and the run goes on, run after run.
BOOST_AUTO_TEST_CASE(example_binary_resumes_past_a_step_it_cannot_delete) {
  const temp_dir s;
  const fs::path b = s.path() / "b";
  BOOST_REQUIRE(trainer(flags(b, 300), s.path() / "b1.log") == 0);
  fs::create_directory(b / checkpoint_name(100));
  std::ofstream(b / checkpoint_name(100) / "notes.txt") << "mine";
  for (const std::int64_t steps : {500, 700}) {
    const int status = trainer(flags(b, steps) + " --resume", s.path() / "b2.log");
    BOOST_TEST(status == 0, read_bytes(s.path() / "b2.log"));
  }
  BOOST_TEST(read_bytes(b / (checkpoint_name(100) + ".damaged") / "notes.txt") == "mine");
  BOOST_TEST(fs::exists(b / checkpoint_name(700)));
}

// Issue 35, finding 4: steps owned by root with mode 0600, resumed by user nobody, were set aside
// and the trainer printed "starting fresh" and wrote new steps from a fresh model over the run.
// Steps that exist but cannot be read are an error: the trainer exits non-zero with it, and
// every step stays in place.
BOOST_AUTO_TEST_CASE(example_binary_never_starts_fresh_over_steps_it_cannot_read) {
  const temp_dir s;
  const fs::path b = s.path() / "b";
  BOOST_REQUIRE(trainer(flags(b, 300), s.path() / "b1.log") == 0);
  const std::vector<std::string> before = ckpt_test::folder_listing(b);
  const bool root = ::geteuid() == 0;
  for (const std::string& name : before)
    if (name.starts_with("ckpt-"))
      fs::permissions(b / name, root ? fs::perms::owner_read | fs::perms::owner_write : fs::perms::none);
  fs::permissions(s.path(), fs::perms::all);
  fs::permissions(b, fs::perms::all);
  for (const std::string& name : {std::string(".ckpt-manager.lock"), std::string("loss.csv")})
    fs::permissions(b / name, fs::perms::all);
  const fs::path log = s.path() / "b2.log";
  std::fflush(nullptr);
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    if (root && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(126);
    if (std::freopen(log.c_str(), "w", stdout) == nullptr || ::dup2(STDOUT_FILENO, STDERR_FILENO) < 0) ::_exit(125);
    const std::string folder = b.string();
    ::execl(CKPT_MLP_TRAINER, CKPT_MLP_TRAINER, "--seed", "3", "--batch", "48", "--lr", "0.02", "--save-every", "100",
            "--keep", "2", "--log-every", "1000", "--ckpt-dir", folder.c_str(), "--steps", "500", "--resume",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_REQUIRE(WIFEXITED(status));
  const std::string out = read_bytes(log);
  BOOST_TEST(WEXITSTATUS(status) == 1, out);
  BOOST_TEST(out.find("mlp_trainer: ckpt: cannot open '" + (b / checkpoint_name(300)).string() + "': Permission denied") !=
                 std::string::npos,
             out);
  BOOST_TEST(out.find("starting fresh") == std::string::npos, out);
  BOOST_TEST(ckpt_test::folder_listing(b) == before);  // nothing set aside, nothing written
}

// A resume that finds only damaged steps would start a fresh run over them: it stops instead,
// naming them and the way on; once they are pruned (ckpt prune --damaged), it starts fresh.
BOOST_AUTO_TEST_CASE(example_binary_never_starts_fresh_over_damaged_steps) {
  const temp_dir s;
  const fs::path b = s.path() / "b";
  BOOST_REQUIRE(trainer(flags(b, 200), s.path() / "b1.log") == 0);
  for (const std::int64_t step : {100, 200}) {
    const fs::path file = b / checkpoint_name(step);
    fs::resize_file(file, fs::file_size(file) / 2);
  }
  BOOST_TEST(trainer(flags(b, 300) + " --resume", s.path() / "b2.log") == 1);
  const std::string out = read_bytes(s.path() / "b2.log");
  BOOST_TEST(out.find("mlp_trainer: no step of " + b.string() + " loads, but it holds damaged steps: 100 (" +
                      checkpoint_name(100) + ".damaged), 200 (" + checkpoint_name(200) +
                      ".damaged); nothing was trained") != std::string::npos,
             out);
  BOOST_TEST(out.find("starting fresh") == std::string::npos, out);
  BOOST_TEST(!fs::exists(b / checkpoint_name(300)));
  ckpt::checkpoint_manager(b, {.max_to_keep = 0}).remove_damaged();
  BOOST_TEST(trainer(flags(b, 100) + " --resume", s.path() / "b3.log") == 0);
  BOOST_TEST(read_bytes(s.path() / "b3.log").find("starting fresh") != std::string::npos);
}

namespace {

// Runs the example trainer into `dir` up to `steps` and sends it SIGTERM once its first
// checkpoint exists (so its handler is installed); returns its output, `log`'s text.
std::string run_and_terminate(const fs::path& dir, std::int64_t steps, const fs::path& log) {
  std::fflush(nullptr);  // or the child would write the test log's buffered lines again
  const pid_t child = ::fork();
  BOOST_REQUIRE(child >= 0);
  if (child == 0) {
    std::freopen(log.c_str(), "w", stdout);
    const std::string folder = dir.string(), count = std::to_string(steps);
    ::execl(CKPT_MLP_TRAINER, CKPT_MLP_TRAINER, "--seed", "3", "--batch", "48", "--lr", "0.02", "--save-every",
            "500", "--keep", "2", "--log-every", "1000", "--ckpt-dir", folder.c_str(), "--steps", count.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!fs::exists(dir / checkpoint_name(500)) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(child, SIGTERM);
  int status = 0;
  BOOST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_REQUIRE(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
  return read_bytes(log);
}

}  // namespace

// Preemption: SIGTERM finishes the step, saves and exits 0; resuming to the same total gives the
// parameters of an uninterrupted run. The run must be stopped by the signal: should it end before
// the signal arrives, it runs again with four times the steps, and the test fails if that one
// is not stopped either (as when the trainer ignored the signal).
BOOST_AUTO_TEST_CASE(example_binary_survives_sigterm) {
  const temp_dir s;
  const fs::path a = s.path() / "a", b = s.path() / "b";
  const std::string stopped_at = "stopped by a signal at step ";
  std::int64_t steps = 20000;
  std::string log = run_and_terminate(b, steps, s.path() / "b1.log");
  if (log.find(stopped_at) == std::string::npos) {
    BOOST_TEST_MESSAGE("the run of " << steps << " steps ended before the signal; again with " << 4 * steps);
    steps *= 4;
    fs::remove_all(b);
    log = run_and_terminate(b, steps, s.path() / "b1.log");
  }
  const std::size_t at = log.find(stopped_at);
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, "the trainer was not stopped by SIGTERM:\n" + log);
  const std::int64_t stop = std::stoll(log.substr(at + stopped_at.size()));
  BOOST_TEST_MESSAGE("stopped at step " << stop << " of " << steps);
  BOOST_TEST(stop >= 500);
  BOOST_TEST(stop < steps);
  BOOST_TEST(fs::exists(b / checkpoint_name(stop)));  // the preemption's own checkpoint

  BOOST_REQUIRE(trainer(flags(a, steps, 5000) + " --params-out '" + (s.path() / "a.safetensors").string() + "'", s.path() / "a.log") == 0);
  BOOST_REQUIRE(trainer(flags(b, steps, 5000) + " --resume --params-out '" + (s.path() / "b.safetensors").string() + "'",
                        s.path() / "b2.log") == 0);
  BOOST_TEST(read_bytes(s.path() / "b2.log").find("at step " + std::to_string(stop)) != std::string::npos);
  BOOST_TEST(read_bytes(s.path() / "a.safetensors") == read_bytes(s.path() / "b.safetensors"));
}

#endif

BOOST_AUTO_TEST_SUITE_END()  // test_resume
