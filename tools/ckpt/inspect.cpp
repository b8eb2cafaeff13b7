// ckpt inspect PATH: the entries of a checkpoint, or the steps of a checkpoint_manager folder.

#include "common.hpp"

#include <ckpt/error.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/tensor.hpp>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ckpt_tool {

namespace {

struct inspect_args {
  std::filesystem::path path;
  std::string filter;
  bool json = false;
  std::optional<std::int64_t> step;
  std::size_t torch_budget = 1;
};

struct totals {
  std::size_t entries = 0;
  std::int64_t parameters = 0;
  std::uint64_t bytes = 0;
};

// The bytes of tied names (one tensor under several names, in a .pt file) count once.
totals sum(const std::vector<const ckpt::checkpoint::entry*>& entries,
           const std::vector<std::vector<std::string>>& tied = {}) {
  totals out;
  for (const auto* e : entries) {
    ++out.entries;
    out.parameters += e->second.numel();
    out.bytes += e->second.nbytes();
  }
  for (const auto& names : tied) {
    std::uint64_t listed = 0, bytes = 0;
    for (const auto* e : entries)
      if (std::ranges::find(names, e->first) != names.end()) ++listed, bytes = e->second.nbytes();
    if (listed > 1) out.bytes -= (listed - 1) * bytes;
  }
  return out;
}

boost::json::object json_of(const ckpt::metadata_map& metadata) {
  boost::json::object out;
  for (const auto& [key, value] : metadata) out[valid_utf8(key)] = valid_utf8(value);
  return out;
}

boost::json::object json_of(const totals& t) {
  return {{"entries", t.entries}, {"parameters", t.parameters}, {"bytes", t.bytes}};
}

void print_totals(const totals& t) {
  std::cout << "total: " << count_of(t.entries, "entry", "entries") << ", "
            << count_of(static_cast<std::uint64_t>(t.parameters), "parameter", "parameters") << ", "
            << count_of(t.bytes, "byte", "bytes") << '\n';
}

// Only the header is read: inspecting a large file costs no pass over its data (verify does that).
int inspect_checkpoint(const inspect_args& args, const std::filesystem::path& path) {
  std::vector<std::vector<std::string>> tied;
  ckpt::torch_options torch = torch_budget(args.torch_budget);
  torch.tied = [&tied](const std::vector<std::string>& names) { tied.push_back(names); };
  const ckpt::checkpoint t = ckpt::load(path, {.verify_digest = false}, torch);
  const auto entries = entries_with_prefix(t, args.filter);
  const totals total = sum(entries, tied);
  if (args.json) {
    boost::json::array rows;
    for (const auto* e : entries) {
      boost::json::array shape;
      for (const std::int64_t d : e->second.shape()) shape.push_back(d);
      rows.push_back(boost::json::object{{"name", valid_utf8(e->first)},
                                         {"dtype", ckpt::to_string(e->second.dtype())},
                                         {"shape", std::move(shape)},
                                         {"parameters", e->second.numel()},
                                         {"bytes", e->second.nbytes()}});
    }
    boost::json::array groups;
    for (const auto& names : tied) {
      boost::json::array group;
      for (const auto& name : names) group.push_back(boost::json::string(valid_utf8(name)));
      groups.push_back(std::move(group));
    }
    boost::json::object out{{"path", valid_utf8(path.string())}, {"entries", std::move(rows)}, {"total", json_of(total)}};
    if (!groups.empty()) out["tied"] = std::move(groups);  // a .pt file's names of one tensor
    out["metadata"] = json_of(t.metadata());
    std::cout << boost::json::serialize(out) << '\n';
    return success;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto* e : entries)
    rows.push_back({e->first, std::string(ckpt::to_string(e->second.dtype())), ckpt::to_string(e->second.shape()),
                    std::to_string(e->second.numel()), std::to_string(e->second.nbytes())});
  print_table(std::cout, {{"name"}, {"dtype"}, {"shape"}, {"parameters", true}, {"bytes", true}}, rows);
  print_totals(total);
  for (const auto& names : tied) {
    std::string line;
    for (const auto& name : names) line += (line.empty() ? "" : ", ") + name;
    std::cout << "tied (one tensor, its bytes counted once): " << printable(line) << '\n';
  }
  if (t.metadata().empty()) {
    std::cout << "__metadata__: none\n";
  } else {
    std::cout << "__metadata__:\n";
    for (const auto& [key, value] : t.metadata()) std::cout << "  " << printable(key) << ": " << printable(value) << '\n';
  }
  return success;
}

// A row a step, damaged steps included (a manager set them aside, or their header cannot be
// read): a damaged step is a finding to show, not a reason to stop; an error that is not damage
// (a permission, too many open files) is, as for a file. Then the folder's leftovers.
int inspect_folder(const inspect_args& args, const std::vector<listed_step>& listed) {
  const std::vector<leftover> leftovers = leftovers_in(args.path);
  struct step_row {
    std::int64_t step;
    std::filesystem::path file;
    totals total;
    ckpt::metadata_map metadata;
    std::optional<std::string> damaged;  // the reason
  };
  std::vector<step_row> steps;
  for (const listed_step& s : listed) {
    if (s.damaged) {
      steps.push_back({s.step, s.checkpoint, {}, {}, s.damaged});
      continue;
    }
    try {
      if (const auto t = load_listed(s))
        steps.push_back({s.step, s.checkpoint, sum(entries_with_prefix(*t, args.filter)), t->metadata(), {}});
    } catch (const std::exception& e) {
      if (what_failed(s, e) != failed_load::damaged) throw;
      steps.push_back({s.step, s.checkpoint, {}, {}, e.what()});
    }
  }
  const auto state_of = [](const step_row& s) { return s.damaged ? "damaged" : "ok"; };
  if (args.json) {
    boost::json::array rows;
    for (const auto& s : steps) {
      boost::json::object row{{"step", s.step}, {"state", state_of(s)}, {"file", valid_utf8(s.file.filename().string())}};
      if (s.damaged) {
        row["reason"] = valid_utf8(*s.damaged);
      } else {
        row["total"] = json_of(s.total);
        row["metadata"] = json_of(s.metadata);
      }
      rows.push_back(std::move(row));
    }
    boost::json::array leftover_rows;
    for (const leftover& l : leftovers) {
      boost::json::object row{{"name", valid_utf8(l.path.filename().string())}, {"what", what_is(l)},
                              {"removed_by", what_removes(l)}};
      if (l.size.known && !l.size.link) row["bytes"] = l.size.bytes;
      else row["bytes"] = nullptr;
      leftover_rows.push_back(std::move(row));
    }
    std::cout << boost::json::serialize(boost::json::object{{"path", valid_utf8(args.path.string())},
                                                            {"steps", std::move(rows)},
                                                            {"leftovers", std::move(leftover_rows)}})
              << '\n';
    return success;
  }
  std::vector<std::vector<std::string>> rows;
  std::size_t damaged = 0;
  const step_row* latest = nullptr;
  for (const auto& s : steps) {
    if (s.damaged) {
      ++damaged;
      rows.push_back({std::to_string(s.step), state_of(s), "-", "-", "-", "-", s.file.filename().string()});
      continue;
    }
    latest = &s;
    const auto wall_time = s.metadata.find("wall_time");
    rows.push_back({std::to_string(s.step), state_of(s), std::to_string(s.total.entries),
                    std::to_string(s.total.parameters), std::to_string(s.total.bytes),
                    wall_time == s.metadata.end() ? "-" : wall_time->second, s.file.filename().string()});
  }
  print_table(std::cout,
              {{"step", true}, {"state"}, {"entries", true}, {"parameters", true}, {"bytes", true}, {"wall_time"}, {"file"}},
              rows);
  std::cout << "checkpoint_manager folder: " << count_of(steps.size() - damaged, "step", "steps");
  if (latest != nullptr) std::cout << ", latest " << latest->step;
  if (damaged > 0) std::cout << ", " << count_of(damaged, "damaged step", "damaged steps");
  std::cout << '\n';
  for (const auto& s : steps)
    if (s.damaged) std::cout << "step " << s.step << " damaged: " << printable(*s.damaged) << '\n';
  print_leftovers(std::cout, leftovers);
  return success;
}

int inspect(const inspect_args& args) {
  const std::vector<listed_step> steps = steps_in(args.path);
  if (!args.step && is_manager_folder(args.path, steps)) return inspect_folder(args, steps);
  return inspect_checkpoint(args, checkpoint_in(args.path, steps, args.step));
}

// What `ckpt inspect --help` shows.
constexpr command_text text{
    "inspect", "List the entries and metadata of a checkpoint, or a folder's steps",
    R"(List the entries of a checkpoint (name, dtype, shape, parameters, bytes), their totals and its
__metadata__, reading headers only. PATH is a .safetensors file, a sharded checkpoint (its
*.safetensors.index.json or its folder, an MPI step folder) or a checkpoint_manager folder (of
either manager, opened read-only), whose steps are listed, each with its state ('ok' if its
header reads, 'damaged' with the reason if not, or if a manager set it aside), then a line for
each leftover of a save that did not finish (a temporary file, an MPI step folder without its
index, a staging folder: 'leftover', its size and what removes it); or whose step N --step
shows. Only headers are read: 'ok' does not check the digest (ckpt verify does).

Exit status: 0 (a folder with damaged steps or leftovers included: they are rows and lines), or
2 if PATH cannot be read (for a folder, a step whose header cannot be read for another reason
than its bytes: a permission, too many open files) or is not a valid checkpoint.)"};

}  // namespace

void add_inspect(CLI::App& app, action& chosen) {
  const auto [sub, args] = add_command<inspect_args>(app, chosen, inspect, text);
  sub->add_option("PATH", args->path, "the checkpoint file, sharded index or folder")->required()->type_name("");
  sub->add_flag("--json", args->json, "print one JSON object instead of a table (for scripts)");
  add_step_option(*sub, args->step);
  add_torch_budget_option(*sub, args->torch_budget);
  sub->add_option("--filter", args->filter, "only the entries whose names start with PREFIX")
      ->type_name("PREFIX");
}

}  // namespace ckpt_tool
