// The command-line tool `ckpt` (tools/), run as a program on checkpoints the library writes: the
// exact stdout, stderr and exit status of each subcommand, its --help and its usage errors; and
// the names of a checkpoint_manager's files, which these tests write and damage directly.
#include <boost/test/unit_test.hpp>

#include "support.hpp"

#include <ckpt/adapt.hpp>
#include <ckpt/error.hpp>
#include <ckpt/file.hpp>
#include <ckpt/torch.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/sharded.hpp>
#include <ckpt/version.hpp>

#include <boost/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <stdlib.h>  // posix_openpt, grantpt, unlockpt, ptsname
#include <poll.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

BOOST_AUTO_TEST_SUITE(test_cli)

namespace fs = std::filesystem;

namespace {

// The file of `step` in a checkpoint_manager's `folder` (checkpoint_manager::path_of).
fs::path step_file(const fs::path& folder, std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "ckpt-%010lld.safetensors", static_cast<long long>(step));
  return folder / name;
}

using ckpt_test::folder_listing;
using ckpt_test::message_of;
using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

struct result {
  int status = -1;
  std::string out, err;
};

// Starts the tool with `args` in the working folder `cwd` (so that relative paths in messages
// are short), its descriptors set up by `actions`, which this destroys. With a `launcher` (a
// program and its arguments), the launcher is started with the tool and `args` after its own.
pid_t spawn_tool(const fs::path& cwd, const std::vector<std::string>& args, posix_spawn_file_actions_t& actions,
                 const std::vector<std::string>& launcher = {}) {
  std::vector<std::string> argv_strings = launcher;
  argv_strings.push_back(CKPT_TOOL);
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The parent changes folder around the spawn (posix_spawn has no chdir action before glibc
  // 2.29's non-portable one), which is safe in this single-threaded test.
  const fs::path before = fs::current_path();
  fs::current_path(cwd);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  fs::current_path(before);
  posix_spawn_file_actions_destroy(&actions);
  BOOST_REQUIRE_EQUAL(rc, 0);
  return pid;
}

// Waits for `pid` and returns its exit status. With a deadline (`seconds` > 0), the tool is
// killed (and the test fails) if it has not ended by then: a command that waits on a FIFO must
// fail the suite, not hang it.
int exit_status_of(pid_t pid, int seconds = 0) {
  int wstatus = 0;
  if (seconds == 0) {
    BOOST_REQUIRE_EQUAL(waitpid(pid, &wstatus, 0), pid);
  } else {
    for (int waited = 0; ::waitpid(pid, &wstatus, WNOHANG) == 0; ++waited) {
      if (waited == seconds * 20) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &wstatus, 0);
        BOOST_FAIL("the tool did not end within " + std::to_string(seconds) + " s");
      }
      ::usleep(50'000);
    }
  }
  BOOST_REQUIRE(WIFEXITED(wstatus));
  return WEXITSTATUS(wstatus);
}

// Where a tool started by `start` writes its stdout and stderr: files beside what it reads (no
// pipe to deadlock on).
fs::path stdout_file(const fs::path& cwd) { return cwd / ".stdout"; }
fs::path stderr_file(const fs::path& cwd) { return cwd / ".stderr"; }

// Starts the tool with `args` (through `launcher`, if given: see spawn_tool), its stdout and
// stderr sent to files; `finish` waits for it.
pid_t start(const fs::path& cwd, const std::vector<std::string>& args, const std::vector<std::string>& launcher = {}) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_file(cwd).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, stderr_file(cwd).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  return spawn_tool(cwd, args, actions, launcher);
}

// Waits for the tool `start` started (at most `seconds`, if given: see exit_status_of) and
// returns what it did.
result finish(const fs::path& cwd, pid_t pid, int seconds = 0) {
  const int status = exit_status_of(pid, seconds);
  result r{status, read_bytes(stdout_file(cwd)), read_bytes(stderr_file(cwd))};
  fs::remove(stdout_file(cwd));
  fs::remove(stderr_file(cwd));
  return r;
}

// Runs the tool with `args` and waits for it (at most `seconds`, if given: see exit_status_of).
result run(const fs::path& cwd, const std::vector<std::string>& args, int seconds = 0) {
  return finish(cwd, start(cwd, args), seconds);
}

// Runs the tool with `args` under a limit of `descriptors` open files (RLIMIT_NOFILE, set by the
// shell before it becomes the tool), so that opening a file fails with EMFILE.
[[maybe_unused]] result run_with_descriptors(const fs::path& cwd, int descriptors, const std::vector<std::string>& args) {
  return finish(cwd, start(cwd, args, {"/bin/sh", "-c", "ulimit -n " + std::to_string(descriptors) + " && exec \"$0\" \"$@\""}),
                20);
}

// Runs the tool with a terminal (a pseudo-terminal) as its stdout, and returns its exit status and
// what it wrote there (the terminal turns "\n" into "\r\n").
result run_on_terminal(const fs::path& cwd, const std::vector<std::string>& args) {
  const int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  BOOST_REQUIRE(master >= 0);
  BOOST_REQUIRE(grantpt(master) == 0 && unlockpt(master) == 0);
  const int slave = ::open(ptsname(master), O_RDWR | O_NOCTTY | O_CLOEXEC);
  BOOST_REQUIRE(slave >= 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, slave, STDOUT_FILENO);
  const pid_t pid = spawn_tool(cwd, args, actions);
  ::close(slave);
  // Until the child's end closes the terminal (read then fails with EIO); bounded by a timeout.
  result r;
  for (char buffer[4096];;) {
    pollfd p{master, POLLIN, 0};
    if (::poll(&p, 1, 20000) != 1) break;
    const ssize_t n = ::read(master, buffer, sizeof buffer);
    if (n <= 0) break;
    r.out.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(master);
  r.status = exit_status_of(pid);
  return r;
}

ckpt::tensor f32(ckpt::dims shape, std::vector<float> values) {
  return ckpt::tensor::copy_of(ckpt::dtype::f32, std::move(shape), std::as_bytes(std::span(values)));
}

// The checkpoint most tests use: two F32 entries, an I32 counter, a metadata entry.
ckpt::checkpoint sample() {
  return ckpt::concat({ckpt::of_tensor("l1.b", f32({2}, {0.5f, -1.0f})),
                       ckpt::of_tensor("l1.w", f32({2, 3}, {1, 2, 3, 4, 5, 6})), ckpt::of_int("step", 7)})
      .with_metadata({{"note", "first"}});
}

// `t` with the entry `name` replaced by `x`.
ckpt::checkpoint with(const ckpt::checkpoint& t, const std::string& name, const ckpt::tensor& x) {
  std::vector<ckpt::checkpoint::entry> entries;
  for (const auto& e : t)
    if (e.first != name) entries.push_back(e);
  entries.emplace_back(name, x);
  return ckpt::checkpoint(std::move(entries), t.metadata());
}

// Flips the bits of the file's last byte (in the data section, so only the digest notices).
void flip_last_byte(const fs::path& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  const char c = static_cast<char>(f.get());
  f.seekp(-1, std::ios::end);
  f.put(static_cast<char>(~c));
}

std::string digest_of(const fs::path& path) {
  return ckpt::load(path, {.verify_digest = false}).metadata().at("ckpt.xxh3_64_file");
}

// What `f` returns when run in the folder `cwd`: the library's message for a relative path, as
// the tool, run in `cwd`, prints it.
template <class F>
std::string in_folder(const fs::path& cwd, F&& f) {
  const fs::path before = fs::current_path();
  fs::current_path(cwd);
  try {
    std::string out = f();
    fs::current_path(before);
    return out;
  } catch (...) {
    fs::current_path(before);
    throw;
  }
}

void check_usage_error(const temp_dir& d, const std::vector<std::string>& args, const std::string& err) {
  const result r = run(d.path(), args);
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out == "");
  BOOST_TEST(r.err == err);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(manager_folder_listing)

BOOST_AUTO_TEST_CASE(a_read_only_manager_lists_the_manager_s_file_names_only) {
  const temp_dir d;
  ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
  m.save(10, {sample()});
  m.save(3000000000, {sample()});
  // The names the tool's tests below write and damage directly.
  BOOST_TEST(m.path_of(10) == step_file(d.path() / "run", 10));
  BOOST_TEST(m.path_of(3000000000) == d.path() / "run" / "ckpt-3000000000.safetensors");
  for (const char* decoy : {"ckpt-7.safetensors", "ckpt-00000000007.safetensors", "ckpt-0000000008.json",
                            ".ckpt-0000000009.safetensors.tmp-abcdef", "notes.txt"})
    std::ofstream(d.path() / "run" / decoy) << "x";
  // Read-only and lock-free: listing works while the manager holds the folder.
  BOOST_TEST(ckpt::checkpoint_manager(d.path() / "run", {.read_only = true}).steps() ==
             (std::vector<std::int64_t>{10, 3000000000}));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(usage)

BOOST_AUTO_TEST_CASE(the_tool_and_every_subcommand_print_their_help_and_the_tool_its_version) {
  const temp_dir d;
  const result top = run(d.path(), {"--help"});
  BOOST_TEST(top.status == 0);
  BOOST_TEST(top.err == "");
  BOOST_TEST(top.out.starts_with("Inspect, verify, compare and convert safetensors checkpoints"));
  for (const std::string sub : {"inspect", "verify", "diff", "convert", "prune"}) {
    BOOST_TEST_CONTEXT(sub) {
      BOOST_TEST(top.out.find("\n  " + sub + " ") != std::string::npos);
      const result r = run(d.path(), {sub, "--help"});
      BOOST_TEST(r.status == 0);
      BOOST_TEST(r.err == "");
      BOOST_TEST(r.out.find("Usage: ckpt " + sub + " [OPTIONS]") != std::string::npos);
      BOOST_TEST(r.out.find("Exit status") != std::string::npos);
    }
  }
  const result convert = run(d.path(), {"convert", "-h"});
  for (const std::string option : {"--dtype", "--rename", "--keep", "--drop", "--keep-matching", "--drop-matching",
                                   "--shard-size", "--base-name", "--no-digest"})
    BOOST_TEST(convert.out.find(option) != std::string::npos, option);
  BOOST_TEST(run(d.path(), {"diff", "-h"}).out.find("--metadata") != std::string::npos);
  const result version = run(d.path(), {"--version"});
  BOOST_TEST(version.status == 0);
  // The version of CMake's project(), through the generated ckpt/version.hpp.
  BOOST_TEST(version.out == std::string("ckpt ") + CKPT_PROJECT_VERSION + "\n");
  BOOST_TEST(std::string(CKPT_VERSION_STRING) == CKPT_PROJECT_VERSION);
  BOOST_TEST(std::to_string(CKPT_VERSION_MAJOR) + "." + std::to_string(CKPT_VERSION_MINOR) + "." +
                 std::to_string(CKPT_VERSION_PATCH) ==
             CKPT_PROJECT_VERSION);
}

BOOST_AUTO_TEST_CASE(the_tool_alone_prints_its_help_and_exits_with_the_usage_error_status) {
  // What `ckpt --help` prints, the list of subcommands included, on stdout; since nothing was
  // done, status 2 (a usage error, as for any missing argument) and why on stderr.
  const temp_dir d;
  const result alone = run(d.path(), {});
  BOOST_TEST(alone.status == 2);
  BOOST_TEST(alone.out == run(d.path(), {"--help"}).out);
  for (const std::string sub : {"inspect", "verify", "diff", "convert", "prune"})
    BOOST_TEST(alone.out.find("\n  " + sub + " ") != std::string::npos, sub);
  BOOST_TEST(alone.out.find("Run 'ckpt SUBCOMMAND --help'") != std::string::npos);
  BOOST_TEST(alone.err == "A subcommand is required\n");
}

BOOST_AUTO_TEST_CASE(usage_errors_exit_2_with_a_message_on_stderr) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample());
  const std::string more = "\nRun with --help for more information.\n";
  check_usage_error(d, {"frobnicate"}, "A subcommand is required" + more);
  check_usage_error(d, {"inspect"}, "PATH is required" + more);
  check_usage_error(d, {"diff", "a.safetensors"},
                    "ckpt: diff with one PATH compares two steps of a checkpoint_manager folder: ckpt diff RUN --step S "
                    "--step T\n");
  check_usage_error(d, {"diff", "a.safetensors", "a.safetensors", "--atol", "-1"},
                    "--atol: '-1' is not a number >= 0" + more);
  check_usage_error(d, {"convert", "a.safetensors", "b.safetensors", "--dtype", "i32"},
                    "--dtype: i32 not in {bf16,f16,f32,f64}" + more);
  check_usage_error(d, {"convert", "a.safetensors", "b", "--shard-size", "2XB"},
                    "ckpt convert: --shard-size: ckpt: the size '2XB' has an unknown unit (expected a byte count "
                    "such as 2GB, 500MB, 1GiB or 123456)\n");
  check_usage_error(d, {"convert", "a.safetensors", "b", "--shard-size", "0"},
                    "ckpt convert: --shard-size: ckpt: the size '0' is zero (expected a byte count such as 2GB, "
                    "500MB, 1GiB or 123456)\n");
  check_usage_error(d, {"convert", "a.safetensors", "b.safetensors", "--rename", "l1"},
                    "ckpt convert: --rename 'l1' has no '=' (expected 'REGEX=REPLACEMENT')\n");
  const result bad_regex = run(d.path(), {"convert", "a.safetensors", "b.safetensors", "--rename", "(l1=x"});
  BOOST_TEST(bad_regex.status == 2);
  BOOST_TEST(bad_regex.err.starts_with("ckpt convert: --rename '(l1=x': ckpt: the regular expression '(l1' is invalid: "));
  check_usage_error(d, {"convert", "a.safetensors", "b.safetensors", "--rename", "^(l1)=$2"},
                    "ckpt convert: --rename '^(l1)=$2': ckpt: the replacement '$2' does not fit the regular "
                    "expression '^(l1)': Rewrite schema requests 2 matches, but the regexp only has 1 parenthesized "
                    "subexpressions.\n");
  fs::create_directory(d.path() / "out");
  check_usage_error(d, {"convert", "a.safetensors", "out"},
                    "ckpt convert: 'out' is a folder: give --shard-size to write a sharded checkpoint into it, or a "
                    "file name\n");
  check_usage_error(d, {"convert", "a.safetensors", "b.safetensors", "--keep", "l2."},
                    "ckpt convert: no entry of 'a.safetensors' is left after --keep/--keep-matching/--drop/"
                    "--drop-matching (it has 3)\n");
  BOOST_TEST(!fs::exists(d.path() / "b.safetensors"));
  BOOST_TEST(!fs::exists(d.path() / "b"));
}

BOOST_AUTO_TEST_CASE(unreadable_inputs_exit_2_with_the_library_s_message) {
  const temp_dir d;
  for (const std::string sub : {"inspect", "verify"}) {
    const result r = run(d.path(), {sub, "missing.safetensors"});
    BOOST_TEST(r.status == 2, sub);
    BOOST_TEST(r.out == "");
    // The library's message, naming the file as given to the tool.
    BOOST_TEST(r.err == "ckpt: cannot open 'missing.safetensors': No such file or directory\n");
  }
  // A folder with neither a manager's checkpoints nor a sharded index: the library's message.
  fs::create_directory(d.path() / "empty");
  const result empty = run(d.path(), {"inspect", "empty"});
  BOOST_TEST(empty.status == 2);
  BOOST_TEST(empty.err == in_folder(d.path(), [] {
               return message_of<ckpt::error>([] { (void)ckpt::load("empty"); });
             }) + "\n");
  BOOST_TEST(empty.err.find("'empty'") != std::string::npos);

  std::ofstream(d.path() / "junk.safetensors") << "junk";
  const std::string junk = in_folder(d.path(), [] {
    return message_of<ckpt::format_error>([] { (void)ckpt::load("junk.safetensors"); });
  });
  for (const auto& args : {std::vector<std::string>{"diff", "junk.safetensors", "junk.safetensors"},
                                              {"convert", "junk.safetensors", "b.safetensors"}}) {
    const result r = run(d.path(), args);
    BOOST_TEST(r.status == 2);
    BOOST_TEST(r.out == "");
    BOOST_TEST(r.err == junk + "\n");
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(inspect)

BOOST_AUTO_TEST_CASE(a_file_is_shown_as_a_table_with_totals_and_metadata) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample(), {.digest = true});
  const result r = run(d.path(), {"inspect", "a.safetensors"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out ==
             "name  dtype  shape   parameters  bytes\n"
             "l1.b  F32    [2]              2      8\n"
             "l1.w  F32    [2, 3]           6     24\n"
             "step  I32    [1]              1      4\n"
             "total: 3 entries, 9 parameters, 36 bytes\n"
             "__metadata__:\n"
             "  ckpt.xxh3_64_file: " + digest_of(d.path() / "a.safetensors") + "\n"
             "  format: pt\n"
             "  note: first\n");
  const result filtered = run(d.path(), {"inspect", "a.safetensors", "--filter", "l1.w"});
  BOOST_TEST(filtered.status == 0);
  BOOST_TEST(filtered.out.starts_with("name  dtype  shape   parameters  bytes\n"
                                      "l1.w  F32    [2, 3]           6     24\n"
                                      "total: 1 entry, 6 parameters, 24 bytes\n"));
  ckpt::save(d.path() / "bare.safetensors", ckpt::of_tensor("x", f32({}, {1})), {.digest = false});
  BOOST_TEST(run(d.path(), {"inspect", "bare.safetensors"}).out ==
             "name  dtype  shape  parameters  bytes\n"
             "x     F32    []              1      4\n"
             "total: 1 entry, 1 parameter, 4 bytes\n"
             "__metadata__:\n"
             "  format: pt\n");
}

BOOST_AUTO_TEST_CASE(json_gives_scripts_the_entries_totals_and_metadata) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample(), {.digest = false});
  const result r = run(d.path(), {"inspect", "--json", "a.safetensors", "--filter", "l1."});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.out.ends_with("}\n"));
  BOOST_TEST(boost::json::parse(r.out) ==
             boost::json::parse(R"({"path": "a.safetensors",
               "entries": [{"name": "l1.b", "dtype": "F32", "shape": [2], "parameters": 2, "bytes": 8},
                           {"name": "l1.w", "dtype": "F32", "shape": [2, 3], "parameters": 6, "bytes": 24}],
               "total": {"entries": 2, "parameters": 8, "bytes": 32},
               "metadata": {"format": "pt", "note": "first"}})"));
}

BOOST_AUTO_TEST_CASE(a_manager_folder_lists_its_steps) {
  const temp_dir d;
  {
    ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
    m.save(5, {sample()});
    m.save(12, {ckpt::of_tensor("l1.b", f32({2}, {1, 2}))});
  }
  const auto wall_time = [&](std::int64_t step) {
    return ckpt::load(step_file(d.path() / "run", step)).metadata().at("wall_time");
  };
  const result r = run(d.path(), {"inspect", "run"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out ==
             "step  state  entries  parameters  bytes  wall_time                 file\n"
             "   5  ok           3           9     36  " + wall_time(5) + "  ckpt-0000000005.safetensors\n"
             "  12  ok           1           2      8  " + wall_time(12) + "  ckpt-0000000012.safetensors\n"
             "checkpoint_manager folder: 2 steps, latest 12\n");
  const result json = run(d.path(), {"inspect", "run", "--json", "--filter", "step"});
  const boost::json::value v = boost::json::parse(json.out);
  BOOST_TEST(v.at("steps").as_array().size() == 2u);
  BOOST_TEST(v.at("steps").at(0).at("step") == 5);
  BOOST_TEST(v.at("steps").at(0).at("file") == "ckpt-0000000005.safetensors");
  BOOST_TEST(v.at("steps").at(0).at("total") == boost::json::parse(R"({"entries":1,"parameters":1,"bytes":4})"));
  BOOST_TEST(v.at("steps").at(1).at("metadata").at("step") == "12");
  BOOST_TEST(v.at("steps").at(1).at("state") == "ok");
}

BOOST_AUTO_TEST_CASE(a_damaged_step_is_a_row_not_an_exit_2) {
  const temp_dir d;
  {
    ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
    for (const std::int64_t step : {1, 2, 3}) m.save(step, {sample()});
  }
  // Step 3 set aside by a manager that found it cut short; then step 2's header broken in place.
  fs::resize_file(step_file(d.path() / "run", 3), 100);
  BOOST_TEST(ckpt::checkpoint_manager(d.path() / "run").load_latest().step == 2);
  {
    std::fstream f(step_file(d.path() / "run", 2), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('[');
  }
  const result r = run(d.path(), {"inspect", "run"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  const std::string header_problem = in_folder(d.path(), [] {
    return message_of<ckpt::format_error>([] { (void)ckpt::load(step_file("run", 2), {.verify_digest = false}); });
  });
  const std::string wall_time = ckpt::load(step_file(d.path() / "run", 1)).metadata().at("wall_time");
  BOOST_TEST(r.out ==
             "step  state    entries  parameters  bytes  wall_time                 file\n"
             "   1  ok             3           9     36  " + wall_time + "  ckpt-0000000001.safetensors\n"
             "   2  damaged        -           -      -  -                         ckpt-0000000002.safetensors\n"
             "   3  damaged        -           -      -  -                         ckpt-0000000003.safetensors.damaged\n"
             "checkpoint_manager folder: 1 step, latest 1, 2 damaged steps\n"
             "step 2 damaged: " + header_problem + "\n"
             "step 3 damaged: set aside as damaged by an earlier run\n");
  const boost::json::value v = boost::json::parse(run(d.path(), {"inspect", "run", "--json"}).out);
  BOOST_TEST(v.at("steps").at(1).at("state") == "damaged");
  BOOST_TEST(v.at("steps").at(1).at("reason").as_string() == header_problem);

  // verify names each damaged step and exits 1 for the live one (step 2); the set-aside one says
  // so; the latest step is the newest intact one.
  const result checked = run(d.path(), {"verify", "run"});
  BOOST_TEST(checked.status == 1);
  BOOST_TEST(checked.out.find("run/ckpt-0000000001.safetensors: ok, digest verified\n") == 0u);
  BOOST_TEST(checked.out.find("run/ckpt-0000000002.safetensors: " + header_problem) != std::string::npos);
  BOOST_TEST(checked.out.find("run/ckpt-0000000003.safetensors.damaged: set aside as damaged by an earlier run (ckpt "
                              "prune --damaged deletes it): ckpt: ") != std::string::npos);
  BOOST_TEST(run(d.path(), {"inspect", "run", "--step", "1"}).status == 0);
}

// A node-local tier root (ckpt::mpi::tiers::local) keeps each run's steps in a folder run-<id>:
// inspect lists the runs, a row per node, and says which runs' folders no manager will use again
// (their shared folder gone, or another run's now); an earlier version's folders are named too.
// An MPI run's folder shows its id.
BOOST_AUTO_TEST_CASE(a_node_local_tier_root_lists_its_runs_by_id) {
  const temp_dir d;
  const std::string a(24, 'a'), b(24, 'b'), c(24, 'c'), e(24, 'e');
  const fs::path local = d.path() / "local";
  const auto note = [&](const std::string& id, const fs::path& shared) {
    fs::create_directories(local / ("run-" + id));
    std::ofstream(local / ("run-" + id) / ".ckpt-shared-folder") << shared.string() << '\n';
  };
  // Run a, of the folder runA, on two simulated nodes: step 5 on both, node 0 keeping node 1's
  // partner copy, and a step 6 that node 0 did not commit.
  fs::create_directories(d.path() / "runA");
  std::ofstream(d.path() / "runA" / ".ckpt-run-id") << a << '\n';
  note(a, d.path() / "runA");
  ckpt::save_sharded(local / ("run-" + a) / "node-0" / "step-0000000005", sample(), 16);
  ckpt::save_sharded(local / ("run-" + a) / "node-0" / "partner" / "step-0000000005", sample(), 16);
  fs::create_directories(local / ("run-" + a) / "node-0" / "step-0000000006");
  ckpt::save_sharded(local / ("run-" + a) / "node-1" / "step-0000000005", sample(), 16);
  // Run b, of a folder since deleted, on a real node (its steps right in its folder); run c, an
  // earlier run of runA's name; run e, without its note.
  note(b, d.path() / "runB");
  ckpt::save_sharded(local / ("run-" + b) / "step-0000000007", sample(), 16);
  note(c, d.path() / "runA");
  fs::create_directories(local / ("run-" + e));
  // An earlier version's layout, and names that are no run's.
  fs::create_directories(local / "node-0" / "step-0000000003");
  fs::create_directories(local / "run-short");
  std::ofstream(local / ("run-" + std::string(24, 'f'))) << "a file";

  const result r = run(d.path(), {"inspect", "local"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  const std::string shown = r.out;
  const auto row = [&](const std::string& id, const std::string& cells) {
    return shown.find("\n" + id + cells) != std::string::npos;
  };
  BOOST_TEST(shown.starts_with("run                       node  steps  partner copies  uncommitted  bytes\n"));
  BOOST_TEST(row(a, "     0  5      5                         1  "));
  BOOST_TEST(row(a, "     1  5      -                         0  "));
  BOOST_TEST(row(b, "     -  7      -                         0  "));
  BOOST_TEST(row(e, "     -  -      -                         0  "));
  const std::string unused = "no manager uses its folders again: delete them once no job of it runs\n";
  BOOST_TEST(shown.find("node-local tier root: 4 runs, 2 of them left over\n"
                        "run " + a + ": of '" + (d.path() / "runA").string() + "'\n"
                        "run " + b + ": of '" + (d.path() / "runB").string() +
                        "', which is gone (unless the run's folder was moved: its next manager notes where): " + unused +
                        "run " + c + ": of '" + (d.path() / "runA").string() + "', which now holds another run (" + a +
                        "): " + unused +
                        "run " + e + ": its shared folder is not noted (no .ckpt-shared-folder)\n"
                        "earlier layout 'local/node-0': a node-local folder of a run an earlier version wrote (no run "
                        "id); no manager uses or removes it: delete it once no job of that version runs\n") !=
             std::string::npos, shown);

  const boost::json::value v = boost::json::parse(run(d.path(), {"inspect", "local", "--json"}).out);
  const boost::json::array& runs = v.at("runs").as_array();
  BOOST_TEST_REQUIRE(runs.size() == 4u);
  BOOST_TEST(runs[0].at("id").as_string() == a);
  BOOST_TEST(runs[0].at("shared_state") == "this run");
  BOOST_TEST(runs[0].at("left_over") == false);
  BOOST_TEST(runs[0].at("nodes").at(0).at("folder").as_string() == "run-" + a + "/node-0");
  BOOST_TEST(runs[0].at("nodes").at(0).at("steps") == boost::json::parse("[5]"));
  BOOST_TEST(runs[0].at("nodes").at(0).at("partner_steps") == boost::json::parse("[5]"));
  BOOST_TEST(runs[0].at("nodes").at(0).at("uncommitted") == boost::json::parse(R"(["step-0000000006"])"));
  BOOST_TEST(runs[1].at("shared_state") == "gone");
  BOOST_TEST(runs[1].at("nodes").at(0).at("node").is_null());
  BOOST_TEST(runs[2].at("shared_state") == "another run");
  BOOST_TEST(runs[2].at("shared_run_id").as_string() == a);
  BOOST_TEST(runs[2].at("left_over") == true);
  BOOST_TEST(runs[3].at("shared_folder").is_null());
  BOOST_TEST(v.at("earlier_layout") == boost::json::parse(R"(["node-0"])"));

  // The run's own folder shows its id; an id file that holds anything else is named.
  ckpt::save_sharded(d.path() / "runA" / "step-0000000005", sample(), 16);
  BOOST_TEST(run(d.path(), {"inspect", "runA"}).out.ends_with(
      "checkpoint_manager folder: 1 step, latest 5\nrun id: " + a +
      " (an mpi::checkpoint_manager's; its node-local tiers are run-" + a + " in a tiers::local root)\n"));
  BOOST_TEST(boost::json::parse(run(d.path(), {"inspect", "runA", "--json"}).out).at("run_id").as_string() == a);
  std::ofstream(d.path() / "runA" / ".ckpt-run-id") << "not an id\n";
  BOOST_TEST(run(d.path(), {"inspect", "runA"}).out.ends_with(
      "run id: unreadable: ckpt: 'runA/.ckpt-run-id' does not hold a run id (24 letters and digits, then a "
      "newline): it holds 9 bytes that are not one; the first manager that opened the folder for writing made it: "
      "restore it, or delete it to make the folder a new run (whose node-local tiers start empty)\n"));
}

// A node's folder in a node-local tier root holds a part of each step: the shards its ranks wrote
// (and, in partner/, the copies of the previous node's), each step folder committed by the step's
// whole index. inspect says which shards each node holds and reads their headers; verify checks
// those shards (each as a sharded load checks its shards: rules, digest, the entries the index
// gives it), and, given the run's shared folder and the local root (--local-dir), says for each
// step which tiers can restore it. Built here as ckpt::mpi::tiers lays it out (4 ranks on 2
// simulated nodes, a shard a rank): node 0 holds shards 1 and 2 and node 1's 3 and 4 as partner
// copies, node 1 the converse; step 5 is drained to the shared folder, step 6 not yet.
BOOST_AUTO_TEST_CASE(a_node_s_folder_shows_and_verifies_the_part_of_each_step_it_holds) {
  const temp_dir d;
  const std::string id = "Ab3dEf6hIj9lMn2pQr5tUv8x";
  const fs::path shared = d.path() / "runA";
  fs::create_directories(shared);
  std::ofstream(shared / ".ckpt-run-id") << id << '\n';
  const std::string run_folder = "local/run-" + id;
  fs::create_directories(d.path() / run_folder);
  std::ofstream(d.path() / run_folder / ".ckpt-shared-folder") << shared.string() << '\n';
  const ckpt::checkpoint t = with(sample(), "l2.b", f32({2}, {7, 8}));  // 4 entries: a shard each
  const auto shard = [](int k) { return "model-0000" + std::to_string(k) + "-of-00004.safetensors"; };
  const auto keep_only = [&](const fs::path& folder, std::initializer_list<int> held) {
    ckpt::save_sharded(folder, t, 8);
    for (int k = 1; k <= 4; ++k)
      if (std::ranges::find(held, k) == held.end()) fs::remove(folder / shard(k));
  };
  for (const std::string step : {"step-0000000005", "step-0000000006"}) {
    keep_only(d.path() / run_folder / "node-0" / step, {1, 2});
    keep_only(d.path() / run_folder / "node-0" / "partner" / step, {3, 4});
    keep_only(d.path() / run_folder / "node-1" / step, {3, 4});
    keep_only(d.path() / run_folder / "node-1" / "partner" / step, {1, 2});
  }
  ckpt::save_sharded(shared / "step-0000000005", t, 8);
  fs::create_directories(d.path() / run_folder / "node-1" / "step-0000000007");  // a save that did not finish
  const std::string node1 = run_folder + "/node-1";

  // The node's own shards and its partner copies, each verified: not a missing shard.
  result r = run(d.path(), {"verify", node1});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out == node1 + "/step-0000000005: ok, holds shards 3, 4 of 4, digests of 2 shards verified\n" +
                          node1 + "/partner/step-0000000005: ok, holds the partner copies of shards 1, 2 of 4, digests "
                          "of 2 shards verified\n" +
                          node1 + "/step-0000000006: ok, holds shards 3, 4 of 4, digests of 2 shards verified\n" +
                          node1 + "/partner/step-0000000006: ok, holds the partner copies of shards 1, 2 of 4, digests "
                          "of 2 shards verified\n"
                          "leftover '" + node1 + "/step-0000000007' (0 bytes): an MPI step folder without its index (a "
                          "save not committed: a killed job's, or one in progress; or a step being deleted); an "
                          "mpi::checkpoint_manager removes it when it next opens the folder for writing\n");
  r = run(d.path(), {"inspect", node1});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out.starts_with("node  step  copy     shards held  state  entries  parameters  bytes\n"
                               "   1     5  own      3, 4 of 4    ok           2           3     12\n"
                               "   1     5  partner  1, 2 of 4    ok           2           8     32\n"),
             r.out);
  BOOST_TEST(r.out.find("node-local tier of run " + id + ": steps 5, 6 (their own shards), 5, 6 (partner copies)\n") !=
             std::string::npos, r.out);
  const boost::json::value v = boost::json::parse(run(d.path(), {"inspect", node1, "--json"}).out);
  BOOST_TEST(v.at("run").as_string() == id);
  BOOST_TEST(v.at("copies").at(1).at("held") == boost::json::parse(R"(["model-00001-of-00004.safetensors",
                                                                       "model-00002-of-00004.safetensors"])"));
  BOOST_TEST(v.at("copies").at(1).at("copy") == "partner");
  BOOST_TEST(v.at("copies").at(1).at("total").at("entries") == 2);
  // The run's folder: both nodes.
  r = run(d.path(), {"verify", run_folder});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out.starts_with(run_folder + "/node-0/step-0000000005: ok, holds shards 1, 2 of 4, digests of 2 shards "
                               "verified\n"), r.out);
  // The root: each run's nodes, the same lines.
  const result root = run(d.path(), {"verify", "local"});
  BOOST_TEST(root.status == 0, root.err);
  BOOST_TEST(root.out == r.out, root.out);
  // A part of a step is no checkpoint to compare or convert.
  r = run(d.path(), {"diff", node1, "runA"});
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.err.find("is a folder of a node-local tier root") != std::string::npos, r.err);

  // The whole run: its steps in the shared tier, its nodes' copies, and what can restore each step.
  r = run(d.path(), {"verify", "runA", "--local-dir", "local"});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out.starts_with("runA/step-0000000005: ok, digests of 4 shards verified\n"), r.out);
  BOOST_TEST(r.out.ends_with("step 5: restorable from the node-local tier, the shared tier\n"
                             "step 6: restorable from the node-local tier\n"), r.out);
  // Node 0 lost: node 1's partner copies stand in for its shards.
  fs::remove_all(d.path() / run_folder / "node-0");
  r = run(d.path(), {"verify", "runA", "--local-dir", "local"});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out.ends_with("step 5: restorable from the node-local tier with its partner copies, the shared tier\n"
                             "step 6: restorable from the node-local tier with its partner copies\n"), r.out);
  // A changed byte in node 1's copy of shard 4: named, a finding; step 6 has no other copy of it.
  flip_last_byte(d.path() / node1 / "step-0000000006" / shard(4));
  r = run(d.path(), {"verify", "runA", "--local-dir", "local"});
  BOOST_TEST(r.status == 1);
  BOOST_TEST(r.out.find(node1 + "/step-0000000006: ckpt: '" + node1 + "/step-0000000006/" + shard(4) +
                        "' is corrupted: its bytes hash to ") != std::string::npos, r.out);
  BOOST_TEST(r.out.ends_with("step 5: restorable from the node-local tier with its partner copies, the shared tier\n"
                             "step 6: no tier can restore it (no node holds an intact copy of " + shard(4) +
                             "; the shared tier does not hold it)\n"), r.out);
  // A shard that is not the one its index names (another save's): refused as a sharded load does.
  fs::copy_file(d.path() / node1 / "partner" / "step-0000000006" / shard(1), d.path() / node1 / "step-0000000005" / shard(3),
                fs::copy_options::overwrite_existing);
  r = run(d.path(), {"verify", node1});
  BOOST_TEST(r.status == 1, r.err);
  BOOST_TEST(r.out.find(node1 + "/step-0000000005: ckpt: ") != std::string::npos, r.out);
  // --local-dir takes the shared folder of an MPI run.
  r = run(d.path(), {"verify", run_folder + "/node-1/step-0000000005", "--local-dir", "local"});
  BOOST_TEST(r.status == 2, r.out + r.err);
}

// A manager folder with no committed step holds no checkpoint to compare or convert: said so (it
// is no folder without an index), as inspect and verify describe it.
BOOST_AUTO_TEST_CASE(a_manager_folder_without_steps_is_said_to_have_none) {
  const temp_dir d;
  { ckpt::checkpoint_manager manager(d.path() / "warm1"); }
  ckpt::save(d.path() / "a.safetensors", sample());
  const std::string said = "ckpt: 'warm1' is a checkpoint_manager folder with no step yet (its first step is not "
                           "committed): there is no checkpoint to read\n";
  for (const std::vector<std::string>& args : {std::vector<std::string>{"diff", "warm1", "a.safetensors"},
                                               std::vector<std::string>{"diff", "a.safetensors", "warm1"},
                                               std::vector<std::string>{"convert", "warm1", "b.safetensors"}}) {
    const result r = run(d.path(), args);
    BOOST_TEST(r.status == 2);
    BOOST_TEST(r.out == "");
    BOOST_TEST(r.err == said);
  }
  BOOST_TEST(run(d.path(), {"verify", "warm1"}).out == "warm1: no step (a manager folder whose first step is not committed)\n");
}

// A step is what a manager writes: a torch.save file under a step's name (which ckpt::load would
// read by its content) is a damaged step for the managers, inspect and verify alike.
BOOST_AUTO_TEST_CASE(a_torch_file_under_a_steps_name_is_a_damaged_step) {
  const temp_dir d;
  {
    ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
    m.save(1, {sample()});
  }
  fs::copy_file(fs::path(CKPT_TORCH_FIXTURES) / "dtypes.pt", step_file(d.path() / "run", 2));
  BOOST_TEST(ckpt::load(step_file(d.path() / "run", 2)).size() > 0u);  // a valid .pt file
  const ckpt::checkpoint_manager::latest latest = ckpt::checkpoint_manager(d.path() / "run", {.read_only = true}).load_latest();
  BOOST_TEST(latest.step == 1);
  BOOST_TEST_REQUIRE(latest.skipped.size() == 1u);
  BOOST_TEST(latest.skipped[0].reason.find("is not a valid safetensors file") != std::string::npos);
  const result shown = run(d.path(), {"inspect", "run"});
  BOOST_TEST(shown.status == 0);
  BOOST_TEST(shown.out.find("   2  damaged") != std::string::npos);
  const result checked = run(d.path(), {"verify", "run"});
  BOOST_TEST(checked.status == 1);
  BOOST_TEST(checked.out.find("run/ckpt-0000000002.safetensors: ckpt: 'run/ckpt-0000000002.safetensors' is not a valid "
                              "safetensors file") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(verify)

BOOST_AUTO_TEST_CASE(each_file_is_ok_or_names_the_rule_it_breaks_and_a_broken_one_exits_1) {
  const temp_dir d;
  const fs::path a = d.path() / "a.safetensors";
  ckpt::save(a, sample(), {.digest = true});
  const result ok = run(d.path(), {"verify", "a.safetensors"});
  BOOST_TEST(ok.status == 0);
  BOOST_TEST(ok.out == "a.safetensors: ok, digest verified\n");
  BOOST_TEST(ok.err == "");

  // A flipped data bit: only the digest sees it; verify reports the library's own words.
  flip_last_byte(a);
  const result corrupted = run(d.path(), {"verify", "a.safetensors"});
  BOOST_TEST(corrupted.status == 1);
  BOOST_TEST(corrupted.err == "");
  BOOST_TEST(corrupted.out == "a.safetensors: " + in_folder(d.path(), [] {
               return message_of<ckpt::integrity_error>([] { (void)ckpt::load("a.safetensors"); });
             }) + "\n");
  BOOST_TEST(corrupted.out.starts_with("a.safetensors: ckpt: 'a.safetensors' is corrupted: its bytes hash to "));

  // A change of the header that breaks no format rule (a shape's dimensions swapped): the digest
  // covers the header too.
  ckpt::save(a, sample(), {.digest = true});
  std::string header_changed = read_bytes(a);
  const std::size_t shape = header_changed.find("[2,3]");
  BOOST_TEST_REQUIRE(shape != std::string::npos);
  header_changed.replace(shape, 5, "[3,2]");
  std::ofstream(a, std::ios::binary | std::ios::trunc) << header_changed;
  const result header = run(d.path(), {"verify", "a.safetensors"});
  BOOST_TEST(header.status == 1);
  BOOST_TEST(header.out.starts_with("a.safetensors: ckpt: 'a.safetensors' is corrupted: its bytes hash to "));

  // A header rule: a truncated file.
  const std::string bytes = read_bytes(a);
  std::ofstream(d.path() / "cut.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() - 4);
  const result cut = run(d.path(), {"verify", "cut.safetensors"});
  BOOST_TEST(cut.status == 1);
  BOOST_TEST(cut.out == "cut.safetensors: " + in_folder(d.path(), [] {
               return message_of<ckpt::format_error>([] { (void)ckpt::load("cut.safetensors"); });
             }) + "\n");
  BOOST_TEST(cut.out.starts_with("cut.safetensors: ckpt: 'cut.safetensors' is not a valid safetensors file: "));

  // Without a digest, a flipped data bit is not a broken rule: verify says what it could check.
  ckpt::save(d.path() / "plain.safetensors", sample(), {.digest = false});
  flip_last_byte(d.path() / "plain.safetensors");
  BOOST_TEST(run(d.path(), {"verify", "plain.safetensors"}).out == "plain.safetensors: ok, format only: no digest\n");

  // Several paths, a line each; one broken file makes the status 1 without hiding the others.
  const result several = run(d.path(), {"verify", "plain.safetensors", "cut.safetensors", "plain.safetensors"});
  BOOST_TEST(several.status == 1);
  BOOST_TEST(several.out == "plain.safetensors: ok, format only: no digest\n" + cut.out +
                                "plain.safetensors: ok, format only: no digest\n");

  // The data-only digests of earlier versions are recognized, not checked, and verify says so
  // (files written by earlier commits: tests/fixtures/README.md).
  for (const std::string old : {"per_mib_digest", "whole_digest"}) {
    fs::copy_file(fs::path(CKPT_FIXTURES_DIR) / "ckpt" / (old + ".safetensors"), d.path() / (old + ".safetensors"));
    const result earlier = run(d.path(), {"verify", old + ".safetensors"});
    BOOST_TEST(earlier.status == 0);
    BOOST_TEST(earlier.out == old + ".safetensors: ok, format only: the digest of an earlier ckpt version (" +
                                  (old == "whole_digest" ? "ckpt.xxh3_64" : "ckpt.xxh3_64_per_mib") +
                                  ", data only) is not checked; re-save to record ckpt.xxh3_64_file\n");
  }
}

BOOST_AUTO_TEST_CASE(a_manager_folder_is_verified_step_by_step_and_a_broken_step_exits_1) {
  const temp_dir d;
  {
    ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
    for (const std::int64_t step : {1, 2, 3}) m.save(step, {sample()});
  }
  const result ok = run(d.path(), {"verify", "run"});
  BOOST_TEST(ok.status == 0);
  BOOST_TEST(ok.out ==
             "run/ckpt-0000000001.safetensors: ok, digest verified\n"
             "run/ckpt-0000000002.safetensors: ok, digest verified\n"
             "run/ckpt-0000000003.safetensors: ok, digest verified\n");
  BOOST_TEST(run(d.path(), {"verify", "run", "--step", "2"}).out == "run/ckpt-0000000002.safetensors: ok, digest verified\n");
  flip_last_byte(step_file(d.path() / "run", 2));
  const result broken = run(d.path(), {"verify", "run"});
  BOOST_TEST(broken.status == 1);
  BOOST_TEST(broken.err == "");
  const std::string problem = in_folder(d.path(), [] {
    return message_of<ckpt::integrity_error>([] { (void)ckpt::load(step_file("run", 2)); });
  });
  BOOST_TEST(broken.out ==
             "run/ckpt-0000000001.safetensors: ok, digest verified\n"
             "run/ckpt-0000000002.safetensors: " + problem + "\n"
             "run/ckpt-0000000003.safetensors: ok, digest verified\n");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(diff)

// The table `diff` prints for two checkpoints holding sample()'s entries.
const std::string sample_table =
    "name  max_abs  max_rel  beyond\n"
    "l1.b        0        0       0\n"
    "l1.w        0        0       0\n"
    "step        0        0       0\n";

BOOST_AUTO_TEST_CASE(two_steps_of_one_run_are_compared_by_giving_step_twice) {
  const temp_dir d;
  {
    ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
    m.save(1, {ckpt::of_tensor("w", f32({2}, {1, 2}))});
    m.save(2, {ckpt::of_tensor("w", f32({2}, {1, 3}))});
  }
  const result same = run(d.path(), {"diff", "run", "--step", "1", "--step", "1"});
  BOOST_TEST(same.status == 0);
  const result r = run(d.path(), {"diff", "run", "--step", "1", "--step", "2"});
  BOOST_TEST(r.status == 1);
  BOOST_TEST(r.out.find("1 of 1 compared entry beyond") != std::string::npos);
  check_usage_error(d, {"diff", "run", "run", "--step", "1", "--step", "2"},
                    "ckpt: --step is given twice: with two paths, one --step picks the step of their manager folders "
                    "(compare two steps of one folder with ckpt diff RUN --step S --step T)\n");
}

BOOST_AUTO_TEST_CASE(identical_checkpoints_exit_0_with_only_a_notice_of_differing_metadata) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample());
  ckpt::save(d.path() / "b.safetensors", sample().with_metadata({}), {.digest = true});
  // B lacks A's note: without --metadata, a line and no finding.
  const result r = run(d.path(), {"diff", "a.safetensors", "b.safetensors"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == sample_table +
                          "metadata differ (1 key; --metadata shows it)\n"
                          "same: 3 entries within atol 0, rtol 0\n");
}

BOOST_AUTO_TEST_CASE(differing_entries_are_findings_and_values_within_atol_plus_rtol_are_not) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample());
  // l1.w: 6 -> 6.5 (abs 0.5, rel 0.5 / 6.5); l1.b becomes F64 with the same values; "step" is
  // reshaped; "extra" only in B; "l1.b" stays in both.
  ckpt::checkpoint b = with(sample(), "l1.w", f32({2, 3}, {1, 2, 3, 4, 5, 6.5f}));
  b = with(b, "step", ckpt::tensor::copy_of(ckpt::dtype::i32, {1, 1}, sample().get("step").bytes()));
  const std::vector<double> b_values{0.5, -1.0};
  b = with(b, "l1.b", ckpt::tensor::copy_of(ckpt::dtype::f64, {2}, std::as_bytes(std::span(b_values))));
  b = with(b, "extra", f32({1}, {0}));
  ckpt::save(d.path() / "b.safetensors", b);
  const std::string rel = [] {
    char text[32];
    std::snprintf(text, sizeof text, "%.6g", 0.5 / 6.5);
    return std::string(text);
  }();

  const result exact = run(d.path(), {"diff", "a.safetensors", "b.safetensors"});
  BOOST_TEST(exact.status == 1);
  BOOST_TEST(exact.err == "");
  BOOST_TEST(exact.out ==
             "only in B: extra\n"
             "dtype differs: l1.b: F32 in A, F64 in B\n"
             "shape differs: step: [1] in A, [1, 1] in B\n"
             "name  max_abs  " + std::string(rel.size() - 7, ' ') + "max_rel  beyond\n"
             "l1.b        0  " + std::string(rel.size() - 1, ' ') + "0       0\n"
             "l1.w      0.5  " + rel + "       1\n"
             "different: 0 only in A, 1 only in B, 2 dtype or shape mismatches, 1 of 2 compared entries beyond "
             "atol 0, rtol 0\n");

  // The same entries, dtypes and shapes: the tolerance decides.
  ckpt::save(d.path() / "v.safetensors", with(sample(), "l1.w", f32({2, 3}, {1, 2, 3, 4, 5, 6.5f})));
  const auto values = [&](std::vector<std::string> options) {
    std::vector<std::string> args{"diff", "a.safetensors", "v.safetensors"};
    args.insert(args.end(), options.begin(), options.end());
    return run(d.path(), args);
  };
  BOOST_TEST(values({}).status == 1);
  BOOST_TEST(values({"--atol", "0.4999"}).status == 1);
  const result within = values({"--atol", "0.5"});
  BOOST_TEST(within.status == 0);
  BOOST_TEST(within.out.ends_with("same: 3 entries within atol 0.5, rtol 0\n"));
  // |a - b| <= atol + rtol * |b|: 0.5 <= 0.1 + 0.0616 * 6.5 holds, 0.5 <= 0.1 + 0.0614 * 6.5 does not.
  BOOST_TEST(values({"--atol", "0.1", "--rtol", "0.0616"}).status == 0);
  BOOST_TEST(values({"--atol", "0.1", "--rtol", "0.0614"}).status == 1);
  // A dtype difference alone is a finding, unless --ignore-dtype.
  ckpt::save(d.path() / "f64.safetensors", with(sample(), "l1.b", b.get("l1.b")));
  BOOST_TEST(run(d.path(), {"diff", "a.safetensors", "f64.safetensors"}).status == 1);
  BOOST_TEST(run(d.path(), {"diff", "a.safetensors", "f64.safetensors", "--ignore-dtype"}).status == 0);
}

BOOST_AUTO_TEST_CASE(a_filter_compares_the_entries_under_a_prefix) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample());
  ckpt::save(d.path() / "b.safetensors",
             ckpt::concat({with(sample(), "step", ckpt::of_int("x", 8).get("x")), ckpt::of_tensor("l2.w", f32({1}, {0}))}));
  BOOST_TEST(run(d.path(), {"diff", "a.safetensors", "b.safetensors"}).status == 1);
  const result r = run(d.path(), {"diff", "a.safetensors", "b.safetensors", "--filter", "l1."});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out ==
             "name  max_abs  max_rel  beyond\n"
             "l1.b        0        0       0\n"
             "l1.w        0        0       0\n"
             "same: 2 entries within atol 0, rtol 0\n");
  const result l2 = run(d.path(), {"diff", "a.safetensors", "b.safetensors", "--filter", "l2"});
  BOOST_TEST(l2.status == 1);
  BOOST_TEST(l2.out ==
             "only in B: l2.w\n"
             "different: 0 only in A, 1 only in B, 0 dtype or shape mismatches, 0 of 0 compared entries beyond "
             "atol 0, rtol 0\n");
}

BOOST_AUTO_TEST_CASE(nan_matches_nan_and_inf_itself_and_against_a_number_is_beyond_any_tolerance) {
  const temp_dir d;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  ckpt::save(d.path() / "a.safetensors", ckpt::concat({ckpt::of_tensor("same", f32({3}, {nan, inf, -0.0f})),
                                                       ckpt::of_tensor("nan", f32({2}, {nan, 1})),
                                                       ckpt::of_tensor("inf", f32({1}, {inf}))}));
  ckpt::save(d.path() / "b.safetensors", ckpt::concat({ckpt::of_tensor("same", f32({3}, {nan, inf, 0.0f})),
                                                       ckpt::of_tensor("nan", f32({2}, {1, 1})),
                                                       ckpt::of_tensor("inf", f32({1}, {3e38f}))}));
  // NaN equals NaN and an infinity itself; NaN against a number, or an infinity against a finite
  // value, is an infinite difference, beyond any tolerance.
  const result r = run(d.path(), {"diff", "a.safetensors", "b.safetensors", "--atol", "1e300"});
  BOOST_TEST(r.status == 1);
  BOOST_TEST(r.out ==
             "name  max_abs  max_rel  beyond\n"
             "inf       inf      inf       1\n"
             "nan       inf      inf       1\n"
             "same        0        0       0\n"
             "different: 0 only in A, 0 only in B, 0 dtype or shape mismatches, 2 of 3 compared entries beyond "
             "atol 1e+300, rtol 0\n");
}

BOOST_AUTO_TEST_CASE(metadata_differences_are_a_notice_by_default_and_findings_with_metadata) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample().with_metadata({{"note", "first"}, {"loss", "0.5"}}));
  ckpt::save(d.path() / "b.safetensors", sample().with_metadata({{"note", "second"}, {"source", "hf"}}));
  // The default compares the entries: the metadata are a line, not a finding.
  const result quiet = run(d.path(), {"diff", "a.safetensors", "b.safetensors"});
  BOOST_TEST(quiet.status == 0);
  BOOST_TEST(quiet.err == "");
  BOOST_TEST(quiet.out == sample_table +
                              "metadata differ (3 keys; --metadata shows them)\n"
                              "same: 3 entries within atol 0, rtol 0\n");
  // With --metadata, a line a key (only in A, only in B, then values that differ) and status 1;
  // format (save's "pt" in both) is compared and equal, the digests are not compared.
  const result shown = run(d.path(), {"diff", "a.safetensors", "b.safetensors", "--metadata"});
  BOOST_TEST(shown.status == 1);
  BOOST_TEST(shown.err == "");
  BOOST_TEST(shown.out == sample_table +
                              "metadata only in A: loss: '0.5'\n"
                              "metadata only in B: source: 'hf'\n"
                              "metadata differs: note: 'first' in A, 'second' in B\n"
                              "different: 0 only in A, 0 only in B, 0 dtype or shape mismatches, 0 of 3 compared "
                              "entries beyond atol 0, rtol 0; 3 of 4 compared metadata keys differ\n");
  // Equal metadata: --metadata says how many keys it compared.
  const result same = run(d.path(), {"diff", "a.safetensors", "a.safetensors", "--metadata"});
  BOOST_TEST(same.status == 0);
  BOOST_TEST(same.out == sample_table + "same: 3 entries within atol 0, rtol 0; 3 metadata keys equal\n");
  // A value from the file goes through printable, as names do.
  ckpt::save(d.path() / "c.safetensors", sample().with_metadata({{"note", "first\x1b]0;title\x07"}, {"loss", "0.5"}}));
  const result escaped = run(d.path(), {"diff", "a.safetensors", "c.safetensors", "--metadata"});
  BOOST_TEST(escaped.status == 1);
  BOOST_TEST(escaped.out == sample_table +
                                "metadata differs: note: 'first' in A, 'first\\x1b]0;title\\x07' in B\n"
                                "different: 0 only in A, 0 only in B, 0 dtype or shape mismatches, 0 of 3 compared "
                                "entries beyond atol 0, rtol 0; 1 of 3 compared metadata keys differs\n");
  BOOST_TEST(run(d.path(), {"diff", "a.safetensors", "c.safetensors"}).out ==
             sample_table + "metadata differ (1 key; --metadata shows it)\nsame: 3 entries within atol 0, rtol 0\n");
}

BOOST_AUTO_TEST_CASE(entry_and_metadata_differences_are_reported_together) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample());  // note: first
  ckpt::save(d.path() / "b.safetensors", ckpt::concat({sample(), ckpt::of_tensor("extra", f32({1}, {0}))})
                                             .with_metadata({{"note", "second"}}));
  const std::string entries = "only in B: extra\n" + sample_table;
  const std::string counts =
      "different: 0 only in A, 1 only in B, 0 dtype or shape mismatches, 0 of 3 compared entries beyond atol 0, rtol 0";
  const result quiet = run(d.path(), {"diff", "a.safetensors", "b.safetensors"});
  BOOST_TEST(quiet.status == 1);
  BOOST_TEST(quiet.err == "");
  BOOST_TEST(quiet.out == entries + "metadata differ (1 key; --metadata shows it)\n" + counts + "\n");
  const result shown = run(d.path(), {"diff", "a.safetensors", "b.safetensors", "--metadata"});
  BOOST_TEST(shown.status == 1);
  BOOST_TEST(shown.err == "");
  BOOST_TEST(shown.out == entries + "metadata differs: note: 'first' in A, 'second' in B\n" + counts +
                              "; 1 of 2 compared metadata keys differs\n");
  // --filter selects entries only: the metadata are compared whole.
  const result filtered = run(d.path(), {"diff", "a.safetensors", "b.safetensors", "--metadata", "--filter", "l1."});
  BOOST_TEST(filtered.status == 1);
  BOOST_TEST(filtered.out ==
             "name  max_abs  max_rel  beyond\n"
             "l1.b        0        0       0\n"
             "l1.w        0        0       0\n"
             "metadata differs: note: 'first' in A, 'second' in B\n"
             "different: 0 only in A, 0 only in B, 0 dtype or shape mismatches, 0 of 2 compared entries beyond "
             "atol 0, rtol 0; 1 of 2 compared metadata keys differs\n");
}

BOOST_AUTO_TEST_CASE(digests_and_wall_time_are_never_compared) {
  const temp_dir d;
  // One file with ckpt's digest, one without; a manager's wall_time apart.
  ckpt::save(d.path() / "a.safetensors", sample().with_metadata({{"note", "first"}, {"wall_time", "1700000000.5"}}),
             {.digest = true});
  ckpt::save(d.path() / "b.safetensors", sample().with_metadata({{"note", "first"}, {"wall_time", "1700000999.25"}}),
             {.digest = false});
  BOOST_REQUIRE(ckpt::load(d.path() / "a.safetensors").metadata().contains("ckpt.xxh3_64_file"));
  const result quiet = run(d.path(), {"diff", "a.safetensors", "b.safetensors"});
  BOOST_TEST(quiet.status == 0);
  BOOST_TEST(quiet.out == sample_table + "same: 3 entries within atol 0, rtol 0\n");
  const result shown = run(d.path(), {"diff", "a.safetensors", "b.safetensors", "--metadata"});
  BOOST_TEST(shown.status == 0);
  BOOST_TEST(shown.err == "");
  BOOST_TEST(shown.out == sample_table + "same: 3 entries within atol 0, rtol 0; 2 metadata keys equal\n");
  // The data-only digests of earlier versions: the same checkpoint, saved by two earlier commits
  // (tests/fixtures/README.md), one recording ckpt.xxh3_64_per_mib, the other ckpt.xxh3_64.
  const fs::path fixtures = fs::path(CKPT_FIXTURES_DIR) / "ckpt";
  const result earlier = run(d.path(), {"diff", (fixtures / "per_mib_digest.safetensors").string(),
                                        (fixtures / "whole_digest.safetensors").string(), "--metadata"});
  BOOST_TEST(earlier.status == 0);
  BOOST_TEST(earlier.err == "");
  BOOST_TEST(earlier.out.ends_with("\nsame: 3 entries within atol 0, rtol 0; 1 metadata key equal\n"), earlier.out);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(convert)

BOOST_AUTO_TEST_CASE(dtype_rename_keep_and_drop_apply_together_and_a_merging_rename_writes_nothing) {
  const temp_dir d;
  const ckpt::checkpoint a = ckpt::concat({sample(), ckpt::of_tensor("l2.w", f32({1}, {0.1f})),
                                           ckpt::of_tensor("l2.b", f32({1}, {3}))});
  ckpt::save(d.path() / "a.safetensors", a, {.digest = false});

  const result r = run(d.path(), {"convert", "a.safetensors", "b.safetensors", "--dtype", "BF16", "--keep", "l1.",
                                  "--keep", "step", "--drop", "l1.b", "--rename", "^l1\\.(.*)$=layer1.$1", "--rename",
                                  "w$=weight", "--no-digest"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == "wrote 'b.safetensors': 2 entries, 16 bytes of data\n");
  const ckpt::checkpoint b = ckpt::load(d.path() / "b.safetensors");
  BOOST_TEST(b.names() == (std::vector<std::string>{"layer1.weight", "step"}));
  BOOST_TEST(b.get("layer1.weight").dtype() == ckpt::dtype::bf16);
  BOOST_TEST((ckpt::cast(b.get("layer1.weight"), ckpt::dtype::f32) == a.get("l1.w")));  // small integers: exact
  BOOST_TEST((b.get("step") == a.get("step")));  // integers keep their dtype
  BOOST_TEST((b.metadata() == ckpt::load(d.path() / "a.safetensors").metadata()));  // carried over; no digest

  // BF16 rounds 0.1 by a relative 2^-9 at most: diff with --rtol says so.
  BOOST_TEST(run(d.path(), {"convert", "a.safetensors", "c.safetensors", "--dtype", "bf16"}).status == 0);
  BOOST_TEST(ckpt::load(d.path() / "c.safetensors").metadata().contains("ckpt.xxh3_64_file"));  // by default
  BOOST_TEST(run(d.path(), {"diff", "a.safetensors", "c.safetensors", "--ignore-dtype"}).status == 1);
  BOOST_TEST(run(d.path(), {"diff", "a.safetensors", "c.safetensors", "--ignore-dtype", "--rtol", "0.002"}).status ==
             0);
  BOOST_TEST(run(d.path(), {"diff", "a.safetensors", "c.safetensors", "--rtol", "0.002"}).status == 1);  // dtypes

  // A rename that merges two entries is refused with the library's message; nothing is written.
  const result clash = run(d.path(), {"convert", "a.safetensors", "e.safetensors", "--rename", "\\.[wb]$=.x"});
  BOOST_TEST(clash.status == 2);
  BOOST_TEST(clash.err.starts_with("ckpt: "));
  BOOST_TEST(clash.err.find("'l1.x'") != std::string::npos);
  BOOST_TEST(!fs::exists(d.path() / "e.safetensors"));
}

BOOST_AUTO_TEST_CASE(metadata_dropped_or_kept_by_key) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample().with_metadata({{"note", "first"}, {"loss", "0.5"}, {"wall_time", "3"}}));
  BOOST_TEST(run(d.path(), {"convert", "a.safetensors", "none.safetensors", "--drop-metadata", "--no-digest"}).status ==
             0);
  // save writes "format": "pt" in any case.
  BOOST_TEST((ckpt::load(d.path() / "none.safetensors").metadata() == ckpt::metadata_map{{"format", "pt"}}));
  BOOST_TEST(run(d.path(), {"convert", "a.safetensors", "digest.safetensors", "--drop-metadata"}).status == 0);
  BOOST_TEST(ckpt::load(d.path() / "digest.safetensors").metadata().size() == 2u);  // format and the new digest
  BOOST_TEST(run(d.path(), {"convert", "a.safetensors", "note.safetensors", "--keep-metadata", "note",
                            "--keep-metadata", "absent", "--no-digest"})
                 .status == 0);
  BOOST_TEST((ckpt::load(d.path() / "note.safetensors").metadata() ==
              ckpt::metadata_map{{"format", "pt"}, {"note", "first"}}));
  const result both =
      run(d.path(), {"convert", "a.safetensors", "x.safetensors", "--drop-metadata", "--keep-metadata", "note"});
  BOOST_TEST(both.status == 2);
  BOOST_TEST(both.err.find("--drop-metadata excludes --keep-metadata") != std::string::npos, both.err);
  BOOST_TEST(!fs::exists(d.path() / "x.safetensors"));

  // --metadata KEY=VALUE sets entries after the selection, over a carried-over value; the last of
  // a key wins; the value may hold '='.
  BOOST_TEST(run(d.path(), {"convert", "a.safetensors", "set.safetensors", "--keep-metadata", "note", "--metadata",
                            "note=second", "--metadata", "source=a=b", "--metadata", "format=pt", "--metadata",
                            "source=c=d", "--no-digest"})
                 .status == 0);
  BOOST_TEST((ckpt::load(d.path() / "set.safetensors").metadata() ==
              ckpt::metadata_map{{"format", "pt"}, {"note", "second"}, {"source", "c=d"}}));
  check_usage_error(d, {"convert", "a.safetensors", "y.safetensors", "--metadata", "=x"},
                    "ckpt convert: --metadata '=x' is not KEY=VALUE with a non-empty KEY\n");
  check_usage_error(d, {"convert", "a.safetensors", "y.safetensors", "--metadata", "note"},
                    "ckpt convert: --metadata 'note' is not KEY=VALUE with a non-empty KEY\n");
  BOOST_TEST(!fs::exists(d.path() / "y.safetensors"));
}

BOOST_AUTO_TEST_CASE(torch_save_files_are_inspected_verified_converted_and_compared_like_safetensors) {
  // A torch.save file (tests/fixtures/torch/) is recognized by its zip signature: inspected,
  // verified, converted (to one file or shards) and compared like a safetensors file.
  const temp_dir d;
  const fs::path mlp = fs::path(CKPT_TORCH_FIXTURES) / "mlp_bf16.bin";
  const ckpt::checkpoint original = ckpt::load(mlp);
  const result shown = run(d.path(), {"inspect", mlp.string()});
  BOOST_TEST(shown.status == 0);
  BOOST_TEST(shown.out.find("0.weight  BF16   [3, 4]") != std::string::npos, shown.out);
  BOOST_TEST(run(d.path(), {"verify", mlp.string()}).status == 0);
  BOOST_TEST(run(d.path(), {"convert", mlp.string(), "mlp.safetensors"}).status == 0);
  const ckpt::checkpoint converted = ckpt::load(d.path() / "mlp.safetensors");
  BOOST_TEST(converted.names() == original.names(), boost::test_tools::per_element());
  for (const auto& [name, x] : original) BOOST_TEST((converted.get(name) == x), name);
  BOOST_TEST(run(d.path(), {"diff", mlp.string(), "mlp.safetensors"}).status == 0);
  BOOST_TEST(run(d.path(), {"convert", mlp.string(), "shards", "--shard-size", "40"}).status == 0);
  BOOST_TEST(ckpt::load(d.path() / "shards").names() == original.names(), boost::test_tools::per_element());
  const result refused = run(d.path(), {"inspect", (fs::path(CKPT_TORCH_FIXTURES) / "evil.pt").string()});
  BOOST_TEST(refused.status == 2);
  BOOST_TEST(refused.err.find("refers to the global 'posix.system'") != std::string::npos, refused.err);
}

BOOST_AUTO_TEST_CASE(a_file_converts_to_shards_and_back_byte_for_byte_and_a_corrupt_shard_is_refused) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample(), {.digest = true});
  // 24-byte shards: l1.b (8) + ... greedily in name order: [l1.b], [l1.w], [step] as 8 + 24 > 24.
  const result r = run(d.path(), {"convert", "a.safetensors", "sharded", "--shard-size", "24"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == "wrote 'sharded/model.safetensors.index.json' and 3 shards: 3 entries, 36 bytes of data\n");
  BOOST_TEST(folder_listing(d.path() / "sharded") ==
             (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                       "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  const result index = run(d.path(), {"inspect", "sharded/model.safetensors.index.json"});
  BOOST_TEST(index.status == 0);
  BOOST_TEST(index.out.starts_with("name  dtype  shape   parameters  bytes\n"
                                   "l1.b  F32    [2]              2      8\n"
                                   "l1.w  F32    [2, 3]           6     24\n"
                                   "step  I32    [1]              1      4\n"
                                   "total: 3 entries, 9 parameters, 36 bytes\n"
                                   "__metadata__:\n"
                                   "  format: pt\n"
                                   "  note: first\n"));  // each shard's own digest is not common
  BOOST_TEST(run(d.path(), {"inspect", "sharded"}).out == index.out);
  BOOST_TEST(run(d.path(), {"verify", "sharded"}).out == "sharded: ok, digests of 3 shards verified\n");

  const result back = run(d.path(), {"convert", "sharded", "back.safetensors"});
  BOOST_TEST(back.status == 0);
  BOOST_TEST(back.out == "wrote 'back.safetensors': 3 entries, 36 bytes of data\n");
  const result same = run(d.path(), {"diff", "a.safetensors", "back.safetensors"});
  BOOST_TEST(same.status == 0);
  BOOST_TEST(same.out.ends_with("same: 3 entries within atol 0, rtol 0\n"));
  // Byte for byte the file a save of the original writes (the digest is recomputed).
  BOOST_TEST(read_bytes(d.path() / "back.safetensors") == read_bytes(d.path() / "a.safetensors"));

  // A corrupted shard fails verify (naming the shard) and is not converted.
  flip_last_byte(d.path() / "sharded" / "model-00002-of-00003.safetensors");
  const result broken = run(d.path(), {"verify", "sharded"});
  BOOST_TEST(broken.status == 1);
  BOOST_TEST(broken.out.find("model-00002-of-00003.safetensors' is corrupted") != std::string::npos);
  const result refused = run(d.path(), {"convert", "sharded", "again.safetensors"});
  BOOST_TEST(refused.status == 2);
  BOOST_TEST("sharded: " + refused.err == broken.out);
  BOOST_TEST(!fs::exists(d.path() / "again.safetensors"));
}

BOOST_AUTO_TEST_CASE(shard_sizes_are_read_in_decimal_and_binary_units) {
  const temp_dir d;
  // 1000 + 24 bytes: one shard under a 1 KiB limit (1024), two under 1 kB (1000).
  ckpt::save(d.path() / "a.safetensors", ckpt::concat({ckpt::of_tensor("a", f32({250}, std::vector<float>(250, 1))),
                                                       ckpt::of_tensor("b", f32({6}, std::vector<float>(6, 2)))}));
  const auto shards = [&](const std::string& size) {
    const fs::path out = d.path() / ("out-" + size);
    const result r = run(d.path(), {"convert", "a.safetensors", out.filename().string(), "--shard-size", size});
    BOOST_TEST(r.status == 0, size);
    return folder_listing(out).size() - 1;  // less the index
  };
  BOOST_TEST(shards("1kB") == 2u);
  BOOST_TEST(shards("1KB") == 2u);
  BOOST_TEST(shards("1k") == 2u);
  BOOST_TEST(shards("1000") == 2u);
  BOOST_TEST(shards("1KiB") == 1u);
  BOOST_TEST(shards("1024B") == 1u);
  BOOST_TEST(shards("2GB") == 1u);
  BOOST_TEST(shards("1gib") == 1u);
  check_usage_error(d, {"convert", "a.safetensors", "x", "--shard-size", "99999999999999TB"},
                    "ckpt convert: --shard-size: ckpt: the size '99999999999999TB' is too large (expected a byte "
                    "count such as 2GB, 500MB, 1GiB or 123456)\n");
  check_usage_error(d, {"convert", "a.safetensors", "x", "--shard-size", "GB"},
                    "ckpt convert: --shard-size: ckpt: the size 'GB' does not start with a number (expected a byte "
                    "count such as 2GB, 500MB, 1GiB or 123456)\n");
}

// A checkpoint named as Hugging Face's GPT-2 (transformers' GPT2Model): 12 blocks h.0 ... h.11,
// each with its causal mask attn.bias, which a conversion leaves out, beside attn.c_attn.bias,
// a weight whose name also ends in "attn.bias"; one F32 element each.
ckpt::checkpoint gpt2_shaped() {
  std::vector<ckpt::checkpoint> parts{ckpt::of_tensor("wte.weight", f32({1}, {1})),
                                      ckpt::of_tensor("ln_f.weight", f32({1}, {1}))};
  for (int block = 0; block < 12; ++block)
    for (const char* leaf : {"attn.bias", "attn.c_attn.bias", "attn.c_attn.weight", "mlp.c_fc.weight"})
      parts.push_back(ckpt::of_tensor("h." + std::to_string(block) + "." + leaf, f32({1}, {0})));
  return ckpt::concat(parts);
}

// The names of the checkpoint `convert` wrote, in name order.
std::vector<std::string> names_in(const fs::path& file) { return ckpt::load(file).names(); }

// `h.<block>.<leaf>` for each of `leaves`: names of a block of gpt2_shaped().
std::vector<std::string> block_names(int block, const std::vector<std::string>& leaves) {
  std::vector<std::string> out;
  for (const auto& leaf : leaves) out.push_back("h." + std::to_string(block) + "." + leaf);
  return out;
}

BOOST_AUTO_TEST_CASE(convert_drops_entries_matching_a_pattern_across_blocks) {
  const temp_dir d;
  ckpt::save(d.path() / "gpt2.safetensors", gpt2_shaped());
  // One rule for the twelve masks, where --drop needs one a block.
  const result r = run(d.path(), {"convert", "gpt2.safetensors", "out.safetensors", "--drop-matching", "\\.attn\\.bias$"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == "wrote 'out.safetensors': 38 entries, 152 bytes of data\n");
  std::vector<std::string> expected;
  for (int block : {0, 1, 10, 11, 2, 3, 4, 5, 6, 7, 8, 9}) {  // name order
    const auto names = block_names(block, {"attn.c_attn.bias", "attn.c_attn.weight", "mlp.c_fc.weight"});
    expected.insert(expected.end(), names.begin(), names.end());
  }
  expected.insert(expected.end(), {"ln_f.weight", "wte.weight"});
  BOOST_TEST(names_in(d.path() / "out.safetensors") == expected, boost::test_tools::per_element());
  // Unanchored, a pattern matches anywhere: "attn\.bias$" also takes attn.c_attn.bias.
  BOOST_TEST(run(d.path(), {"convert", "gpt2.safetensors", "loose.safetensors", "--drop-matching", "attn\\.bias$"})
                 .out == "wrote 'loose.safetensors': 26 entries, 104 bytes of data\n");
}

BOOST_AUTO_TEST_CASE(convert_keeps_entries_matching_a_pattern) {
  const temp_dir d;
  ckpt::save(d.path() / "gpt2.safetensors", gpt2_shaped());
  // Anchored at the start: blocks 10 and 11, not block 1; a second pattern adds what it matches.
  const result r = run(d.path(), {"convert", "gpt2.safetensors", "out.safetensors", "--keep-matching",
                                  "^h\\.1[01]\\.mlp\\.", "--keep-matching", "wte"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == "wrote 'out.safetensors': 3 entries, 12 bytes of data\n");
  BOOST_TEST(names_in(d.path() / "out.safetensors") ==
                 (std::vector<std::string>{"h.10.mlp.c_fc.weight", "h.11.mlp.c_fc.weight", "wte.weight"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(convert_takes_prefixes_literally_and_patterns_as_regular_expressions) {
  const temp_dir d;
  ckpt::save(d.path() / "gpt2.safetensors", gpt2_shaped());
  // The same text: as a prefix "h.1." is block 1; as a pattern its dots match any character, so
  // blocks 10 and 11 too.
  BOOST_TEST(run(d.path(), {"convert", "gpt2.safetensors", "prefix.safetensors", "--keep", "h.1."}).out ==
             "wrote 'prefix.safetensors': 4 entries, 16 bytes of data\n");
  BOOST_TEST(run(d.path(), {"convert", "gpt2.safetensors", "pattern.safetensors", "--keep-matching", "^h.1."}).out ==
             "wrote 'pattern.safetensors': 12 entries, 48 bytes of data\n");
  // Together: kept if a --keep prefix or a --keep-matching pattern covers it, then dropped if a
  // --drop prefix or a --drop-matching pattern does.
  const result r = run(d.path(), {"convert", "gpt2.safetensors", "out.safetensors", "--keep", "h.0.", "--keep-matching",
                                  "^wte\\.", "--drop", "h.0.mlp.", "--drop-matching", "\\.attn\\.bias$"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == "wrote 'out.safetensors': 3 entries, 12 bytes of data\n");
  BOOST_TEST(names_in(d.path() / "out.safetensors") ==
                 (std::vector<std::string>{"h.0.attn.c_attn.bias", "h.0.attn.c_attn.weight", "wte.weight"}),
             boost::test_tools::per_element());
  // The rules select on IN's names, before --rename.
  const result renamed = run(d.path(), {"convert", "gpt2.safetensors", "renamed.safetensors", "--keep-matching",
                                        "^h\\.0\\.mlp\\.", "--rename", "^h\\.=transformer.h."});
  BOOST_TEST(renamed.status == 0);
  BOOST_TEST(names_in(d.path() / "renamed.safetensors") == (std::vector<std::string>{"transformer.h.0.mlp.c_fc.weight"}),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(convert_refuses_an_invalid_pattern_before_reading_anything) {
  const temp_dir d;
  ckpt::save(d.path() / "gpt2.safetensors", gpt2_shaped());
  // The library's message (naming the pattern and RE2's reason) after the option and the pattern.
  const auto refused = [](const std::string& pattern) {
    return message_of<std::invalid_argument>([&] { static_cast<void>(ckpt::name_pattern(pattern)); });
  };
  check_usage_error(d, {"convert", "gpt2.safetensors", "out.safetensors", "--drop-matching", "(attn"},
                    "ckpt convert: --drop-matching '(attn': " + refused("(attn") + "\n");
  check_usage_error(d, {"convert", "gpt2.safetensors", "out.safetensors", "--keep-matching", "h.[0-"},
                    "ckpt convert: --keep-matching 'h.[0-': " + refused("h.[0-") + "\n");
  BOOST_TEST(refused("(attn").starts_with("ckpt: the regular expression '(attn' is invalid: "));
  // Before IN is read: a missing IN is not what is reported.
  check_usage_error(d, {"convert", "missing.safetensors", "out.safetensors", "--drop-matching", "(attn"},
                    "ckpt convert: --drop-matching '(attn': " + refused("(attn") + "\n");
  BOOST_TEST(!fs::exists(d.path() / "out.safetensors"));
}

BOOST_AUTO_TEST_CASE(convert_refuses_rules_that_leave_no_entry_naming_its_flags) {
  const temp_dir d;
  ckpt::save(d.path() / "gpt2.safetensors", gpt2_shaped());
  const std::string nothing_left =
      "ckpt convert: no entry of 'gpt2.safetensors' is left after --keep/--keep-matching/--drop/--drop-matching (it "
      "has 50)\n";
  check_usage_error(d, {"convert", "gpt2.safetensors", "out.safetensors", "--keep-matching", "^lm_head\\."},
                    nothing_left);
  check_usage_error(d, {"convert", "gpt2.safetensors", "out.safetensors", "--drop-matching", "."}, nothing_left);
  check_usage_error(d, {"convert", "gpt2.safetensors", "out.safetensors", "--keep", "h.", "--drop-matching", "^h\\."},
                    nothing_left);
  BOOST_TEST(!fs::exists(d.path() / "out.safetensors"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(progress)

// On a terminal, long passes draw a bar on stdout and erase it before the result; on a pipe or a
// file (every other test) nothing but the result is written.
BOOST_AUTO_TEST_CASE(a_bar_is_drawn_and_erased_on_a_terminal_only) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample(), {.digest = true});
  const std::string erase = "\r\033[K";
  const result verify = run_on_terminal(d.path(), {"verify", "a.safetensors"});
  BOOST_TEST(verify.status == 0);
  BOOST_TEST(verify.out.starts_with("\rverifying [..............................]   0%"));
  BOOST_TEST(verify.out.ends_with("\rverifying [##############################] 100%" + erase +
                                  "a.safetensors: ok, digest verified\r\n"));

  const result convert = run_on_terminal(d.path(), {"convert", "a.safetensors", "b.safetensors"});
  BOOST_TEST(convert.status == 0);
  BOOST_TEST(convert.out.find("\rreading [") != std::string::npos);
  // Nothing to convert without --dtype: the entries are read as they are written.
  BOOST_TEST(convert.out.find("\rconverting") == std::string::npos);
  BOOST_TEST(convert.out.find("\rwriting [") != std::string::npos);
  BOOST_TEST(convert.out.ends_with("\rwriting [##############################] 100%" + erase +
                                   "wrote 'b.safetensors': 3 entries, 36 bytes of data\r\n"));
  BOOST_TEST(read_bytes(d.path() / "b.safetensors") == read_bytes(d.path() / "a.safetensors"));
  // A sharded checkpoint: one bar a shard, each erased before the next.
  ckpt::save_sharded(d.path() / "sharded", sample(), 16, {.save = {.digest = true}});
  const result sharded = run_on_terminal(d.path(), {"verify", "sharded"});
  BOOST_TEST(sharded.status == 0);
  BOOST_TEST(sharded.out.starts_with("\rverifying shard 1 [..............................]   0%"));
  BOOST_TEST(sharded.out.find(erase + "\rverifying shard 2 [") != std::string::npos);
  BOOST_TEST(sharded.out.ends_with("] 100%" + erase + "sharded: ok, digests of 2 shards verified\r\n"));
  // Nothing long to show: a table alone.
  BOOST_TEST(run_on_terminal(d.path(), {"inspect", "a.safetensors"}).out.starts_with("name  dtype"));
}

BOOST_AUTO_TEST_SUITE_END()

// Every folder ckpt writes opens with every command: a manager folder of either manager (the
// latest step, or --step N, read-only: a run may be training there), and an MPI step folder.
BOOST_AUTO_TEST_SUITE(folders)

BOOST_AUTO_TEST_CASE(every_command_opens_manager_folders_of_both_kinds) {
  const temp_dir d;
  {
    ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
    m.save(5, {sample()});
    m.save(12, {with(sample(), "step", ckpt::of_int("step", 12).get("step"))});
  }
  // The layout of ckpt::mpi::checkpoint_manager: a folder per step, committed by its index (the
  // step folder without one is a save in progress, not a step).
  // (Written without digests, which every save writes by default, for verify to say so below.)
  ckpt::save_sharded(d.path() / "mpi" / "step-0000000005", sample(), 16, {.save = {.digest = false}});
  ckpt::save_sharded(d.path() / "mpi" / "step-0000000012", with(sample(), "step", ckpt::of_int("step", 12).get("step")), 16,
                     {.save = {.digest = false}});
  fs::create_directories(d.path() / "mpi" / "step-0000000013");

  // The step folder without its index is a leftover, listed after the steps.
  const std::string uncommitted =
      "leftover 'mpi/step-0000000013' (0 bytes): an MPI step folder without its index (a save not committed: a killed "
      "job's, or one in progress; or a step being deleted); an mpi::checkpoint_manager removes it when it next opens "
      "the folder for writing\n";
  for (const std::string folder : {"run", "mpi"}) {
    const result listed = run(d.path(), {"inspect", folder});
    BOOST_TEST(listed.status == 0, folder);
    BOOST_TEST(listed.out.ends_with("checkpoint_manager folder: 2 steps, latest 12\n" +
                                    (folder == "mpi" ? uncommitted : std::string())),
               folder);
    const result step5 = run(d.path(), {"inspect", folder, "--step", "5"});
    BOOST_TEST(step5.status == 0, folder);
    BOOST_TEST(step5.out.find("step  I32    [1]") != std::string::npos, folder);
    // diff: the latest of each, and step 5 against the file it was saved from.
    ckpt::save(d.path() / "five.safetensors", sample());
    const result latest = run(d.path(), {"diff", folder, "run"});
    BOOST_TEST(latest.status == 0, folder);
    BOOST_TEST(latest.out.ends_with("same: 3 entries within atol 0, rtol 0\n"), folder);
    const result five = run(d.path(), {"diff", folder, "five.safetensors", "--step", "5"});
    BOOST_TEST(five.status == 0, folder);
    BOOST_TEST(five.out.ends_with("same: 3 entries within atol 0, rtol 0\n"), folder);
    const result newer = run(d.path(), {"diff", folder, "five.safetensors"});
    BOOST_TEST(newer.status == 1, folder);  // step 12's counter is not 7
    // convert: step 5 out as one file, without the manager's metadata.
    const std::string out = folder + "-5.safetensors";
    const result converted = run(d.path(), {"convert", folder, out, "--step", "5", "--drop-metadata"});
    BOOST_TEST(converted.status == 0, folder);
    BOOST_TEST(ckpt::load(d.path() / out).names() == sample().names(), folder);
    BOOST_TEST((ckpt::load(d.path() / out).metadata() ==
                ckpt::metadata_map{{"ckpt.xxh3_64_file", digest_of(d.path() / out)}, {"format", "pt"}}),
               folder);  // the manager's step and wall_time, and the note, are dropped
  }
  // verify: every step of each, named by its checkpoint.
  const result all = run(d.path(), {"verify", "run", "mpi"});
  BOOST_TEST(all.status == 0);
  BOOST_TEST(all.out ==
             "run/ckpt-0000000005.safetensors: ok, digest verified\n"
             "run/ckpt-0000000012.safetensors: ok, digest verified\n"
             "mpi/step-0000000005: ok, format only: no digest\n"
             "mpi/step-0000000012: ok, format only: no digest\n" +
                 uncommitted);
  // An MPI step folder alone is a sharded checkpoint (these were written without digests).
  BOOST_TEST(run(d.path(), {"verify", "mpi/step-0000000012"}).out == "mpi/step-0000000012: ok, format only: no digest\n");

  check_usage_error(d, {"inspect", "run", "--step", "7"}, "ckpt: --step 7: 'run' has no such step (it has 5, 12)\n");
  check_usage_error(d, {"verify", "five.safetensors", "--step", "5"},
                    "ckpt: --step 5: 'five.safetensors' is not a checkpoint_manager folder\n");
  check_usage_error(d, {"diff", "five.safetensors", "five.safetensors", "--step", "5"},
                    "ckpt: --step 5: neither 'five.safetensors' nor 'five.safetensors' is a checkpoint_manager folder\n");
}

BOOST_AUTO_TEST_CASE(verify_counts_entries_of_an_unknown_dtype_and_fails_on_them_when_strict) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample(), {.digest = false});
  // A dtype a later version of the format might add: the header spells F32 as F63.
  std::string bytes = read_bytes(d.path() / "a.safetensors");
  const std::size_t at = bytes.find("\"F32\"");
  BOOST_REQUIRE(at != std::string::npos);
  bytes.replace(at, 5, "\"F63\"");
  std::ofstream(d.path() / "later.safetensors", std::ios::binary) << bytes;
  const result lenient = run(d.path(), {"verify", "later.safetensors"});
  BOOST_TEST(lenient.status == 0);
  BOOST_TEST(lenient.err == "");
  BOOST_TEST(lenient.out == "later.safetensors: ok, format only: no digest; 1 entry skipped (unknown dtype): 'l1.b' (F63)\n");
  const result strict = run(d.path(), {"verify", "--strict", "later.safetensors"});
  BOOST_TEST(strict.status == 1);
  BOOST_TEST(strict.out == "later.safetensors: not ok (--strict): 1 entry of an unknown dtype: 'l1.b' (F63)\n");
}

BOOST_AUTO_TEST_SUITE_END()


// What the tool says of a run folder (issue 35): a step set aside by a manager is not a step of
// the run (a finding only with --strict), a step deleted while the tool listed it is not damage,
// damage is a finding (1) and an error that is not damage is an error (2) that hides no other
// step; the leftovers of interrupted saves are listed with their sizes and what removes them; and
// `ckpt prune --damaged` deletes what a manager set aside, and nothing else.
BOOST_AUTO_TEST_SUITE(run_folders)

// The folder of MPI step `step` in `folder` (ckpt::mpi::checkpoint_manager::path_of).
fs::path mpi_step(const fs::path& folder, std::int64_t step) {
  char name[64];
  std::snprintf(name, sizeof name, "step-%010lld", static_cast<long long>(step));
  return folder / name;
}

// The bytes of the files in `folder` and its subfolders.
std::uint64_t bytes_in(const fs::path& folder) {
  std::uint64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(folder))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

// The lines the tool prints for each kind of leftover, after `leftover 'PATH' (SIZE): `.
const std::string manager_temporary =
    "a checkpoint_manager's temporary file of an interrupted save (or one in progress); a checkpoint_manager removes "
    "it when it next opens the folder for writing (so does ckpt prune --damaged)\n";
const std::string uncommitted_step =
    "an MPI step folder without its index (a save not committed: a killed job's, or one in progress; or a step being "
    "deleted); an mpi::checkpoint_manager removes it when it next opens the folder for writing\n";
const std::string staging_folder =
    "the staging folder of an interrupted ckpt::save_sharded (or one in progress); no manager removes it: delete it "
    "once no save is running\n";
const std::string other_temporary =
    "the temporary file of an interrupted ckpt::save (or one in progress); no manager removes it: delete it once no "
    "save is running\n";
const std::string set_aside = "set aside as damaged by an earlier run";

BOOST_AUTO_TEST_CASE(verify_of_a_run_exits_0_with_set_aside_steps_unless_strict) {
  const temp_dir d;
  {
    ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
    for (const std::int64_t step : {1, 2, 3}) m.save(step, {sample()});
  }
  // Step 3 cut short, then set aside by the next manager that loads the latest step; a copy of
  // step 1 set aside too (it verifies: no longer a step all the same).
  fs::resize_file(step_file(d.path() / "run", 3), 100);
  BOOST_TEST(ckpt::checkpoint_manager(d.path() / "run").load_latest().step == 2);
  fs::copy_file(step_file(d.path() / "run", 1), d.path() / "run" / "ckpt-0000000001.safetensors.damaged-2");
  const std::string cut = in_folder(d.path(), [] {
    return message_of<ckpt::format_error>([] { (void)ckpt::load("run/ckpt-0000000003.safetensors.damaged"); });
  });
  const std::string lines =
      "run/ckpt-0000000001.safetensors.damaged-2: " + set_aside +
      " (ckpt prune --damaged deletes it); it verifies now, but is no longer a step of the run\n"
      "run/ckpt-0000000001.safetensors: ok, digest verified\n"
      "run/ckpt-0000000002.safetensors: ok, digest verified\n"
      "run/ckpt-0000000003.safetensors.damaged: " + set_aside + " (ckpt prune --damaged deletes it): " + cut + "\n";
  const result r = run(d.path(), {"verify", "run"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == lines);
  const result strict = run(d.path(), {"verify", "--strict", "run"});
  BOOST_TEST(strict.status == 1);
  BOOST_TEST(strict.err == "");
  BOOST_TEST(strict.out == lines);
}

BOOST_AUTO_TEST_CASE(verify_of_a_run_exits_1_on_live_damage_whatever_else_is_set_aside) {
  const temp_dir d;
  {
    ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
    for (const std::int64_t step : {1, 2, 3}) m.save(step, {sample()});
  }
  // Step 2's header broken in place, step 3 a symbolic link to nowhere: both listed, both damaged.
  {
    std::fstream f(step_file(d.path() / "run", 2), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.put('[');
  }
  fs::remove(step_file(d.path() / "run", 3));
  fs::create_symlink(d.path() / "nowhere.safetensors", step_file(d.path() / "run", 3));
  std::ofstream(d.path() / "run" / "ckpt-0000000004.safetensors.damaged") << "set aside";
  const auto message = [&]<class E>(const fs::path& file) {
    return in_folder(d.path(), [&] { return message_of<E>([&] { (void)ckpt::load(file); }); });
  };
  const std::string header = message.operator()<ckpt::format_error>(step_file("run", 2));
  const std::string nowhere = message.operator()<ckpt::io_error>(step_file("run", 3));
  BOOST_TEST(nowhere == "ckpt: cannot open 'run/ckpt-0000000003.safetensors': No such file or directory");
  const result r = run(d.path(), {"verify", "run"});
  BOOST_TEST(r.status == 1);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == "run/ckpt-0000000001.safetensors: ok, digest verified\n"
                      "run/ckpt-0000000002.safetensors: " + header + "\n"
                      "run/ckpt-0000000003.safetensors: " + nowhere + "\n"
                      "run/ckpt-0000000004.safetensors.damaged: " + set_aside + " (ckpt prune --damaged deletes it): " +
                          message.operator()<ckpt::format_error>("run/ckpt-0000000004.safetensors.damaged") + "\n");
}

// The MPI manager deletes a step's index first, then its folder: a step folder without its index
// is a step being deleted (or a save not committed), a leftover, never damage.
BOOST_AUTO_TEST_CASE(an_mpi_step_folder_without_its_index_is_a_leftover_not_damage) {
  const temp_dir d;
  ckpt::save_sharded(mpi_step(d.path() / "mpi", 5), sample(), 16, {.save = {.digest = true}});
  ckpt::save_sharded(mpi_step(d.path() / "mpi", 7), sample(), 16, {.save = {.digest = true}});
  fs::remove(mpi_step(d.path() / "mpi", 7) / "model.safetensors.index.json");
  const std::string leftover = "leftover 'mpi/step-0000000007' (" + std::to_string(bytes_in(mpi_step(d.path() / "mpi", 7))) +
                               " bytes): " + uncommitted_step;
  const std::size_t shards = folder_listing(mpi_step(d.path() / "mpi", 5)).size() - 1;
  const result verified = run(d.path(), {"verify", "mpi"});
  BOOST_TEST(verified.status == 0);
  BOOST_TEST(verified.err == "");
  BOOST_TEST(verified.out == "mpi/step-0000000005: ok, digests of " + std::to_string(shards) + " shards verified\n" + leftover);
  const result listed = run(d.path(), {"inspect", "mpi"});
  BOOST_TEST(listed.status == 0);
  BOOST_TEST(listed.out.ends_with("checkpoint_manager folder: 1 step, latest 5\n" + leftover), listed.out);
}

// Whether the process `pid` has a file whose path holds `part` mapped (it is loading it). A
// process that ended has no mapping: `ended` is then set.
bool maps_a_file(pid_t pid, const std::string& part, bool& ended) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  ended = true;
  while (std::getline(maps, line)) {
    ended = false;
    if (line.find(part) != std::string::npos) return true;
  }
  return false;
}

BOOST_AUTO_TEST_CASE(verify_of_a_run_says_which_steps_were_deleted_while_it_listed_them_and_exits_0) {
  const temp_dir d;
  // Step 1 large enough (32 MiB, digest included) that the tool is still checking it when the
  // test, having seen it mapped, deletes the steps after it, as the retention rules of a manager
  // training in the folder would: the files of ckpt::checkpoint_manager; the index of an MPI step
  // (its folder stays, as while the MPI manager prunes it), and a whole MPI step folder.
  const ckpt::checkpoint big({{"w", ckpt::tensor::make(ckpt::dtype::f32, {2048, 4096}, [](std::span<std::byte> bytes) {
                                 for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 7 % 251);
                               })}});
  {
    ckpt::checkpoint_manager m(d.path() / "run", {.max_to_keep = 0});
    m.save(1, {big});
  }
  ckpt::save_sharded(mpi_step(d.path() / "mpi", 1), big, std::uint64_t{1} << 30, {.save = {.digest = true}});
  for (const std::string folder : {"run", "mpi"}) {
    BOOST_TEST_CONTEXT(folder) {
      const bool mpi = folder == "mpi";
      const auto step_of = [&](std::int64_t step) { return mpi ? mpi_step(d.path() / folder, step) : step_file(d.path() / folder, step); };
      const std::string expected = (mpi ? "mpi/step-0000000001: ok, digest verified\n"
                                        : "run/ckpt-0000000001.safetensors: ok, digest verified\n") +
                                   fs::relative(step_of(2), d.path()).string() +
                                   ": deleted while it was being listed (a manager's retention)\n" +
                                   fs::relative(step_of(3), d.path()).string() +
                                   ": deleted while it was being listed (a manager's retention)\n";
      // The tool may be past step 1 when the test sees it (a busy machine): then it tries again.
      bool seen = false;
      for (int attempt = 0; attempt < 20 && !seen; ++attempt) {
        for (const std::int64_t step : {2, 3}) {
          fs::remove_all(step_of(step));
          if (mpi) ckpt::save_sharded(step_of(step), sample(), 16, {.save = {.digest = true}});
          else ckpt::save(step_of(step), sample(), {.digest = true});
        }
        const pid_t pid = start(d.path(), {"verify", folder});
        bool deleted = false, ended = false;
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!deleted && !ended && std::chrono::steady_clock::now() < deadline) {
          if (!maps_a_file(pid, fs::relative(step_of(1), d.path()).string(), ended)) continue;
          ::kill(pid, SIGSTOP);
          if (mpi) fs::remove(step_of(2) / "model.safetensors.index.json");
          else fs::remove(step_of(2));
          fs::remove_all(step_of(3));
          ::kill(pid, SIGCONT);
          deleted = true;
        }
        const result r = finish(d.path(), pid, 30);
        if (!deleted || r.out != expected) {
          BOOST_TEST_MESSAGE("attempt " << attempt << ": the tool was not seen checking step 1:\n" << r.out);
          continue;
        }
        seen = true;
        BOOST_TEST(r.status == 0);
        BOOST_TEST(r.err == "");
      }
      BOOST_TEST(seen);
    }
  }
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CKPT_CLI_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CKPT_CLI_SANITIZED 1
#endif
#endif

// A sanitizer's runtime opens descriptors of its own while the tool runs (24 needed where the
// plain build needs 7), so that no limit separates a step of one shard from one of 40: the case
// is left to the plain build. The library's side (EMFILE is not damage) is tested in every build
// (test_recovery, test_run_folder, test_mpi_folder).
#ifndef CKPT_CLI_SANITIZED
// EMFILE ("Too many open files") is not damage: exit 2, the message on stderr, and the other
// steps are still checked (a broken one still a line). An MPI step of 40 shards holds 16 of them
// open at least (ckpt's floor, whatever the limit): under the smallest limit at which a step of
// one shard loads, one of them fails (which one depends on what the build's runtime holds open).
BOOST_AUTO_TEST_CASE(an_error_that_is_not_damage_exits_2_and_hides_no_other_step) {
  const temp_dir d;
  const fs::path mpi = d.path() / "mpi";
  ckpt::save_sharded(mpi_step(mpi, 1), sample(), 1 << 20, {.save = {.digest = true}});
  std::vector<ckpt::checkpoint> forty;
  for (int i = 0; i < 40; ++i) forty.push_back(ckpt::of_int("w" + std::to_string(10 + i), i));
  ckpt::save_sharded(mpi_step(mpi, 2), ckpt::concat(forty), 4, {.save = {.digest = true}});
  ckpt::save_sharded(mpi_step(mpi, 3), sample(), 1 << 20, {.save = {.digest = true}});
  ckpt::save_sharded(mpi_step(mpi, 4), sample(), 1 << 20, {.save = {.digest = true}});
  BOOST_TEST_REQUIRE(folder_listing(mpi_step(mpi, 2)).size() == 41u);  // 40 shards and the index
  flip_last_byte(mpi_step(mpi, 4) / "model-00001-of-00001.safetensors");
  const std::string corrupted = in_folder(d.path(), [] {
    return message_of<ckpt::integrity_error>([] { (void)ckpt::load("mpi/step-0000000004"); });
  });
  int limit = 3;
  for (; limit < 64; ++limit)
    if (run_with_descriptors(d.path(), limit, {"verify", "mpi"}).out.starts_with("mpi/step-0000000001: ok")) break;
  BOOST_TEST_REQUIRE(limit < 64);
  BOOST_TEST_MESSAGE("the smallest limit at which a step loads: " << limit << " descriptors");
  // A shard of step 2 that could not be opened, and nothing else.
  const auto too_many = [](const std::string& err) {
    return err.starts_with("ckpt: cannot open 'mpi/step-0000000002/model-000") &&
           err.ends_with("-of-00040.safetensors': Too many open files\n") && err.find('\n') == err.size() - 1;
  };
  const result r = run_with_descriptors(d.path(), limit, {"verify", "mpi"});
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.out == "mpi/step-0000000001: ok, digest verified\n"
                      "mpi/step-0000000003: ok, digest verified\n"
                      "mpi/step-0000000004: " + corrupted + "\n");
  BOOST_TEST(too_many(r.err), r.err);
  // The same for the step folder alone, and for inspect, which no longer calls the step damaged.
  const result alone = run_with_descriptors(d.path(), limit, {"verify", "mpi/step-0000000002"});
  BOOST_TEST(alone.status == 2);
  BOOST_TEST(alone.out == "");
  BOOST_TEST(too_many(alone.err), alone.err);
  const result listed = run_with_descriptors(d.path(), limit, {"inspect", "mpi"});
  BOOST_TEST(listed.status == 2);
  BOOST_TEST(listed.out == "");
  BOOST_TEST(too_many(listed.err), listed.err);
  // With enough descriptors, step 2 is sound; a PATH that cannot be read hides no other PATH.
  BOOST_TEST(run(d.path(), {"verify", "mpi/step-0000000002"}).out == "mpi/step-0000000002: ok, digests of 40 shards verified\n");
  const result several = run(d.path(), {"verify", "mpi/step-0000000001", "missing.safetensors", "mpi/step-0000000003"});
  BOOST_TEST(several.status == 2);
  BOOST_TEST(several.out == "mpi/step-0000000001: ok, digest verified\n"
                            "mpi/step-0000000003: ok, digest verified\n");
  BOOST_TEST(several.err == "ckpt: cannot open 'missing.safetensors': No such file or directory\n");
}
#endif

BOOST_AUTO_TEST_CASE(inspect_and_verify_list_leftovers_with_their_sizes_and_what_removes_them) {
  const temp_dir d;
  const fs::path run_folder = d.path() / "run";
  {
    ckpt::checkpoint_manager m(run_folder, {.max_to_keep = 0});
    m.save(1, {sample()});
  }
  // A 740 MiB temporary of a 1 GiB save killed (sparse: it costs no disk), the staging folder of
  // an interrupted save_sharded, another save's temporary, an MPI step folder without its index.
  std::ofstream(run_folder / ".ckpt-0000000002.safetensors.tmp-AbC123").close();
  fs::resize_file(run_folder / ".ckpt-0000000002.safetensors.tmp-AbC123", std::uint64_t{740} << 20);
  fs::create_directory(run_folder / ".ckpt-staging-Xy12Zq");
  std::ofstream(run_folder / ".ckpt-staging-Xy12Zq" / "model-00001-of-00002.safetensors") << "0123456789";
  std::ofstream(run_folder / ".notes.txt.tmp-abcdef") << "abc";
  fs::create_directory(mpi_step(run_folder, 9));
  // Not leftovers: the user's files, names that only look like a temporary.
  std::ofstream(run_folder / "notes.txt") << "mine";
  std::ofstream(run_folder / ".ckpt-0000000003.safetensors.tmp-abc") << "x";
  const std::string leftovers =
      "leftover 'run/.ckpt-0000000002.safetensors.tmp-AbC123' (775946240 bytes, 740.0 MiB): " + manager_temporary +
      "leftover 'run/.ckpt-staging-Xy12Zq' (10 bytes): " + staging_folder +
      "leftover 'run/.notes.txt.tmp-abcdef' (3 bytes): " + other_temporary +
      "leftover 'run/step-0000000009' (0 bytes): " + uncommitted_step;
  const std::string wall_time = ckpt::load(step_file(run_folder, 1)).metadata().at("wall_time");
  const result listed = run(d.path(), {"inspect", "run"});
  BOOST_TEST(listed.status == 0);
  BOOST_TEST(listed.err == "");
  BOOST_TEST(listed.out ==
             "step  state  entries  parameters  bytes  wall_time                 file\n"
             "   1  ok           3           9     36  " + wall_time + "  ckpt-0000000001.safetensors\n"
             "checkpoint_manager folder: 1 step, latest 1\n" + leftovers);
  const result verified = run(d.path(), {"verify", "run"});
  BOOST_TEST(verified.status == 0);  // leftovers are never a finding
  BOOST_TEST(verified.err == "");
  BOOST_TEST(verified.out == "run/ckpt-0000000001.safetensors: ok, digest verified\n" + leftovers);
  BOOST_TEST(run(d.path(), {"verify", "--strict", "run"}).status == 0);
  const boost::json::value json = boost::json::parse(run(d.path(), {"inspect", "--json", "run"}).out);
  BOOST_TEST_REQUIRE(json.at("leftovers").as_array().size() == 4u);
  BOOST_TEST(json.at("leftovers").at(0).at("name") == ".ckpt-0000000002.safetensors.tmp-AbC123");
  BOOST_TEST(json.at("leftovers").at(0).at("bytes") == 775946240);
  BOOST_TEST(json.at("leftovers").at(3).at("what").as_string().starts_with("an MPI step folder without its index"));

  // A run killed during its first save: the manager's lock file and a temporary, no step yet.
  {
    ckpt::checkpoint_manager m(d.path() / "fresh", {.max_to_keep = 0});
  }
  std::ofstream(d.path() / "fresh" / ".ckpt-0000000000.safetensors.tmp-Zz9Zz9").close();
  fs::resize_file(d.path() / "fresh" / ".ckpt-0000000000.safetensors.tmp-Zz9Zz9", std::uint64_t{1} << 30);
  const std::string first =
      "leftover 'fresh/.ckpt-0000000000.safetensors.tmp-Zz9Zz9' (1073741824 bytes, 1.0 GiB): " + manager_temporary;
  const result fresh = run(d.path(), {"inspect", "fresh"});
  BOOST_TEST(fresh.status == 0);
  BOOST_TEST(fresh.out == "step  state  entries  parameters  bytes  wall_time  file\n"
                          "checkpoint_manager folder: 0 steps\n" + first);
  const result fresh_verified = run(d.path(), {"verify", "fresh"});
  BOOST_TEST(fresh_verified.status == 0);
  BOOST_TEST(fresh_verified.out == "fresh: no step (a manager folder whose first step is not committed)\n" + first);
}

BOOST_AUTO_TEST_CASE(prune_deletes_what_a_manager_set_aside_and_its_temporaries_and_nothing_else) {
  const temp_dir d;
  const fs::path run_folder = d.path() / "run";
  {
    ckpt::checkpoint_manager m(run_folder, {.max_to_keep = 0});
    for (const std::int64_t step : {1, 2, 3}) m.save(step, {sample()});
  }
  fs::resize_file(step_file(run_folder, 3), 100);
  BOOST_TEST(ckpt::checkpoint_manager(run_folder, {.max_to_keep = 0}).load_latest().step == 2);  // sets step 3 aside
  // A set-aside MPI step folder, a set-aside link to a file outside the run, a temporary of the
  // manager's interrupted save; and what prune leaves: another save's temporary, the user's file.
  ckpt::save_sharded(run_folder / "step-0000000004.damaged", sample(), 16);
  const std::uint64_t step_4 = bytes_in(run_folder / "step-0000000004.damaged");
  ckpt::save(d.path() / "outside.safetensors", sample());
  fs::create_symlink(d.path() / "outside.safetensors", run_folder / "ckpt-0000000005.safetensors.damaged");
  std::ofstream(run_folder / ".ckpt-0000000006.safetensors.tmp-AbC123") << "partial";
  std::ofstream(run_folder / ".notes.txt.tmp-abcdef") << "x";
  std::ofstream(run_folder / "notes.txt") << "mine";
  const std::string left = "leftover 'run/.notes.txt.tmp-abcdef' (1 byte): " + other_temporary;

  const result r = run(d.path(), {"prune", "--damaged", "run"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out ==
             "deleted 'run/ckpt-0000000003.safetensors.damaged' (step 3, 100 bytes): " + set_aside + "\n"
             "deleted 'run/step-0000000004.damaged' (step 4, " + std::to_string(step_4) + " bytes): " + set_aside + "\n"
             "deleted 'run/ckpt-0000000005.safetensors.damaged' (step 5, a symbolic link: what it points at is kept): " +
                 set_aside + "\n"
             "removed 'run/.ckpt-0000000006.safetensors.tmp-AbC123' (7 bytes): a checkpoint_manager's temporary file of "
             "an interrupted save (or one in progress)\n" +
                 left + "pruned 'run': 3 damaged steps deleted, 1 leftover removed (" + std::to_string(100 + step_4 + 7) +
                 " bytes)\n");
  BOOST_TEST(folder_listing(run_folder) ==
                 (std::vector<std::string>{".ckpt-manager.lock", ".notes.txt.tmp-abcdef", "ckpt-0000000001.safetensors",
                                           "ckpt-0000000002.safetensors", "notes.txt"}),
             boost::test_tools::per_element());
  BOOST_TEST(ckpt::load(d.path() / "outside.safetensors").names() == sample().names());  // only the link went
  const result verified = run(d.path(), {"verify", "--strict", "run"});
  BOOST_TEST(verified.status == 0);
  BOOST_TEST(verified.out == "run/ckpt-0000000001.safetensors: ok, digest verified\n"
                             "run/ckpt-0000000002.safetensors: ok, digest verified\n" + left);
  // Nothing left to prune: said so, status 0.
  const result again = run(d.path(), {"prune", "--damaged", "run"});
  BOOST_TEST(again.status == 0);
  BOOST_TEST(again.out == left + "pruned 'run': 0 damaged steps deleted, 0 leftovers removed (0 bytes)\n");
}

// A folder of ckpt::mpi::checkpoint_manager, pruned by a process without MPI: its set-aside step
// folders go; its steps, and its step folders without an index (which only the MPI manager
// removes), stay.
BOOST_AUTO_TEST_CASE(prune_works_on_an_mpi_run_folder) {
  const temp_dir d;
  const fs::path mpi = d.path() / "mpi";
  ckpt::save_sharded(mpi_step(mpi, 5), sample(), 16);
  ckpt::save_sharded(mpi_step(mpi, 6), sample(), 16);
  fs::rename(mpi_step(mpi, 6), mpi / "step-0000000006.damaged");  // as the MPI manager sets a step aside
  const std::uint64_t step_6 = bytes_in(mpi / "step-0000000006.damaged");
  fs::create_directory(mpi_step(mpi, 7));
  std::ofstream(mpi / ".ckpt-manager.lock").close();
  const result r = run(d.path(), {"prune", "--damaged", "mpi"});
  BOOST_TEST(r.status == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == "deleted 'mpi/step-0000000006.damaged' (step 6, " + std::to_string(step_6) + " bytes): " + set_aside +
                          "\n"
                          "leftover 'mpi/step-0000000007' (0 bytes): " + uncommitted_step +
                          "pruned 'mpi': 1 damaged step deleted, 0 leftovers removed (" + std::to_string(step_6) + " bytes)\n");
  BOOST_TEST(!fs::exists(mpi / "step-0000000006.damaged"));
  BOOST_TEST(ckpt::checkpoint_manager(mpi, {.read_only = true}).steps() == std::vector<std::int64_t>{5},
             boost::test_tools::per_element());
  BOOST_TEST(fs::is_directory(mpi_step(mpi, 7)));
}

BOOST_AUTO_TEST_CASE(prune_refuses_while_a_manager_holds_the_folder) {
  const temp_dir d;
  const fs::path damaged = d.path() / "run" / "ckpt-0000000002.safetensors.damaged";
  {
    ckpt::checkpoint_manager trainer(d.path() / "run", {.max_to_keep = 0});
    trainer.save(1, {sample()});
    std::ofstream(damaged) << "set aside";
    const std::string held = in_folder(d.path(), [] {
      return message_of<ckpt::lock_error>([] { ckpt::checkpoint_manager("run", {.max_to_keep = 0}); });
    });
    const result r = run(d.path(), {"prune", "--damaged", "run"});
    BOOST_TEST(r.status == 2);
    BOOST_TEST(r.out == "");
    BOOST_TEST(r.err == held + "\n");
    BOOST_TEST(fs::exists(damaged));
  }
  // An MPI job's manager holds the same lock (one lock file for both managers).
  fs::create_directory(d.path() / "mpi");
  fs::rename(damaged, d.path() / "mpi" / "step-0000000002.damaged");
  const int lock = ::open((d.path() / "mpi" / ".ckpt-manager.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  BOOST_TEST_REQUIRE(lock >= 0);
  BOOST_TEST_REQUIRE(::flock(lock, LOCK_EX) == 0);
  const result mpi = run(d.path(), {"prune", "--damaged", "mpi"});
  ::close(lock);
  BOOST_TEST(mpi.status == 2);
  BOOST_TEST(mpi.out == "");
  BOOST_TEST(mpi.err == std::string(ckpt::lock_error("mpi", "mpi/.ckpt-manager.lock").what()) + "\n");
  BOOST_TEST(fs::exists(d.path() / "mpi" / "step-0000000002.damaged"));
  BOOST_TEST(run(d.path(), {"prune", "--damaged", "mpi"}).status == 0);  // released
  BOOST_TEST(!fs::exists(d.path() / "mpi" / "step-0000000002.damaged"));
}

BOOST_AUTO_TEST_CASE(prune_needs_damaged_and_an_existing_folder) {
  const temp_dir d;
  fs::create_directory(d.path() / "run");
  ckpt::save(d.path() / "a.safetensors", sample());
  check_usage_error(d, {"prune"}, "RUN is required\nRun with --help for more information.\n");
  check_usage_error(d, {"prune", "run"},
                    "ckpt prune: say what to prune: --damaged deletes the steps a manager set aside as damaged (see "
                    "them with ckpt verify RUN)\n");
  check_usage_error(d, {"prune", "--damaged", "missing"},
                    "ckpt prune: there is no folder 'missing' (RUN is a checkpoint_manager folder)\n");
  BOOST_TEST(!fs::exists(d.path() / "missing"));  // not created
  check_usage_error(d, {"prune", "--damaged", "a.safetensors"},
                    "ckpt prune: 'a.safetensors' is not a folder (RUN is a checkpoint_manager folder)\n");
  BOOST_TEST(folder_listing(d.path() / "run").empty());
  const result help = run(d.path(), {"prune", "--help"});
  BOOST_TEST(help.out.find("Prune never deletes a step that loads") != std::string::npos, help.out);
  BOOST_TEST(help.out.find("removes only what a manager set aside") != std::string::npos, help.out);
}

BOOST_AUTO_TEST_SUITE_END()

// Hostile inputs, round two (tests/RELIABILITY.md): every command ends within seconds with a
// status below 128 and a message naming the file and the rule.
BOOST_AUTO_TEST_SUITE(hostile)

fs::path crafted(const std::string& name) { return fs::path(CKPT_TORCH_FIXTURES) / "hostile" / name; }

BOOST_AUTO_TEST_CASE(a_fifo_is_refused_by_every_command_without_waiting) {
  const temp_dir d;
  BOOST_REQUIRE(::mkfifo((d.path() / "x.safetensors").c_str(), 0600) == 0);
  fs::create_directory(d.path() / "sharded");
  BOOST_REQUIRE(::mkfifo((d.path() / "sharded" / "model.safetensors.index.json").c_str(), 0600) == 0);
  const std::string rule = "ckpt: 'x.safetensors' is not a valid safetensors file: it is not a regular file\n";
  for (const auto& args : std::vector<std::vector<std::string>>{{"inspect", "x.safetensors"},
                                                                {"convert", "x.safetensors", "y.safetensors"},
                                                                {"diff", "x.safetensors", "x.safetensors"}}) {
    const result r = run(d.path(), args, 10);
    BOOST_TEST(r.status == 2, args.front());
    BOOST_TEST(r.err == rule, args.front());
  }
  const result verified = run(d.path(), {"verify", "x.safetensors"}, 10);
  BOOST_TEST(verified.status == 1);
  BOOST_TEST(verified.out == "x.safetensors: " + rule);
  const result index = run(d.path(), {"inspect", "sharded"}, 10);
  BOOST_TEST(index.status == 2);
  BOOST_TEST(index.err ==
             "ckpt: 'sharded/model.safetensors.index.json' is not a valid sharded checkpoint index: it is not a regular file\n");
}

BOOST_AUTO_TEST_CASE(convert_refuses_to_replace_a_device_or_a_fifo) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample());
  BOOST_REQUIRE(::mkfifo((d.path() / "fifo").c_str(), 0600) == 0);
  const result r = run(d.path(), {"convert", "a.safetensors", "fifo"}, 10);
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.err == "ckpt: will not save over 'fifo': it is a FIFO, not a regular file (a save replaces the file at its path)\n");
  BOOST_TEST(fs::is_fifo(d.path() / "fifo"));
  // The real /dev/null, which a convert run as root used to replace by a regular file.
  const result null = run(d.path(), {"convert", "a.safetensors", "/dev/null"}, 10);
  BOOST_TEST(null.status == 2);
  BOOST_TEST(null.err.find("'/dev/null': it is a character device") != std::string::npos, null.err);
  BOOST_TEST(fs::is_character_file("/dev/null"));
}

BOOST_AUTO_TEST_CASE(the_pt_budgets_end_within_seconds_naming_the_budget) {
  const temp_dir d;
  for (const char* name : {"deep_names.pt", "many_names.pt"}) {
    for (const auto& command : std::vector<std::vector<std::string>>{
             {"inspect", crafted(name).string()}, {"convert", crafted(name).string(), "out.safetensors"}}) {
      const result r = run(d.path(), command, 20);
      BOOST_TEST(r.status == 2, name);
      BOOST_TEST(r.err.find("is not a readable PyTorch file: its ") != std::string::npos, r.err);
      BOOST_TEST(r.err.find("the budget torch_options::") != std::string::npos, r.err);
      BOOST_TEST(r.err.find("--torch-budget") != std::string::npos, r.err);
      BOOST_TEST(!fs::exists(d.path() / "out.safetensors"));
    }
  }
  // Raised for a trusted file: it is read.
  const result raised = run(d.path(), {"inspect", "--torch-budget", "400", crafted("deep_names.pt").string()}, 20);
  BOOST_TEST(raised.status == 0, raised.err);
  // An expand past memory names the file; verify counts it as a finding (1), not an I/O error.
  const result expanded = run(d.path(), {"verify", crafted("expand_2p61.pt").string()}, 20);
  BOOST_TEST(expanded.status == 1);
  BOOST_TEST(expanded.out.find("'" + crafted("expand_2p61.pt").string() + "' is not a readable PyTorch file: ") !=
                 std::string::npos,
             expanded.out);
}

BOOST_AUTO_TEST_CASE(a_rename_of_names_of_100000_characters_ends_and_renames) {
  // std::regex recursed once per character and overflowed the stack (SIGSEGV) on a name of
  // 40,000; RE2 (ckpt::name_pattern) matches in linear time with a bounded stack.
  const temp_dir d;
  const std::string tail(100'000, 'a');
  ckpt::save(d.path() / "long.safetensors",
             ckpt::checkpoint({{"model." + tail, f32({1}, {1})}, {"model.b" + tail, f32({1}, {2})}, {"x", f32({1}, {3})}}));
  const result r = run(d.path(), {"convert", "long.safetensors", "out.safetensors", "--rename", "^model\\.(.*)=$1",
                                         "--rename", "^(b?)(a*)$=$1$2.w", "--no-digest"}, 30);
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.err == "");
  const ckpt::checkpoint out = ckpt::load(d.path() / "out.safetensors");
  BOOST_TEST(out.names() == (std::vector<std::string>{tail + ".w", "b" + tail + ".w", "x"}));
  BOOST_TEST((out.get(tail + ".w") == f32({1}, {1})));
  BOOST_TEST((out.get("b" + tail + ".w") == f32({1}, {2})));
}

BOOST_AUTO_TEST_CASE(a_step_out_of_range_is_refused_not_clamped) {
  const temp_dir d;
  const result r = run(d.path(), {"inspect", "--step", "9223372036854775808", "."}, 10);
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.err.find("--step: '9223372036854775808' is not a step number") != std::string::npos, r.err);
}

BOOST_AUTO_TEST_CASE(names_that_would_drive_a_terminal_are_escaped_and_json_is_utf8) {
  const temp_dir d;
  const fs::path file = crafted("control_names.pt");
  const result shown = run(d.path(), {"inspect", file.string()}, 10);
  BOOST_TEST(shown.status == 0);
  BOOST_TEST(shown.out.find('\x1b') == std::string::npos, shown.out);
  BOOST_TEST(shown.out.find('\x07') == std::string::npos);
  BOOST_TEST(shown.out.find("\\x1b]0;owned\\x07title") != std::string::npos, shown.out);
  BOOST_TEST(shown.out.find("latin1_\\xe9t\\xe9") != std::string::npos);
  BOOST_TEST(shown.out.find("  note: \\x1b[31mred\\x9b\n") != std::string::npos);
  // --json: valid UTF-8 JSON, the bytes that are not UTF-8 as the text \xNN.
  const result json = run(d.path(), {"inspect", "--json", file.string()}, 10);
  BOOST_TEST(json.status == 0);
  boost::json::error_code ec;
  const boost::json::value parsed = boost::json::parse(json.out, ec);
  BOOST_TEST_REQUIRE(!ec, json.out);
  std::vector<std::string> names;
  for (const auto& e : parsed.at("entries").as_array()) names.emplace_back(e.at("name").as_string());
  BOOST_TEST(names == (std::vector<std::string>{"\x1b]0;owned\x07title", "clear\x1b[2J", "latin1_\\xe9t\\xe9"}),
             boost::test_tools::per_element());
  BOOST_TEST(std::string(parsed.at("metadata").at("note").as_string()) == "\x1b[31mred\\x9b");
  // diff and verify escape too.
  const result diffed = run(d.path(), {"diff", file.string(), (fs::path(CKPT_TORCH_FIXTURES) / "tied.pt").string()}, 10);
  BOOST_TEST(diffed.status == 1);
  BOOST_TEST(diffed.out.find('\x1b') == std::string::npos, diffed.out);
  BOOST_TEST(diffed.out.find("only in A: \\x1b]0;owned\\x07title\n") != std::string::npos, diffed.out);
}

BOOST_AUTO_TEST_CASE(a_c1_control_shows_as_its_code_point_del_as_its_byte_other_utf8_as_it_is) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample().with_metadata({{"note", "a\xc2\x9b" "b\x7f" "c\xc3\xa9"}}));
  const result shown = run(d.path(), {"inspect", "a.safetensors"});
  BOOST_TEST(shown.status == 0);
  BOOST_TEST(shown.out.find("  note: a\\u009bb\\x7fc\xc3\xa9\n") != std::string::npos, shown.out);
  // JSON keeps valid UTF-8 as it is (JSON escapes the controls itself).
  const result json = run(d.path(), {"inspect", "--json", "a.safetensors"});
  BOOST_TEST(std::string(boost::json::parse(json.out).at("metadata").at("note").as_string()) ==
             "a\xc2\x9b" "b\x7f" "c\xc3\xa9");
}

BOOST_AUTO_TEST_CASE(tied_weights_are_counted_once_and_written_once_unless_kept) {
  const temp_dir d;
  const fs::path tied = fs::path(CKPT_TORCH_FIXTURES) / "tied.pt";
  const result shown = run(d.path(), {"inspect", tied.string()}, 10);
  BOOST_TEST(shown.status == 0);
  BOOST_TEST(shown.out.find("total: 2 entries, 30 parameters, 60 bytes\n"
                            "tied (one tensor, its bytes counted once): embed.weight, out.weight\n") != std::string::npos,
             shown.out);
  const result json = run(d.path(), {"inspect", "--json", tied.string()}, 10);
  BOOST_TEST(json.out.find(R"("tied":[["embed.weight","out.weight"]])") != std::string::npos, json.out);
  // convert writes the first name, as transformers' save_pretrained does; --keep-tied both.
  const result converted = run(d.path(), {"convert", tied.string(), "one.safetensors"}, 10);
  BOOST_TEST(converted.status == 0);
  BOOST_TEST(converted.out.find("left out 'out.weight': tied to 'embed.weight'") != std::string::npos, converted.out);
  BOOST_TEST(ckpt::load(d.path() / "one.safetensors").names() == std::vector<std::string>{"embed.weight"},
             boost::test_tools::per_element());
  BOOST_TEST(run(d.path(), {"convert", "--keep-tied", tied.string(), "both.safetensors"}, 10).status == 0);
  BOOST_TEST(ckpt::load(d.path() / "both.safetensors").size() == 2u);
  // With the first name dropped by --drop, the second is the first left: it is written.
  BOOST_TEST(run(d.path(), {"convert", "--drop", "embed", tied.string(), "out.safetensors"}, 10).status == 0);
  BOOST_TEST(ckpt::load(d.path() / "out.safetensors").names() == std::vector<std::string>{"out.weight"},
             boost::test_tools::per_element());
}

// Class 5: an input cut short while convert reads it (by another process, a network file system)
// ends convert with an error naming it, never a signal: convert reads with pread, where a copy
// out of the mapping raised SIGBUS. The cut lands at a different moment of each run (before,
// during the digest check, during the write, after).
BOOST_AUTO_TEST_CASE(an_input_truncated_during_convert_is_an_error_not_a_signal) {
  const temp_dir d;
  const fs::path in = d.path() / "in.safetensors", out = d.path() / "out.safetensors";
  const ckpt::checkpoint big({{"w", ckpt::tensor::make(ckpt::dtype::f32, {4096, 4096}, [](std::span<std::byte> bytes) {
                                 for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(i * 7 % 251);
                               })}});
  for (const int delay_ms : {0, 5, 10, 20, 40, 80}) {
    BOOST_TEST_CONTEXT("cut after " << delay_ms << " ms") {
      ckpt::save(in, big, {.digest = true});
      std::thread cut([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
        fs::resize_file(in, 4096);
      });
      const result r = run(d.path(), {"convert", "in.safetensors", "out.safetensors"}, 30);  // exited: no signal
      cut.join();
      BOOST_TEST((r.status == 0 || r.status == 2), r.status << ": " << r.err);
      if (r.status != 0) {
        BOOST_TEST(r.err.find("'in.safetensors'") != std::string::npos, r.err);
        BOOST_TEST(!fs::exists(out));
      }
      fs::remove(out);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_sharded_convert_that_fails_leaves_the_previous_checkpoint_whole) {
  const temp_dir d;
  ckpt::save(d.path() / "a.safetensors", sample());
  BOOST_TEST_REQUIRE(run(d.path(), {"convert", "a.safetensors", "out", "--shard-size", "8"}, 10).status == 0);
  const std::vector<std::string> before = folder_listing(d.path() / "out");
  BOOST_TEST_REQUIRE(before.size() == 4u);  // three shards and the index
  // Three entries of 4 bytes, the last name not UTF-8: its shard, the third, fails after the
  // first two are written (the same shard names as the previous save's).
  const result r = run(
      d.path(), {"convert", "--keep-tied", crafted("control_names.pt").string(), "out", "--shard-size", "4"}, 10);
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.err.find("is not valid UTF-8") != std::string::npos, r.err);
  BOOST_TEST(folder_listing(d.path() / "out") == before, boost::test_tools::per_element());
  const result verified = run(d.path(), {"verify", "out"}, 10);
  BOOST_TEST(verified.status == 0, verified.out);
  BOOST_TEST(run(d.path(), {"diff", "a.safetensors", "out"}, 10).status == 0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_cli
