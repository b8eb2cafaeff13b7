// ckpt verify PATH: every check of the strict loader, and the file's digest where one is recorded.

#include "common.hpp"

#include <ckpt/error.hpp>
#include <ckpt/file.hpp>

#include <CLI/CLI.hpp>

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace ckpt_tool {

namespace {

// The digest keys of the file format (docs/guide.md, "File-format guarantees"): ckpt's digest of
// the whole file, which load verifies, and the data-only ones of earlier versions, which it does
// not check.
constexpr std::string_view digest_key = "ckpt.xxh3_64_file";
constexpr std::array<std::string_view, 2> earlier_digest_keys = {"ckpt.xxh3_64_per_mib", "ckpt.xxh3_64"};

struct verify_args {
  std::vector<std::filesystem::path> paths;
  std::optional<std::int64_t> step;
  bool strict = false;
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
// shard of a sharded checkpoint. An I/O error (a missing file) is not a finding about the
// checkpoint: it propagates, for exit status 2.
verdict check(const std::filesystem::path& path,
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
    const ckpt::checkpoint t = load({.verify_digest = true, .progress = report, .skipped = skipped});
    if (!t.metadata().contains(digest_key))
      for (const std::string_view key : earlier_digest_keys)
        if (t.metadata().contains(key)) {
          out.earlier = std::string(key);
          break;
        }
  } catch (const ckpt::io_error&) {
    throw;
  } catch (const ckpt::error& e) {
    out.problem = e.what();
  }
  return out;
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

int verify(const verify_args& args) {
  // One line a checkpoint, so that one broken checkpoint does not hide the others.
  int status = success;
  for (const std::filesystem::path& path : args.paths) {
    const std::vector<listed_step> steps = steps_in(path);
    if (args.step || steps.empty()) {
      const std::filesystem::path checkpoint = checkpoint_in(path, steps, args.step);
      const verdict v = check(checkpoint, [&](const ckpt::load_options& options) {
        return ckpt::load(checkpoint, options, torch_budget(args.torch_budget));
      });
      if (print_verdict(checkpoint.string(), v, args.strict)) status = finding;
      continue;
    }
    // Every step, damaged ones included: each is a line, and a damaged one a finding.
    for (const listed_step& s : steps) {
      const std::filesystem::path& checkpoint = s.checkpoint;
      verdict v;
      try {
        // A listed step loads as its manager loads it; one set aside (no longer a step) as a file.
        v = check(checkpoint, [&](const ckpt::load_options& options) {
          return s.damaged ? ckpt::load(checkpoint, options) : s.reader->load(s.step, options);
        });
      } catch (const ckpt::io_error& e) {
        // Deleted since it was listed, by the retention rules of a manager still training here;
        // anything else there that cannot be read (a symlink to nowhere) is a damaged step.
        std::error_code ec;
        if (e.code() == std::errc::no_such_file_or_directory && !std::filesystem::is_symlink(checkpoint, ec)) continue;
        v.problem = e.what();
      }
      if (s.damaged && !v.problem) v.problem = *s.damaged + "; it verifies now, but is no longer a step of the run";
      if (print_verdict(checkpoint.string(), v, args.strict)) status = finding;
    }
  }
  return status;
}

// What `ckpt verify --help` shows.
constexpr command_text text{
    "verify", "Check every rule of the loader and the data digest",
    R"(Check checkpoints with every rule of the strict loader, and their digest of the whole
file (ckpt.xxh3_64_file: header and data) where one is recorded, without extracting anything.
Prints a line a checkpoint: 'ok, digest verified', 'ok, format only: no digest' (only the format
rules could be checked; also said of the data-only digests of earlier ckpt versions,
ckpt.xxh3_64_per_mib and ckpt.xxh3_64, which are not checked: save the file again to record the
new one), or the broken rule naming the file; and the entries left out for a dtype this version
does not know. Each PATH
is a .safetensors file, a sharded checkpoint (index or folder, an MPI step folder included), or a
checkpoint_manager folder (of either manager, opened read-only), whose steps are checked one by
one (or only step N with --step), steps a manager set aside as damaged included: each damaged
step is a line naming its file and why.

Exit status: 0 if sound, 1 if a checkpoint breaks a rule (or, with --strict, has entries of an
unknown dtype), 2 if a file cannot be read.)"};

}  // namespace

void add_verify(CLI::App& app, action& chosen) {
  const auto [sub, args] = add_command<verify_args>(app, chosen, verify, text);
  sub->add_option("PATH", args->paths, "checkpoint files, sharded indexes or folders, manager folders")
      ->required()->type_name("");
  add_step_option(*sub, args->step);
  sub->add_flag("--strict", args->strict, "fail on entries of a dtype this version does not know (they are left out)");
  add_torch_budget_option(*sub, args->torch_budget);
}

}  // namespace ckpt_tool
