#pragma once
// A manager's background save: at most one write on a thread of its own, whose outcome is handed
// over once, at the lowest priority once what the loop may wait for is done.

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
  // Waits for the write; its error, or null. The write is no longer pending afterwards.
  std::exception_ptr join() noexcept;
  // Called by a job on its thread once what the loop may wait for is done (its snapshot's
  // copies): the rest of the write runs at the lowest priority (tuning::writer_nice), in the time
  // the training threads leave idle. Where the system refuses, the job goes on as it was.
  static void yield() noexcept;

 private:
  std::thread worker_;
  std::exception_ptr error_;
  bool pending_ = false;
};

// Writes "ckpt: <who>: a background save to '<folder>' failed and nobody called wait(): <what>"
// to stderr: what a destructor does with an error it cannot throw.
void report_uncollected(std::string_view who, const std::filesystem::path& folder, const std::exception_ptr& error) noexcept;

}  // namespace ckpt::detail
