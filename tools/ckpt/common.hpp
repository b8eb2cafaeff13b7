#pragma once
// What the subcommands of the `ckpt` tool share: exit statuses, the error guard, the size parser,
// the listing of a manager folder (its steps, what counts as damage, its leftovers), aligned
// tables, the progress bar, and the registration of each subcommand with CLI11.

#include "run/layout.hpp"

#include <ckpt/checkpoint.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/torch.hpp>

#include "base/digest.hpp"

#include <CLI/App.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt_tool {

/// The exit statuses of every subcommand.
enum status : int {
  success = 0,  ///< done; for verify and diff: nothing found
  finding = 1,  ///< verify found a broken file (a damaged step), diff found a difference
  failure = 2,  ///< a usage error, an I/O error, or an input that cannot be read
};
// The statuses are ordered: of several outcomes, the command exits with the largest (an error
// over a finding over nothing found).

/// The digest keys of the file format (docs/guide.md, "File-format guarantees"), as the library
/// names them (src/base/digest.hpp): ckpt's digest of the whole file, which `load` verifies, and the
/// data-only ones of earlier versions, which it does not check. Each describes one file's bytes.
using ckpt::detail::digest_key;
using ckpt::detail::earlier_digest_keys;

/// What a subcommand does once its arguments are parsed; returns the exit status.
using action = std::function<int()>;

/// Each adds its subcommand to `app`; when the subcommand is the one parsed, its callback stores
/// what to run in `chosen`, which `main` runs outside CLI11's parse.
/// \throws std::bad_alloc; CLI::ConstructionError on a clash of option names (a bug).
void add_inspect(CLI::App& app, action& chosen);
/// \copydoc add_inspect
void add_verify(CLI::App& app, action& chosen);
/// \copydoc add_inspect
void add_diff(CLI::App& app, action& chosen);
/// \copydoc add_inspect
void add_convert(CLI::App& app, action& chosen);
/// \copydoc add_inspect
void add_prune(CLI::App& app, action& chosen);

/// What `ckpt NAME --help` says of a subcommand: its name, one line of help, and the text below its
/// options.
struct command_text {
  const char* name;
  const char* help;
  const char* footer;
};

/// Adds the subcommand described by `text` to `app`, with arguments of type `Args`; when it is the
/// one parsed, `chosen` becomes `run(args)`. Returns the subcommand and its arguments, for the
/// caller to add its options to.
/// \throws std::bad_alloc; CLI::ConstructionError if the name is taken (a bug).
template <class Args, class Run>
std::pair<CLI::App*, std::shared_ptr<Args>> add_command(CLI::App& app, action& chosen, Run run,
                                                        const command_text& text) {
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(text.name, text.help);
  sub->footer(text.footer);
  sub->callback([args, run, &chosen] { chosen = [args, run] { return run(*args); }; });
  return {sub, args};
}

/// Runs `run` and maps what it throws to an exit status and a message on stderr (each message of
/// the library already names the file): `ckpt::error` and `std::invalid_argument` give
/// `failure`, as does anything else.
/// \throws nothing
int guarded(const action& run) noexcept;

/// A usage error found after parsing (an option that cannot apply to these files, say): printed on
/// stderr as `ckpt <subcommand>: <message>`, exit status `failure`.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// `"2GB"`, `"500MB"`, `"1GiB"`, `"123"`: a byte count with an optional unit, decimal (kB, MB, GB,
/// TB: powers of 1000, as Hugging Face's `max_shard_size`) or binary (KiB, MiB, GiB, TiB), the
/// letters in any case, `B` optional (`"2G"` is 2 GB).
/// \throws std::invalid_argument naming `text` if it is not such a count, is 0, or overflows.
[[nodiscard]] std::uint64_t parse_size(std::string_view text);

/// One step of a manager folder: its number and its checkpoint (a file, or an MPI step folder).
struct listed_step {
  std::int64_t step;
  std::filesystem::path checkpoint;
  /// Set if the step is known to be damaged without reading it: set aside by a manager (the
  /// checkpoint is then the set-aside file), or ambiguous; the reason.
  std::optional<std::string> damaged = {};
  /// True if a manager set the step aside as damaged: `checkpoint` is `<name>.damaged` (or
  /// `.damaged-K`), no longer a step of the run, which `ckpt prune --damaged` deletes. A damaged
  /// step that is not set aside (ambiguous: both a file and an MPI step folder) is live damage.
  bool set_aside = false;
  /// The read-only manager that listed the step, which loads it as the managers do (a step is a
  /// safetensors file or an MPI step folder, whatever else `ckpt::load` would read there).
  std::shared_ptr<ckpt::checkpoint_manager> reader = {};
};

/// The steps of a manager folder, of either manager (`ckpt::checkpoint_manager`'s files,
/// `ckpt::mpi::checkpoint_manager`'s step folders), listed by a read-only manager (no lock: a run
/// may be training there), damaged ones included; nothing if `path` is not a folder or holds no
/// step.
/// \throws ckpt::io_error if the folder cannot be listed.
[[nodiscard]] std::vector<listed_step> steps_in(const std::filesystem::path& path);

/// Whether `path` is a manager folder for inspect and verify to list: it has steps (`steps` is
/// `steps_in(path)`), or the lock file of either manager (a run whose first step is not
/// committed yet: its leftovers are all there is to show).
/// \throws std::bad_alloc
[[nodiscard]] bool is_manager_folder(const std::filesystem::path& path, const std::vector<listed_step>& steps);

/// Whether `path` is a run's folder, or a node's, in a node-local tier root (the library's
/// layout::tier_place_of), and a folder.
/// \throws std::bad_alloc
[[nodiscard]] bool is_tier_folder(const std::filesystem::path& path);

/// `"1, 2 of 4"`: the shards of the step that `copy` holds, by their places among the shards its
/// index names (`"none of 4"`; `"?"` if its index cannot be read).
/// \throws std::bad_alloc
[[nodiscard]] std::string held_shards(const ckpt::detail::layout::tier_step& copy);

/// What `copy` holds, for a line of verify: `"holds shards 1, 2 of 4"`, `"holds the partner copies
/// of shards 3, 4 of 4"`, or, holding none (a node whose ranks wrote no shard of the step), that it
/// holds the index alone.
/// \throws std::bad_alloc
[[nodiscard]] std::string held_text(const ckpt::detail::layout::tier_step& copy);

/// What a load of listed step `s` that threw found, in the managers' words (ckpt/manager.hpp):
/// the step was deleted since it was listed (a manager writing the folder: its reader no longer
/// lists it), or its bytes are wrong (damage: its reader now lists it as damaged), or neither (an
/// error of this run: a permission, a resource, which is no finding about the step). A set-aside
/// step, already damaged, is gone if its name is, else damaged for any `ckpt::error`.
enum class failed_load { gone, damaged, error };
/// \throws std::bad_alloc
[[nodiscard]] failed_load what_failed(const listed_step& s, const std::exception& e);

/// What a file or folder takes, a symbolic link not followed: the bytes of a file, or of the files
/// in a folder and its subfolders.
struct footprint {
  std::uint64_t bytes = 0;
  bool link = false;   ///< a symbolic link (its target is not counted)
  bool known = true;   ///< false if it could not be measured (a permission, a resource)
};

/// The footprint of `path` now.
/// \throws std::bad_alloc
[[nodiscard]] footprint footprint_of(const std::filesystem::path& path);

/// `"36 bytes"`, `"775946240 bytes, 740.0 MiB"`, `"a symbolic link"`, `"size unknown"`.
/// \throws std::bad_alloc
[[nodiscard]] std::string to_string(const footprint& f);

/// Something a save that did not finish (or has not finished yet) left in a manager folder.
struct leftover {
  std::filesystem::path path;
  /// What the library's description of a run calls it (src/run/layout.hpp): a step file's
  /// temporary, a step folder without its index, a staging folder, another temporary.
  ckpt::detail::layout::what kind;
  footprint size;
};

/// The leftovers in the manager folder `folder`, by name, measured: temporaries and staging
/// folders of saves, and MPI step folders without their index. Steps, set-aside steps, lock
/// files and the user's own files are not leftovers.
/// \throws ckpt::io_error if the folder cannot be listed.
[[nodiscard]] std::vector<leftover> leftovers_in(const std::filesystem::path& folder);

/// What leftover `l` is, without its path: `"a checkpoint_manager's temporary file of an
/// interrupted save (or one in progress)"`, ...
/// \throws std::bad_alloc
[[nodiscard]] std::string what_is(const leftover& l);

/// What removes leftover `l`: `"a checkpoint_manager removes it when it next opens the folder for
/// writing (so does ckpt prune --damaged)"`, or that nothing does.
/// \throws std::bad_alloc
[[nodiscard]] std::string what_removes(const leftover& l);

/// Writes a line a leftover, `leftover 'PATH' (SIZE): WHAT; WHAT REMOVES IT`, through
/// `printable`: what inspect, verify and prune show of a manager folder's leftovers.
/// \throws whatever the stream throws
void print_leftovers(std::ostream& out, const std::vector<leftover>& leftovers);

/// The checkpoint a PATH argument names, with `--step`: a step of a manager folder (`step`, or
/// the latest step not known to be damaged; for `step`, a damaged one if it is the only one), or
/// PATH itself (a file, a sharded checkpoint, an MPI step folder).
/// \throws usage_error if `step` is given and PATH is not a manager folder, or has no such step
/// (the message lists the steps it has); if PATH is a manager folder with no step yet, or a
/// folder of a node-local tier root (whose steps are each node's part).
[[nodiscard]] std::filesystem::path checkpoint_in(const std::filesystem::path& path, std::optional<std::int64_t> step);
/// The same, for a caller that listed `path` already (`steps` is `steps_in(path)`).
/// \throws usage_error as above.
[[nodiscard]] std::filesystem::path checkpoint_in(const std::filesystem::path& path, const std::vector<listed_step>& steps,
                                                  std::optional<std::int64_t> step);

/// True if `ckpt::load` reads `path` as a sharded checkpoint, by the rules its documentation
/// gives (ckpt/file.hpp): an index by its name, or a folder (which may hold a single file
/// instead). Looks at the file system only for the folder test. For what the tool shows of the
/// reading (a bar a shard), not for how it reads.
/// \throws nothing
[[nodiscard]] bool names_sharded(const std::filesystem::path& path) noexcept;

/// Whether a command requires a positional argument, or may go without it.
enum class presence { required, optional };

/// Adds the positional argument `name`: the path (or paths) a command reads or writes, shown in
/// the usage as `name` and then `type_name` ("PATH", or nothing), required unless `given` says so.
/// \throws std::bad_alloc; CLI::ConstructionError on a clash of option names (a bug).
template <class Paths>
void add_path_argument(CLI::App& sub, const std::string& name, Paths& paths, const std::string& help,
                       const std::string& type_name = "", presence given = presence::required) {
  sub.add_option(name, paths, help)->required(given == presence::required)->type_name(type_name);
}

/// What the loads of a command fetched from object storage (`ckpt::load_options::fetched`), summed
/// over its loads, for `--stats`.
struct fetch_stats {
  std::uint64_t bytes = 0;
  std::uint64_t requests = 0;
  /// `options` with its `fetched` adding to these (which must outlive the loads).
  /// \throws std::bad_alloc
  [[nodiscard]] ckpt::load_options counting(ckpt::load_options options);
};

/// Adds `--fetch-all`: a checkpoint in object storage fetched whole and its digest checked, where
/// `with` (the command's options that choose entries, e.g. "--filter") would fetch only `chosen`
/// (its entries, by ranged GETs, which cannot check the digest of the whole file).
/// \throws std::bad_alloc; CLI::ConstructionError on a clash of option names (a bug).
void add_fetch_all_option(CLI::App& sub, bool& fetch_all, std::string_view with, std::string_view chosen);

/// What a command that loads ends with: with `--stats` (`stats`), the line `fetched from object
/// storage: B bytes (X MiB) in N requests` on stdout. Returns `status`, the command's exit status.
/// \throws whatever the stream throws
int finish(int status, bool stats, const fetch_stats& fetched);

/// The pattern (`ckpt::name_pattern`, for `load_options::only`) of the names that start with one
/// of `prefixes` (taken literally) or that one of `patterns` (RE2) matches; nothing if there is
/// neither.
/// \throws std::invalid_argument if a pattern is not valid RE2.
[[nodiscard]] std::optional<ckpt::name_pattern> pattern_of(const std::vector<std::string>& prefixes,
                                                           const std::vector<std::string>& patterns = {});

/// Whether a load of `path` with `load_options::only` fetches the chosen entries alone (an object,
/// or a sharded checkpoint, in object storage), rather than reading the whole file first; the
/// tool then fetches only those (by default), and says so (print_part_fetched).
/// \throws nothing
[[nodiscard]] bool fetched_in_part(const std::filesystem::path& path) noexcept;

/// The line that says of `path`, loaded in part, that its whole file's digest was not checked,
/// and that `option` fetches it whole.
/// \throws whatever the stream throws
void print_part_fetched(std::ostream& out, const std::filesystem::path& path, std::string_view option);

/// Adds the options every command that loads checkpoints shares, after the command's own, in this
/// order: `--step N`, where `step` is given (the commands that open one step of a manager folder);
/// `--torch-budget FACTOR` (at least 1), which multiplies the budgets of the `.pt` reader
/// (`ckpt::torch_options`); `--stats`, which prints what the command's loads fetched from object
/// storage.
/// \throws std::bad_alloc; CLI::ConstructionError on a clash of option names (a bug).
void add_load_options(CLI::App& sub, std::optional<std::int64_t>* step, std::size_t& torch_budget, bool& stats);

/// `ckpt::torch_options` with every budget multiplied by `factor`.
/// \throws nothing
[[nodiscard]] ckpt::torch_options torch_budget(std::size_t factor) noexcept;
/// The same, listing a `.pt` file's tied names (`torch_options::tied`: each group, in the file's
/// order) in `tied`, which must outlive the read.
/// \throws std::bad_alloc
[[nodiscard]] ckpt::torch_options torch_budget(std::size_t factor, std::vector<std::vector<std::string>>& tied);

/// Step `s` of a manager folder, loaded as its manager loads it (by default header only: no
/// digest check), or nothing if it is gone since it was listed (`what_failed`): a manager still
/// training in the folder deletes old steps after listing them.
/// \throws as `ckpt::checkpoint_manager::load`, except for a step gone since it was listed.
[[nodiscard]] std::optional<ckpt::checkpoint> load_listed(const listed_step& s,
                                                          const ckpt::load_options& options = {.verify_digest = false});

/// The entries of `t` whose names start with `prefix` (all of them for an empty prefix).
/// \throws std::bad_alloc
[[nodiscard]] std::vector<const ckpt::checkpoint::entry*> entries_with_prefix(const ckpt::checkpoint& t,
                                                                              std::string_view prefix);

/// `text` as a terminal may show it: control characters (C0, DEL, C1) and bytes that are not
/// UTF-8 become `\xNN` (a C1 character `\u0080`...), so that a name or a metadata value read
/// from a file cannot move the cursor, clear the screen or set the window title. Everything else
/// is unchanged, `\n` in a message included when `keep_newlines`.
/// \throws std::bad_alloc
[[nodiscard]] std::string printable(std::string_view text, bool keep_newlines = false);

/// `text` as valid UTF-8, for JSON output: each byte that is not part of a valid UTF-8 sequence
/// becomes the four characters `\xNN` (JSON then escapes the backslash); valid text is unchanged.
/// \throws std::bad_alloc
[[nodiscard]] std::string valid_utf8(std::string_view text);

/// `"1 entry"`, `"3 entries"`: `n` and the word that goes with it.
/// \throws std::bad_alloc
[[nodiscard]] std::string count_of(std::uint64_t n, std::string_view one, std::string_view many);

/// One column of a table: its title and whether its cells are right-aligned (numbers).
struct column {
  std::string title;
  bool right = false;
};

/// Writes `rows` under `columns`, each column as wide as its widest cell, two spaces apart, no
/// trailing blanks; each cell through `printable`.
/// \throws whatever the stream throws
void print_table(std::ostream& out, const std::vector<column>& columns,
                 const std::vector<std::vector<std::string>>& rows);

/// A progress bar on stdout for a job of `total` units (bytes), drawn only when stdout is a
/// terminal, so that pipes and files receive the results alone. Redrawn at most once per percent;
/// erased by `done` or the destructor, so the results that follow start on a clean line.
class progress {
 public:
  /// \throws nothing
  progress(std::string label, std::uint64_t total) noexcept;
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;
  /// \throws nothing
  ~progress();
  /// Adds `units` to the work done and redraws if the shown percentage changed.
  /// \throws nothing
  void advance(std::uint64_t units) noexcept;
  /// Erases the bar.
  /// \throws nothing
  void done() noexcept;
  /// True if the bar is drawn (stdout is a terminal).
  /// \throws nothing
  [[nodiscard]] bool shown() const noexcept { return shown_; }

 private:
  void draw() noexcept;
  std::string label_;
  std::uint64_t total_ = 0;
  std::uint64_t current_ = 0;
  int percent_ = -1;
  bool shown_ = false;
};

/// Reads the files in order, sequentially, with a progress bar, so that the pass over them that
/// follows (the library's digest check) finds them in the page cache; the bar thus shows the disk
/// reads, the slow part of verifying a large file. Does nothing when stdout is not a terminal.
/// Unreadable files are skipped: the library reports them in its own words.
/// \throws std::bad_alloc
void read_ahead(const std::vector<std::filesystem::path>& files, std::string_view label);

}  // namespace ckpt_tool
