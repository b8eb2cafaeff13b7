// ckpt verify PATH: every check of the strict loader, and the data digest where one is recorded.

#include "common.hpp"

#include <ckpt/error.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/sharded.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

namespace ckpt_tool {

namespace {

struct verify_args {
  std::filesystem::path path;
};

// Loads `path` as `ckpt::load` does, digest included, and returns the broken rule's message, or
// nothing if the checkpoint is sound. Loading maps the file and parses the header only; nothing
// is extracted. The digest check draws a bar (on a terminal), one for each shard of a sharded
// checkpoint. An I/O error (a missing file) is not a finding about the checkpoint: it propagates,
// for exit status 2.
std::optional<std::string> problem_of(const std::filesystem::path& path) {
  const bool sharded = ckpt::is_sharded_path(path);
  std::optional<progress> bar;
  std::uint64_t shown = 0;
  int files = 0;
  bool file_done = true;  // the next report is the first of a file
  const auto report = [&](std::uint64_t hashed, std::uint64_t total) {
    if (file_done) {
      bar.reset();  // erases the previous file's bar
      bar.emplace(sharded ? "verifying shard " + std::to_string(++files) : std::string("verifying"), total);
      shown = 0;
    }
    bar->advance(hashed - shown);
    shown = hashed;
    file_done = hashed == total;
  };
  try {
    (void)read_checkpoint(path, {.verify_digest = true, .progress = report});
    return std::nullopt;
  } catch (const ckpt::io_error&) {
    throw;
  } catch (const ckpt::error& e) {
    return e.what();
  }
}

int verify(const verify_args& args) {
  if (!is_manager_folder(args.path)) {
    const auto problem = problem_of(args.path);
    std::cout << (problem ? *problem : "ok") << '\n';
    return problem ? finding : success;
  }
  // Each step in turn, one line each, so that one broken checkpoint does not hide the others.
  int status = success;
  for (const std::int64_t step : ckpt::list_steps(args.path)) {
    const std::filesystem::path file = ckpt::checkpoint_path(args.path, step);
    std::optional<std::string> problem;
    try {
      problem = problem_of(file);
    } catch (const ckpt::io_error& e) {
      // Deleted since it was listed, by the retention rules of a manager still training here.
      if (e.code() == std::errc::no_such_file_or_directory) continue;
      throw;
    }
    std::cout << file.filename().string() << ": " << (problem ? *problem : "ok") << '\n';
    if (problem) status = finding;
  }
  return status;
}

// What `ckpt verify --help` shows.
constexpr command_text text{
    "verify", "Check every rule of the loader and the data digest",
    R"(Check a checkpoint with every rule of the strict loader, and its data digest (ckpt.xxh3_64)
where one is recorded, without extracting anything. Prints 'ok' or the broken rule, naming the
file. PATH is a .safetensors file, a sharded checkpoint (index or folder), or a
checkpoint_manager folder, whose steps are checked one by one.

Exit status: 0 if sound, 1 if a checkpoint breaks a rule, 2 if a file cannot be read.)"};

}  // namespace

void add_verify(CLI::App& app, action& chosen) {
  const auto [sub, args] = add_command<verify_args>(app, chosen, verify, text);
  sub->add_option("PATH", args->path, "the checkpoint file, sharded index or folder")->required()->type_name("");
}

}  // namespace ckpt_tool
