#pragma once
// A manager's background save: at most one write on a thread of its own, whose outcome is handed
// over once, at a low priority once what the loop may wait for is done: the lowest while the writes
// end before the next call, a higher one after a write someone had to wait for.

#include "base/tuning.hpp"

#include <atomic>
#include <exception>
#include <filesystem>
#include <functional>
#include <string_view>
#include <thread>

namespace ckpt::detail {

// At most one write on a background thread, whose error is handed over once.
class background_write {
 public:
  background_write() = default;
  background_write(const background_write&) = delete;
  background_write& operator=(const background_write&) = delete;
  // Waits for the write (its error is the owner's to collect first: see `join`).
  ~background_write();

  // Runs `job` on a new thread. There must be no write in flight.
  // \throws std::system_error if the thread cannot be started.
  void start(std::function<void()> job);
  // Records a write that ended at once, with `error` (null: nothing to write), for `join`.
  void finish(std::exception_ptr error) noexcept;
  // True between `start` (or `finish`) and `join`.
  [[nodiscard]] bool pending() const noexcept { return pending_; }
  // Waits for the write; its error, or null. The write is no longer pending afterwards. A write
  // still running when it is joined (the caller waits for it) makes the next ones run at a higher
  // priority, one that had ended a lower one again (`niceness`).
  std::exception_ptr join() noexcept;
  // Called by a job on its thread once what the loop may wait for is done (its snapshot's
  // copies): the rest of the write runs at the niceness chosen when the job started, never above
  // the thread's own priority, in the time the training threads leave idle. Where the system
  // refuses, the job goes on as it was.
  void yield() const noexcept;
  // The niceness of the next job's write: tuning::writer_nice (19, the lowest priority) while the
  // writes end before they are joined. Where the training keeps every core busy, a write at
  // nice 19 gets about 1.5% of a core and may not end within a save interval: then the caller
  // waits, with the cores idle, for the rest of it. Each write joined while it ran halves the
  // niceness (19, 9, 4, 2, 1, 0: by the scheduler's weights, a share of a core of about 12%, 29%,
  // 40%, 45%, 50% against one training thread); each that had ended raises it again (0, 1, 3, 7,
  // 15, 19).
  [[nodiscard]] int niceness() const noexcept { return nice_; }
  // True from `start` until its job has returned.
  [[nodiscard]] bool running() const noexcept { return running_.load(); }

 private:
  std::thread worker_;
  std::exception_ptr error_;
  bool pending_ = false;
  std::atomic<bool> running_{false};
  int nice_ = tuning::writer_nice;
  int job_nice_ = tuning::writer_nice;  // the running job's: set by start, before its thread
};

// Writes "ckpt: <who>: a background save to '<folder>' failed and nobody called wait(): <what>"
// to stderr: what a destructor does with an error it cannot throw.
void report_uncollected(std::string_view who, const std::filesystem::path& folder, const std::exception_ptr& error) noexcept;

}  // namespace ckpt::detail
