#include "common.hpp"

// The library's own rules, through its internal headers (src/): UTF-8 and hex digits, the test of
// an s3:// URL, and what a run holds (the one description of a run, src/run/layout.hpp), each in
// one place.
#include "base/hex.hpp"
#include "base/utf8.hpp"
#include "format/sharded.hpp"
#include "io/remote_path.hpp"
#include "run/layout.hpp"
#include "run/store.hpp"

#include <ckpt/error.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/torch.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ckpt_tool {

int guarded(const action& run) noexcept {
  try {
    try {
      return run();
    } catch (const std::exception& e) {
      // The library's messages start with "ckpt: " and name the file; ours do too.
      std::cout.flush();
      std::cerr << printable(e.what(), true) << '\n';
      return failure;
    }
  } catch (...) {
    // Writing the message itself failed (stderr closed): the status still tells.
    return failure;
  }
}

std::uint64_t parse_size(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("ckpt: the size '" + std::string(text) + "' " + why +
                                 " (expected a byte count such as 2GB, 500MB, 1GiB or 123456)");
  };
  std::uint64_t count = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
  if (end == text.data()) throw bad("does not start with a number");
  if (ec == std::errc::result_out_of_range) throw bad("is too large");
  std::string unit(end, text.data() + text.size());
  std::ranges::transform(unit, unit.begin(),
                         [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  if (unit.ends_with('b') && unit != "b") unit.pop_back();  // "gb" and "g" alike; "gib" -> "gi"
  // Decimal units as Hugging Face's max_shard_size counts them ("5GB" is 5 * 10^9); the "i"
  // units are binary.
  static constexpr std::pair<std::string_view, std::uint64_t> units[] = {
      {"", 1},           {"b", 1},
      {"k", 1000},       {"m", 1000'000},          {"g", 1000'000'000},          {"t", 1000'000'000'000},
      {"ki", 1ull << 10}, {"mi", 1ull << 20},       {"gi", 1ull << 30},           {"ti", 1ull << 40},
  };
  const auto it = std::ranges::find(units, std::string_view(unit), &std::pair<std::string_view, std::uint64_t>::first);
  if (it == std::end(units)) throw bad("has an unknown unit");
  if (count > std::numeric_limits<std::uint64_t>::max() / it->second) throw bad("is too large");
  if (count == 0) throw bad("is zero");
  return count * it->second;
}

namespace {

// A checkpoint_manager's run in a bucket: an s3:// prefix, not an object of a checkpoint file.
bool names_run_in_bucket(const std::filesystem::path& path) {
  const std::string_view text(path.native());
  return ckpt::detail::is_remote(text) && !text.ends_with(".safetensors") && !text.ends_with(".json") &&
         !text.ends_with(".bin") && !text.ends_with(".pt");
}

}  // namespace

std::vector<listed_step> steps_in(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec) && !names_run_in_bucket(path)) return {};
  const auto reader = std::make_shared<ckpt::checkpoint_manager>(path, ckpt::checkpoint_manager::options{.read_only = true});
  std::vector<listed_step> out;
  for (const ckpt::checkpoint_manager::step_status& s : reader->status()) {
    const bool damaged = s.state == ckpt::checkpoint_manager::step_state::damaged;
    // Set aside: renamed by a writing manager, no longer where the step would be.
    out.push_back({s.step, s.path, damaged ? std::optional(s.reason) : std::nullopt,
                   damaged && s.path != reader->path_of(s.step), reader});
  }
  return out;
}

namespace {

// What the run at `path` holds, as the library describes it (src/run/layout.hpp).
std::vector<ckpt::detail::layout::item> described(const std::filesystem::path& path) {
  return ckpt::detail::layout::describe(*ckpt::detail::open_store(path, /*create=*/false));
}

}  // namespace

bool is_manager_folder(const std::filesystem::path& path, const std::vector<listed_step>& steps) {
  if (!steps.empty()) return true;
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return false;
  return std::ranges::any_of(described(path), [](const ckpt::detail::layout::item& x) {
    return x.kind == ckpt::detail::layout::what::lock;
  });
}

bool is_tier_folder(const std::filesystem::path& path) {
  std::error_code ec;
  return ckpt::detail::layout::tier_place_of(path) && std::filesystem::is_directory(path, ec);
}

std::string held_shards(const ckpt::detail::layout::tier_step& copy) {
  if (!copy.problem.empty()) return "?";
  std::string out;
  for (const std::string& shard : copy.held)
    out += (out.empty() ? "" : ", ") + std::to_string(std::ranges::lower_bound(copy.shards, shard) - copy.shards.begin() + 1);
  return (out.empty() ? std::string("none") : out) + " of " + std::to_string(copy.shards.size());
}

std::string held_text(const ckpt::detail::layout::tier_step& copy) {
  const char* unit = copy.parts ? "part" : "shard";
  if (copy.held.empty())
    return "holds the index alone (none of the step's " +
           count_of(copy.shards.size(), unit, copy.parts ? "parts" : "shards") + ": " +
           (copy.partner ? "the previous node's" : "the node's") + " ranks wrote none)";
  return std::string(copy.partner ? "holds the partner copies of " : "holds ") + unit +
         (copy.held.size() == 1 ? " " : "s ") + held_shards(copy);
}

failed_load what_failed(const listed_step& s, const std::exception& e) {
  if (s.set_aside) {
    std::error_code ec;
    if (std::filesystem::symlink_status(s.checkpoint, ec).type() == std::filesystem::file_type::not_found)
      return failed_load::gone;
    return dynamic_cast<const ckpt::error*>(&e) != nullptr ? failed_load::damaged : failed_load::error;
  }
  // The reader's load has sorted it: it forgets a step gone since it was listed, lists a damaged
  // one as damaged (where it lies: a read-only manager renames nothing), and keeps listing a step
  // it could not read for another reason.
  if (std::ranges::binary_search(s.reader->steps(), s.step)) return failed_load::error;  // ascending
  for (const ckpt::checkpoint_manager::step_status& row : s.reader->status())
    if (row.state == ckpt::checkpoint_manager::step_state::damaged && row.path == s.checkpoint) return failed_load::damaged;
  return failed_load::gone;
}

footprint footprint_of(const std::filesystem::path& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::symlink_status(path, ec);
  if (ec) return {.known = false};
  if (std::filesystem::is_symlink(status)) return {.link = true};
  if (std::filesystem::is_regular_file(status)) {
    const std::uintmax_t size = std::filesystem::file_size(path, ec);
    return ec ? footprint{.known = false} : footprint{.bytes = size};
  }
  if (!std::filesystem::is_directory(status)) return {};
  // The files of a folder and its subfolders; links inside are not followed (nor counted).
  footprint out;
  std::filesystem::recursive_directory_iterator it(path, ec);
  for (const std::filesystem::recursive_directory_iterator end; !ec && it != end; it.increment(ec)) {
    const std::filesystem::file_status entry = it->symlink_status(ec);
    if (!ec && std::filesystem::is_regular_file(entry)) out.bytes += it->file_size(ec);
    if (ec) break;
  }
  if (ec) out.known = false;
  return out;
}

std::string to_string(const footprint& f) {
  if (!f.known) return "size unknown";
  if (f.link) return "a symbolic link";
  std::string out = count_of(f.bytes, "byte", "bytes");
  if (f.bytes >= 1024) {
    static constexpr std::array<const char*, 6> units = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double value = static_cast<double>(f.bytes) / 1024;
    std::size_t unit = 0;
    for (; value >= 1024 && unit + 1 < units.size(); ++unit) value /= 1024;
    char text[32];
    std::snprintf(text, sizeof text, ", %.1f %s", value, units[unit]);
    out += text;
  }
  return out;
}

std::vector<leftover> leftovers_in(const std::filesystem::path& folder) {
  using ckpt::detail::layout::what;
  std::vector<leftover> out;
  for (const ckpt::detail::layout::item& x : described(folder))
    if (x.kind == what::step_temporary || x.kind == what::uncommitted_step_folder || x.kind == what::staging_folder ||
        x.kind == what::temporary)
      out.push_back({folder / x.name, x.kind, footprint_of(folder / x.name)});
  return out;
}

std::string what_is(const leftover& l) {
  switch (l.kind) {
    case ckpt::detail::layout::what::step_temporary:
      return "a checkpoint_manager's temporary file of an interrupted save (or one in progress)";
    case ckpt::detail::layout::what::uncommitted_step_folder:
      return "an MPI step folder without its index (a save not committed: a killed job's, or one in progress; "
             "or a step being deleted)";
    case ckpt::detail::layout::what::staging_folder:
      return "the staging folder of an interrupted ckpt::save_sharded (or one in progress)";
    default:
      break;
  }
  return "the temporary file of an interrupted ckpt::save (or one in progress)";
}

std::string what_removes(const leftover& l) {
  switch (l.kind) {
    case ckpt::detail::layout::what::step_temporary:
      return "a checkpoint_manager removes it when it next opens the folder for writing (so does ckpt prune --damaged)";
    case ckpt::detail::layout::what::uncommitted_step_folder:
      return "an mpi::checkpoint_manager removes it when it next opens the folder for writing";
    default:
      break;
  }
  return "no manager removes it: delete it once no save is running";
}

void print_leftovers(std::ostream& out, const std::vector<leftover>& leftovers) {
  for (const leftover& l : leftovers)
    out << "leftover '" << printable(l.path.string()) << "' (" << to_string(l.size) << "): " << what_is(l) << "; "
        << what_removes(l) << '\n';
}

std::filesystem::path checkpoint_in(const std::filesystem::path& path, std::optional<std::int64_t> step) {
  return checkpoint_in(path, steps_in(path), step);
}

std::filesystem::path checkpoint_in(const std::filesystem::path& path, const std::vector<listed_step>& steps,
                                    std::optional<std::int64_t> step) {
  if (is_tier_folder(path))
    throw usage_error("ckpt: '" + path.string() + "' is a folder of a node-local tier root: its steps are each node's "
                      "part of them (ckpt inspect and ckpt verify show them); read a step in the run's shared folder");
  if (steps.empty()) {
    if (step) throw usage_error("ckpt: --step " + std::to_string(*step) + ": '" + path.string() + "' is not a checkpoint_manager folder");
    if (is_manager_folder(path, steps))
      throw usage_error("ckpt: '" + path.string() +
                        "' is a checkpoint_manager folder with no step yet (its first step is not committed): there is "
                        "no checkpoint to read");
    return path;
  }
  const auto usable = [](const listed_step& s) { return !s.damaged; };
  if (!step) {
    const auto newest = std::ranges::find_if(steps.rbegin(), steps.rend(), usable);
    if (newest == steps.rend())
      throw usage_error("ckpt: '" + path.string() + "' holds only damaged steps: name one with --step");
    return newest->checkpoint;
  }
  // The step, or a damaged one of that number if there is no other.
  const auto same = [&](const listed_step& s) { return s.step == *step; };
  const auto it = std::ranges::find_if(steps, [&](const listed_step& s) { return same(s) && usable(s); });
  if (it != steps.end()) return it->checkpoint;
  if (const auto damaged = std::ranges::find_if(steps, same); damaged != steps.end()) return damaged->checkpoint;
  std::string have;
  for (const listed_step& s : steps) have += (have.empty() ? "" : ", ") + std::to_string(s.step);
  throw usage_error("ckpt: --step " + std::to_string(*step) + ": '" + path.string() + "' has no such step (it has " + have + ")");
}

bool names_sharded(const std::filesystem::path& path) noexcept {
  if (ckpt::detail::names_index(path.native())) return true;
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

ckpt::load_options fetch_stats::counting(ckpt::load_options options) {
  options.fetched = [this](std::uint64_t b, std::uint64_t r) {
    bytes += b;
    requests += r;
  };
  return options;
}

void add_fetch_all_option(CLI::App& sub, bool& fetch_all, std::string_view with, std::string_view chosen) {
  sub.add_flag("--fetch-all", fetch_all,
               "with " + std::string(with) + ", fetch all of a checkpoint in object storage and check its digest (by "
               "default only " + std::string(chosen) + " are fetched, by ranged GETs, which cannot check the digest of "
               "the whole file)");
}

int finish(int status, bool stats, const fetch_stats& fetched) {
  if (stats)
    std::cout << "fetched from object storage: " << to_string(footprint{.bytes = fetched.bytes}) << " in "
              << count_of(fetched.requests, "request", "requests") << '\n';
  return status;
}

std::optional<ckpt::name_pattern> pattern_of(const std::vector<std::string>& prefixes,
                                             const std::vector<std::string>& patterns) {
  if (prefixes.empty() && patterns.empty()) return std::nullopt;
  std::string any;
  const auto add = [&](const std::string& alternative) { any += (any.empty() ? "(?:" : "|(?:") + alternative + ")"; };
  for (const std::string& prefix : prefixes) {
    // The prefix literally: every ASCII character but letters, digits and '_' escaped (RE2's
    // QuoteMeta), a NUL as \x00.
    std::string quoted = "^";
    for (const char c : prefix) {
      const auto u = static_cast<unsigned char>(c);
      if (u == 0) quoted += "\\x00";
      else if (u >= 0x80 || std::isalnum(u) != 0 || c == '_') quoted += c;
      else (quoted += '\\') += c;
    }
    add(quoted);
  }
  for (const std::string& p : patterns) add(p);
  return ckpt::name_pattern(any);
}

bool fetched_in_part(const std::filesystem::path& path) noexcept { return ckpt::detail::is_remote(path); }

void print_part_fetched(std::ostream& out, const std::filesystem::path& path, std::string_view option) {
  out << "fetched only the chosen entries of '" << printable(path.string())
      << "': the digest of the whole file (if it records one) was not checked; " << option
      << " fetches it whole and checks it\n";
}

void add_load_options(CLI::App& sub, std::optional<std::int64_t>* step, std::size_t& torch_budget, bool& stats) {
  if (step != nullptr) {
    // Checked as text first: a number out of range is refused, not clamped to the nearest step.
    const CLI::Validator step_number(
        [](std::string& text) {
          std::int64_t value = 0;
          const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
          if (ec != std::errc() || end != text.data() + text.size())
            return "'" + text + "' is not a step number (an integer from " +
                   std::to_string(std::numeric_limits<std::int64_t>::min()) + " to " +
                   std::to_string(std::numeric_limits<std::int64_t>::max()) + ")";
          return std::string();
        },
        "", "step number");
    sub.add_option("--step", *step, "in a checkpoint_manager folder (of either manager), step N instead of the latest")
        ->type_name("N")
        ->check(step_number);
  }
  sub.add_option("--torch-budget", torch_budget,
                 "multiply the budgets of the .pt/.bin reader by FACTOR (names: 16 bytes per byte of the pickle + "
                 "1 MiB; tensor bytes: 16 per byte of the file + 16 MiB; unpickler objects: 64 per byte of the "
                 "pickle + 64 MiB), to read a trusted file that exceeds one")
      ->type_name("FACTOR")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1} << 20));
  sub.add_flag("--stats", stats,
               "print what the loads fetched from object storage (s3://): the bytes of the answers and the requests");
}

ckpt::torch_options torch_budget(std::size_t factor) noexcept {
  ckpt::torch_options options;
  options.name_budget *= factor;
  options.data_budget *= factor;
  options.object_budget *= factor;
  return options;
}

ckpt::torch_options torch_budget(std::size_t factor, std::vector<std::vector<std::string>>& tied) {
  ckpt::torch_options options = torch_budget(factor);
  options.tied = [&tied](const std::vector<std::string>& names) { tied.push_back(names); };
  return options;
}

std::optional<ckpt::checkpoint> load_listed(const listed_step& s, const ckpt::load_options& options) {
  try {
    return s.reader->load(s.step, options);
  } catch (const std::exception& e) {
    if (what_failed(s, e) == failed_load::gone) return std::nullopt;
    throw;
  }
}

std::vector<const ckpt::checkpoint::entry*> entries_with_prefix(const ckpt::checkpoint& t,
                                                                std::string_view prefix) {
  std::vector<const ckpt::checkpoint::entry*> out;
  for (const auto& e : t)
    if (e.first.starts_with(prefix)) out.push_back(&e);
  return out;
}

std::string printable(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  ckpt::detail::for_each_utf8(
      text,
      [&](std::string_view sequence, char32_t c) {
        if (c < 0x20 || c == 0x7f) {
          if (keep_newlines && c == '\n') out += '\n';
          else ckpt::detail::append_byte_escape(out, static_cast<unsigned char>(c));
        } else if (c >= 0x80 && c < 0xa0) {
          out += "\\u";
          ckpt::detail::append_hex(out, c, 4);
        } else {
          out.append(sequence);
        }
      },
      [&](unsigned char b) { ckpt::detail::append_byte_escape(out, b); });
  return out;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  ckpt::detail::for_each_utf8(
      text, [&](std::string_view sequence, char32_t) { out.append(sequence); },
      [&](unsigned char b) { ckpt::detail::append_byte_escape(out, b); });
  return out;
}

std::string count_of(std::uint64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

void print_table(std::ostream& out, const std::vector<column>& columns,
                 const std::vector<std::vector<std::string>>& raw_rows) {
  // Cells come from files: escaped before their widths are taken.
  std::vector<std::vector<std::string>> rows;
  rows.reserve(raw_rows.size());
  for (const auto& row : raw_rows) {
    auto& cells = rows.emplace_back();
    for (const auto& cell : row) cells.push_back(printable(cell));
  }
  std::vector<std::size_t> width(columns.size());
  for (std::size_t c = 0; c < columns.size(); ++c) width[c] = columns[c].title.size();
  for (const auto& row : rows)
    for (std::size_t c = 0; c < columns.size() && c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  const auto print_row = [&](const auto& cell_of) {
    std::string line;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      const std::string_view cell = cell_of(c);
      const std::string pad(width[c] - cell.size(), ' ');
      if (c > 0) line += "  ";
      if (columns[c].right) line += pad;
      line += cell;
      if (!columns[c].right) line += pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  };
  print_row([&](std::size_t c) -> std::string_view { return columns[c].title; });
  for (const auto& row : rows)
    print_row([&](std::size_t c) -> std::string_view { return c < row.size() ? row[c] : std::string_view(); });
}

progress::progress(std::string label, std::uint64_t total) noexcept
    : label_(std::move(label)), total_(total), shown_(::isatty(STDOUT_FILENO) == 1) {
  draw();
}

progress::~progress() { done(); }

void progress::advance(std::uint64_t units) noexcept {
  current_ = std::min(total_, current_ + units);
  draw();
}

void progress::draw() noexcept {
  if (!shown_) return;
  const int percent = total_ == 0 ? 100 : static_cast<int>(current_ * 100 / total_);
  if (percent == percent_) return;
  percent_ = percent;
  constexpr int width = 30;
  const int filled = percent * width / 100;
  // Written with stdio in one call, flushed at once: the bar must show while the work goes on.
  std::fprintf(stdout, "\r%s [%s%s] %3d%%", label_.c_str(), std::string(static_cast<std::size_t>(filled), '#').c_str(),
               std::string(static_cast<std::size_t>(width - filled), '.').c_str(), percent);
  std::fflush(stdout);
}

void progress::done() noexcept {
  if (!shown_) return;
  shown_ = false;
  // "\r", then erase to the end of the line (ANSI EL), so that what follows starts clean.
  std::fputs("\r\033[K", stdout);
  std::fflush(stdout);
}

void read_ahead(const std::vector<std::filesystem::path>& files, std::string_view label) {
  if (::isatty(STDOUT_FILENO) != 1) return;
  std::uint64_t total = 0;
  for (const auto& f : files) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(f, ec);
    if (!ec) total += size;
  }
  progress bar(std::string(label), total);
  constexpr std::size_t chunk = std::size_t{4} << 20;
  const auto buffer = std::make_unique_for_overwrite<char[]>(chunk);
  for (const auto& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat info {};
    if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {  // a FIFO would block: left to the reader to refuse
      ::close(fd);
      continue;
    }
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (ssize_t n; (n = ::read(fd, buffer.get(), chunk)) > 0;) bar.advance(static_cast<std::uint64_t>(n));
    ::close(fd);
  }
}

}  // namespace ckpt_tool
