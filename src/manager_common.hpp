#pragma once
// What the single-process manager (src/manager.cpp) and the MPI one (src/mpi/manager.cpp) share:
// the retention rules of checkpoint_manager_options, so that both keep exactly the same steps,
// and the wall_time stamp they record.

#include <ckpt/manager.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace ckpt::detail {

// Now, in UTC, as ISO 8601 with milliseconds: the `wall_time` metadata of a manager's checkpoint.
inline std::string wall_time_now() {
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

// A keep-best metric as written in `__metadata__`; nothing if it is not a number (or is NaN,
// which would not rank).
inline std::optional<double> parse_metric(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || std::isnan(value)) return std::nullopt;
  return value;
}

// The steps of `checkpoints` (every step with its keep-best metric, if any) that no rule of
// `options` keeps, oldest first. The newest is always kept, as max_to_keep is at least 1 when set.
inline std::vector<std::int64_t> steps_to_drop(const std::map<std::int64_t, std::optional<double>>& checkpoints,
                                               const checkpoint_manager_options& options) {
  if (options.max_to_keep == 0 || checkpoints.size() <= options.max_to_keep) return {};
  std::vector<std::int64_t> steps;
  for (const auto& [step, metric] : checkpoints) steps.push_back(step);
  std::vector<std::int64_t> keep(steps.end() - static_cast<std::ptrdiff_t>(options.max_to_keep), steps.end());
  if (options.keep_every_n_steps > 0)
    for (std::int64_t step : steps)
      if (step % options.keep_every_n_steps == 0) keep.push_back(step);
  if (options.keep_best > 0) {
    std::vector<std::pair<double, std::int64_t>> ranked;
    for (const auto& [step, metric] : checkpoints)
      if (metric) ranked.emplace_back(options.best_mode == metric_mode::min ? *metric : -*metric, -step);
    // Ties go to the newer checkpoint (hence -step).
    std::ranges::sort(ranked);
    for (std::size_t i = 0; i < ranked.size() && i < options.keep_best; ++i) keep.push_back(-ranked[i].second);
  }
  std::ranges::sort(keep);
  std::vector<std::int64_t> drop;
  for (std::int64_t step : steps)
    if (!std::ranges::binary_search(keep, step)) drop.push_back(step);
  return drop;
}

}  // namespace ckpt::detail
