// The one description of a run (src/run/layout.hpp).
#include "layout.hpp"

#include <ckpt/error.hpp>

#include "format/hf_index.hpp"
#include "format/safetensors.hpp"
#include "format/sharded.hpp"
#include "io/remote_path.hpp"
#include "io/temporary_name.hpp"

#include <climits>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iterator>
#include <map>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace ckpt::detail::layout {

namespace {

constexpr std::string_view file_prefix = "ckpt-";
constexpr std::string_view file_suffix = ".safetensors";
constexpr std::string_view folder_prefix = "step-";
constexpr std::string_view aside_mark = ".damaged";
// The base of a step folder's shards and index (`model-00001-of-00002.safetensors`, step_index).
constexpr std::string_view shard_base = "model";
// The base of the parts of a step of slices in a node-local tier (`part-00001-of-00004.safetensors`).
constexpr std::string_view part_base = "part";
constexpr std::string_view node_prefix = "node-";

// `<prefix><step, zero-padded to 10 digits><suffix>`.
std::string step_name(std::string_view prefix, std::int64_t step, std::string_view suffix) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%010lld", static_cast<long long>(step));
  std::string name(prefix);
  name += digits;
  name += suffix;
  return name;
}

std::optional<std::int64_t> step_in_name(std::string_view name, std::string_view prefix, std::string_view suffix) {
  if (name.size() < prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
    return std::nullopt;
  const std::string_view digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size() || step < 0 || step_name(prefix, step, suffix) != name)
    return std::nullopt;
  return step;
}

}  // namespace

std::string step_file(std::int64_t step) { return step_name(file_prefix, step, file_suffix); }
std::string step_folder(std::int64_t step) { return step_name(folder_prefix, step, {}); }
std::string index_of(std::int64_t step) { return step_folder(step) + "/" + std::string(step_index); }
std::optional<std::int64_t> step_of_file(std::string_view name) { return step_in_name(name, file_prefix, file_suffix); }
std::optional<std::int64_t> step_of_folder(std::string_view name) { return step_in_name(name, folder_prefix, {}); }
std::string step_shard(std::size_t number, std::size_t count) { return shard_name(shard_base, number, count); }
std::optional<std::size_t> shard_count_of(std::string_view name) { return detail::shard_count_of(name, shard_base); }
std::string step_part(std::size_t number, std::size_t count) { return shard_name(part_base, number, count); }
std::optional<std::size_t> part_count_of(std::string_view name) { return detail::shard_count_of(name, part_base); }

std::string set_aside_name(std::string_view name, int k) {
  std::string out(name);
  out += aside_mark;
  if (k > 1) out += "-" + std::to_string(k);
  return out;
}

std::optional<std::int64_t> step_set_aside(std::string_view name) {
  const std::size_t at = name.rfind(aside_mark);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view rest = name.substr(at + aside_mark.size());
  if (!rest.empty()) {
    // "-K" with K >= 2, written without leading zeros.
    int k = 0;
    const auto [end, ec] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), k);
    if (rest[0] != '-' || ec != std::errc() || end != rest.data() + rest.size() || k < 2 ||
        rest != "-" + std::to_string(k))
      return std::nullopt;
  }
  const std::string_view stepped = name.substr(0, at);
  if (const auto step = step_of_file(stepped)) return step;
  return step_of_folder(stepped);
}

bool is_run_id(std::string_view text) noexcept {
  const auto alphanumeric = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  return text.size() == run_id_length && std::ranges::all_of(text, alphanumeric);
}

std::string tier_run_folder(std::string_view id) { return std::string(tier_run_prefix) + std::string(id); }

std::optional<std::string> run_id_of_tier_folder(std::string_view name) {
  if (!name.starts_with(tier_run_prefix)) return std::nullopt;
  return std::string(name.substr(tier_run_prefix.size()));
}

std::string tier_node_folder(int node) { return std::string(node_prefix) + std::to_string(node); }

std::optional<int> node_of_tier_folder(std::string_view name) {
  if (!name.starts_with(node_prefix)) return std::nullopt;
  const std::string_view digits = name.substr(node_prefix.size());
  int node = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), node);
  if (ec != std::errc() || end != digits.data() + digits.size() || node < 0 || tier_node_folder(node) != name)
    return std::nullopt;
  return node;
}

std::optional<std::string> read_run_id(const store& s) {
  std::optional<std::string> text = s.read(run_id_name, run_id_length + 1);
  if (!text) return std::nullopt;
  if (text->ends_with('\n')) text->pop_back();
  if (!is_run_id(*text)) {
    const std::filesystem::path file = s.path_of(run_id_name);
    throw error(file, "ckpt: '" + file.string() + "' does not hold a run id (" + std::to_string(run_id_length) +
                          " letters and digits, then a newline): it holds " + std::to_string(text->size()) +
                          " bytes that are not one; the first manager that opened the folder for writing made it: "
                          "restore it, or delete it to make the folder a new run (whose node-local tiers start empty)");
  }
  return text;
}

bool committed_step_folder(const store& s, std::string_view name) {
  return s.find(std::string(name) + "/" + std::string(step_index), /*through_links=*/true) == store::kind::file;
}

std::vector<item> describe(const store& s) {
  std::vector<item> out;
  for (store::entry& e : s.list()) {
    item x{.name = std::move(e.name), .kind = what::other, .step = std::nullopt, .entry = e.what};
    const bool folder_like = e.what == store::kind::folder || e.what == store::kind::link;
    if (const auto step = step_of_file(x.name)) {
      x.kind = what::step_file;
      x.step = step;
    } else if (const auto folder_step = step_of_folder(x.name); folder_step && folder_like) {
      // Committed by its index, looked for through a link as the managers read the step.
      x.kind = committed_step_folder(s, x.name) ? what::step_folder : what::uncommitted_step_folder;
      x.step = folder_step;
    } else if (const auto aside = step_set_aside(x.name)) {
      x.kind = what::set_aside;
      x.step = aside;
    } else if (x.name == lock_name) {
      x.kind = what::lock;
    } else if (x.name == run_id_name) {
      x.kind = what::run_id;
    } else if (e.what == store::kind::folder && x.name.starts_with(staging_prefix) &&
               x.name.size() == staging_prefix.size() + temporary_suffix_length) {
      x.kind = what::staging_folder;
    } else if (const auto target = target_of_temporary(x.name); target && e.what != store::kind::folder) {
      x.kind = step_of_file(*target) ? what::step_temporary : what::temporary;
    }
    out.push_back(std::move(x));
  }
  std::ranges::sort(out, {}, &item::name);
  return out;
}

}  // namespace ckpt::detail::layout

// ---------------------------------------------------------------------------------------------
// The node-local tier root, described for the tool (src/run/layout.hpp, describe_tier_root).
// ---------------------------------------------------------------------------------------------

namespace ckpt::detail::layout {

namespace {

// The id of a run's folder name `run-<id>`.
std::optional<std::string> run_of_folder(std::string_view name) {
  std::optional<std::string> id = run_id_of_tier_folder(name);
  if (!id || !is_run_id(*id)) return std::nullopt;
  return id;
}

std::string joined(std::string_view folder, std::string_view name) {
  return folder.empty() ? std::string(name) : std::string(folder) + "/" + std::string(name);
}

// The folders of `s` (not links) under `folder`, sorted.
std::vector<std::string> folders_in(const store& s, std::string_view folder) {
  std::vector<std::string> out;
  for (store::entry& e : s.list(folder))
    if (e.what == store::kind::folder) out.push_back(std::move(e.name));
  std::ranges::sort(out);
  return out;
}

// The weight_map of the index of the step folder `folder` of `root`, read whole.
// \throws index_error, io_error.
std::map<std::string, std::vector<std::string>, std::less<>> index_of_folder(const store& root, std::string_view folder,
                                                                             std::string* save_id) {
  const std::string index = joined(folder, step_index);
  const std::optional<std::string> text = root.read(index, max_header_size);
  if (!text) throw io_error(root.path_of(index), "open", std::make_error_code(std::errc::no_such_file_or_directory));
  return parse_weight_map(*text, root.path_of(index), save_id);
}

// The committed step folders and the uncommitted ones in the folder `folder` of `root`.
void add_steps(const store& root, std::string_view folder, bool partner, tier_node& node) {
  if (root.find(folder) != store::kind::folder) return;
  node.step_folders.emplace_back(folder);
  const std::unique_ptr<store> here = folder_store_of(root.local()->subfolder(folder));
  for (const item& x : describe(*here)) {
    if (x.kind == what::uncommitted_step_folder) {
      node.uncommitted.push_back(partner ? joined(tier_partner_folder, x.name) : x.name);
      continue;
    }
    if (x.kind != what::step_folder) continue;
    tier_step copy{.step = *x.step, .partner = partner, .parts = false, .folder = joined(folder, x.name), .shards = {},
                   .held = {}, .problem = {}};
    try {
      for (const auto& [shard, names] : index_of_folder(root, copy.folder, nullptr)) copy.shards.push_back(shard);
      const std::vector<store::entry> files = root.list(copy.folder);
      // A step of slices: its parts, as the MPI manager finds them (src/mpi/tiers.cpp).
      for (const store::entry& e : files)
        if (const std::optional<std::size_t> count = part_count_of(e.name)) {
          copy.parts = true;
          copy.shards.clear();
          for (std::size_t k = 1; k <= *count; ++k) copy.shards.push_back(step_part(k, *count));
          break;
        }
      for (const store::entry& e : files)
        if (std::ranges::binary_search(copy.shards, e.name)) copy.held.push_back(e.name);
      std::ranges::sort(copy.held);
    } catch (const error& e) {
      copy.problem = e.what();
    }
    node.steps.push_back(std::move(copy));
  }
}

tier_node node_at(const store& root, std::string folder, std::optional<int> k) {
  tier_node out{.node = k, .folder = std::move(folder), .steps = {}, .uncommitted = {}, .step_folders = {}};
  add_steps(root, out.folder, false, out);
  add_steps(root, joined(out.folder, tier_partner_folder), true, out);
  std::ranges::sort(out.steps, {}, [](const tier_step& s) { return std::pair(s.step, s.partner); });
  return out;
}

// What the run's note says of its shared folder, and what that folder holds now.
void note_shared(const store& root, tier_run& run) {
  try {
    std::optional<std::string> noted = root.read(joined(run.folder, tier_shared_folder_name), PATH_MAX);
    if (!noted) return;
    if (noted->ends_with('\n')) noted->pop_back();
    run.shared = *noted;
    if (!is_remote(*run.shared)) {
      std::error_code ec;
      const std::filesystem::file_status status = std::filesystem::status(*run.shared, ec);
      if (status.type() == std::filesystem::file_type::not_found) {
        run.state = shared_state::gone;
        return;
      }
      if (!ec && !std::filesystem::is_directory(status)) {
        run.state = shared_state::no_run_id;
        return;
      }
    }
    const std::optional<std::string> theirs = read_run_id(*open_store(*run.shared, /*create=*/false));
    run.state = !theirs ? shared_state::no_run_id : *theirs == run.id ? shared_state::this_run : shared_state::another_run;
    if (theirs) run.detail = *theirs;
  } catch (const std::exception& e) {
    run.state = shared_state::unreadable;
    run.detail = e.what();
  }
}

}  // namespace

tier_root describe_tier_root(const store& root) {
  tier_root out;
  if (root.local() == nullptr) return out;
  for (const std::string& name : folders_in(root, {})) {
    if (const std::optional<std::string> id = run_of_folder(name)) {
      tier_run run{.id = std::string(*id), .folder = name, .shared = {}, .state = shared_state::not_noted, .detail = {}, .nodes = {}};
      note_shared(root, run);
      for (const std::string& sub : folders_in(root, name))
        if (const std::optional<int> k = node_of_tier_folder(sub)) run.nodes.push_back(node_at(root, joined(name, sub), k));
      std::ranges::sort(run.nodes, {}, &tier_node::node);
      if (run.nodes.empty()) run.nodes.push_back(node_at(root, name, std::nullopt));
      out.runs.push_back(std::move(run));
    } else if (node_of_tier_folder(name) || name == tier_partner_folder || step_of_folder(name)) {
      out.earlier.push_back(name);
    }
  }
  return out;
}

std::optional<tier_place> tier_place_of(const std::filesystem::path& path) {
  std::filesystem::path p = path.lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "run-<id>/"
  const std::string name = p.filename().string();
  if (const std::optional<std::string> id = run_of_folder(name))
    return tier_place{p.parent_path(), std::string(*id), name};
  const std::string parent = p.parent_path().filename().string();
  const std::optional<std::string> id = run_of_folder(parent);
  if (!id || !node_of_tier_folder(name)) return std::nullopt;
  return tier_place{p.parent_path().parent_path(), std::string(*id), joined(parent, name)};
}

checkpoint load_held(const store& root, const tier_step& copy, const load_options& options, std::string_view shard) {
  if (copy.parts) {
    if (shard.empty()) throw std::invalid_argument("layout::load_held: the parts of a step of slices load one at a time");
    return root.load(joined(copy.folder, shard), options);
  }
  std::string save_id;
  auto by_shard = index_of_folder(root, copy.folder, &save_id);
  std::erase_if(by_shard, [&](const auto& kv) {
    return shard.empty() ? !std::ranges::binary_search(copy.held, kv.first) : kv.first != shard;
  });
  return assemble_shards(
      root.path_of(joined(copy.folder, step_index)), by_shard,
      [&](const std::string& name) { return root.load(joined(copy.folder, name), options); }, save_id);
}

tier_cover covered(const tier_run& run, std::int64_t step,
                   const std::function<bool(const tier_step& copy, const std::string& shard)>& intact) {
  std::set<std::string> every, own, any;
  for (const tier_node& node : run.nodes)
    for (const tier_step& copy : node.steps) {
      if (copy.step != step) continue;
      every.insert(copy.shards.begin(), copy.shards.end());
      for (const std::string& shard : copy.held) {
        if (!intact(copy, shard)) continue;
        any.insert(shard);
        if (!copy.partner) own.insert(shard);
      }
    }
  tier_cover out;
  out.own = !every.empty() && own == every;
  out.with_partners = !every.empty() && any == every;
  std::ranges::set_difference(every, any, std::back_inserter(out.missing));
  return out;
}

}  // namespace ckpt::detail::layout
