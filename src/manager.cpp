#include <ckpt/detail/io_hooks.hpp>
#include <ckpt/file.hpp>
#include <ckpt/manager.hpp>
#include <ckpt/snapshot.hpp>

#include "manager_common.hpp"
#include "posix_file.hpp"

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
#include <unistd.h>

namespace ckpt {

namespace {

constexpr std::string_view file_prefix = "ckpt-";
constexpr std::string_view file_suffix = ".safetensors";
constexpr std::string_view lock_name = ".ckpt-manager.lock";

using detail::last_error;

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

}  // namespace

struct checkpoint_manager::impl {
  std::filesystem::path folder;
  checkpoint_manager_options options;
  int lock_fd = -1;
  // Every checkpoint of ours in the folder, with its keep-best metric if it has one.
  std::map<std::int64_t, std::optional<double>> checkpoints;
  std::thread worker;
  std::exception_ptr error;
  // Buffers of the snapshots of live sections for save_async, reused from save to save.
  snapshot_arena arena;

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

  void lock() { lock_fd = detail::lock_exclusively(folder, folder / lock_name); }

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
    // Only the headers are needed: verifying digests here would read every checkpoint whole.
    if (options.keep_best > 0)
      for (auto& [step, metric] : checkpoints)
        metric = metric_of(ckpt::load(path_of(step), {.verify_digest = false}).metadata());
  }

  [[nodiscard]] std::optional<double> metric_of(const metadata_map& metadata) const {
    if (options.keep_best == 0) return std::nullopt;
    const auto it = metadata.find(options.best_metric);
    if (it == metadata.end()) return std::nullopt;
    return detail::parse_metric(it->second);
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
      if (it != metadata.end() && !detail::parse_metric(it->second))
        throw std::invalid_argument("ckpt: checkpoint_manager: the metric '" + options.best_metric +
                                    "' = '" + it->second + "' is not a number");
    }
    if (!force && step % options.save_interval_steps != 0) return std::nullopt;
    metadata_map merged = t.metadata();
    for (const auto& [key, value] : metadata) merged.insert_or_assign(key, value);
    merged.insert_or_assign("step", std::to_string(step));
    merged.insert_or_assign("wall_time", detail::wall_time_now());
    return t.with_metadata(std::move(merged));
  }

  void write(std::int64_t step, const checkpoint& t) {
    before_write();
    ckpt::save(path_of(step), t, save_options{.digest = options.digest});
    written(step, t.metadata());
  }

  // Finishes the retention of a save that a crash interrupted between its rename and its
  // deletions, before adding a file. Otherwise every such crash would leave one checkpoint more
  // (the crash test saw 5 with max_to_keep = 3); with it, the folder never holds more than one
  // checkpoint beyond what the rules keep. It deletes only what the retention after this save
  // would delete too, so without such a crash (or stricter options than the last run's) it
  // deletes nothing.
  void before_write() { retain(); }

  // Records `step`'s new file and applies the retention rules.
  void written(std::int64_t step, const metadata_map& metadata) {
    checkpoints.insert_or_assign(step, metric_of(metadata));
    retain();
  }

  void retain() {
    for (std::int64_t step : detail::steps_to_drop(checkpoints, options)) {
      // Only after the new checkpoint is durable (save fsyncs it and the folder), so a crash
      // leaves at worst an old checkpoint too many. The unlink is not fsynced: if power loss
      // undoes it, the next manager lists the old file again and the next save drops it.
      const std::filesystem::path path = path_of(step);
      if (detail::hooks().unlink(path.c_str()) != 0 && errno != ENOENT)
        throw io_error(path, "remove", last_error());
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

bool checkpoint_manager::save(std::int64_t step, std::initializer_list<section> sections,
                              const metadata_map& metadata, bool force) {
  impl_->settle();
  // The metadata the file gets, and the argument checks, without a snapshot: the leaves are
  // written straight from where they live.
  const std::optional<checkpoint> prepared = impl_->prepare(step, checkpoint{}, metadata, force);
  if (!prepared) return false;
  impl_->before_write();
  ckpt::save(impl_->path_of(step), sections, prepared->metadata(), save_options{.digest = impl_->options.digest});
  impl_->written(step, prepared->metadata());
  return true;
}

bool checkpoint_manager::save_async(std::int64_t step, std::initializer_list<section> sections,
                                    const metadata_map& metadata, bool force) {
  // Settling first also frees the previous snapshot, whose buffer this one then reuses.
  impl_->settle();
  // Check the arguments before copying anything, so that a skipped or refused step costs nothing.
  if (!impl_->prepare(step, checkpoint{}, metadata, force)) return false;
  return save_async(step, impl_->arena.snapshot(sections), metadata, force);
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

checkpoint checkpoint_manager::load(std::int64_t step, const load_options& options) {
  impl_->settle();
  if (!impl_->checkpoints.contains(step))
    throw std::invalid_argument("ckpt: checkpoint_manager: no checkpoint for step " + std::to_string(step) +
                                " in '" + impl_->folder.string() + "'");
  return ckpt::load(impl_->path_of(step), options);
}

std::optional<checkpoint> checkpoint_manager::load_latest(const load_options& options) {
  const std::optional<std::int64_t> step = latest_step();
  if (!step) return std::nullopt;
  return load(*step, options);
}

std::vector<std::int64_t> list_steps(const std::filesystem::path& folder) {
  std::error_code ec;
  std::filesystem::directory_iterator it(folder, ec);
  if (ec) throw io_error(folder, "list", ec);
  std::vector<std::int64_t> steps;
  for (; it != std::filesystem::directory_iterator(); it.increment(ec))
    if (const auto step = step_of(it->path().filename().string())) steps.push_back(*step);
  if (ec) throw io_error(folder, "list", ec);
  std::ranges::sort(steps);
  return steps;
}

std::filesystem::path checkpoint_path(const std::filesystem::path& folder, std::int64_t step) {
  if (step < 0) throw std::invalid_argument("ckpt: checkpoint_path: negative step " + std::to_string(step));
  return folder / file_name_of(step);
}

}  // namespace ckpt
