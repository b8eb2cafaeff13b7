// ckpt inspect PATH: the entries of a checkpoint, the steps of a checkpoint_manager folder, or the
// runs of a node-local tier root (ckpt::mpi::tiers::local).

#include "format/describe.hpp"
#include "io/remote_path.hpp"
#include "run/layout.hpp"
#include "run/store.hpp"
#include "common.hpp"

#include <ckpt/detail/sizes.hpp>
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
  bool stats = false;
  std::optional<std::int64_t> step;
  std::size_t torch_budget = 1;
};

struct totals {
  std::uint64_t entries = 0, parameters = 0, bytes = 0;
  totals& operator+=(const totals& more) {
    entries += more.entries;
    parameters += more.parameters;
    bytes += more.bytes;
    return *this;
  }
};

using ckpt::detail::description;

std::uint64_t parameters_of(const description::entry& e) {
  return static_cast<std::uint64_t>(ckpt::detail::numel_of(e.shape));
}

// The entries of `d` whose names start with `prefix`.
std::vector<const description::entry*> described_entries_with_prefix(const description& d, std::string_view prefix) {
  std::vector<const description::entry*> out;
  for (const description::entry& e : d.entries)
    if (e.name.starts_with(prefix)) out.push_back(&e);
  return out;
}

// The bytes of tied names (one tensor under several names, in a .pt file) count once.
totals sum(const std::vector<const description::entry*>& entries, const std::vector<std::vector<std::string>>& tied = {}) {
  totals out;
  for (const auto* e : entries) out += {1, parameters_of(*e), e->bytes};
  for (const auto& names : tied) {
    std::uint64_t listed = 0, bytes = 0;
    for (const auto* e : entries)
      if (std::ranges::find(names, e->name) != names.end()) ++listed, bytes = e->bytes;
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

boost::json::object json_of(const fetch_stats& s) { return {{"bytes", s.bytes}, {"requests", s.requests}}; }

std::optional<std::uint64_t> bytes_of(const footprint& f) {
  return f.known && !f.link ? std::optional(f.bytes) : std::nullopt;
}

// Leftover `l` as a row of the JSON listing, `name` its name there.
boost::json::object json_of(const leftover& l, const std::string& name) {
  const std::optional<std::uint64_t> bytes = bytes_of(l.size);
  return {{"name", valid_utf8(name)},
          {"what", what_is(l)},
          {"removed_by", what_removes(l)},
          {"bytes", bytes ? boost::json::value(*bytes) : boost::json::value(nullptr)}};
}

// Writes `out`, a listing in JSON, on a line of its own, with what its loads fetched (`fetched`,
// under "fetched") if --stats asked for it (`stats`). Returns success, its exit status.
int print_json(boost::json::object out, bool stats = false, const fetch_stats& fetched = {}) {
  if (stats) out["fetched"] = json_of(fetched);
  std::cout << boost::json::serialize(out) << '\n';
  return success;
}

void print_totals(const totals& t) {
  std::cout << "total: " << count_of(t.entries, "entry", "entries") << ", "
            << count_of(t.parameters, "parameter", "parameters") << ", "
            << count_of(t.bytes, "byte", "bytes") << '\n';
}

// Only the headers are read (ckpt::detail::describe): inspecting a large file costs no pass over
// its data (verify does that), and an object in a bucket is fetched no further than its header
// (with --filter, than the headers of the shards that hold a chosen entry).
int inspect_checkpoint(const inspect_args& args, const std::filesystem::path& path) {
  std::vector<std::vector<std::string>> tied;
  const ckpt::torch_options torch = torch_budget(args.torch_budget, tied);
  fetch_stats fetched;
  ckpt::load_options options = fetched.counting({});
  if (!args.filter.empty()) options.only = pattern_of({args.filter});
  const description t = ckpt::detail::describe(path, options, torch);
  const auto entries = described_entries_with_prefix(t, args.filter);
  const totals total = sum(entries, tied);
  if (args.json) {
    boost::json::array rows;
    for (const auto* e : entries) {
      boost::json::array shape;
      for (const std::int64_t d : e->shape) shape.push_back(d);
      rows.push_back(boost::json::object{{"name", valid_utf8(e->name)},
                                         {"dtype", ckpt::to_string(e->type)},
                                         {"shape", std::move(shape)},
                                         {"parameters", parameters_of(*e)},
                                         {"bytes", e->bytes}});
    }
    boost::json::array groups;
    for (const auto& names : tied) {
      boost::json::array group;
      for (const auto& name : names) group.push_back(boost::json::string(valid_utf8(name)));
      groups.push_back(std::move(group));
    }
    boost::json::object out{{"path", valid_utf8(path.string())}, {"entries", std::move(rows)}, {"total", json_of(total)}};
    if (!groups.empty()) out["tied"] = std::move(groups);  // a .pt file's names of one tensor
    out["metadata"] = json_of(t.metadata);
    return print_json(std::move(out), args.stats, fetched);
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto* e : entries)
    rows.push_back({e->name, std::string(ckpt::to_string(e->type)), ckpt::to_string(e->shape),
                    std::to_string(parameters_of(*e)), std::to_string(e->bytes)});
  print_table(std::cout, {{"name"}, {"dtype"}, {"shape"}, {"parameters", true}, {"bytes", true}}, rows);
  print_totals(total);
  for (const auto& names : tied) {
    std::string line;
    for (const auto& name : names) line += (line.empty() ? "" : ", ") + name;
    std::cout << "tied (one tensor, its bytes counted once): " << printable(line) << '\n';
  }
  if (t.metadata.empty()) {
    std::cout << "__metadata__: none\n";
  } else {
    std::cout << "__metadata__:\n";
    for (const auto& [key, value] : t.metadata) std::cout << "  " << printable(key) << ": " << printable(value) << '\n';
  }
  return finish(success, args.stats, fetched);
}

// Step `s` described from its headers: for a step in a bucket, fetched no further than them; a
// step that cannot be so described is loaded as its manager loads it (load_listed), which tells
// damage from a step deleted meanwhile. Nothing if it is gone.
std::optional<description> describe_listed(const listed_step& s, fetch_stats& fetched) {
  if (ckpt::detail::is_remote(s.checkpoint)) {
    try {
      return ckpt::detail::describe(s.checkpoint, fetched.counting({}), {});
    } catch (const std::exception&) {  // the manager's load says what it is
    }
  }
  const std::optional<ckpt::checkpoint> t = load_listed(s, fetched.counting({.verify_digest = false}));
  if (!t) return std::nullopt;
  return ckpt::detail::description_of(*t);
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
  fetch_stats fetched;
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
      if (const auto t = describe_listed(s, fetched))
        steps.push_back({s.step, s.checkpoint, sum(described_entries_with_prefix(*t, args.filter)), t->metadata, {}});
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
    for (const leftover& l : leftovers) leftover_rows.push_back(json_of(l, l.path.filename().string()));
    boost::json::object out{{"path", valid_utf8(args.path.string())},
                            {"steps", std::move(rows)},
                            {"leftovers", std::move(leftover_rows)}};
    if (id) out["run_id"] = id->id ? boost::json::value(*id->id) : boost::json::value(nullptr);
    return print_json(std::move(out), args.stats, fetched);
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
              << ckpt::detail::layout::tier_run_folder(*id->id) << " in a tiers::local root)\n";
  else if (id)
    std::cout << "run id: unreadable: " << printable(id->error) << '\n';
  print_leftovers(std::cout, leftovers);
  return finish(success, args.stats, fetched);
}

namespace layout = ckpt::detail::layout;

std::string steps_text(const std::vector<std::int64_t>& steps) {
  std::string out;
  for (const std::int64_t s : steps) out += (out.empty() ? "" : ", ") + std::to_string(s);
  return out.empty() ? "-" : out;
}

// The steps of `node`, its own (or its partner copies).
std::vector<std::int64_t> steps_of(const layout::tier_node& node, bool partner) {
  std::vector<std::int64_t> out;
  for (const layout::tier_step& s : node.steps)
    if (s.partner == partner) out.push_back(s.step);
  return out;
}

std::string_view to_string(layout::shared_state s) {
  switch (s) {
    case layout::shared_state::this_run: return "this run";
    case layout::shared_state::another_run: return "another run";
    case layout::shared_state::no_run_id: return "no run id";
    case layout::shared_state::gone: return "gone";
    case layout::shared_state::not_noted: return "not noted";
    case layout::shared_state::unreadable: return "unreadable";
  }
  return "";
}

// A node-local tier root: a row per node of each run, then what became of each run's shared folder.
int inspect_local_root(const inspect_args& args, const layout::tier_root& root) {
  const auto& runs = root.runs;
  if (args.json) {
    const auto numbers = [](const std::vector<std::int64_t>& steps) {
      boost::json::array out;
      for (const std::int64_t s : steps) out.push_back(s);
      return out;
    };
    const auto names = [](const std::vector<std::string>& list) {
      boost::json::array out;
      for (const std::string& name : list) out.push_back(boost::json::string(valid_utf8(name)));
      return out;
    };
    boost::json::array run_rows;
    for (const layout::tier_run& run : runs) {
      boost::json::array nodes;
      for (const layout::tier_node& n : run.nodes) {
        const std::optional<std::uint64_t> bytes = bytes_of(footprint_of(args.path / n.folder));
        nodes.push_back(boost::json::object{{"node", n.node ? boost::json::value(*n.node) : boost::json::value(nullptr)},
                                            {"folder", valid_utf8(n.folder)},
                                            {"steps", numbers(steps_of(n, false))},
                                            {"partner_steps", numbers(steps_of(n, true))},
                                            {"uncommitted", names(n.uncommitted)},
                                            {"bytes", bytes ? boost::json::value(*bytes) : boost::json::value(nullptr)}});
      }
      boost::json::object row{{"id", run.id},
                              {"shared_folder", run.shared ? boost::json::value(valid_utf8(run.shared->string()))
                                                           : boost::json::value(nullptr)},
                              {"shared_state", to_string(run.state)},
                              {"left_over", run.left_over()},
                              {"nodes", std::move(nodes)}};
      if (run.state == layout::shared_state::another_run) row["shared_run_id"] = run.detail;
      if (run.state == layout::shared_state::unreadable) row["reason"] = valid_utf8(run.detail);
      run_rows.push_back(std::move(row));
    }
    return print_json({{"path", valid_utf8(args.path.string())},
                       {"runs", std::move(run_rows)},
                       {"earlier_layout", names(root.earlier)}});
  }
  std::vector<std::vector<std::string>> rows;
  for (const layout::tier_run& run : runs)
    for (const layout::tier_node& n : run.nodes) {
      const std::optional<std::uint64_t> bytes = bytes_of(footprint_of(args.path / n.folder));
      rows.push_back({run.id, n.node ? std::to_string(*n.node) : "-", steps_text(steps_of(n, false)),
                      steps_text(steps_of(n, true)), std::to_string(n.uncommitted.size()),
                      bytes ? std::to_string(*bytes) : "-"});
    }
  print_table(std::cout,
              {{"run"}, {"node", true}, {"steps"}, {"partner copies"}, {"uncommitted", true}, {"bytes", true}}, rows);
  const auto stale = static_cast<std::size_t>(std::ranges::count_if(runs, &layout::tier_run::left_over));
  std::cout << "node-local tier root: " << count_of(runs.size(), "run", "runs");
  if (stale > 0) std::cout << ", " << stale << " of them left over";
  std::cout << '\n';
  const std::string unused = "no manager uses its folders again: delete them once no job of it runs";
  for (const layout::tier_run& run : runs) {
    std::cout << "run " << run.id << ": ";
    const std::string shared = run.shared ? "of '" + printable(run.shared->string()) + "'" : "";
    switch (run.state) {
      case layout::shared_state::this_run:
        std::cout << shared;
        break;
      case layout::shared_state::another_run:
        std::cout << shared << ", which now holds another run (" << run.detail << "): " << unused;
        break;
      case layout::shared_state::no_run_id:
        std::cout << shared << ", which holds no run id (made again since): " << unused;
        break;
      case layout::shared_state::gone:
        std::cout << shared << ", which is gone (unless the run's folder was moved: its next manager notes where): "
                  << unused;
        break;
      case layout::shared_state::not_noted:
        std::cout << "its shared folder is not noted (no " << layout::tier_shared_folder_name << ")";
        break;
      case layout::shared_state::unreadable:
        std::cout << (run.shared ? shared + ", whose run id" : "its shared folder")
                  << " cannot be read: " << printable(run.detail);
        break;
    }
    std::cout << '\n';
  }
  for (const std::string& name : root.earlier)
    std::cout << "earlier layout '" << printable((args.path / name).string())
              << "': a node-local folder of a run an earlier version wrote (no run id); no manager uses or removes "
                 "it: delete it once no job of that version runs\n";
  return success;
}

// A run's folder, or a node's, in a node-local tier root: what each node holds of each step (its
// own shards, its partner copies), the entries of that part read from the headers, then the
// leftovers of its saves.
int inspect_tier_place(const inspect_args& args, const layout::tier_place& place) {
  const std::unique_ptr<ckpt::detail::store> store = ckpt::detail::open_folder_store(place.root, false);
  const layout::tier_root root = layout::describe_tier_root(*store);
  const auto run = std::ranges::find(root.runs, place.run, &layout::tier_run::id);
  if (run == root.runs.end()) throw usage_error("ckpt: '" + args.path.string() + "' is not a folder of a node-local tier root");
  struct copy_row {
    const layout::tier_node* node;
    const layout::tier_step* copy;
    totals total;
    std::optional<std::string> damaged;
  };
  std::vector<copy_row> copies;
  std::vector<leftover> leftovers;
  for (const layout::tier_node& node : run->nodes) {
    if (node.folder != place.folder && run->folder != place.folder) continue;
    for (const layout::tier_step& copy : node.steps) {
      copy_row row{&node, &copy, {}, std::nullopt};
      try {
        if (!copy.problem.empty()) throw ckpt::error(place.root / copy.folder, copy.problem);
        // Shard by shard: the parts of a step of slices are files of their own, of one name space each.
        for (const std::string& shard : copy.held) {
          row.total += sum(described_entries_with_prefix(
              ckpt::detail::description_of(layout::load_held(*store, copy, {.verify_digest = false}, shard)), args.filter));
        }
      } catch (const ckpt::format_error& e) {
        row.damaged = e.what();
      } catch (const ckpt::error& e) {
        if (!copy.problem.empty()) row.damaged = e.what();
        else throw;
      }
      copies.push_back(std::move(row));
    }
    for (const std::string& folder : node.step_folders)
      for (leftover& l : leftovers_in(place.root / folder)) leftovers.push_back(std::move(l));
  }
  const auto copy_name = [](const layout::tier_step& c) { return c.partner ? "partner" : "own"; };
  if (args.json) {
    boost::json::array rows;
    for (const copy_row& r : copies) {
      boost::json::array held;
      for (const std::string& shard : r.copy->held) held.push_back(boost::json::string(valid_utf8(shard)));
      boost::json::object row{{"node", r.node->node ? boost::json::value(*r.node->node) : boost::json::value(nullptr)},
                              {"step", r.copy->step},
                              {"copy", copy_name(*r.copy)},
                              {"folder", valid_utf8(r.copy->folder)},
                              {"shards", r.copy->shards.size()},
                              {"held", std::move(held)},
                              {"state", r.damaged ? "damaged" : "ok"}};
      if (r.damaged) row["reason"] = valid_utf8(*r.damaged);
      else row["total"] = json_of(r.total);
      rows.push_back(std::move(row));
    }
    boost::json::array leftover_rows;
    for (const leftover& l : leftovers)
      leftover_rows.push_back(json_of(l, l.path.lexically_relative(place.root).string()));
    return print_json({{"path", valid_utf8(args.path.string())},
                       {"run", run->id},
                       {"copies", std::move(rows)},
                       {"leftovers", std::move(leftover_rows)}});
  }
  std::vector<std::vector<std::string>> rows;
  std::size_t damaged = 0;
  for (const copy_row& r : copies) {
    const std::string node = r.node->node ? std::to_string(*r.node->node) : "-";
    if (r.damaged) {
      ++damaged;
      rows.push_back({node, std::to_string(r.copy->step), copy_name(*r.copy), held_shards(*r.copy), "damaged", "-", "-", "-"});
      continue;
    }
    rows.push_back({node, std::to_string(r.copy->step), copy_name(*r.copy), held_shards(*r.copy), "ok",
                    std::to_string(r.total.entries), std::to_string(r.total.parameters), std::to_string(r.total.bytes)});
  }
  print_table(std::cout,
              {{"node", true}, {"step", true}, {"copy"}, {"shards held"}, {"state"}, {"entries", true},
               {"parameters", true}, {"bytes", true}},
              rows);
  std::cout << "node-local tier of run " << run->id << ": ";
  std::vector<std::int64_t> own, partner;
  for (const copy_row& r : copies) (r.copy->partner ? partner : own).push_back(r.copy->step);
  for (auto* list : {&own, &partner}) {
    std::ranges::sort(*list);
    list->erase(std::unique(list->begin(), list->end()), list->end());
  }
  std::cout << "steps " << steps_text(own) << " (their own shards), " << steps_text(partner) << " (partner copies)";
  if (damaged > 0) std::cout << ", " << count_of(damaged, "damaged copy", "damaged copies");
  std::cout << '\n';
  for (const copy_row& r : copies)
    if (r.damaged)
      std::cout << "step " << r.copy->step << " (" << copy_name(*r.copy) << ", '" << printable(r.copy->folder)
                << "') damaged: " << printable(*r.damaged) << '\n';
  print_leftovers(std::cout, leftovers);
  return success;
}

int inspect(const inspect_args& args) {
  if (!args.step) {
    if (is_tier_folder(args.path)) return inspect_tier_place(args, *layout::tier_place_of(args.path));
    std::error_code ec;
    if (std::filesystem::is_directory(args.path, ec))
      if (const layout::tier_root root = layout::describe_tier_root(*ckpt::detail::open_folder_store(args.path, false));
          !root.runs.empty())
        return inspect_local_root(args, root);
  }
  const std::vector<listed_step> steps = steps_in(args.path);
  if (!args.step && is_manager_folder(args.path, steps)) return inspect_folder(args, steps);
  return inspect_checkpoint(args, checkpoint_in(args.path, steps, args.step));
}

// What `ckpt inspect --help` shows.
constexpr command_text inspect_text{
    "inspect", "List the entries and metadata of a checkpoint, or a folder's steps",
    R"(List the entries of a checkpoint (name, dtype, shape, parameters, bytes), their totals and its
__metadata__, reading headers only. PATH is a .safetensors file, a sharded checkpoint (its
*.safetensors.index.json or its folder, an MPI step folder) or a checkpoint_manager folder (of
either manager, opened read-only), whose steps are listed, each with its state ('ok' if its
header reads, 'damaged' with the reason if not, or if a manager set it aside), then a line for
each leftover of a save that did not finish (a temporary file, an MPI step folder without its
index, a staging folder: 'leftover', its size and what removes it), and an MPI run's id; or
whose step N --step shows. Only headers are read: 'ok' does not check the digest (ckpt verify
does). Of an object in S3 (s3://bucket/key, a sharded checkpoint's index or prefix there) only the
headers are fetched, by ranged GETs; --stats prints the bytes and requests fetched.

PATH may also be a node-local tier root (the 'local' folder of ckpt::mpi::tiers), which keeps each
run's steps apart in a folder of its own: a row per node of each run (the committed steps of its
own shards, of its partner copies, its step folders without an index, its bytes), then a line per
run naming its shared folder, and saying when no manager will use the run's folders again (the
shared folder is gone, or holds another run now); then the folders an earlier version wrote there.
Or a run's folder in that root, or one node's folder of it: a row per step that a node holds, its
own shards or its partner copies of the previous node's ('shards held': which of the step's shards,
e.g. '1, 2 of 4'), with the entries, parameters and bytes of that part; then its leftovers.

Exit status: 0 (a folder with damaged steps or leftovers included: they are rows and lines), or
2 if PATH cannot be read (for a folder, a step whose header cannot be read for another reason
than its bytes: a permission, too many open files) or is not a valid checkpoint.)"};

}  // namespace

void add_inspect(CLI::App& app, action& chosen) {
  const auto [sub, args] = add_command<inspect_args>(app, chosen, inspect, inspect_text);
  add_path_argument(*sub, "PATH", args->path, "the checkpoint file, sharded index or folder, or a node-local tier root");
  sub->add_flag("--json", args->json, "print one JSON object instead of a table (for scripts)");
  sub->add_option("--filter", args->filter, "only the entries whose names start with PREFIX")
      ->type_name("PREFIX");
  add_load_options(*sub, &args->step, args->torch_budget, args->stats);
}

}  // namespace ckpt_tool
