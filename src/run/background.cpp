// A manager's background save (src/run/background.hpp).
#include "background.hpp"

#include "io/io_hooks.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iostream>
#include <utility>

namespace ckpt::detail {

background_write::~background_write() {
  if (worker_.joinable()) worker_.join();
}

void background_write::start(std::function<void()> job) {
  error_ = nullptr;
  job_nice_ = nice_;
  running_.store(true);
  // The job owns what it writes; the caller touches none of it until join().
  worker_ = std::thread([this, job = std::move(job)] {
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();
    }
    running_.store(false);
  });
  pending_ = true;
}

void background_write::finish(std::exception_ptr error) noexcept {
  error_ = std::move(error);
  pending_ = true;
}

void background_write::yield() const noexcept {
  // Linux takes a thread's id where POSIX says a process: the niceness of this thread alone.
  const auto self = static_cast<id_t>(::gettid());
  // Never above the thread's own priority (a process that runs at nice 10 writes at 10 or more).
  errno = 0;
  const int own = ::getpriority(PRIO_PROCESS, self);
  const int nice = errno == 0 ? std::max(own, job_nice_) : job_nice_;
  static_cast<void>(hooks().setpriority(PRIO_PROCESS, self, nice));
}

std::exception_ptr background_write::join() noexcept {
  if (worker_.joinable()) {
    nice_ = running() ? nice_ / 2 : std::min(tuning::writer_nice, 2 * nice_ + 1);
    worker_.join();
  }
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

}  // namespace ckpt::detail
