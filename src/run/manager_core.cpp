#include "manager_core.hpp"

#include <ckpt/error.hpp>

#include "base/tuning.hpp"
#include "format/reader.hpp"
#include "io/io_hooks.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <iostream>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace ckpt::detail {

namespace {

// A keep-best metric as written in `__metadata__`; nothing if it is not a number (or is NaN,
// which would not rank).
std::optional<double> parse_metric(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || std::isnan(value)) return std::nullopt;
  return value;
}

}  // namespace

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

std::optional<std::int64_t> step_set_aside(std::string_view name, std::string_view prefix, std::string_view suffix) {
  constexpr std::string_view mark = ".damaged";
  const std::size_t at = name.rfind(mark);
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view rest = name.substr(at + mark.size());
  if (!rest.empty()) {
    // "-K" with K >= 2, written without leading zeros.
    int k = 0;
    const auto [end, ec] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), k);
    if (rest[0] != '-' || ec != std::errc() || end != rest.data() + rest.size() || k < 2 ||
        rest != "-" + std::to_string(k))
      return std::nullopt;
  }
  return step_in_name(name.substr(0, at), prefix, suffix);
}

bool is_damage(const std::exception& e) noexcept {
  if (dynamic_cast<const format_error*>(&e) != nullptr) return true;
  const auto* io = dynamic_cast<const io_error*>(&e);
  if (io == nullptr) return false;
  // The errno compared as a value (system and generic errors share them), not through the
  // category's virtual `equivalent`: this runs where descriptors or memory ran out.
  const std::error_code code = io->code();
  if (code.category() != std::system_category() && code.category() != std::generic_category()) return false;
  return code.value() == ENOENT || code.value() == ELOOP || code.value() == ENOTDIR;
}

std::string wall_time_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  ::gmtime_r(&seconds, &utc);
  char text[64];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(millis));
  return text;
}

bool is_run_id(std::string_view text) noexcept {
  const auto alphanumeric = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  return text.size() == run_id_length && std::ranges::all_of(text, alphanumeric);
}

std::optional<std::string> read_small_file(const folder_handle& folder, std::string_view name, std::size_t limit) {
  if (!folder.status(name)) return std::nullopt;
  struct stat info {};
  const file_descriptor fd = folder.open_to_read(name, info);
  // One byte past the limit tells a file at the limit from a longer one.
  std::string text(limit + 1, '\0');
  text.resize(read_fully(fd.get(), reinterpret_cast<std::byte*>(text.data()), text.size(), 0, folder.path_of(name)));
  if (text.size() > limit)
    throw error(folder.path_of(name), "ckpt: '" + folder.path_of(name).string() + "' is longer than the " +
                                          std::to_string(limit) + " bytes such a file holds");
  return text;
}

std::optional<std::string> read_run_id(const folder_handle& folder) {
  std::optional<std::string> text = read_small_file(folder, run_id_file_name, run_id_length + 1);
  if (!text) return std::nullopt;
  if (text->ends_with('\n')) text->pop_back();
  if (!is_run_id(*text))
    throw error(folder.path_of(run_id_file_name),
                "ckpt: '" + folder.path_of(run_id_file_name).string() + "' does not hold a run id (" +
                    std::to_string(run_id_length) + " letters and digits, then a newline): it holds " +
                    std::to_string(text->size()) + " bytes that are not one; the first manager that opened the folder for "
                    "writing made it: restore it, or delete it to make the folder a new run (whose node-local tiers "
                    "start empty)");
  return text;
}

manager_core::manager_core(std::string who, std::filesystem::path folder, manager_options options)
    : who_(std::move(who)), folder_(std::move(folder)), options_(std::move(options)) {
  if (options_.save_interval_steps < 1)
    throw std::invalid_argument(message("save_interval_steps must be at least 1, not " +
                                        std::to_string(options_.save_interval_steps)));
  if (options_.keep_every_n_steps < 0) throw std::invalid_argument(message("keep_every_n_steps must not be negative"));
  if (options_.keep_best > 0 && options_.best_metric.empty())
    throw std::invalid_argument(message("keep_best needs a best_metric name"));
}

std::string manager_core::message(const std::string& what) const { return "ckpt: " + who_ + ": " + what; }

std::vector<std::int64_t> manager_core::steps() const {
  std::vector<std::int64_t> out;
  out.reserve(steps_.size());
  for (const auto& [step, metric] : steps_) out.push_back(step);
  return out;
}

std::optional<std::int64_t> manager_core::latest_step() const noexcept {
  if (steps_.empty()) return std::nullopt;
  return steps_.rbegin()->first;
}

void manager_core::require(std::int64_t step) const {
  if (!steps_.contains(step))
    throw std::invalid_argument(
        message("no checkpoint for step " + std::to_string(step) + " in '" + folder_.string() + "'"));
}

void manager_core::check_not_negative(std::int64_t step) const {
  if (step < 0) throw std::invalid_argument(message("negative step " + std::to_string(step)));
}

bool manager_core::admit(std::int64_t step, const metadata_map& metadata, bool force) const {
  check_not_negative(step);
  // A saved step is never rewritten: see "Saving a step again" in manager.hpp.
  if (const std::optional<std::int64_t> latest = latest_step(); latest && step <= *latest)
    throw std::invalid_argument(message("step " + std::to_string(step) + " is not newer than the latest step in '" +
                                        folder_.string() + "' (step " + std::to_string(*latest) + ")"));
  if (options_.keep_best > 0) {
    const auto it = metadata.find(options_.best_metric);
    if (it != metadata.end() && !parse_metric(it->second))
      throw std::invalid_argument(
          message("the metric '" + options_.best_metric + "' = '" + it->second + "' is not a number"));
  }
  return force || should_save(step);
}

std::optional<double> manager_core::metric_of(const metadata_map& metadata) const {
  if (options_.keep_best == 0) return std::nullopt;
  const auto it = metadata.find(options_.best_metric);
  if (it == metadata.end()) return std::nullopt;
  return parse_metric(it->second);
}

void manager_core::add(std::int64_t step, const metadata_map& metadata) {
  steps_.insert_or_assign(step, metric_of(metadata));
}

std::vector<std::pair<std::int64_t, std::string>> manager_core::add_existing(
    const std::vector<std::int64_t>& steps, const std::function<metadata_map(std::int64_t step)>& metadata_of) {
  std::vector<std::pair<std::int64_t, std::string>> unreadable;
  for (const std::int64_t step : steps) {
    std::optional<double> metric;
    if (options_.keep_best > 0) {
      try {
        metric = metric_of(metadata_of(step));
      } catch (const error& e) {
        if (!is_damage(e)) throw;
        unreadable.emplace_back(step, e.what());
        continue;
      }
    }
    steps_.insert_or_assign(step, metric);
  }
  return unreadable;
}

void manager_core::mark_damaged(std::int64_t step, std::filesystem::path path, std::string reason) {
  forget(step);
  damaged_.push_back({.step = step, .state = step_state::damaged, .path = std::move(path), .reason = std::move(reason)});
}

namespace {

run_files run_files_of(const folder_handle& folder) {
  return {[&folder](const std::string& from, const std::string& to) { return folder.rename_unless_taken(from, to); },
          [&folder](const std::string& name) { static_cast<void>(folder.remove(name)); },
          [&folder](const std::string& name) { return folder.path_of(name); }};
}

}  // namespace

const step_status& manager_core::set_aside(std::int64_t step, const folder_handle& folder, const std::string& name,
                                           std::string reason) {
  return set_aside(step, run_files_of(folder), name, std::move(reason));
}

std::vector<step_status> manager_core::remove_set_aside(const folder_handle& folder) {
  return remove_set_aside(run_files_of(folder));
}

const step_status& manager_core::set_aside(std::int64_t step, const run_files& run, const std::string& name,
                                           std::string reason) {
  std::string now = name;
  if (!options_.read_only) {
    // The first of `<name>.damaged`, `<name>.damaged-2`, ... that is free: never over another.
    std::string aside = name + ".damaged";
    try {
      for (int k = 2; !run.rename_unless_taken(name, aside); ++k) aside = name + ".damaged-" + std::to_string(k);
      now = aside;
    } catch (const io_error& e) {
      if (e.code() != std::errc::no_such_file_or_directory) throw io_error(run.path_of(name), "set aside (rename)", e.code());
    }
  }
  mark_damaged(step, run.path_of(now), std::move(reason));
  return damaged_.back();
}

std::vector<step_status> manager_core::remove_set_aside(const run_files& run) {
  std::vector<step_status> removed;
  // What stays: the rows not set aside here, and (after a failure) those not tried yet.
  std::vector<step_status> kept;
  std::size_t i = 0;
  try {
    for (; i < damaged_.size(); ++i) {
      const step_status& s = damaged_[i];
      const std::string name = s.path.filename().string();
      if (step_set_aside(name, file_step_prefix, file_step_suffix) || step_set_aside(name, mpi_step_prefix)) {
        run.remove(name);
        removed.push_back(s);
      } else {
        kept.push_back(s);
      }
    }
  } catch (...) {
    kept.insert(kept.end(), damaged_.begin() + static_cast<std::ptrdiff_t>(i), damaged_.end());
    damaged_ = std::move(kept);
    throw;
  }
  damaged_ = std::move(kept);
  return removed;
}

std::vector<step_status> manager_core::status(const std::function<std::filesystem::path(std::int64_t)>& path_of) const {
  std::vector<step_status> out = damaged_;
  for (const auto& [step, metric] : steps_) {
    const auto stuck = undeletable_.find(step);
    out.push_back({.step = step,
                   .state = stuck != undeletable_.end() ? step_state::undeletable
                            : intact_.contains(step)    ? step_state::intact
                                                        : step_state::unchecked,
                   .path = path_of(step),
                   .reason = stuck != undeletable_.end() ? stuck->second : std::string()});
  }
  // A damaged step before a later save of the same number.
  std::ranges::stable_sort(out, [](const step_status& a, const step_status& b) {
    return a.step != b.step ? a.step < b.step : a.state == step_state::damaged && b.state != step_state::damaged;
  });
  return out;
}

void manager_core::retain(const std::function<void(std::int64_t step)>& remove) {
  for (const std::int64_t step : to_drop()) {
    try {
      remove(step);
      forget(step);
    } catch (const error& e) {  // an io_error, or a bucket's remote_error
      undeletable_.insert_or_assign(step, std::string("the retention rules drop it, but it could not be deleted: ") + e.what());
    }
  }
}

std::vector<std::int64_t> manager_core::to_drop_after(std::int64_t step, const metadata_map& metadata) const {
  manager_core after = *this;
  after.add(step, metadata);
  return after.to_drop();
}

std::vector<std::int64_t> manager_core::to_drop() const {
  // The newest is always kept, as max_to_keep is at least 1 when set.
  if (options_.max_to_keep == 0 || steps_.size() <= options_.max_to_keep) return {};
  const std::vector<std::int64_t> all = steps();
  std::vector<std::int64_t> keep(all.end() - static_cast<std::ptrdiff_t>(options_.max_to_keep), all.end());
  if (options_.keep_every_n_steps > 0)
    for (const std::int64_t step : all)
      if (step % options_.keep_every_n_steps == 0) keep.push_back(step);
  if (options_.keep_best > 0) {
    std::vector<std::pair<double, std::int64_t>> ranked;
    for (const auto& [step, metric] : steps_)
      if (metric) ranked.emplace_back(options_.best_mode == metric_mode::min ? *metric : -*metric, -step);
    // Ties go to the newer checkpoint (hence -step).
    std::ranges::sort(ranked);
    for (std::size_t i = 0; i < ranked.size() && i < options_.keep_best; ++i) keep.push_back(-ranked[i].second);
  }
  std::ranges::sort(keep);
  std::vector<std::int64_t> drop;
  for (const std::int64_t step : all)
    if (!std::ranges::binary_search(keep, step)) drop.push_back(step);
  return drop;
}

background_write::~background_write() {
  if (worker_.joinable()) worker_.join();
}

void background_write::start(std::function<void()> job) {
  error_ = nullptr;
  // The job owns what it writes; the caller touches none of it until join().
  worker_ = std::thread([this, job = std::move(job)] {
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  pending_ = true;
}

void background_write::finish(std::exception_ptr error) noexcept {
  error_ = std::move(error);
  pending_ = true;
}

void background_write::yield() noexcept {
  // Linux takes a thread's id where POSIX says a process: the niceness of this thread alone.
  static_cast<void>(hooks().setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), tuning::writer_nice));
}

std::exception_ptr background_write::join() noexcept {
  if (worker_.joinable()) worker_.join();
  pending_ = false;
  return std::exchange(error_, nullptr);
}

void report_uncollected(std::string_view who, const std::filesystem::path& folder, const std::exception_ptr& error) noexcept {
  if (!error) return;
  try {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      std::cerr << "ckpt: " << who << ": a background save to '" << folder.string()
                << "' failed and nobody called wait(): " << e.what() << '\n';
    } catch (...) {
      std::cerr << "ckpt: " << who << ": a background save to '" << folder.string()
                << "' failed and nobody called wait()\n";
    }
  } catch (...) {  // writing to stderr failed: nothing more to do
  }
}

metadata_map manager_state::given_metadata(std::span<const section> sections, const metadata_map& metadata,
                                           std::string_view operation) {
  return merged_metadata(sections, metadata, core.who() + ": " + std::string(operation));
}

void manager_state::settle_quietly() noexcept {
  try {
    settle_all();
  } catch (...) {
    report_uncollected(core.who(), core.folder(), std::current_exception());
  }
}

std::optional<metadata_map> admit_here(const manager_core& core, std::int64_t step, const metadata_map& metadata,
                                       bool force) {
  metadata_map merged = metadata;
  merged.insert_or_assign("step", std::to_string(step));
  merged.insert_or_assign("wall_time", wall_time_now());
  if (!core.admit(step, merged, force)) return std::nullopt;
  return merged;
}

}  // namespace ckpt::detail

// ckpt::checkpoint_manager's members: the rules, over the state of either manager.
namespace ckpt {

using detail::manager_state;
using detail::step_status;

checkpoint_manager::checkpoint_manager(std::unique_ptr<manager_state> state) noexcept
    : state_(std::move(state)) {}

checkpoint_manager::~checkpoint_manager() {
  if (state_) state_->settle_quietly();
}

checkpoint_manager::checkpoint_manager(checkpoint_manager&& other) noexcept = default;

checkpoint_manager& checkpoint_manager::operator=(checkpoint_manager&& other) noexcept {
  if (this != &other) {
    if (state_) state_->settle_quietly();
    state_ = std::move(other.state_);
  }
  return *this;
}

const std::filesystem::path& checkpoint_manager::folder() const noexcept { return state_->core.folder(); }

std::filesystem::path checkpoint_manager::path_of(std::int64_t step) const { return state_->path_of(step); }

bool checkpoint_manager::should_save(std::int64_t step) const noexcept { return state_->core.should_save(step); }

namespace {

// save and save_async: the checks, then the write now or in the background.
bool save_step(manager_state& state, std::int64_t step, std::span<const section> sections,
               const metadata_map& metadata, bool force, bool background) {
  if (state.core.options().read_only)
    throw std::invalid_argument(state.core.message(std::string(background ? "save_async" : "save") +
                                                   ": the folder '" + state.core.folder().string() +
                                                   "' was opened read-only"));
  // Settling first also frees the previous snapshot, whose buffer a background save then reuses.
  state.settle();
  const std::optional<metadata_map> merged =
      state.admit(step, state.given_metadata(sections, metadata, background ? "save_async" : "save"), force);
  if (!merged) return false;
  if (background) state.save_in_background(step, sections, *merged);
  else state.save_now(step, sections, *merged);
  return true;
}

}  // namespace

bool checkpoint_manager::save(std::int64_t step, std::span<const section> sections,
                                   const metadata_map& metadata, bool force) {
  return save_step(*state_, step, sections, metadata, force, false);
}

bool checkpoint_manager::save_async(std::int64_t step, std::span<const section> sections,
                                         const metadata_map& metadata, bool force) {
  return save_step(*state_, step, sections, metadata, force, true);
}

void checkpoint_manager::wait() { state_->settle_all(); }

std::vector<std::int64_t> checkpoint_manager::steps() const { return state_->core.steps(); }

std::optional<std::int64_t> checkpoint_manager::latest_step() const noexcept { return state_->core.latest_step(); }

std::vector<step_status> checkpoint_manager::status() const {
  return state_->core.status([this](std::int64_t step) { return state_->path_of(step); });
}

namespace {

// Loads committed `step`; if it is damaged, sets it aside (recorded in the core) and throws the
// load's error.
// Loads committed `step`. If it is gone (deleted since it was listed, as a writer's retention
// deletes a step a reader listed), forgets it, sets `*gone` and throws the load's error; if it is
// damaged, sets it aside (recorded in the core) and throws the error.
checkpoint load_committed(manager_state& state, std::int64_t step, const load_options& options, bool* gone = nullptr) {
  try {
    checkpoint t = state.load_step(step, options);
    state.core.mark_intact(step);
    return detail::chosen(t, options);
  } catch (const std::exception& e) {
    if (state.gone(step)) {
      state.core.forget(step);
      if (gone != nullptr) *gone = true;
    } else if (state.damaged_by(e)) {
      static_cast<void>(state.set_aside(step, e.what()));
    }
    throw;
  }
}

}  // namespace

std::vector<step_status> checkpoint_manager::remove_damaged() {
  if (state_->core.options().read_only)
    throw std::invalid_argument(state_->core.message("remove_damaged: the folder '" + state_->core.folder().string() +
                                                     "' was opened read-only"));
  return state_->remove_damaged();
}

checkpoint checkpoint_manager::load(std::int64_t step, const load_options& opts) {
  state_->settle();
  state_->core.require(step);
  return load_committed(*state_, step, opts);
}

checkpoint_manager::latest checkpoint_manager::load_latest(const load_options& opts) {
  state_->settle();
  latest out;
  while (const std::optional<std::int64_t> step = latest_step()) {
    bool gone = false;
    try {
      out.data = load_committed(*state_, *step, opts, &gone);
      out.step = *step;
      out.sources = state_->last_sources;
      break;
    } catch (const std::exception& e) {
      if (gone) continue;  // deleted since it was listed: no longer a step, and not damage
      if (!state_->damaged_by(e)) throw;
      out.skipped.push_back(state_->core.damaged().back());
    }
  }
  return out;
}

std::string_view to_string(checkpoint_manager::tier t) noexcept {
  switch (t) {
    case checkpoint_manager::tier::local: return "local";
    case checkpoint_manager::tier::partner: return "partner";
    case checkpoint_manager::tier::folder: break;
  }
  return "folder";
}

}  // namespace ckpt
