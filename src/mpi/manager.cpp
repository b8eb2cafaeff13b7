#include <ckpt/mpi.hpp>
#include <ckpt/sharded.hpp>

#include "../posix_file.hpp"
#include "../manager_common.hpp"
#include "common.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <stdexcept>
#include <system_error>
#include <utility>

namespace ckpt::mpi {
namespace {

constexpr std::string_view lock_name = ".ckpt-mpi-manager.lock";

// True for the exact names step_folder gives (`step-` and ten or more digits), so that a user's
// own "step-7" is never taken for debris.
bool is_step_folder_name(std::string_view name) {
  if (!name.starts_with("step-")) return false;
  const std::string_view digits = name.substr(5);
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  return ec == std::errc() && end == digits.data() + digits.size() && step >= 0 &&
         step_folder("", step).filename() == name;
}

using step_map = std::map<std::int64_t, std::optional<double>>;

std::string encode(const step_map& steps) {
  detail::encoder e;
  e.u64(steps.size());
  for (const auto& [step, metric] : steps) {
    e.i64(step);
    e.u64(metric ? 1 : 0);
    e.f64(metric.value_or(0));
  }
  return std::move(e.bytes());
}

step_map decode_steps(std::string_view bytes) {
  detail::decoder d(bytes);
  step_map steps;
  for (std::uint64_t n = d.u64(); n > 0; --n) {
    const std::int64_t step = d.i64();
    const bool has = d.u64() != 0;
    const double metric = d.f64();
    steps.emplace(step, has ? std::optional<double>(metric) : std::nullopt);
  }
  return steps;
}

std::string encode(const metadata_map& metadata) {
  detail::encoder e;
  e.u64(metadata.size());
  for (const auto& [key, value] : metadata) {
    e.str(key);
    e.str(value);
  }
  return std::move(e.bytes());
}

metadata_map decode_metadata(std::string_view bytes) {
  detail::decoder d(bytes);
  metadata_map metadata;
  for (std::uint64_t n = d.u64(); n > 0; --n) {
    std::string key = d.str();
    metadata.insert_or_assign(std::move(key), d.str());
  }
  return metadata;
}

}  // namespace

struct checkpoint_manager::impl {
  MPI_Comm comm = MPI_COMM_NULL;
  std::filesystem::path folder;
  checkpoint_manager_options options;
  int lock_fd = -1;  // rank 0 only
  // Every committed step with its keep-best metric; the same on every rank.
  step_map checkpoints;

  impl(std::filesystem::path folder_path, checkpoint_manager_options opts)
      : folder(std::move(folder_path)), options(std::move(opts)) {}
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;
  ~impl() {
    if (lock_fd >= 0) ::close(lock_fd);  // releases the flock
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && finalized == 0) MPI_Comm_free(&comm);
  }

  [[nodiscard]] int rank() const { return detail::rank_of(comm); }

  [[nodiscard]] std::optional<double> metric_of(const metadata_map& metadata) const {
    if (options.keep_best == 0) return std::nullopt;
    const auto it = metadata.find(options.best_metric);
    if (it == metadata.end()) return std::nullopt;
    return ckpt::detail::parse_metric(it->second);
  }

  // Rank 0: the lock, as the single-process manager takes it (flock on its own lock file).
  void lock() { lock_fd = ckpt::detail::lock_exclusively(folder, folder / lock_name); }

  // Rank 0, holding the lock: the committed steps, and the uncommitted step folders of a crashed
  // job removed (no save of ours runs, and a step without its index does not exist).
  void scan() {
    for (const std::int64_t step : committed_steps(folder)) checkpoints.emplace(step, std::nullopt);
    std::error_code ec;
    std::vector<std::filesystem::path> debris;
    for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      std::error_code ignored;
      if (is_step_folder_name(name) && it->is_directory(ignored) &&
          !std::filesystem::exists(it->path() / index_file_name, ignored))
        debris.push_back(it->path());
    }
    if (ec) throw io_error(folder, "list", ec);
    for (const auto& path : debris) std::filesystem::remove_all(path, ec);
    // Only the headers are needed for the metrics.
    if (options.keep_best > 0)
      for (auto& [step, metric] : checkpoints)
        metric = metric_of(load_sharded(step_folder(folder, step) / index_file_name, {.verify_digest = false}).metadata());
  }

  // Rank 0: deletes what the rules drop, the index first, so that a step is either committed and
  // whole or not there at all, even if this stops half-way.
  void retain() {
    for (const std::int64_t step : ckpt::detail::steps_to_drop(checkpoints, options)) {
      const std::filesystem::path dir = step_folder(folder, step);
      const std::filesystem::path index = dir / index_file_name;
      std::error_code ec;
      if (!std::filesystem::remove(index, ec) && ec) throw io_error(index, "remove", ec);
      checkpoints.erase(step);
      std::filesystem::remove_all(dir, ec);
      if (ec) throw io_error(dir, "remove", ec);
    }
  }

  // Rank 0's list of steps, on every rank.
  void share_steps() {
    std::string bytes = rank() == 0 ? encode(checkpoints) : std::string();
    detail::broadcast(comm, bytes, 0);
    if (rank() != 0) checkpoints = decode_steps(bytes);
  }
};

checkpoint_manager::checkpoint_manager(MPI_Comm comm, std::filesystem::path folder, checkpoint_manager_options options) {
  if (options.save_interval_steps < 1)
    throw std::invalid_argument("ckpt: mpi::checkpoint_manager: save_interval_steps must be at least 1, not " +
                                std::to_string(options.save_interval_steps));
  if (options.keep_every_n_steps < 0)
    throw std::invalid_argument("ckpt: mpi::checkpoint_manager: keep_every_n_steps must not be negative");
  if (options.keep_best > 0 && options.best_metric.empty())
    throw std::invalid_argument("ckpt: mpi::checkpoint_manager: keep_best needs a best_metric name");
  impl_ = std::make_unique<impl>(std::move(folder), std::move(options));
  MPI_Comm_dup(comm, &impl_->comm);
  std::exception_ptr local_error;
  if (impl_->rank() == 0) {
    try {
      std::error_code ec;
      std::filesystem::create_directories(impl_->folder, ec);
      if (ec) throw io_error(impl_->folder, "create the folder", ec);
      impl_->lock();
      impl_->scan();
      // Finishes the retention of a job that died between a commit and its deletions, so that
      // crashes do not pile up steps the rules drop (as the single-process manager does).
      impl_->retain();
    } catch (...) {
      local_error = std::current_exception();
    }
  }
  detail::settle(impl_->comm, local_error, impl_->folder, "checkpoint_manager");
  impl_->share_steps();
}

checkpoint_manager::~checkpoint_manager() = default;

const std::filesystem::path& checkpoint_manager::folder() const noexcept { return impl_->folder; }

const checkpoint_manager_options& checkpoint_manager::options() const noexcept { return impl_->options; }

bool checkpoint_manager::should_save(std::int64_t step) const noexcept {
  return step % impl_->options.save_interval_steps == 0;
}

bool checkpoint_manager::save(std::int64_t step, const checkpoint& local, const metadata_map& metadata, bool force) {
  impl& m = *impl_;
  // The ranks must agree on the step before anything depends on it (a skip on some ranks only
  // would leave the others waiting in a collective).
  // One reduction gives the largest and (as ~max(~step)) the smallest step; ~ cannot overflow.
  std::int64_t bounds[2] = {step, ~step};
  MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_INT64_T, MPI_MAX, m.comm);
  if (bounds[0] != ~bounds[1])
    throw std::invalid_argument("ckpt: mpi::checkpoint_manager: the ranks disagree on the step (from " +
                                std::to_string(~bounds[1]) + " to " + std::to_string(bounds[0]) + ")");
  if (step < 0)
    throw std::invalid_argument("ckpt: mpi::checkpoint_manager: negative step " + std::to_string(step));
  if (!m.checkpoints.empty() && step <= m.checkpoints.rbegin()->first)
    throw std::invalid_argument("ckpt: mpi::checkpoint_manager: step " + std::to_string(step) +
                                " is not newer than the latest step in '" + m.folder.string() + "' (step " +
                                std::to_string(m.checkpoints.rbegin()->first) + ")");
  if (!force && !should_save(step)) return false;

  // Rank 0's metadata and clock, so that every rank checks and records the same metric.
  std::string bytes;
  if (m.rank() == 0) {
    metadata_map merged = metadata;
    merged.insert_or_assign("step", std::to_string(step));
    merged.insert_or_assign("wall_time", ckpt::detail::wall_time_now());
    bytes = encode(merged);
  }
  detail::broadcast(m.comm, bytes, 0);
  metadata_map merged = decode_metadata(bytes);
  if (m.options.keep_best > 0) {
    const auto it = merged.find(m.options.best_metric);
    if (it != merged.end() && !ckpt::detail::parse_metric(it->second))
      throw std::invalid_argument("ckpt: mpi::checkpoint_manager: the metric '" + m.options.best_metric + "' = '" +
                                  it->second + "' is not a number");
  }
  const std::optional<double> metric = m.metric_of(merged);
  mpi::save(m.comm, m.folder, step, local, {.digest = m.options.digest, .metadata = std::move(merged)});

  m.checkpoints.insert_or_assign(step, metric);
  std::exception_ptr local_error;
  if (m.rank() == 0) {
    try {
      m.retain();
    } catch (...) {
      local_error = std::current_exception();
    }
  }
  m.share_steps();
  detail::settle(m.comm, local_error, m.folder, "checkpoint_manager::save of step " + std::to_string(step));
  return true;
}

std::vector<std::int64_t> checkpoint_manager::steps() const {
  std::vector<std::int64_t> out;
  out.reserve(impl_->checkpoints.size());
  for (const auto& [step, metric] : impl_->checkpoints) out.push_back(step);
  return out;
}

std::optional<std::int64_t> checkpoint_manager::latest_step() const noexcept {
  if (impl_->checkpoints.empty()) return std::nullopt;
  return impl_->checkpoints.rbegin()->first;
}

checkpoint checkpoint_manager::load(std::int64_t step, const load_options& options) {
  if (!impl_->checkpoints.contains(step))
    throw std::invalid_argument("ckpt: mpi::checkpoint_manager: no checkpoint for step " + std::to_string(step) +
                                " in '" + impl_->folder.string() + "'");
  return mpi::load(impl_->comm, impl_->folder, step, options);
}

std::optional<checkpoint> checkpoint_manager::load_latest(const load_options& options) {
  const std::optional<std::int64_t> step = latest_step();
  if (!step) return std::nullopt;
  return load(*step, options);
}

}  // namespace ckpt::mpi
