#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>

#include "temporary_name.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <iostream>
#include <limits>
#include <map>
#include <stdexcept>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace ckpt {

namespace {

constexpr std::string_view file_prefix = "ckpt-";
constexpr std::string_view file_suffix = ".safetensors";
constexpr std::string_view lock_name = ".ckpt-manager.lock";

std::error_code last_error() { return {errno, std::system_category()}; }

std::string file_name_of(std::int64_t step) {
  char digits[32];
  std::snprintf(digits, sizeof digits, "%010lld", static_cast<long long>(step));
  return std::string(file_prefix) + digits + std::string(file_suffix);
}

// The step of one of our own file names; only the exact spelling `file_name_of` produces counts,
// so a user's "ckpt-7.safetensors" or "ckpt-00000000007.safetensors" is not ours to touch.
std::optional<std::int64_t> step_of(std::string_view name) {
  if (!name.starts_with(file_prefix) || !name.ends_with(file_suffix)) return std::nullopt;
  const std::string_view digits =
      name.substr(file_prefix.size(), name.size() - file_prefix.size() - file_suffix.size());
  if (digits.size() < 10 || !std::ranges::all_of(digits, [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  std::int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  if (file_name_of(step) != name) return std::nullopt;
  return step;
}

// A leftover of a crashed ckpt::save of one of our own files.
bool is_own_temporary(std::string_view name) {
  const auto target = detail::target_of_temporary(name);
  return target && step_of(*target).has_value();
}

std::optional<double> parse_metric(std::string_view text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || std::isnan(value)) return std::nullopt;
  return value;
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

}  // namespace

struct checkpoint_manager::impl {
  std::filesystem::path folder;
  checkpoint_manager_options options;
  int lock_fd = -1;
  // Every checkpoint of ours in the folder, with its keep-best metric if it has one.
  std::map<std::int64_t, std::optional<double>> checkpoints;
  std::thread worker;
  std::exception_ptr error;

  impl(std::filesystem::path folder_path, checkpoint_manager_options opts)
      : folder(std::move(folder_path)), options(std::move(opts)) {}
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  ~impl() {
    if (worker.joinable()) worker.join();
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        std::cerr << "ckpt: checkpoint_manager: a background save to '" << folder.string()
                  << "' failed and nobody called wait(): " << e.what() << '\n';
      } catch (...) {
        std::cerr << "ckpt: checkpoint_manager: a background save to '" << folder.string()
                  << "' failed and nobody called wait()\n";
      }
    }
    if (lock_fd >= 0) ::close(lock_fd);  // releases the flock
  }

  void lock() {
    const std::filesystem::path lock_path = folder / lock_name;
    lock_fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lock_fd < 0) throw io_error(lock_path, "open the lock file", last_error());
    // flock (not fcntl locks): it belongs to the open file description, so a second manager in
    // this very process, which opens the file anew, is refused as well.
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      const int code = errno;
      ::close(lock_fd);
      lock_fd = -1;
      if (code == EWOULDBLOCK) throw lock_error(folder, lock_path);
      throw io_error(lock_path, "lock", {code, std::system_category()});
    }
  }

  void scan() {
    std::error_code ec;
    std::filesystem::directory_iterator it(folder, ec);
    if (ec) throw io_error(folder, "list", ec);
    std::vector<std::filesystem::path> leftovers;
    for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (const auto step = step_of(name)) checkpoints.emplace(*step, std::nullopt);
      else if (is_own_temporary(name)) leftovers.push_back(it->path());
    }
    if (ec) throw io_error(folder, "list", ec);
    // We hold the lock, so no save of ours is writing them: they are debris of a crash. Failing
    // to remove one is harmless (it is ignored when listing), so that is not an error.
    for (const auto& path : leftovers) std::filesystem::remove(path, ec);
    if (options.keep_best > 0)
      for (auto& [step, metric] : checkpoints) metric = metric_of(ckpt::load(path_of(step)).metadata());
  }

  [[nodiscard]] std::optional<double> metric_of(const metadata_map& metadata) const {
    if (options.keep_best == 0) return std::nullopt;
    const auto it = metadata.find(options.best_metric);
    if (it == metadata.end()) return std::nullopt;
    return parse_metric(it->second);
  }

  [[nodiscard]] std::filesystem::path path_of(std::int64_t step) const {
    if (step < 0)
      throw std::invalid_argument("ckpt: checkpoint_manager: negative step " + std::to_string(step));
    return folder / file_name_of(step);
  }

  // Waits for the background write and hands over its error, once.
  void settle() {
    if (worker.joinable()) worker.join();
    if (error) std::rethrow_exception(std::exchange(error, nullptr));
  }

  // Checks the arguments of a save and builds what will be written, or nothing to skip it.
  std::optional<checkpoint> prepare(std::int64_t step, const checkpoint& t,
                                    const metadata_map& metadata, bool force) {
    if (step < 0)
      throw std::invalid_argument("ckpt: checkpoint_manager: negative step " + std::to_string(step));
    if (!checkpoints.empty() && step < checkpoints.rbegin()->first)
      throw std::invalid_argument("ckpt: checkpoint_manager: step " + std::to_string(step) +
                                  " is older than the latest checkpoint in '" + folder.string() +
                                  "' (step " + std::to_string(checkpoints.rbegin()->first) + ")");
    if (options.keep_best > 0) {
      const auto it = metadata.find(options.best_metric);
      if (it != metadata.end() && !parse_metric(it->second))
        throw std::invalid_argument("ckpt: checkpoint_manager: the metric '" + options.best_metric +
                                    "' = '" + it->second + "' is not a number");
    }
    if (!force && step % options.save_interval_steps != 0) return std::nullopt;
    metadata_map merged = t.metadata();
    for (const auto& [key, value] : metadata) merged.insert_or_assign(key, value);
    merged.insert_or_assign("step", std::to_string(step));
    merged.insert_or_assign("wall_time", wall_time_now());
    return t.with_metadata(std::move(merged));
  }

  void write(std::int64_t step, const checkpoint& t) {
    ckpt::save(path_of(step), t);
    checkpoints.insert_or_assign(step, metric_of(t.metadata()));
    retain();
  }

  void retain() {
    if (options.max_to_keep == 0 || checkpoints.size() <= options.max_to_keep) return;
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
    for (std::int64_t step : steps) {
      if (std::ranges::binary_search(keep, step)) continue;
      const std::filesystem::path path = path_of(step);
      std::error_code ec;
      std::filesystem::remove(path, ec);
      if (ec) throw io_error(path, "remove", ec);
      checkpoints.erase(step);
    }
  }
};

checkpoint_manager::checkpoint_manager(std::filesystem::path folder, checkpoint_manager_options options) {
  if (options.save_interval_steps < 1)
    throw std::invalid_argument("ckpt: checkpoint_manager: save_interval_steps must be at least 1, not " +
                                std::to_string(options.save_interval_steps));
  if (options.keep_every_n_steps < 0)
    throw std::invalid_argument("ckpt: checkpoint_manager: keep_every_n_steps must not be negative");
  if (options.keep_best > 0 && options.best_metric.empty())
    throw std::invalid_argument("ckpt: checkpoint_manager: keep_best needs a best_metric name");
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) throw io_error(folder, "create the folder", ec);
  impl_ = std::make_unique<impl>(std::move(folder), std::move(options));
  impl_->lock();
  impl_->scan();
}

checkpoint_manager::~checkpoint_manager() = default;
checkpoint_manager::checkpoint_manager(checkpoint_manager&& other) noexcept = default;
checkpoint_manager& checkpoint_manager::operator=(checkpoint_manager&& other) noexcept = default;

const std::filesystem::path& checkpoint_manager::folder() const noexcept { return impl_->folder; }

const checkpoint_manager_options& checkpoint_manager::options() const noexcept { return impl_->options; }

std::filesystem::path checkpoint_manager::path_of(std::int64_t step) const { return impl_->path_of(step); }

bool checkpoint_manager::should_save(std::int64_t step) const noexcept {
  return step % impl_->options.save_interval_steps == 0;
}

bool checkpoint_manager::save(std::int64_t step, const checkpoint& t, const metadata_map& metadata, bool force) {
  impl_->settle();
  std::optional<checkpoint> prepared = impl_->prepare(step, t, metadata, force);
  if (!prepared) return false;
  impl_->write(step, *prepared);
  return true;
}

bool checkpoint_manager::save_async(std::int64_t step, const checkpoint& t, const metadata_map& metadata,
                                    bool force) {
  impl_->settle();
  std::optional<checkpoint> prepared = impl_->prepare(step, t, metadata, force);
  if (!prepared) return false;
  // The worker owns the only access to the manager's state until settle() joins it: every
  // member function that reads the state settles first.
  impl_->worker = std::thread([state = impl_.get(), step, snapshot = std::move(*prepared)] {
    try {
      state->write(step, snapshot);
    } catch (...) {
      state->error = std::current_exception();
    }
  });
  return true;
}

void checkpoint_manager::wait() { impl_->settle(); }

std::vector<std::int64_t> checkpoint_manager::steps() {
  impl_->settle();
  std::vector<std::int64_t> out;
  out.reserve(impl_->checkpoints.size());
  for (const auto& [step, metric] : impl_->checkpoints) out.push_back(step);
  return out;
}

std::optional<std::int64_t> checkpoint_manager::latest_step() {
  impl_->settle();
  if (impl_->checkpoints.empty()) return std::nullopt;
  return impl_->checkpoints.rbegin()->first;
}

checkpoint checkpoint_manager::load(std::int64_t step) {
  impl_->settle();
  if (!impl_->checkpoints.contains(step))
    throw std::invalid_argument("ckpt: checkpoint_manager: no checkpoint for step " + std::to_string(step) +
                                " in '" + impl_->folder.string() + "'");
  return ckpt::load(impl_->path_of(step));
}

std::optional<checkpoint> checkpoint_manager::load_latest() {
  const std::optional<std::int64_t> step = latest_step();
  if (!step) return std::nullopt;
  return load(*step);
}

}  // namespace ckpt
