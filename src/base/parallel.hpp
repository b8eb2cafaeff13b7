#pragma once
// The one way the compiled parts split work between threads: one core does not use all of the
// memory bandwidth (CHANGELOG.md, "Performance history", "Notes from the code"), so large copies,
// transposes and adam::update's leaves run in chunks, the first on the calling thread and the
// others on it and on the process's pool of threads (src/base/parallel.cpp).

#include <concepts>
#include <cstddef>

namespace ckpt::detail {

// The hardware threads this process may run on: the CPUs of its affinity mask
// (sched_getaffinity), so that processes bound to some of the cores (MPI ranks, taskset) do not
// run more threads than they have; at least one. Asked once.
[[nodiscard]] std::size_t usable_threads() noexcept;

// A job of chunks, type-erased: `run(context, k)` does chunk k.
struct chunk_job {
  const void* context;
  void (*run)(const void* context, std::size_t chunk);
};

// Runs the chunks [0, count), each once: chunk 0 on this thread, the others on this thread and on
// up to `threads - 1` threads of the process's pool, handed out in the order of their index as
// threads take them (fewer where the pool has fewer: usable_threads() - 1 at most, started at
// their first use and kept). Returns once every chunk has run; rethrows the first exception a
// chunk threw, the other chunks having run. Within a chunk, on any thread, a call runs all its
// chunks on that thread: nested splits start no more threads than the outer one.
void parallel_for(std::size_t count, std::size_t threads, chunk_job job);

template <class F>
  requires std::invocable<const F&, std::size_t>
void parallel_for(std::size_t count, std::size_t threads, const F& chunk) {
  parallel_for(count, threads,
               chunk_job{&chunk, [](const void* context, std::size_t k) { (*static_cast<const F*>(context))(k); }});
}

// Whether this thread is running a chunk of a parallel_for call (where a nested call runs inline).
[[nodiscard]] bool in_parallel_chunk() noexcept;

// Calls part(k, n) once for every k in [0, n): part 0 on this thread, the others on this thread
// and the pool's, all finished when it returns (parallel_for). `n` is `parts`, or 1 on a machine
// (or an affinity mask) of one hardware thread or within a chunk of another call. Rethrows the
// first exception a part threw, once every part has finished.
template <class Part>
void run_in_parallel(std::size_t parts, const Part& part) {
  if (parts <= 1 || in_parallel_chunk() || usable_threads() < 2) return part(0, 1);
  parallel_for(parts, parts, [&](std::size_t k) { part(k, parts); });
}

}  // namespace ckpt::detail
