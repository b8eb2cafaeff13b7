#pragma once
// The one way the compiled parts split work between threads: one core does not use all of the
// memory bandwidth (CHANGELOG.md, "Performance history", "Notes from the code"), so large copies and transposes run
// in parts, the first on the calling thread and the others on helpers started for the call.

#include <algorithm>
#include <cstddef>
#include <exception>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace ckpt::detail {

// The machine's hardware threads (at least one), asked once: glibc answers
// std::thread::hardware_concurrency() by reading sysfs on each call.
inline std::size_t hardware_threads() noexcept {
  static const std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
  return threads;
}

// Whether this thread is running a part of a run_in_parallel call: the calls made from a part run
// all their parts on its thread, so that nested splits do not start more threads than cores.
inline thread_local bool in_parallel_part = false;

// Calls part(k, n) once for every k in [0, n): part 0 on this thread, the others on helper
// threads, all finished when it returns. `n` is `parts`, or 1 on a machine with one hardware
// thread or within a part of another call. A helper that cannot be started leaves its parts to
// this thread. Rethrows the first exception a part threw, once every part has finished.
template <class Part>
void run_in_parallel(std::size_t parts, const Part& part) {
  if (parts <= 1 || in_parallel_part || hardware_threads() < 2) return part(0, 1);
  const std::size_t n = parts;
  // Marks this thread as running a part while one runs.
  struct part_scope {
    bool outer = in_parallel_part;
    part_scope() noexcept { in_parallel_part = true; }
    ~part_scope() { in_parallel_part = outer; }
    part_scope(const part_scope&) = delete;
    part_scope& operator=(const part_scope&) = delete;
  };
  std::vector<std::exception_ptr> errors;
  std::vector<std::jthread> helpers;  // declared after `errors`: joined before it goes
  try {
    errors.resize(n);
    helpers.reserve(n - 1);
  } catch (const std::bad_alloc&) {
    for (std::size_t k = 0; k < n; ++k) part(k, n);  // no room for helpers: all here
    return;
  }
  const auto run = [&](std::size_t k) {
    const part_scope scope;
    try {
      part(k, n);
    } catch (...) {
      errors[k] = std::current_exception();
    }
  };
  std::size_t started = 1;
  try {
    for (; started < n; ++started) helpers.emplace_back(run, started);
  } catch (const std::system_error&) {
    // No more threads to be had: the remaining parts run here.
  } catch (const std::bad_alloc&) {
    // Likewise.
  }
  run(0);
  for (std::size_t k = started; k < n; ++k) run(k);
  helpers.clear();  // joins them
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
}

}  // namespace ckpt::detail
