// ckpt diff A B: the entries only in one of two checkpoints, those whose dtype or shape differ, and
// the largest absolute and relative differences of the values of the others; with --metadata,
// their __metadata__ too.

#include "common.hpp"

#include <ckpt/adapt.hpp>
#include <ckpt/detail/pages.hpp>
#include <ckpt/file.hpp>
#include <ckpt/tensor.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt_tool {

namespace {

struct diff_args {
  std::filesystem::path a, b;
  double atol = 0;
  double rtol = 0;
  bool ignore_dtype = false;
  std::string filter;  // only the entries whose names start with it
  std::vector<std::int64_t> steps;  // of manager folders: this step (A B), or these two (RUN)
  std::size_t torch_budget = 1;
  bool metadata = false;  // compare the __metadata__ too, a difference being a finding
  bool fetch_all = false;  // objects in a bucket fetched whole (their digests checked), whatever --filter
  bool stats = false;
};

// The comparison of the values of two entries of the same shape.
struct value_diff {
  double max_abs = 0;        // max |a - b|
  double max_rel = 0;        // max |a - b| / |b|
  std::uint64_t beyond = 0;  // elements (bytes, for F6/F4) outside the tolerance
  bool numeric = true;       // false: compared as raw bytes (F6, F4)
};

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", x);
  return text;
}

// `x` as a tensor whose elements convert to F64 with ckpt::cast: C64 as F32 pairs (real,
// imaginary), so that both parts are compared, and every other whole-byte dtype as itself.
ckpt::tensor comparable(const ckpt::tensor& x, ckpt::dtype other) {
  // A C64 entry against a real one: the real one becomes C64 (imaginary part +0), by the rules
  // of ckpt::cast, rather than dropping the other's imaginary part.
  const ckpt::tensor y = other == ckpt::dtype::c64 ? ckpt::cast(x, ckpt::dtype::c64) : x;
  if (y.dtype() != ckpt::dtype::c64) return y;
  return ckpt::tensor::view_of(ckpt::dtype::f32, {2 * y.numel()}, y.bytes(), std::make_shared<ckpt::tensor>(y));
}

// Elements [first, first + count) of `x` (a whole-byte dtype) in double, by ckpt::cast.
ckpt::tensor as_doubles(const ckpt::tensor& x, std::size_t first, std::size_t count) {
  const std::size_t element = x.nbytes() / static_cast<std::size_t>(x.numel());
  const ckpt::tensor part = ckpt::tensor::view_of(x.dtype(), {static_cast<std::int64_t>(count)},
                                                  x.bytes().subspan(first * element, count * element), nullptr);
  return ckpt::cast(part, ckpt::dtype::f64);
}

// Element-wise, in double, after ckpt::cast (so F16, BF16, the F8 formats and the integers are
// decoded by the library's rules; 64-bit integers beyond 2^53 are rounded). NaN against NaN
// counts as equal, NaN against a number as an infinite difference; equal infinities are equal.
value_diff compare(const ckpt::tensor& a_file, const ckpt::tensor& b_file, double atol, double rtol) {
  value_diff out;
  // Read from the files with pread, not through their mappings: a file truncated meanwhile is an
  // error naming it, not a SIGBUS.
  const ckpt::tensor a_in = ckpt::detail::tensor_access::in_memory(a_file);
  const ckpt::tensor b_in = ckpt::detail::tensor_access::in_memory(b_file);
  if (ckpt::detail::is_sub_byte(a_in.dtype()) || ckpt::detail::is_sub_byte(b_in.dtype())) {
    // Raw bytes only: no values to subtract, so byte for byte (dtypes differ: all differ).
    out.numeric = false;
    const auto x = a_in.bytes(), y = b_in.bytes();
    if (a_in.dtype() != b_in.dtype() || x.size() != y.size()) {
      out.beyond = std::max(x.size(), y.size());
      return out;
    }
    for (std::size_t i = 0; i < x.size(); ++i) out.beyond += x[i] != y[i];
    return out;
  }
  const ckpt::tensor a = comparable(a_in, b_in.dtype()), b = comparable(b_in, a_in.dtype());
  constexpr std::size_t chunk = 1 << 15;
  const auto n = static_cast<std::size_t>(a.numel());
  for (std::size_t first = 0; first < n; first += chunk) {
    const std::size_t count = std::min(chunk, n - first);
    const ckpt::tensor a_part = as_doubles(a, first, count), b_part = as_doubles(b, first, count);
    const std::span<const double> xs = a_part.as<double>(), ys = b_part.as<double>();
    for (std::size_t i = 0; i < count; ++i) {
      const double x = xs[i], y = ys[i];
      if (x == y || (std::isnan(x) && std::isnan(y))) continue;
      const double abs = std::isnan(x) || std::isnan(y) ? std::numeric_limits<double>::infinity() : std::fabs(x - y);
      const double rel = abs / std::fabs(y);  // +inf where b is 0 (a is not, or they were equal)
      out.max_abs = std::max(out.max_abs, abs);
      out.max_rel = std::max(out.max_rel, rel);
      // An infinity equals only itself and a NaN only a NaN (as in numpy.isclose with
      // equal_nan), whatever the tolerance.
      if (!std::isfinite(x) || !std::isfinite(y) || !(abs <= atol + rtol * std::fabs(y))) ++out.beyond;
    }
  }
  return out;
}

// The metadata keys never compared: the digests of the file format (common.hpp), each of one
// file's bytes, so that they change with any other difference and are missing from a file
// written without one; and the time a manager saved a step, which two runs never share.
bool compared(std::string_view key) noexcept {
  return key != digest_key && key != "wall_time" && std::ranges::find(earlier_digest_keys, key) == earlier_digest_keys.end();
}

// What --metadata finds: the keys compared (those of A and of B, the uncompared ones left out),
// and a line (not yet through `printable`) for each that differs, as the entries' lines go:
// those only in A, those only in B, those whose values differ, each kind in key order.
struct metadata_diff {
  std::size_t compared = 0;
  std::vector<std::string> lines;
};

metadata_diff compare_metadata(const ckpt::metadata_map& a, const ckpt::metadata_map& b) {
  const auto quoted = [](const std::string& value) { return "'" + value + "'"; };
  metadata_diff out;
  std::vector<std::string> only_a, only_b, differ;
  for (const auto& [key, value] : a) {
    if (!compared(key)) continue;
    ++out.compared;
    if (const auto other = b.find(key); other == b.end())
      only_a.push_back("metadata only in A: " + key + ": " + quoted(value));
    else if (other->second != value)
      differ.push_back("metadata differs: " + key + ": " + quoted(value) + " in A, " + quoted(other->second) + " in B");
  }
  for (const auto& [key, value] : b) {
    if (!compared(key) || a.contains(key)) continue;
    ++out.compared;
    only_b.push_back("metadata only in B: " + key + ": " + quoted(value));
  }
  for (auto* kind : {&only_a, &only_b, &differ}) out.lines.insert(out.lines.end(), kind->begin(), kind->end());
  return out;
}

int diff(const diff_args& args) {
  const std::vector<listed_step> steps_a = steps_in(args.a);
  std::filesystem::path path_a, path_b;
  if (args.b.empty()) {
    // RUN --step S --step T: two steps of one manager folder.
    if (args.steps.size() != 2 || steps_a.empty())
      throw usage_error("ckpt: diff with one PATH compares two steps of a checkpoint_manager folder: ckpt diff RUN "
                        "--step S --step T");
    path_a = checkpoint_in(args.a, steps_a, args.steps[0]);
    path_b = checkpoint_in(args.a, steps_a, args.steps[1]);
  } else {
    // A B [--step N]: --step picks the step of whichever of A and B is a manager folder.
    const std::vector<listed_step> steps_b = steps_in(args.b);
    if (args.steps.size() > 1)
      throw usage_error("ckpt: --step is given twice: with two paths, one --step picks the step of their manager "
                        "folders (compare two steps of one folder with ckpt diff RUN --step S --step T)");
    const std::optional<std::int64_t> step = args.steps.empty() ? std::nullopt : std::optional(args.steps[0]);
    if (step && steps_a.empty() && steps_b.empty())
      throw usage_error("ckpt: --step " + std::to_string(*step) + ": neither '" + args.a.string() + "' nor '" +
                        args.b.string() + "' is a checkpoint_manager folder");
    const auto step_of = [&](const std::vector<listed_step>& s) { return s.empty() ? std::nullopt : step; };
    path_a = checkpoint_in(args.a, steps_a, step_of(steps_a));
    path_b = checkpoint_in(args.b, steps_b, step_of(steps_b));
  }
  // With --filter, of a checkpoint in a bucket only the entries under the prefix are fetched
  // (ranged GETs, which cannot check the whole file's digest: said so; --fetch-all).
  fetch_stats fetched;
  const auto load = [&](const std::filesystem::path& path) {
    ckpt::load_options options;
    if (!args.filter.empty() && !args.fetch_all && fetched_in_part(path)) options.only = pattern_of({args.filter});
    ckpt::checkpoint t = ckpt::load(path, fetched.counting(options), torch_budget(args.torch_budget));
    if (options.only) print_part_fetched(std::cout, path, "--fetch-all");
    return t;
  };
  const ckpt::checkpoint a = load(path_a);
  const ckpt::checkpoint b = load(path_b);
  std::vector<std::string> only_a, only_b, structure;
  std::vector<std::vector<std::string>> rows;
  std::size_t beyond_entries = 0;
  const auto in_a = entries_with_prefix(a, args.filter), in_b = entries_with_prefix(b, args.filter);
  auto ia = in_a.begin(), ib = in_b.begin();
  while (ia != in_a.end() || ib != in_b.end()) {
    if (ib == in_b.end() || (ia != in_a.end() && (*ia)->first < (*ib)->first)) {
      only_a.push_back((*ia++)->first);
      continue;
    }
    if (ia == in_a.end() || (*ib)->first < (*ia)->first) {
      only_b.push_back((*ib++)->first);
      continue;
    }
    const std::string& name = (*ia)->first;
    const ckpt::tensor &x = (*ia)->second, &y = (*ib)->second;
    ++ia, ++ib;
    const bool same_shape = std::ranges::equal(x.shape(), y.shape());
    if (!same_shape)
      structure.push_back("shape differs: " + name + ": " + ckpt::to_string(x.shape()) + " in A, " +
                          ckpt::to_string(y.shape()) + " in B");
    if (x.dtype() != y.dtype() && !args.ignore_dtype)
      structure.push_back("dtype differs: " + name + ": " + std::string(ckpt::to_string(x.dtype())) + " in A, " +
                          std::string(ckpt::to_string(y.dtype())) + " in B");
    if (!same_shape) continue;
    const value_diff d = compare(x, y, args.atol, args.rtol);
    if (d.beyond > 0) ++beyond_entries;
    rows.push_back({name, d.numeric ? number(d.max_abs) : "-", d.numeric ? number(d.max_rel) : "-",
                    std::to_string(d.beyond)});
  }
  for (const auto& name : only_a) std::cout << "only in A: " << printable(name) << '\n';
  for (const auto& name : only_b) std::cout << "only in B: " << printable(name) << '\n';
  for (const auto& line : structure) std::cout << printable(line) << '\n';
  if (!rows.empty()) print_table(std::cout, {{"name"}, {"max_abs", true}, {"max_rel", true}, {"beyond", true}}, rows);
  // The metadata after the entries: their lines with --metadata; without, a line if they differ,
  // which is no finding (the default compares tensors only).
  const metadata_diff meta = compare_metadata(a.metadata(), b.metadata());
  if (args.metadata)
    for (const auto& line : meta.lines) std::cout << printable(line) << '\n';
  else if (!meta.lines.empty())
    std::cout << "metadata differ (" << count_of(meta.lines.size(), "key", "keys") << "; --metadata shows "
              << (meta.lines.size() == 1 ? "it" : "them") << ")\n";
  const std::string tolerance = "atol " + number(args.atol) + ", rtol " + number(args.rtol);
  const bool metadata_differ = args.metadata && !meta.lines.empty();
  if (only_a.empty() && only_b.empty() && structure.empty() && beyond_entries == 0 && !metadata_differ) {
    std::cout << "same: " << count_of(rows.size(), "entry", "entries") << " within " << tolerance;
    if (args.metadata) std::cout << "; " << count_of(meta.compared, "metadata key", "metadata keys") << " equal";
    std::cout << '\n';
    return finish(success, args.stats, fetched);
  }
  std::cout << "different: " << only_a.size() << " only in A, " << only_b.size() << " only in B, "
            << count_of(structure.size(), "dtype or shape mismatch", "dtype or shape mismatches") << ", "
            << beyond_entries << " of " << count_of(rows.size(), "compared entry", "compared entries") << " beyond "
            << tolerance;
  if (args.metadata)
    std::cout << "; " << meta.lines.size() << " of "
              << count_of(meta.compared, "compared metadata key", "compared metadata keys")
              << (meta.lines.size() == 1 ? " differs" : " differ");
  std::cout << '\n';
  return finish(finding, args.stats, fetched);
}

// What `ckpt diff --help` shows.
constexpr command_text diff_text{
    "diff", "Compare the entries and values of two checkpoints",
    R"(Compare two checkpoints (files or sharded checkpoints): the entries only in A, only in B, those
whose dtype or shape differ, and for the common entries of equal shape the largest absolute
difference |a - b| and relative difference |a - b| / |b|, computed in double. An element is
beyond tolerance when |a - b| > atol + rtol * |b| (numpy.isclose); NaN equals NaN, and NaN
against a number, or an infinity against anything else, is beyond any tolerance. A and B may be
checkpoint_manager folders (their latest steps, or step N with --step); `ckpt diff RUN --step S
--step T` compares two steps of one run.

The __metadata__ are not compared unless --metadata: a line says when they differ ('metadata
differ (N keys; --metadata shows them)') without changing the exit status. With --metadata,
each key only in A, only in B, or whose values differ is a line, and a finding. The digests
ckpt.xxh3_64_file, ckpt.xxh3_64_per_mib and ckpt.xxh3_64, which describe one file's bytes, and a
manager's wall_time are never compared.

Both are loaded with their digests checked; but with --filter, of a checkpoint in object storage
only the entries under the prefix are fetched (ranged GETs), which cannot check the whole file's
digest: a line says so, and --fetch-all fetches it whole.

Exit status: 0 if nothing differs, 1 if something does, 2 if A or B cannot be read.)"};

}  // namespace

void add_diff(CLI::App& app, action& chosen) {
  const auto [sub, args] = add_command<diff_args>(app, chosen, diff, diff_text);
  add_path_argument(*sub, "A", args->a, "the first checkpoint");
  add_path_argument(*sub, "B", args->b,
                    "the second checkpoint (the reference of relative differences); leave it out to compare two "
                    "steps of the manager folder A, each named by --step",
                    "", presence::optional);
  // CLI::NonNegativeNumber would print the largest double in its message.
  const CLI::Validator non_negative(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        const double x = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0' || !(x >= 0)) return "'" + value + "' is not a number >= 0";
        return {};
      },
      "TOLERANCE");
  sub->add_option("--atol", args->atol, "absolute tolerance (default 0: values must be equal)")->check(non_negative);
  sub->add_option("--rtol", args->rtol, "relative tolerance (default 0)")->check(non_negative);
  sub->add_flag("--ignore-dtype", args->ignore_dtype,
                "compare values across dtypes without counting the dtype difference itself (after convert "
                "--dtype)");
  sub->add_option("--step", args->steps,
                  "in checkpoint_manager folders, step N instead of the latest; twice with one folder (ckpt diff RUN "
                  "--step S --step T) to compare two of its steps")
      ->type_name("N")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--filter", args->filter, "only the entries whose names start with PREFIX (in A and in B)")
      ->type_name("PREFIX");
  add_fetch_all_option(*sub, args->fetch_all, "--filter", "the entries under the prefix");
  sub->add_flag("--metadata", args->metadata,
                "compare the __metadata__ too, a difference being a finding; never compared: the digests "
                "ckpt.xxh3_64_file, ckpt.xxh3_64_per_mib and ckpt.xxh3_64, which describe one file's bytes, and a "
                "manager's wall_time");
  add_load_options(*sub, nullptr, args->torch_budget, args->stats);
}

}  // namespace ckpt_tool
