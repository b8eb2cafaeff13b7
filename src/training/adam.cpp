// adam::update's leaves on several threads (ckpt/detail/adam_update.hpp).
#include <ckpt/detail/adam_update.hpp>

#include "base/parallel.hpp"
#include "base/tuning.hpp"

#include <algorithm>
#include <vector>

namespace ckpt::detail {

void update_leaves(std::span<const adam_task> tasks, const adam_step& step, std::size_t threads) {
  if (threads == 0) threads = usable_threads();
  std::size_t bytes = 0;
  for (const adam_task& t : tasks) bytes += t.bytes;
  if (threads <= 1 || bytes < tuning::parallel_update_bytes) {
    for (const adam_task& t : tasks) t.update(0, t.size, step);
    return;
  }
  // Ranges of about `target` bytes of parameters, a few per thread, in the leaves' order (the
  // order in which a background save copies them): a leaf of `target` or less is one range, so
  // that the threads mostly work on different leaves and copy different leaves for a pending save.
  const std::size_t target =
      std::clamp(bytes / (threads * tuning::update_ranges_per_thread), tuning::min_update_range_bytes,
                 tuning::max_update_range_bytes);
  struct range {
    std::size_t task, first, last;
  };
  std::vector<range> ranges;
  for (std::size_t i = 0; i < tasks.size(); ++i) {
    const adam_task& t = tasks[i];
    const std::size_t parts = t.cut_grain == 0 ? 1 : (t.bytes + target - 1) / target;
    std::size_t first = 0;
    for (std::size_t k = 1; k < parts; ++k) {
      // The cut at or before element k/parts of the leaf.
      const std::size_t at = t.size / parts * k;
      if (at < t.first_cut) continue;
      const std::size_t cut = t.first_cut + (at - t.first_cut) / t.cut_grain * t.cut_grain;
      if (cut <= first || cut >= t.size) continue;
      ranges.push_back({i, first, cut});
      first = cut;
    }
    ranges.push_back({i, first, t.size});
  }
  parallel_for(ranges.size(), threads, [&](std::size_t k) {
    const range& r = ranges[k];
    tasks[r.task].update(r.first, r.last, step);
  });
}

}  // namespace ckpt::detail
