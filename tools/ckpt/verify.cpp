// ckpt verify PATH: every check of the strict loader, and the file's digest where one is recorded.

#include "run/layout.hpp"
#include "run/store.hpp"
#include "common.hpp"

#include <ckpt/error.hpp>
#include <ckpt/file.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt_tool {

namespace {

namespace layout = ckpt::detail::layout;

struct verify_args {
  std::vector<std::filesystem::path> paths;
  std::optional<std::int64_t> step;
  bool strict = false;
  bool stats = false;
  std::optional<std::filesystem::path> local_dir;  // the node-local tier root of the runs verified
  std::size_t torch_budget = 1;
};

// What verifying one checkpoint found.
struct verdict {
  std::optional<std::string> problem;  // the broken rule, or nothing if sound
  int digests = 0;                     // files whose digest was checked (a shard each)
  std::optional<std::string> earlier;  // the key of an earlier version's digest, not checked
  std::vector<std::string> skipped;    // entries of an unknown dtype: "'name' (DTYPE)"
};

// Loads a checkpoint with `load` (`ckpt::load` of a path, or a manager's load of a step) with
// these options, digest included, and says what it found. Loading maps the file and parses the
// header only; nothing is extracted. The digest check draws a bar (on a terminal), one for each
// shard of a sharded checkpoint. A broken rule (a format_error, integrity_error included) is the
// verdict; anything else (an io_error, std::bad_alloc) propagates: whether it is a finding
// depends on what was checked (a step whose name leads nowhere is damaged; a file named on the
// command line that cannot be opened is an error, exit status 2).
verdict check(const std::filesystem::path& path, fetch_stats& fetched,
              const std::function<ckpt::checkpoint(const ckpt::load_options&)>& load) {
  const bool sharded = names_sharded(path);
  verdict out;
  std::optional<progress> bar;
  std::uint64_t shown = 0;
  bool file_done = true;  // the next report is the first of a file
  const auto report = [&](std::uint64_t hashed, std::uint64_t total) {
    if (file_done) {
      bar.reset();  // erases the previous file's bar
      ++out.digests;
      bar.emplace(sharded ? "verifying shard " + std::to_string(out.digests) : std::string("verifying"), total);
      shown = 0;
    }
    bar->advance(hashed - shown);
    shown = hashed;
    file_done = hashed == total;
  };
  const auto skipped = [&](std::string_view name, std::string_view dtype) {
    out.skipped.push_back("'" + std::string(name) + "' (" + std::string(dtype) + ")");
  };
  try {
    const ckpt::checkpoint t = load(fetched.counting({.verify_digest = true, .progress = report, .skipped = skipped}));
    if (!t.metadata().contains(digest_key))
      for (const std::string_view key : earlier_digest_keys)
        if (t.metadata().contains(key)) {
          out.earlier = std::string(key);
          break;
        }
  } catch (const ckpt::format_error& e) {
    out.problem = e.what();
  }
  return out;
}

// An error that is not a finding (the checkpoint could not be checked): its message on stderr,
// after the lines already on stdout. The library's messages name the file; another one
// (std::bad_alloc) is given the checkpoint's name.
void report_error(const std::filesystem::path& checkpoint, const std::exception& e) {
  std::cout.flush();
  if (dynamic_cast<const ckpt::error*>(&e) != nullptr)
    std::cerr << printable(e.what(), true) << '\n';
  else
    std::cerr << "ckpt verify: cannot check '" << printable(checkpoint.string()) << "': " << printable(e.what(), true)
              << '\n';
}

// "ok, digest verified", "ok, format only: no digest" (or an earlier version's digest, which is
// not checked), the broken rule; and the entries skipped
// for an unknown dtype, which --strict counts as a finding. Returns whether it is a finding.
bool print_verdict(const std::string& label, const verdict& v, bool strict) {
  std::cout << printable(label) << ": ";
  const bool skipped_fail = strict && !v.skipped.empty();
  if (v.problem) {
    std::cout << printable(*v.problem);
  } else if (skipped_fail) {
    std::cout << "not ok (--strict): " << count_of(v.skipped.size(), "entry", "entries") << " of an unknown dtype";
  } else {
    std::cout << "ok, "
              << (v.digests == 1   ? std::string("digest verified")
                  : v.digests > 1  ? "digests of " + std::to_string(v.digests) + " shards verified"
                  : v.earlier      ? "format only: the digest of an earlier ckpt version (" + *v.earlier +
                                    ", data only) is not checked; re-save to record " + std::string(digest_key)
                                   : std::string("format only: no digest"));
    if (!v.skipped.empty()) std::cout << "; " << count_of(v.skipped.size(), "entry", "entries") << " skipped (unknown dtype)";
  }
  if (!v.skipped.empty() && !v.problem) {
    std::string names;
    for (const std::string& n : v.skipped) names += (names.empty() ? "" : ", ") + n;
    std::cout << ": " << printable(names);
  }
  std::cout << '\n';
  return v.problem.has_value() || skipped_fail;
}

// A checkpoint named by PATH: a file, a sharded checkpoint, or --step N of a manager folder.
int verify_checkpoint(const verify_args& args, fetch_stats& fetched, const std::filesystem::path& checkpoint) {
  verdict v;
  try {
    v = check(checkpoint, fetched, [&](const ckpt::load_options& options) {
      return ckpt::load(checkpoint, options, torch_budget(args.torch_budget));
    });
  } catch (const ckpt::io_error& e) {
    // Cannot be read (missing, a permission, a resource): nothing was checked.
    report_error(checkpoint, e);
    return failure;
  } catch (const ckpt::error& e) {
    // Not a checkpoint at all (a folder with neither a manager's steps nor an index): a finding.
    v.problem = e.what();
  } catch (const std::exception& e) {
    report_error(checkpoint, e);
    return failure;
  }
  return print_verdict(checkpoint.string(), v, args.strict) ? finding : success;
}

// A step of a manager folder, a line: its verdict (live damage is a finding), or that a manager
// writing the folder deleted it after it was listed (not a finding), or, for a step a manager set
// aside, that it was set aside and what is wrong with it (a finding only with --strict). An error
// that is not damage (EMFILE, EACCES, ENOMEM, EIO, std::bad_alloc...) goes to stderr, exit status
// 2: the step could not be checked. `sound` gets whether the step verified.
int verify_step(const verify_args& args, fetch_stats& fetched, const listed_step& s, bool& sound) {
  sound = false;
  const std::string label = printable(s.checkpoint.string());
  if (s.damaged && !s.set_aside) {
    // Damaged as listed (a step both a file and an MPI step folder): nothing to load.
    std::cout << label << ": " << printable(*s.damaged) << '\n';
    return finding;
  }
  verdict v;
  try {
    // A listed step loads as its manager loads it; one set aside (no longer a step) as a path.
    v = check(s.checkpoint, fetched, [&](const ckpt::load_options& options) {
      return s.set_aside ? ckpt::load(s.checkpoint, options, torch_budget(args.torch_budget))
                         : s.reader->load(s.step, options);
    });
  } catch (const std::exception& e) {
    switch (what_failed(s, e)) {
      case failed_load::gone:
        std::cout << label << ": deleted while it was being listed ("
                  << (s.set_aside ? "ckpt prune --damaged, or a manager's remove_damaged" : "a manager's retention")
                  << ")\n";
        return success;
      case failed_load::error:
        report_error(s.checkpoint, e);
        return failure;
      case failed_load::damaged:
        v.problem = e.what();  // a name that leads nowhere (a symbolic link to nowhere, a loop)
        break;
    }
  }
  if (s.set_aside) {
    std::cout << label << ": " << printable(*s.damaged) << " (ckpt prune --damaged deletes it)";
    if (v.problem) std::cout << ": " << printable(*v.problem);
    else std::cout << "; it verifies now, but is no longer a step of the run";
    std::cout << '\n';
    return args.strict ? finding : success;
  }
  const bool broken = print_verdict(s.checkpoint.string(), v, args.strict);
  sound = !v.problem;
  return broken ? finding : success;
}

// Every step of a manager folder, damaged and set-aside ones included, a line each, then its
// leftovers (never a finding: a manager or the user removes them). `sound` gets the steps that
// verified.
int verify_folder(const verify_args& args, fetch_stats& fetched, const std::filesystem::path& folder,
                  const std::vector<listed_step>& steps, std::set<std::int64_t>& sound) {
  const std::vector<leftover> leftovers = leftovers_in(folder);
  if (steps.empty())
    std::cout << printable(folder.string()) << ": no step (a manager folder whose first step is not committed)\n";
  int status = success;
  for (const listed_step& s : steps) {
    bool ok = false;
    status = std::max(status, verify_step(args, fetched, s, ok));
    if (ok && !s.set_aside) sound.insert(s.step);
  }
  print_leftovers(std::cout, leftovers);
  return status;
}

// The shards of a node-local tier's copies that verified: (the copy's folder, the shard).
using intact_shards = std::set<std::pair<std::string, std::string>>;

// The copies of run `run` in the node-local tier root `root` (at `root_path`) that the nodes
// `keep` accepts hold, each held shard verified as a load of that part of the step checks it
// (layout::load_held: the shard's rules and digest, the entries the index gives it): a line a
// copy, saying which shards of the step it holds; a broken shard is a line naming it (a finding).
// `intact` gets the shards that verified. Returns the status.
int verify_copies(const verify_args& args, fetch_stats& fetched, const std::filesystem::path& root_path,
                  const ckpt::detail::store& root, const layout::tier_run& run,
                  const std::function<bool(const layout::tier_node&)>& keep, intact_shards& intact) {
  int status = success;
  for (const layout::tier_node& node : run.nodes) {
    if (!keep(node)) continue;
    for (const layout::tier_step& copy : node.steps) {
      const std::string label = printable((root_path / copy.folder).string());
      if (!copy.problem.empty()) {
        std::cout << label << ": " << printable(copy.problem) << '\n';
        status = std::max<int>(status, finding);
        continue;
      }
      int digests = 0;
      bool broken = false;
      for (const std::string& shard : copy.held) {
        verdict v;
        try {
          v = check(root_path / copy.folder / shard, fetched, [&](const ckpt::load_options& options) {
            return layout::load_held(root, copy, options, shard);
          });
        } catch (const ckpt::io_error& e) {
          report_error(root_path / copy.folder / shard, e);
          status = std::max<int>(status, failure);
          broken = true;
          continue;
        } catch (const ckpt::error& e) {
          // Not the shard its index names (another save's: ckpt::mixed_save_error): a committed
          // step is never saved again, so a finding, as verify_checkpoint counts it.
          v.problem = e.what();
        }
        if (v.problem || (args.strict && !v.skipped.empty())) {
          std::cout << label << ": "
                    << (v.problem ? printable(*v.problem)
                                  : "not ok (--strict): " + printable(shard) + " has " +
                                        count_of(v.skipped.size(), "entry", "entries") + " of an unknown dtype")
                    << '\n';
          status = std::max<int>(status, finding);
          broken = true;
          continue;
        }
        digests += v.digests;
        intact.emplace(copy.folder, shard);
      }
      if (broken) continue;
      std::cout << label << ": ok, " << held_text(copy);
      if (!copy.held.empty())
        std::cout << ", "
                  << (digests == 0   ? std::string("format only: no digest")
                      : digests == 1 ? std::string("digest verified")
                                     : "digests of " + std::to_string(digests) + (copy.parts ? " parts" : " shards") +
                                           " verified");
      std::cout << '\n';
    }
    for (const std::string& folder : node.step_folders) print_leftovers(std::cout, leftovers_in(root_path / folder));
  }
  return status;
}

// A run's folder, or a node's, in a node-local tier root: the copies of its nodes.
int verify_tier_place(const verify_args& args, fetch_stats& fetched, const layout::tier_place& place) {
  const std::unique_ptr<ckpt::detail::store> root = ckpt::detail::open_folder_store(place.root, false);
  const layout::tier_root described = layout::describe_tier_root(*root);
  const auto run = std::ranges::find(described.runs, place.run, &layout::tier_run::id);
  if (run == described.runs.end()) throw usage_error("ckpt: '" + place.root.string() + "' holds no run " + place.run);
  intact_shards intact;
  return verify_copies(args, fetched, place.root, *root, *run, [&](const layout::tier_node& node) {
    return node.folder == place.folder || run->folder == place.folder;
  }, intact);
}

// `ckpt verify RUN --local-dir L`: RUN's steps, then the copies its nodes keep in L, then for
// each step which tiers can restore it: the node-local tier (every shard intact on its own node,
// or with the partner copies), the shared tier (RUN's step verified).
int verify_run_with_tiers(const verify_args& args, fetch_stats& fetched, const std::filesystem::path& run_path,
                          const std::vector<listed_step>& steps) {
  std::set<std::int64_t> shared;
  int status = verify_folder(args, fetched, run_path, steps, shared);
  const std::optional<std::string> id = layout::read_run_id(*ckpt::detail::open_store(run_path, false));
  if (!id)
    throw usage_error("ckpt verify: --local-dir: '" + run_path.string() +
                      "' has no run id: it is no run of ckpt::mpi::checkpoint_manager, which alone keeps node-local tiers");
  const std::unique_ptr<ckpt::detail::store> root = ckpt::detail::open_folder_store(*args.local_dir, false);
  const layout::tier_root described = layout::describe_tier_root(*root);
  const auto run = std::ranges::find(described.runs, *id, &layout::tier_run::id);
  std::set<std::int64_t> all = shared;
  for (const listed_step& s : steps) all.insert(s.step);
  intact_shards intact;
  if (run == described.runs.end()) {
    std::cout << printable(args.local_dir->string()) << ": no node-local copy of run " << *id << '\n';
  } else {
    status = std::max(status, verify_copies(args, fetched, *args.local_dir, *root, *run,
                                            [](const layout::tier_node&) { return true; }, intact));
    for (const layout::tier_node& node : run->nodes)
      for (const layout::tier_step& copy : node.steps) all.insert(copy.step);
  }
  for (const std::int64_t step : all) {
    std::vector<std::string> from;
    layout::tier_cover local;
    if (run != described.runs.end())
      local = layout::covered(*run, step, [&](const layout::tier_step& copy, const std::string& shard) {
        return intact.contains({copy.folder, shard});
      });
    if (local.own) from.emplace_back("the node-local tier");
    else if (local.with_partners) from.emplace_back("the node-local tier with its partner copies");
    if (shared.contains(step)) from.emplace_back("the shared tier");
    std::cout << "step " << step << ": ";
    if (from.empty()) {
      std::cout << "no tier can restore it (";
      if (!local.missing.empty()) {
        std::string names;
        for (const std::string& m : local.missing) names += (names.empty() ? "" : ", ") + m;
        std::cout << "no node holds an intact copy of " << printable(names) << "; ";
      }
      std::cout << (std::ranges::any_of(steps, [&](const listed_step& s) { return s.step == step; })
                        ? "its step in the shared tier did not verify"
                        : "the shared tier does not hold it")
                << ")\n";
      continue;
    }
    std::string text;
    for (const std::string& f : from) text += (text.empty() ? "" : ", ") + f;
    std::cout << "restorable from " << text << '\n';
  }
  return status;
}

int verify(const verify_args& args) {
  // A line a checkpoint, so that one broken checkpoint, or one that cannot be read, does not hide
  // the others; the status is the worst.
  int status = success;
  fetch_stats fetched;
  for (const std::filesystem::path& path : args.paths)
    status = std::max(status, guarded([&] {
                        if (!args.step && is_tier_folder(path))
                          return verify_tier_place(args, fetched, *layout::tier_place_of(path));
                        if (std::error_code ec; !args.step && !args.local_dir && std::filesystem::is_directory(path, ec)) {
                          const std::unique_ptr<ckpt::detail::store> root = ckpt::detail::open_folder_store(path, false);
                          const layout::tier_root described = layout::describe_tier_root(*root);
                          int worst = success;
                          intact_shards intact;
                          for (const layout::tier_run& run : described.runs)
                            worst = std::max(worst, verify_copies(args, fetched, path, *root, run,
                                                                  [](const layout::tier_node&) { return true; }, intact));
                          if (!described.runs.empty()) return worst;
                        }
                        const std::vector<listed_step> steps = steps_in(path);
                        if (args.step || !is_manager_folder(path, steps)) {
                          if (args.local_dir)
                            throw usage_error("ckpt verify: --local-dir: '" + path.string() +
                                              "' is not the shared folder of a run (a checkpoint_manager folder)");
                          return verify_checkpoint(args, fetched, checkpoint_in(path, steps, args.step));
                        }
                        if (args.local_dir) return verify_run_with_tiers(args, fetched, path, steps);
                        std::set<std::int64_t> sound;
                        return verify_folder(args, fetched, path, steps, sound);
                      }));
  return finish(status, args.stats, fetched);
}

// What `ckpt verify --help` shows.
constexpr command_text verify_text{
    "verify", "Check every rule of the loader and the data digest",
    R"(Check checkpoints with every rule of the strict loader, and their digest of the whole
file (ckpt.xxh3_64_file: header and data) where one is recorded, without extracting anything.
Prints a line a checkpoint: 'ok, digest verified', 'ok, format only: no digest' (only the format
rules could be checked; also said of the data-only digests of earlier ckpt versions,
ckpt.xxh3_64_per_mib and ckpt.xxh3_64, which are not checked: save the file again to record the
new one), or the broken rule naming the file; and the entries left out for a dtype this version
does not know. Each PATH is a .safetensors file, a sharded checkpoint (index or folder, an MPI
step folder included), or a checkpoint_manager folder (of either manager, opened read-only),
whose steps are checked one by one (or only step N with --step). A step whose bytes are wrong is
a line naming its file and the broken rule; a step that a manager still writing the folder
deleted after it was listed says 'deleted while it was being listed'; a step a manager set aside
as damaged (<name>.damaged) says so, and what is wrong with it ('ckpt prune --damaged' deletes
those). Then a line for each leftover of a save that did not finish (a temporary file, an MPI
step folder without its index, a staging folder): its size and what removes it.

A node-local tier root (ckpt::mpi::tiers::local), a run's folder in it or one node's folder:
each step folder a node holds gets a line saying which of the step's shards it holds (its own, or
the partner copies of the previous node's), each verified as a sharded load checks its shards;
a broken shard is a line naming it. With --local-dir L, each PATH is a run's shared folder: its
steps are verified, then its nodes' copies in L, then for each step a line says which tiers can
restore it ('step S: restorable from the node-local tier, the shared tier'; 'with its partner
copies' when the copies of a lost node's shards are needed), or that none can.

Exit status: 0 if sound (steps set aside as damaged, steps deleted while listed and leftovers
included: none is a step of the run any more); 1 if a checkpoint or a step breaks a rule (or,
with --strict, has entries of an unknown dtype, or is a step set aside as damaged); 2 if a
checkpoint cannot be read for another reason than its bytes (a missing file, a permission, too
many open files, no memory; the message is on stderr, and the other checkpoints are still
checked). Of several, the largest.)"};

}  // namespace

void add_verify(CLI::App& app, action& chosen) {
  const auto [sub, args] = add_command<verify_args>(app, chosen, verify, verify_text);
  add_path_argument(*sub, "PATH", args->paths,
                    "checkpoint files, sharded indexes or folders, manager folders, node-local tier folders");
  sub->add_flag("--strict", args->strict,
                "fail on entries of a dtype this version does not know (they are left out), and on steps a manager set "
                "aside as damaged");
  sub->add_option("--local-dir", args->local_dir,
                  "the node-local tier root (ckpt::mpi::tiers::local) of the runs named: their nodes' copies are "
                  "verified too, and each step gets a line saying which tiers can restore it")
      ->type_name("L");
  add_load_options(*sub, &args->step, args->torch_budget, args->stats);
}

}  // namespace ckpt_tool
