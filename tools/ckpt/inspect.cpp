// ckpt inspect PATH: the entries of a checkpoint, the steps of a checkpoint_manager folder, or the
// runs of a node-local tier root (ckpt::mpi::tiers::local).

#include "io/folder.hpp"
#include "run/store.hpp"
#include "common.hpp"

#include <ckpt/error.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/tensor.hpp>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
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

// The run id of an mpi::checkpoint_manager's folder (src/run/manager_core.hpp): nothing if `folder`
// has no id file (or is not a local folder), else the id, or why it cannot be read.
struct run_id_reading {
  std::optional<std::string> id;
  std::string error;
};
std::optional<run_id_reading> run_id_in(const std::filesystem::path& folder) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) return std::nullopt;
  try {
    if (std::optional<std::string> id = ckpt::detail::layout::read_run_id(*ckpt::detail::open_folder_store(folder, false)))
      return run_id_reading{std::move(id), {}};
    return std::nullopt;
  } catch (const std::exception& e) {
    return run_id_reading{std::nullopt, e.what()};
  }
}

// A row a step, damaged steps included (a manager set them aside, or their header cannot be
// read): a damaged step is a finding to show, not a reason to stop; an error that is not damage
// (a permission, too many open files) is, as for a file. Then the folder's leftovers.
int inspect_folder(const inspect_args& args, const std::vector<listed_step>& listed) {
  const std::vector<leftover> leftovers = leftovers_in(args.path);
  const std::optional<run_id_reading> id = run_id_in(args.path);
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
    boost::json::object out{{"path", valid_utf8(args.path.string())},
                            {"steps", std::move(rows)},
                            {"leftovers", std::move(leftover_rows)}};
    if (id) out["run_id"] = id->id ? boost::json::value(*id->id) : boost::json::value(nullptr);
    std::cout << boost::json::serialize(out) << '\n';
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
  if (id && id->id)
    std::cout << "run id: " << *id->id << " (an mpi::checkpoint_manager's; its node-local tiers are "
              << ckpt::detail::layout::tier_run_prefix << *id->id << " in a tiers::local root)\n";
  else if (id)
    std::cout << "run id: unreadable: " << printable(id->error) << '\n';
  print_leftovers(std::cout, leftovers);
  return success;
}

// A node's folder in a node-local tier root: what it holds of its run.
struct tier_node {
  std::optional<int> node;  // k of node-<k>; nothing: the run's folder is this machine's node's
  std::filesystem::path folder;
  std::vector<std::int64_t> steps;          // committed, of the node's own shards
  std::vector<std::int64_t> partner_steps;  // committed, of the previous node's (partner/)
  std::vector<std::filesystem::path> uncommitted;  // step folders without their index
  footprint size;
};

// What became of a run's shared folder, as the run's folder in the local root notes it.
enum class shared_state { this_run, another_run, no_run_id, gone, not_noted, unreadable };

// A run's folder `run-<id>` in a node-local tier root.
struct tier_run {
  std::string id;
  std::filesystem::path folder;
  std::optional<std::filesystem::path> shared;  // as noted
  shared_state state = shared_state::not_noted;
  std::string detail;  // the other run's id, or why the shared folder's id cannot be read
  std::vector<tier_node> nodes;
};

// A folder's entries, sorted, each with whether it is a folder (a symbolic link is not).
std::vector<std::pair<std::string, bool>> entries_of(const std::filesystem::path& folder) {
  std::vector<std::pair<std::string, bool>> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(folder, ec);
  for (const std::filesystem::directory_iterator end; !ec && it != end; it.increment(ec))
    out.emplace_back(it->path().filename().string(),
                     it->symlink_status(ec).type() == std::filesystem::file_type::directory);
  if (ec) throw ckpt::io_error(folder, "list", ec);
  std::ranges::sort(out);
  return out;
}

// k if `name` is a simulated node's folder name, node-<k>.
std::optional<int> node_in_name(std::string_view name) {
  constexpr std::string_view prefix = "node-";
  if (!name.starts_with(prefix) || name.size() == prefix.size() || name.size() > prefix.size() + 9) return std::nullopt;
  int k = 0;
  for (const char c : name.substr(prefix.size())) {
    if (c < '0' || c > '9') return std::nullopt;
    k = 10 * k + (c - '0');
  }
  return std::to_string(k) == name.substr(prefix.size()) ? std::optional(k) : std::nullopt;
}

tier_node node_at(const std::filesystem::path& folder, std::optional<int> node) {
  tier_node out{node, folder, {}, {}, {}, footprint_of(folder)};
  for (const auto& [listed, into] : {std::pair{folder, &out.steps}, std::pair{folder / "partner", &out.partner_steps}}) {
    for (const listed_step& s : steps_in(listed)) into->push_back(s.step);
    std::error_code ec;
    if (!std::filesystem::is_directory(listed, ec)) continue;
    for (const leftover& l : leftovers_in(listed))
      if (l.kind == ckpt::detail::layout::what::uncommitted_step_folder) out.uncommitted.push_back(l.path);
  }
  return out;
}

// The runs of the node-local tier root `root`; none if it is not one (or not a folder).
std::vector<tier_run> tier_runs_in(const std::filesystem::path& root) {
  std::error_code ec;
  if (!std::filesystem::is_directory(root, ec)) return {};
  std::vector<tier_run> out;
  for (const auto& [name, is_folder] : entries_of(root)) {
    if (!is_folder || !name.starts_with(ckpt::detail::layout::tier_run_prefix)) continue;
    const std::string_view id = std::string_view(name).substr(ckpt::detail::layout::tier_run_prefix.size());
    if (!ckpt::detail::layout::is_run_id(id)) continue;
    tier_run run{std::string(id), root / name, {}, shared_state::not_noted, {}, {}};
    try {
      // The note is one path and a newline.
      std::optional<std::string> noted =
          ckpt::detail::open_folder_store(run.folder, false)->read(ckpt::detail::layout::tier_shared_folder_name, PATH_MAX);
      if (noted) {
        if (noted->ends_with('\n')) noted->pop_back();
        run.shared = *noted;
        if (!std::filesystem::exists(*run.shared, ec) && !ec) {
          run.state = shared_state::gone;
        } else {
          const std::optional<run_id_reading> theirs = run_id_in(*run.shared);
          run.state = !theirs ? shared_state::no_run_id
                      : !theirs->id ? shared_state::unreadable
                      : *theirs->id == run.id ? shared_state::this_run
                                              : shared_state::another_run;
          if (theirs) run.detail = theirs->id ? *theirs->id : theirs->error;
        }
      }
    } catch (const std::exception& e) {
      run.state = shared_state::unreadable;
      run.detail = e.what();
    }
    for (const auto& [sub, sub_is_folder] : entries_of(run.folder))
      if (const std::optional<int> k = node_in_name(sub); k && sub_is_folder)
        run.nodes.push_back(node_at(run.folder / sub, k));
    if (run.nodes.empty()) run.nodes.push_back(node_at(run.folder, std::nullopt));
    std::ranges::sort(run.nodes, {}, &tier_node::node);
    out.push_back(std::move(run));
  }
  return out;
}

// The entries of a node-local tier root that an earlier version's manager wrote there, before
// runs had ids: its nodes' folders, step folders and partner/.
std::vector<std::filesystem::path> earlier_layout_in(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> out;
  for (const auto& [name, is_folder] : entries_of(root))
    if (is_folder && (node_in_name(name) || name == "partner" ||
                      ckpt::detail::layout::step_of_folder(name)))
      out.push_back(root / name);
  return out;
}

std::string_view to_string(shared_state s) {
  switch (s) {
    case shared_state::this_run: return "this run";
    case shared_state::another_run: return "another run";
    case shared_state::no_run_id: return "no run id";
    case shared_state::gone: return "gone";
    case shared_state::not_noted: return "not noted";
    case shared_state::unreadable: return "unreadable";
  }
  return "";
}

// Whether no manager will use the run's folder again: its shared folder is gone or another run's.
bool left_over(const tier_run& run) {
  return run.state == shared_state::another_run || run.state == shared_state::no_run_id ||
         run.state == shared_state::gone;
}

std::string steps_text(const std::vector<std::int64_t>& steps) {
  std::string out;
  for (const std::int64_t s : steps) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out.empty() ? "-" : out;
}

// A node-local tier root: a row per node of each run, then what became of each run's shared folder.
int inspect_local_root(const inspect_args& args, const std::vector<tier_run>& runs) {
  const std::vector<std::filesystem::path> earlier = earlier_layout_in(args.path);
  if (args.json) {
    const auto numbers = [](const std::vector<std::int64_t>& steps) {
      boost::json::array out;
      for (const std::int64_t s : steps) out.push_back(s);
      return out;
    };
    const auto names = [](const std::vector<std::filesystem::path>& paths, const std::filesystem::path& base) {
      boost::json::array out;
      for (const std::filesystem::path& p : paths)
        out.push_back(boost::json::string(valid_utf8(p.lexically_relative(base).string())));
      return out;
    };
    boost::json::array run_rows;
    for (const tier_run& run : runs) {
      boost::json::array nodes;
      for (const tier_node& n : run.nodes) {
        boost::json::object row{{"node", n.node ? boost::json::value(*n.node) : boost::json::value(nullptr)},
                                {"folder", valid_utf8(n.folder.lexically_relative(args.path).string())},
                                {"steps", numbers(n.steps)},
                                {"partner_steps", numbers(n.partner_steps)},
                                {"uncommitted", names(n.uncommitted, n.folder)}};
        if (n.size.known && !n.size.link) row["bytes"] = n.size.bytes;
        else row["bytes"] = nullptr;
        nodes.push_back(std::move(row));
      }
      boost::json::object row{{"id", run.id},
                              {"shared_folder", run.shared ? boost::json::value(valid_utf8(run.shared->string()))
                                                           : boost::json::value(nullptr)},
                              {"shared_state", to_string(run.state)},
                              {"left_over", left_over(run)},
                              {"nodes", std::move(nodes)}};
      if (run.state == shared_state::another_run) row["shared_run_id"] = run.detail;
      if (run.state == shared_state::unreadable) row["reason"] = valid_utf8(run.detail);
      run_rows.push_back(std::move(row));
    }
    std::cout << boost::json::serialize(boost::json::object{{"path", valid_utf8(args.path.string())},
                                                            {"runs", std::move(run_rows)},
                                                            {"earlier_layout", names(earlier, args.path)}})
              << '\n';
    return success;
  }
  std::vector<std::vector<std::string>> rows;
  for (const tier_run& run : runs)
    for (const tier_node& n : run.nodes)
      rows.push_back({run.id, n.node ? std::to_string(*n.node) : "-", steps_text(n.steps), steps_text(n.partner_steps),
                      std::to_string(n.uncommitted.size()),
                      n.size.known && !n.size.link ? std::to_string(n.size.bytes) : "-"});
  print_table(std::cout,
              {{"run"}, {"node", true}, {"steps"}, {"partner copies"}, {"uncommitted", true}, {"bytes", true}}, rows);
  const auto stale = static_cast<std::size_t>(std::ranges::count_if(runs, left_over));
  std::cout << "node-local tier root: " << count_of(runs.size(), "run", "runs");
  if (stale > 0) std::cout << ", " << stale << " of them left over";
  std::cout << '\n';
  const std::string unused = "no manager uses its folders again: delete them once no job of it runs";
  for (const tier_run& run : runs) {
    std::cout << "run " << run.id << ": ";
    const std::string shared = run.shared ? "of '" + printable(run.shared->string()) + "'" : "";
    switch (run.state) {
      case shared_state::this_run:
        std::cout << shared;
        break;
      case shared_state::another_run:
        std::cout << shared << ", which now holds another run (" << run.detail << "): " << unused;
        break;
      case shared_state::no_run_id:
        std::cout << shared << ", which holds no run id (made again since): " << unused;
        break;
      case shared_state::gone:
        std::cout << shared << ", which is gone (unless the run's folder was moved: its next manager notes where): "
                  << unused;
        break;
      case shared_state::not_noted:
        std::cout << "its shared folder is not noted (no " << ckpt::detail::layout::tier_shared_folder_name << ")";
        break;
      case shared_state::unreadable:
        std::cout << (run.shared ? shared + ", whose run id" : "its shared folder")
                  << " cannot be read: " << printable(run.detail);
        break;
    }
    std::cout << '\n';
  }
  for (const std::filesystem::path& p : earlier)
    std::cout << "earlier layout '" << printable(p.string()) << "': a node-local folder of a run an earlier version wrote (no "
              << "run id); no manager uses or removes it: delete it once no job of that version runs\n";
  return success;
}

int inspect(const inspect_args& args) {
  if (!args.step)
    if (const std::vector<tier_run> runs = tier_runs_in(args.path); !runs.empty()) return inspect_local_root(args, runs);
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
index, a staging folder: 'leftover', its size and what removes it), and an MPI run's id; or
whose step N --step shows. Only headers are read: 'ok' does not check the digest (ckpt verify
does).

PATH may also be a node-local tier root (the 'local' folder of ckpt::mpi::tiers), which keeps each
run's steps apart in a folder run-<id>: a row per node of each run (the committed steps of its own
shards, of its partner copies, its step folders without an index, its bytes), then a line per run
naming its shared folder, and saying when no manager will use the run's folders again (the shared
folder is gone, or holds another run now); then the folders an earlier version wrote there.

Exit status: 0 (a folder with damaged steps or leftovers included: they are rows and lines), or
2 if PATH cannot be read (for a folder, a step whose header cannot be read for another reason
than its bytes: a permission, too many open files) or is not a valid checkpoint.)"};

}  // namespace

void add_inspect(CLI::App& app, action& chosen) {
  const auto [sub, args] = add_command<inspect_args>(app, chosen, inspect, text);
  sub->add_option("PATH", args->path, "the checkpoint file, sharded index or folder, or a node-local tier root")
      ->required()
      ->type_name("");
  sub->add_flag("--json", args->json, "print one JSON object instead of a table (for scripts)");
  add_step_option(*sub, args->step);
  add_torch_budget_option(*sub, args->torch_budget);
  sub->add_option("--filter", args->filter, "only the entries whose names start with PREFIX")
      ->type_name("PREFIX");
}

}  // namespace ckpt_tool
