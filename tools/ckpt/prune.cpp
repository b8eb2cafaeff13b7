// ckpt prune --damaged RUN: deletes the steps a manager set aside as damaged, through a writing
// manager (its lock, its clean-up of its own temporaries), once the user has looked at them.

#include "common.hpp"

#include <ckpt/error.hpp>
#include <ckpt/manager.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>


namespace ckpt_tool {

namespace {

struct prune_args {
  std::filesystem::path run;
  bool damaged = false;
};

bool still_there(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found;
}

int prune(const prune_args& args) {
  if (!args.damaged)
    throw usage_error("ckpt prune: say what to prune: --damaged deletes the steps a manager set aside as damaged "
                      "(see them with ckpt verify RUN)");
  // Checked first: the manager would create a missing folder.
  std::error_code ec;
  const std::filesystem::file_status run = std::filesystem::status(args.run, ec);
  if (run.type() == std::filesystem::file_type::not_found)
    throw usage_error("ckpt prune: there is no folder '" + args.run.string() + "' (RUN is a checkpoint_manager folder)");
  if (ec) throw ckpt::io_error(args.run, "open", ec);
  if (!std::filesystem::is_directory(run))
    throw usage_error("ckpt prune: '" + args.run.string() + "' is not a folder (RUN is a checkpoint_manager folder)");

  const std::vector<leftover> before = leftovers_in(args.run);
  // A writing manager that keeps every step: it takes the folder's lock, the one lock of both
  // managers (refused, with its lock_error, while a trainer or an MPI job holds the folder), and
  // removes its own temporaries as it opens.
  ckpt::checkpoint_manager manager(args.run, {.max_to_keep = 0});
  // What remove_damaged deletes, measured before it goes.
  std::vector<std::pair<ckpt::checkpoint_manager::step_status, footprint>> set_aside;
  for (const ckpt::checkpoint_manager::step_status& s : manager.status())
    if (s.state == ckpt::checkpoint_manager::step_state::damaged && s.path != manager.path_of(s.step))
      set_aside.emplace_back(s, footprint_of(s.path));
  std::optional<std::string> failed;
  try {
    static_cast<void>(manager.remove_damaged());
  } catch (const ckpt::error& e) {
    failed = e.what();  // those before the failure are deleted: reported below
  }
  // Deleted: the set-aside rows no longer in status().
  const std::vector<ckpt::checkpoint_manager::step_status> left = manager.status();
  std::uint64_t bytes = 0;
  std::size_t deleted = 0, removed = 0;
  for (const auto& [s, size] : set_aside) {
    const std::filesystem::path& path = s.path;  // clang before 16 cannot capture a structured binding
    if (std::ranges::any_of(left, [&](const auto& l) { return l.path == path; })) continue;
    ++deleted;
    bytes += size.bytes;
    std::cout << "deleted '" << printable(s.path.string()) << "' (step " << s.step << ", "
              << (size.link ? std::string("a symbolic link: what it points at is kept") : to_string(size))
              << "): " << printable(s.reason) << '\n';
  }
  // Removed as the manager opened: its own temporaries that were there before and are gone now.
  for (const leftover& l : before) {
    if (l.kind != ckpt::detail::layout::what::step_temporary || still_there(l.path)) continue;
    ++removed;
    bytes += l.size.bytes;
    std::cout << "removed '" << printable(l.path.string()) << "' (" << to_string(l.size) << "): " << what_is(l) << '\n';
  }
  // What no checkpoint_manager removes stays, each with what does.
  print_leftovers(std::cout, leftovers_in(args.run));
  std::cout << "pruned '" << printable(args.run.string()) << "': " << count_of(deleted, "damaged step", "damaged steps")
            << " deleted, " << count_of(removed, "leftover", "leftovers") << " removed ("
            << count_of(bytes, "byte", "bytes") << ")\n";
  if (failed) {
    std::cout.flush();
    std::cerr << printable(*failed, true) << '\n';
    return failure;
  }
  return success;
}

// What `ckpt prune --help` shows.
constexpr command_text prune_text{
    "prune", "Delete the steps a manager set aside as damaged",
    R"(With --damaged, delete the steps that a manager set aside as damaged in the checkpoint_manager
folder RUN (of either manager): those it found with wrong bytes and renamed '<name>.damaged'
('.damaged-2', ...), files or MPI step folders. Look at them first (ckpt verify RUN): a manager
never deletes them itself. Prune never deletes a step that loads: it reads no step and keeps
every one, and removes only what a manager set aside (a symbolic link so named is deleted, never
what it points at; a set-aside step that verifies now goes too: verify says which) and, as any
manager that opens a folder for writing, the temporary files of a checkpoint_manager's
interrupted saves. RUN is opened as a writing checkpoint_manager that keeps every step
(max_to_keep = 0), under the folder's lock (and an MPI job's, if it has one): prune refuses while
a trainer holds the folder, and no trainer starts while it runs. RUN must be an existing folder;
the process needs no MPI.

Prints a line for each step deleted ('deleted', its path, step, size and reason) and for each
leftover removed ('removed'), a line for each leftover left (with what removes it), then the
summary: pruned 'RUN': N damaged steps deleted, M leftovers removed (B bytes).

Exit status: 0 when done (nothing to delete included); 2 without --damaged, if RUN is not a
folder, if a manager holds it, or if a deletion fails (what was deleted before is reported).)"};

}  // namespace

void add_prune(CLI::App& app, action& chosen) {
  const auto [sub, args] = add_command<prune_args>(app, chosen, prune, prune_text);
  add_path_argument(*sub, "RUN", args->run, "the checkpoint_manager folder");
  sub->add_flag("--damaged", args->damaged,
                "delete the steps a manager set aside as damaged (<name>.damaged, <name>.damaged-K)");
}

}  // namespace ckpt_tool
