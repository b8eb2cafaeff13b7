// ckpt convert IN OUT: select, rename and cast the entries of a checkpoint, and write them as one
// file or as a sharded checkpoint.

#include "common.hpp"

#include <ckpt/adapt.hpp>
#include <ckpt/file.hpp>
#include <ckpt/sharded.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt_tool {

namespace {

struct convert_args {
  std::filesystem::path in, out;
  std::string dtype;
  std::vector<std::string> renames;
  std::vector<std::string> keep;           // name prefixes
  std::vector<std::string> keep_matching;  // RE2 patterns, matched anywhere in a name
  bool drop_metadata = false;
  std::vector<std::string> keep_metadata;  // the metadata keys to carry over; empty: all
  std::vector<std::string> set_metadata;   // KEY=VALUE, written over what is carried over
  std::vector<std::string> drop;           // name prefixes
  std::vector<std::string> drop_matching;  // RE2 patterns, matched anywhere in a name
  std::string shard_size;
  std::string base_name = "model";
  bool no_digest = false;
  std::optional<std::int64_t> step;  // of a manager folder: this step, not the latest
  std::size_t torch_budget = 1;
  bool keep_tied = false;  // keep every name of a tied group (a .pt file's shared tensor)
  bool fetch_all = false;  // an object in a bucket fetched whole (its digest checked), whatever is kept
  bool stats = false;
};

struct rename_rule {
  ckpt::name_pattern pattern;
  std::string replacement;
};

// 'REGEX=REPLACEMENT', split at the first '=' (write '=' in the regex as \x3d). The pattern and
// the groups the replacement names are checked here, before anything is read.
rename_rule parse_rename(const std::string& rule) {
  const std::size_t eq = rule.find('=');
  if (eq == std::string::npos)
    throw usage_error("ckpt convert: --rename '" + rule + "' has no '=' (expected 'REGEX=REPLACEMENT')");
  try {
    rename_rule r{ckpt::name_pattern(rule.substr(0, eq)), rule.substr(eq + 1)};
    static_cast<void>(r.pattern.replace("", r.replacement));
    return r;
  } catch (const std::invalid_argument& e) {
    throw usage_error("ckpt convert: --rename '" + rule + "': " + e.what());
  }
}

// The patterns of --keep-matching or --drop-matching (`option`), compiled here, before anything
// is read, as --rename's are.
std::vector<ckpt::name_pattern> parse_patterns(std::string_view option, const std::vector<std::string>& patterns) {
  std::vector<ckpt::name_pattern> out;
  for (const std::string& p : patterns) {
    try {
      out.emplace_back(p);
    } catch (const std::invalid_argument& e) {
      throw usage_error("ckpt convert: " + std::string(option) + " '" + p + "': " + e.what());
    }
  }
  return out;
}

// The entries a --keep or --drop rule names: those whose names start with one of `prefixes` or
// that one of `patterns` matches. A prefix and a pattern have flags of their own because a
// prefix such as "model.layers.0." is full of regular-expression metacharacters.
struct name_rules {
  std::vector<std::string> prefixes;
  std::vector<ckpt::name_pattern> patterns;

  [[nodiscard]] bool empty() const noexcept { return prefixes.empty() && patterns.empty(); }
  [[nodiscard]] bool cover(std::string_view name) const noexcept {
    return std::ranges::any_of(prefixes, [&](const std::string& p) { return name.starts_with(p); }) ||
           std::ranges::any_of(patterns, [&](const ckpt::name_pattern& p) { return p.matches(name); });
  }
};

int convert(const convert_args& args) {
  // Everything the arguments can get wrong, before reading anything.
  std::optional<std::uint64_t> shard_bytes;
  if (!args.shard_size.empty()) {
    try {
      shard_bytes = parse_size(args.shard_size);
    } catch (const std::invalid_argument& e) {
      throw usage_error(std::string("ckpt convert: --shard-size: ") + e.what());
    }
  }
  const name_rules keep{args.keep, parse_patterns("--keep-matching", args.keep_matching)};
  const name_rules drop{args.drop, parse_patterns("--drop-matching", args.drop_matching)};
  std::vector<rename_rule> rules;
  for (const auto& r : args.renames) rules.push_back(parse_rename(r));
  ckpt::metadata_map set_metadata;
  for (const std::string& kv : args.set_metadata) {
    const std::size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw usage_error("ckpt convert: --metadata '" + kv + "' is not KEY=VALUE with a non-empty KEY");
    set_metadata.insert_or_assign(kv.substr(0, eq), kv.substr(eq + 1));  // the last of a key wins
  }
  std::optional<ckpt::dtype> to;
  if (!args.dtype.empty()) {
    std::string upper = args.dtype;
    std::ranges::transform(upper, upper.begin(),
                           [](char c) { return static_cast<char>(std::toupper(static_cast<unsigned char>(c))); });
    to = ckpt::dtype_from_string(upper);
  }
  std::error_code ec;
  if (!shard_bytes && std::filesystem::is_directory(args.out, ec))
    throw usage_error("ckpt convert: '" + args.out.string() +
                      "' is a folder: give --shard-size to write a sharded checkpoint into it, or a file name");

  // The digest (if recorded) is checked: a conversion must not launder corrupted data. But of an
  // object in a bucket, with keep rules, only the entries they keep are fetched (ranged GETs),
  // which cannot check the digest of the whole file: said so, --fetch-all to fetch it whole.
  const std::filesystem::path in = checkpoint_in(args.in, args.step);
  std::optional<ckpt::name_pattern> only;
  if (!args.fetch_all && fetched_in_part(in)) only = pattern_of(args.keep, args.keep_matching);
  if (!names_sharded(in) && !only) read_ahead({in}, "reading");
  std::vector<std::vector<std::string>> tied;
  const ckpt::torch_options torch = torch_budget(args.torch_budget, tied);
  fetch_stats fetched;
  const ckpt::checkpoint input = ckpt::load(in, fetched.counting({.only = only}), torch);
  if (only) print_part_fetched(std::cout, in, "--fetch-all");

  const auto chosen = [&](const std::string& name) {
    return (keep.empty() || keep.cover(name)) && !drop.cover(name);
  };
  // Tied names, as transformers' save_pretrained writes safetensors: of the names of one tensor
  // that the keep and drop rules leave, the first (in the file's order) is written, the others
  // dropped.
  std::vector<std::string> untied;
  if (!args.keep_tied)
    for (const auto& names : tied) {
      bool first = true;
      for (const auto& name : names)
        if (chosen(name)) {
          if (!first) untied.push_back(name);
          first = false;
        }
    }
  std::vector<ckpt::checkpoint::entry> selected;
  for (const auto& [name, x] : input)
    if (chosen(name) && std::ranges::find(untied, name) == untied.end()) selected.emplace_back(name, x);
  for (const auto& names : tied)
    for (std::size_t i = 1; i < names.size(); ++i)
      if (std::ranges::find(untied, names[i]) != untied.end())
        std::cout << "left out '" << printable(names[i]) << "': tied to '" << printable(names.front())
                  << "' (the same tensor; --keep-tied writes both)\n";
  if (selected.empty() && (!input.empty() || only))
    throw usage_error("ckpt convert: no entry of '" + args.in.string() +
                      "' is left after --keep/--keep-matching/--drop/--drop-matching (" +
                      (only ? "of those fetched, the entries the keep rules choose: " + std::to_string(input.size())
                            : "it has " + std::to_string(input.size())) +
                      ")");
  ckpt::metadata_map metadata;
  if (!args.drop_metadata)
    for (const auto& [key, value] : input.metadata())
      if (args.keep_metadata.empty() || std::ranges::find(args.keep_metadata, key) != args.keep_metadata.end())
        metadata.emplace(key, value);
  for (const auto& [key, value] : set_metadata) metadata.insert_or_assign(key, value);
  ckpt::checkpoint t(std::move(selected), std::move(metadata));
  if (!rules.empty())
    t = ckpt::rename(t, [&](std::string_view name) {
      std::string out(name);
      for (const auto& r : rules) out = r.pattern.replace(out, r.replacement);
      return out;
    });

  if (to) {
    std::uint64_t total = 0;
    for (const auto& e : t) total += e.second.nbytes();
    // One entry at a time through ckpt::cast, whose rules pick the entries to convert (floating
    // ones only), so that the bar moves as entries are done.
    progress bar("converting", total);
    std::vector<ckpt::checkpoint::entry> done;
    for (const auto& [name, x] : t) {
      done.push_back(*ckpt::cast(ckpt::checkpoint({{name, x}}), *to).begin());
      bar.advance(x.nbytes());
    }
    t = ckpt::checkpoint(std::move(done), t.metadata());
  }
  // The entries left as they were are read from IN as they are written (ckpt::save reads a
  // loaded file with pread): the writing bar moves with the disk.

  std::uint64_t bytes = 0;
  for (const auto& e : t) bytes += e.second.nbytes();
  // The bar counts the bytes of every file written (each shard's report starts again at 0).
  progress bar("writing", bytes);
  std::uint64_t files_done = 0, reported = 0;
  const ckpt::save_options save{.digest = !args.no_digest, .progress = [&](std::uint64_t written, std::uint64_t file_size) {
                                  bar.advance(files_done + written - reported);
                                  reported = files_done + written;
                                  if (written == file_size) files_done += file_size;
                                }};
  const std::string summary = std::to_string(t.size()) + (t.size() == 1 ? " entry, " : " entries, ") +
                              std::to_string(bytes) + " bytes of data";
  if (shard_bytes) {
    const ckpt::sharded_files files =
        ckpt::save_sharded(args.out, t, *shard_bytes, {.base_name = args.base_name, .save = save});
    bar.done();
    std::cout << "wrote '" << printable(files.index.string()) << "' and " << files.shards.size()
              << (files.shards.size() == 1 ? " shard: " : " shards: ") << summary << '\n';
  } else {
    ckpt::save(args.out, t, save);
    bar.done();
    std::cout << "wrote '" << printable(args.out.string()) << "': " << summary << '\n';
  }
  return finish(success, args.stats, fetched);
}

// What `ckpt convert --help` shows.
constexpr command_text convert_text{
    "convert", "Select, rename and cast entries; write a file or a sharded checkpoint",
    R"(Read IN (a .safetensors file or a sharded checkpoint; its digest checked, but of an object in
a bucket with --keep/--keep-matching only the entries kept are fetched, which cannot check it:
--fetch-all fetches it whole and checks it), keep and drop entries
by name prefix (--keep, --drop) or regular expression (--keep-matching, --drop-matching), rename
them, convert floating entries to another dtype, and write OUT: one file, or with --shard-size a
sharded checkpoint in the folder OUT. The steps run in this order: the keep and drop rules (on
IN's names: with any keep rule, an entry is kept if one of them covers it; then dropped if a drop
rule does), --rename, --dtype. Metadata are carried over, all of them, none with --drop-metadata,
or those named by --keep-metadata; --metadata KEY=VALUE sets one.

Exit status: 0 once OUT is written, 2 on a usage error, or if IN cannot be read or OUT written.)"};

}  // namespace

void add_convert(CLI::App& app, action& chosen) {
  const auto [sub, args] = add_command<convert_args>(app, chosen, convert, convert_text);
  add_path_argument(*sub, "IN", args->in, "the checkpoint to read (file, sharded index or folder)", "PATH");
  add_path_argument(*sub, "OUT", args->out, "the file to write, or the folder with --shard-size", "PATH");
  sub->add_option("--dtype", args->dtype,
                  "convert floating entries (F16, BF16, F32, F64, F8) to this dtype; integer and bool entries "
                  "keep theirs")
      ->check(CLI::IsMember({"bf16", "f16", "f32", "f64"}, CLI::ignore_case));
  sub->add_option("--rename", args->renames,
                  "rename entries: every match of the regular expression REGEX (RE2 syntax, linear time) is "
                  "replaced by REPLACEMENT ($1 for a group); repeatable, applied in order")
      ->type_name("'REGEX=REPLACEMENT'")
      ->allow_extra_args(false);
  sub->add_option("--keep", args->keep, "keep only the entries whose names start with PREFIX (repeatable)")
      ->type_name("PREFIX")
      ->allow_extra_args(false);
  sub->add_option("--drop", args->drop, "drop the entries whose names start with PREFIX (repeatable)")
      ->type_name("PREFIX")
      ->allow_extra_args(false);
  sub->add_option("--keep-matching", args->keep_matching,
                  "keep only the entries whose names the regular expression REGEX (RE2 syntax, linear time) "
                  "matches, anywhere in the name unless anchored with ^ and $ (repeatable; with --keep, an entry "
                  "is kept if a prefix or a pattern covers it)")
      ->type_name("REGEX")
      ->allow_extra_args(false);
  sub->add_option("--drop-matching", args->drop_matching,
                  "drop the entries whose names the regular expression REGEX matches (RE2, anywhere unless "
                  "anchored; repeatable): --drop-matching '\\.attn\\.bias$' drops h.0.attn.bias ... h.11.attn.bias")
      ->type_name("REGEX")
      ->allow_extra_args(false);
  sub->add_option("--shard-size", args->shard_size,
                  "write a sharded checkpoint into the folder OUT with at most SIZE bytes of tensor data a "
                  "shard: 2GB, 500MB (powers of 1000, as Hugging Face), 1GiB (powers of 1024) or bytes")
      ->type_name("SIZE");
  sub->add_option("--base-name", args->base_name,
                  "with --shard-size: the files are NAME-00001-of-0000N.safetensors and NAME.safetensors.index.json")
      ->type_name("NAME")
      ->capture_default_str();
  sub->add_flag("--keep-tied", args->keep_tied,
                "write every name of a tied tensor of a .pt/.bin file (by default only the first, as "
                "transformers' save_pretrained writes safetensors)");
  add_fetch_all_option(*sub, args->fetch_all, "--keep/--keep-matching", "the entries kept");
  sub->add_flag("--no-digest", args->no_digest, "do not record the digest of the file (ckpt.xxh3_64_file) in the output");
  auto* drop_metadata =
      sub->add_flag("--drop-metadata", args->drop_metadata,
                    "carry none of IN's metadata over (the digest of OUT is still recorded, unless --no-digest)");
  sub->add_option("--keep-metadata", args->keep_metadata,
                  "carry over only the metadata entry KEY (repeatable); the others are dropped")
      ->type_name("KEY")
      ->allow_extra_args(false)
      ->excludes(drop_metadata);
  sub->add_option("--metadata", args->set_metadata,
                  "set the metadata entry KEY to VALUE in OUT (repeatable; after --drop-metadata/--keep-metadata, "
                  "over a carried-over value; split at the first '=')")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  add_load_options(*sub, &args->step, args->torch_budget, args->stats);
}

}  // namespace ckpt_tool
