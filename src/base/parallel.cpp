// The process's pool of threads behind parallel_for and run_in_parallel (src/base/parallel.hpp).
#include "parallel.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace ckpt::detail {

std::size_t usable_threads() noexcept {
  static const std::size_t threads = [] {
    // A set large enough for the machine's CPUs (a fixed cpu_set_t holds 1024).
    const std::size_t cpus = std::max<std::size_t>(std::thread::hardware_concurrency(), CPU_SETSIZE);
    std::vector<unsigned long> mask((CPU_ALLOC_SIZE(cpus) + sizeof(unsigned long) - 1) / sizeof(unsigned long));
    auto* set = reinterpret_cast<cpu_set_t*>(mask.data());
    const std::size_t bytes = mask.size() * sizeof(unsigned long);
    if (sched_getaffinity(0, bytes, set) == 0) return std::max<std::size_t>(1, static_cast<std::size_t>(CPU_COUNT_S(bytes, set)));
    return std::max<std::size_t>(1, std::thread::hardware_concurrency());
  }();
  return threads;
}

namespace {

thread_local bool in_chunk = false;

// Marks this thread as running a chunk while one runs.
class chunk_scope {
 public:
  chunk_scope() noexcept : outer_(in_chunk) { in_chunk = true; }
  ~chunk_scope() { in_chunk = outer_; }
  chunk_scope(const chunk_scope&) = delete;
  chunk_scope& operator=(const chunk_scope&) = delete;

 private:
  bool outer_;
};

// One parallel_for call: its chunks, handed out by `next`, and what became of them. Shared by the
// caller and the workers that join it, so that the last to let go of it frees it.
struct job_state {
  chunk_job job{};
  std::size_t count = 0;
  std::size_t helpers_wanted = 0;  // workers that may join
  std::size_t helpers = 0;         // that joined (under the pool's mutex)
  std::atomic<std::size_t> next{1};  // chunk 0 is the caller's
  std::atomic<std::size_t> finished{0};
  std::mutex error_mutex;
  std::exception_ptr error;

  void run(std::size_t k) noexcept {
    try {
      job.run(job.context, k);
    } catch (...) {
      const std::lock_guard lock(error_mutex);
      if (!error) error = std::current_exception();
    }
    if (finished.fetch_add(1, std::memory_order_acq_rel) + 1 == count) finished.notify_all();
  }
  // Runs chunks until none is left to take.
  void take_chunks() noexcept {
    for (std::size_t k = next.fetch_add(1, std::memory_order_relaxed); k < count;
         k = next.fetch_add(1, std::memory_order_relaxed))
      run(k);
  }
};

// The workers wait for jobs posted by parallel_for; each job's caller works on it too, and never
// waits for a chunk no thread has taken, so a call finishes even when every worker is busy with
// other calls (or, in a forked child, when there are none). The workers are detached and the pool
// is never destroyed: they wait for work until the process ends. Workers are started by the
// first calls that need them and inherit that thread's priority and affinity.
class pool {
 public:
  pool() {
    // A child forked while a worker held the mutex would find it locked, and no workers: the
    // fork waits for the mutex, and the child starts with an empty pool.
    pthread_atfork([] { get().mutex_.lock(); }, [] { get().mutex_.unlock(); },
                   [] {
                     pool& p = get();
                     p.workers_ = 0;
                     p.jobs_.clear();
                     // The condition variable may record the parent's waiters: a fresh one.
                     new (&p.wake_) std::condition_variable;
                     p.mutex_.unlock();
                   });
  }

  static pool& get() {
    // Never destroyed (a union member has no destructor called): detached workers may still
    // wait on it while the process exits.
    union holder {
      pool value;
      holder() : value() {}
      ~holder() {}
    };
    static holder instance;
    return instance.value;
  }

  // Runs the job with up to `threads - 1` workers; `state` holds it (and nothing else yet).
  void run(const std::shared_ptr<job_state>& state, std::size_t count, std::size_t threads, chunk_job job) {
    state->job = job;
    state->count = count;
    {
      std::unique_lock lock(mutex_);
      const std::size_t wanted = std::min({threads, count, usable_threads()}) - 1;
      start_workers(wanted);
      state->helpers_wanted = std::min(wanted, workers_);
      if (state->helpers_wanted > 0) {
        jobs_.push_back(state);
        lock.unlock();
        if (state->helpers_wanted == 1) wake_.notify_one();
        else wake_.notify_all();
      }
    }
    {
      const chunk_scope scope;
      state->run(0);
      state->take_chunks();
    }
    withdraw(state.get());
    for (std::size_t done = state->finished.load(std::memory_order_acquire); done != count;
         done = state->finished.load(std::memory_order_acquire))
      state->finished.wait(done, std::memory_order_acquire);
    if (state->error) std::rethrow_exception(state->error);
  }

 private:
  // Starts workers until there are `wanted` (under the mutex); as many as can be started.
  void start_workers(std::size_t wanted) noexcept {
    while (workers_ < wanted) {
      try {
        std::thread([this] { work(); }).detach();
      } catch (const std::system_error&) {
        return;  // no more threads to be had: the callers do the chunks
      } catch (const std::bad_alloc&) {
        return;
      }
      ++workers_;
    }
  }

  // No more workers join `state` (its caller has taken its last chunk).
  void withdraw(const job_state* state) {
    const std::lock_guard lock(mutex_);
    std::erase_if(jobs_, [state](const auto& j) { return j.get() == state; });
  }

  void work() {
    const chunk_scope scope;
    for (;;) {
      std::shared_ptr<job_state> state;
      {
        std::unique_lock lock(mutex_);
        wake_.wait(lock, [this] { return !jobs_.empty(); });
        state = jobs_.front();
        if (++state->helpers >= state->helpers_wanted) jobs_.pop_front();
      }
      state->take_chunks();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<job_state>> jobs_;  // jobs that workers may still join
  std::size_t workers_ = 0;
};

}  // namespace

bool in_parallel_chunk() noexcept { return in_chunk; }

void parallel_for(std::size_t count, std::size_t threads, chunk_job job) {
  if (count == 0) return;
  std::shared_ptr<job_state> state;
  if (count > 1 && threads > 1 && !in_chunk && usable_threads() > 1) try {
      state = std::make_shared<job_state>();
    } catch (const std::bad_alloc&) {
      // No room to share the job: every chunk here.
    }
  if (!state) {
    // Every chunk here, the first exception rethrown once all have run.
    const chunk_scope scope;
    std::exception_ptr error;
    for (std::size_t k = 0; k < count; ++k) try {
        job.run(job.context, k);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    if (error) std::rethrow_exception(error);
    return;
  }
  pool::get().run(state, count, threads, job);
}

}  // namespace ckpt::detail
