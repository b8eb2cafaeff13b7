#include "manager_core.hpp"

#include "layout.hpp"

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

const step_status& manager_core::set_aside(std::int64_t step, const store& run, const std::string& name,
                                           std::string reason) {
  std::string now = name;
  if (!options_.read_only) {
    // The first of `<name>.damaged`, `<name>.damaged-2`, ... that is free: never over another.
    try {
      int k = 1;
      while (!run.rename_unless_taken(name, layout::set_aside_name(name, k))) ++k;
      now = layout::set_aside_name(name, k);
    } catch (const io_error& e) {
      if (e.code() != std::errc::no_such_file_or_directory) throw io_error(run.path_of(name), "set aside (rename)", e.code());
    }
  }
  mark_damaged(step, run.path_of(now), std::move(reason));
  return damaged_.back();
}

std::vector<step_status> manager_core::remove_set_aside(const store& run) {
  std::vector<step_status> removed;
  // What stays: the rows not set aside here, and (after a failure) those not tried yet.
  std::vector<step_status> kept;
  std::size_t i = 0;
  try {
    for (; i < damaged_.size(); ++i) {
      const step_status& s = damaged_[i];
      const std::string name = s.path.filename().string();
      if (layout::step_set_aside(name)) {
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

std::optional<metadata_map> admit_here(const manager_core& core, std::int64_t step, const metadata_map& metadata,
                                       bool force) {
  metadata_map merged = metadata;
  merged.insert_or_assign("step", std::to_string(step));
  merged.insert_or_assign("wall_time", wall_time_now());
  if (!core.admit(step, merged, force)) return std::nullopt;
  return merged;
}

}  // namespace ckpt::detail

