// The one description of a run (src/run/layout.hpp).
#include "layout.hpp"

#include <ckpt/error.hpp>

#include "format/sharded.hpp"
#include "io/temporary_name.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>

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
