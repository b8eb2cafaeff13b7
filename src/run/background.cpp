// A manager's background save (src/run/background.hpp).
#include "background.hpp"

#include "base/tuning.hpp"
#include "io/io_hooks.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <iostream>
#include <utility>

namespace ckpt::detail {

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

}  // namespace ckpt::detail
