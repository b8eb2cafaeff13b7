// What a training loop sees of its checkpoints: a loop that keeps every core busy (the gradients
// computed on every hardware thread, then `ckpt::adam::update` with its default options, on every
// core too), with and without a `checkpoint_manager::save_async` of
// `ckpt::training_state(params, state)` every few seconds (digest on, fsync), in pairs of runs
// whose order alternates (without, with; then with, without), and:
//   - the update against the same update cut by hand into one part per core, each part with its
//     own Adam state, on its own thread (the floor of that pattern), and on one thread;
//   - the throughput lost, per save interval (the median of the pairs' losses);
//   - the loop's blocking per save (the `save_async` call plus what the next update takes beyond
//     an update without a save), against a memcpy of the whole state;
//   - the same with the leaves copied before the call returns (sections typed by hand, which a
//     save copies whole), side by side (`--eager=0` leaves them out);
//   - `--normal-priority=1`: the same lazy saves with the writer left at the loop's priority (the
//     library lowers it once the copies are made: tuning::writer_nice), side by side;
//   - the machine's costs (ckpt_machine's, `--machine=0` leaves them out), the writer's CPU per GiB
//     by stage (copy, hash, the copy that hashes as it goes, the transposing copy, write into the
//     page cache, fsync, direct write), a whole background save's CPU per GiB with nothing
//     training, for both storage orders, and the CPU a save costs the whole process in the loop;
//   - `--update=one`: the loop with the update on one thread (adam::threads = 1), as before it ran
//     on every core;
//   - `--first`: only the blocking of a fresh process's first `save_async` against a memcpy of
//     the state into fresh memory (run it in several processes: bench/loop_run.sh).
//
// ckpt_bench_loop --dir=DIR [--model-mib=256] [--order=col|row] [--intervals=5] [--pairs=10]
//                 [--seconds=20] [--batch=32] [--eager=1] [--normal-priority=0] [--update=default|one]
//                 [--split=1 (up to 256 MiB)] [--machine=1] [--first]

#include "base/digest.hpp"  // the copy that hashes as it goes, as a snapshot's copy does (private: src/)
#include "io/io_hooks.hpp"  // the writer's priority, left as it was for --normal-priority (private: src/)
#include "common.hpp"
#include "machine.hpp"

#include <ckpt/detail/transpose.hpp>

#include <xxhash.h>

#include <sys/resource.h>

#include <barrier>
#include <functional>
#include <thread>

namespace {

using namespace bench;

// The model: `layers` F32 matrices of 1024 x 1024 (4 MiB each), column-major as Eigen's default
// (the file holds them in C order: the snapshot transposes them) or row-major (--order=row).
template <class M>
struct model {
  std::vector<M> layers;
};

constexpr long side = 1024;

template <class M>
model<M> make_model(long layers, std::uint32_t seed) {
  model<M> m;
  m.layers.reserve(static_cast<std::size_t>(layers));
  for (long i = 0; i < layers; ++i) {
    m.layers.emplace_back(side, side);
    fill(m.layers.back().data(), static_cast<std::size_t>(side * side), seed + static_cast<std::uint32_t>(i));
  }
  return m;
}

double thread_cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double process_cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

std::vector<long> list_of(const std::string& text) {
  std::vector<long> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stol(item));
  return out;
}

// The gradients of every layer computed on `threads` threads (a pool that lives as long as the
// trainer), then one Adam update: `opt`'s (every core, or one thread with --update=one), or the
// same update cut by hand into one part per thread of the pool, each part with its own state
// (update_split).
template <class M>
class trainer {
 public:
  trainer(long layers, long batch, std::size_t threads, std::size_t update_threads)
      : opt{.lr = 1e-4, .threads = update_threads}, params(make_model<M>(layers, 1)), grads(make_model<M>(layers, 7)),
        state(opt.init(params)), x_(Eigen::MatrixXf::Random(side, batch)), threads_(threads),
        start_(static_cast<std::ptrdiff_t>(threads)), done_(static_cast<std::ptrdiff_t>(threads)) {
    for (std::size_t k = 1; k < threads_; ++k) pool_.emplace_back([this, k] { work(k); });
  }
  trainer(const trainer&) = delete;
  trainer& operator=(const trainer&) = delete;
  ~trainer() {
    stop_ = true;
    start_.arrive_and_wait();
    for (auto& t : pool_) t.join();
  }

  // One step; returns the seconds of its update.
  double step() {
    on_pool([this](std::size_t k) { gradients(k); });
    const double t0 = now_s();
    opt.update(params, grads, state);
    return now_s() - t0;
  }

  // The update cut by hand: part k (its own parameters, gradients and state, 1/threads of the
  // layers) updated on thread k of the pool, one thread each (made at the first call).
  double update_split() {
    if (parts_.empty())
      for (std::size_t k = 0; k < threads_; ++k) {
        const long layers = static_cast<long>((params.layers.size() * (k + 1)) / threads_ - (params.layers.size() * k) / threads_);
        part p{make_model<M>(layers, 100 + static_cast<std::uint32_t>(k)), make_model<M>(layers, 200 + static_cast<std::uint32_t>(k)), {}};
        p.state = one_thread.init(p.params);
        parts_.push_back(std::move(p));
      }
    const double t0 = now_s();
    on_pool([this](std::size_t k) { one_thread.update(parts_[k].params, parts_[k].grads, parts_[k].state); });
    return now_s() - t0;
  }
  // The update on one thread.
  double update_one() {
    const double t0 = now_s();
    one_thread.update(params, grads, state);
    return now_s() - t0;
  }
  // The update with `opt`'s options.
  double update() {
    const double t0 = now_s();
    opt.update(params, grads, state);
    return now_s() - t0;
  }
  [[nodiscard]] std::size_t threads() const noexcept { return threads_; }

  ckpt::adam opt;
  ckpt::adam one_thread{.lr = 1e-4, .threads = 1};
  model<M> params, grads;
  ckpt::adam_state<model<M>> state;

 private:
  struct part {
    model<M> params, grads;
    ckpt::adam_state<model<M>> state;
  };

  // Runs job(k) on every thread k of the pool (0: this one) and returns once all are done.
  void on_pool(std::function<void(std::size_t)> job) {
    job_ = std::move(job);
    start_.arrive_and_wait();
    job_(0);
    done_.arrive_and_wait();
  }
  void gradients(std::size_t k) {
    const float scale = 1.0f / static_cast<float>(x_.cols());
    for (std::size_t i = k; i < params.layers.size(); i += threads_) {
      // A linear layer's weight gradient for a batch: (W·X)·Xᵀ, the FLOPs of a forward and a backward.
      grads.layers[i].noalias() = (params.layers[i] * x_) * x_.transpose() * scale;
    }
  }
  void work(std::size_t k) {
    for (;;) {
      start_.arrive_and_wait();
      if (stop_) return;
      job_(k);
      done_.arrive_and_wait();
    }
  }

  Eigen::MatrixXf x_;
  std::size_t threads_;
  std::barrier<> start_, done_;
  std::atomic<bool> stop_{false};
  std::function<void(std::size_t)> job_;
  std::vector<part> parts_;
  std::vector<std::thread> pool_;
};

// adam::update with the trainer's options against the same update cut by hand into one part per
// core (update_split) and against one thread, `reps` of each in rotating order: the medians.
template <class M>
void update_figures(trainer<M>& t, int reps) {
  std::vector<double> mine, split, one;
  for (int i = 0; i < reps; ++i) {
    if (i % 2 == 0) {
      mine.push_back(t.update());
      split.push_back(t.update_split());
      one.push_back(t.update_one());
    } else {
      one.push_back(t.update_one());
      split.push_back(t.update_split());
      mine.push_back(t.update());
    }
  }
  std::printf("| adam::update, %zu threads (adam::threads = %zu; 0: every usable CPU) | %s | cut by hand into %zu parts, "
              "each its own state, on its own thread | %s | ratio %.3f | on one thread %s (%.2fx) | %d of each |\n",
              t.threads(), t.opt.threads, fmt_time(median(mine)).c_str(), t.threads(), fmt_time(median(split)).c_str(),
              median(mine) / median(split), fmt_time(median(one)).c_str(), median(one) / median(split), reps);
  std::fflush(stdout);
}

// The same leaves as sections listed by hand, which a save copies whole before it returns, as
// every save did before the lazy copy (the names do not matter here).
template <class M>
std::vector<ckpt::section> eager_sections(trainer<M>& t) {
  std::vector<ckpt::section> out;
  out.emplace_back(t.params, "model");
  out.emplace_back(t.state.mu, "first_moments");
  out.emplace_back(t.state.nu, "second_moments");
  out.emplace_back(ckpt::of_int("step", t.state.step));
  return out;
}

struct run_result {
  double steps_per_s = 0;
  long steps = 0;
  std::vector<double> blocking;  // per save: the call + the next update's excess
  std::vector<double> calls;     // per save: the call alone
  double cpu_s = 0;              // the process's CPU
  long saves = 0;
};

enum class saving { none, lazy, lazy_normal_priority, eager };

// Trains for `seconds` (a multiple of `interval`), saving at the middle of every interval (none:
// never), so that each save's write runs inside the run. The last write is waited for outside the
// timing, before the next run.
template <class M>
run_result run(trainer<M>& t, ckpt::checkpoint_manager& manager, saving mode, double interval, double seconds,
               double typical_update) {
  run_result out;
  // The writer's priority change, a no-op for this run (restored when it ends, after its wait).
  ckpt::detail::io_hooks unchanged = ckpt::detail::hooks();
  if (mode == saving::lazy_normal_priority) unchanged.setpriority = [](int, id_t, int) { return 0; };
  const ckpt::detail::io_hooks_guard priority(unchanged);
  const double cpu0 = process_cpu_s();
  const double t0 = now_s();
  double next_save = t0 + interval / 2;
  long steps = 0;
  for (double now = t0; now - t0 < seconds; now = now_s()) {
    double call = 0;
    const bool saving_now = mode != saving::none && now >= next_save;
    if (saving_now) {
      const double c0 = now_s();
      const auto step = t.state.step;
      if (mode != saving::eager) manager.save_async(step, ckpt::training_state(t.params, t.state), {}, true);
      else manager.save_async(step, eager_sections(t), {}, true);
      call = now_s() - c0;
      next_save += interval;
      if (next_save < now_s()) next_save = now_s() + interval;  // a save longer than the interval
    }
    const double update = t.step();
    ++steps;
    if (saving_now) {
      out.blocking.push_back(call + std::max(0.0, update - typical_update));
      out.calls.push_back(call);
      ++out.saves;
    }
  }
  const double elapsed = now_s() - t0;
  manager.wait();
  out.steps_per_s = static_cast<double>(steps) / elapsed;
  out.steps = steps;
  out.cpu_s = process_cpu_s() - cpu0;
  return out;
}

// The seconds of a memcpy of `bytes` between touched buffers (the median of 5), on one thread.
double memcpy_s(std::size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> s;
  for (int i = 0; i < 5; ++i) {
    const double t0 = now_s();
    std::memcpy(b.data(), a.data(), bytes);
    s.push_back(now_s() - t0);
  }
  if (b[bytes / 2] != 1) throw std::runtime_error("memcpy");
  return median(s);
}

// The writer's stages, each alone on this thread: CPU seconds per GiB (and wall for fsync).
void writer_stages(const fs::path& dir, std::size_t bytes) {
  std::vector<char> src(bytes, 3), dst(bytes, 4);
  const double gib = static_cast<double>(bytes) / (1 << 30);
  const auto cpu_of = [](auto&& f) {
    const double c0 = thread_cpu_s();
    f();
    return thread_cpu_s() - c0;
  };
  const double copy = cpu_of([&] { std::memcpy(dst.data(), src.data(), bytes); });
  std::uint64_t h = 0;
  const double hash = cpu_of([&] { h = XXH3_64bits(dst.data(), bytes); });
  // What a snapshot's copy of a contiguous entry does: each 1 MiB chunk hashed, then copied
  // around the caches (one pass); and the transposing copy of column-major leaves (1024 x 1024
  // F32 each, as the model's), into the same memory.
  constexpr std::size_t digest_chunk = ckpt::detail::file_digest_chunk_bytes;
  const double copy_hash = cpu_of([&] {
    for (std::size_t at = 0; at < bytes; at += digest_chunk)
      h ^= ckpt::detail::xxh3_copy(reinterpret_cast<std::byte*>(dst.data()) + at,
                                   std::as_bytes(std::span(src.data() + at, std::min(digest_chunk, bytes - at))));
  });
  constexpr std::size_t matrix = side * side * sizeof(float);
  const double transposed = cpu_of([&] {
    for (std::size_t at = 0; at + matrix <= bytes; at += matrix)
      ckpt::detail::transpose(reinterpret_cast<const std::byte*>(src.data() + at), side, reinterpret_cast<std::byte*>(dst.data() + at),
                              side, side, side, sizeof(float));
  }) * static_cast<double>(bytes) / static_cast<double>(bytes / matrix * matrix);
  const fs::path file = dir / "stages.bin";
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) die("open " + file.string());
  const double write = cpu_of([&] { write_all(fd, dst.data(), bytes); });
  const double w0 = now_s();
  const double sync = cpu_of([&] {
    if (::fsync(fd) != 0) die("fsync");
  });
  const double sync_wall = now_s() - w0;
  ::close(fd);
  fs::remove(file);
  // The same bytes written with O_DIRECT from an aligned buffer: no copy into the page cache.
  constexpr std::size_t align = 4096;
  const std::size_t direct_bytes = bytes / align * align;
  std::unique_ptr<char, decltype(&std::free)> aligned_buffer(static_cast<char*>(std::aligned_alloc(align, direct_bytes)),
                                                           &std::free);
  std::memcpy(aligned_buffer.get(), dst.data(), direct_bytes);
  const int direct = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
  if (direct < 0) die("open O_DIRECT " + file.string());
  const double d0 = now_s();
  const double direct_cpu = cpu_of([&] {
    constexpr std::size_t chunk = std::size_t{8} << 20;
    for (std::size_t done = 0; done < direct_bytes; done += chunk) {
      const std::size_t n = std::min(chunk, direct_bytes - done);
      if (::pwrite(direct, aligned_buffer.get() + done, n, static_cast<off_t>(done)) != static_cast<ssize_t>(n))
        die("pwrite O_DIRECT");
    }
    if (::fsync(direct) != 0) die("fsync");
  });
  const double direct_wall = now_s() - d0;
  ::close(direct);
  fs::remove(file);
  std::printf("| writer CPU per GiB, each stage alone | copy %.3f s | hash (XXH3) %.3f s | hash, then copy around the caches "
              "(a snapshot's contiguous chunk) %.3f s | transposing copy (1024x1024 F32, one thread) %.3f s | write into the page "
              "cache %.3f s | fsync %.3f s CPU, %.3f s wall | O_DIRECT write + fsync, 8 MiB a call: %.3f s CPU, %.3f s wall | "
              "(hash %016llx) |\n",
              copy / gib, hash / gib, copy_hash / gib, transposed / gib, write / gib, sync / gib, sync_wall / gib,
              direct_cpu / gib, direct_wall / gib, static_cast<unsigned long long>(h));
}

// The CPU of a whole background save of the training state `params`, `state`, nothing training
// meanwhile: the process's CPU from the call to the end of its write, per GiB (the median of 5
// after a first that fills the arena), and its wall time.
template <class P>
void save_alone(P& params, ckpt::adam_state<P>& state, const fs::path& dir, std::size_t state_bytes,
                const std::string& what) {
  fs::remove_all(dir);
  std::vector<double> cpu, wall;
  {
    ckpt::checkpoint_manager manager(dir, {.max_to_keep = 2});
    for (int i = 0; i < 6; ++i) {
      const double c0 = process_cpu_s(), w0 = now_s();
      manager.save_async(i, ckpt::training_state(params, state), {}, true);
      manager.wait();
      if (i == 0) continue;
      cpu.push_back(process_cpu_s() - c0);
      wall.push_back(now_s() - w0);
    }
  }
  fs::remove_all(dir);
  const double gib = static_cast<double>(state_bytes) / (1 << 30);
  std::printf("| a background save of the state alone (copies, hash, write, fsync; nothing training), %s, per GiB | "
              "CPU %.3f s | wall %.3f s |\n", what.c_str(), median(cpu) / gib, median(wall) / gib);
  std::fflush(stdout);
}

// The same of a model of the other storage order, of as many layers (made for it, then freed).
template <class M>
void save_alone_other_order(long layers, const fs::path& dir, std::size_t state_bytes) {
  using other = std::conditional_t<M::IsRowMajor, Eigen::MatrixXf, row_matrix>;
  model<other> params = make_model<other>(layers, 3);
  const ckpt::adam opt;
  ckpt::adam_state<model<other>> state = opt.init(params);
  opt.update(params, params, state);
  save_alone(params, state, dir, state_bytes, M::IsRowMajor ? "column-major" : "row-major");
}

std::string pct(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%+.2f%%", x * 100);
  return text;
}

template <class M>
void first_save(const fs::path& dir, long layers) {
  // A fresh process: the manager's arena is empty, so the first save_async copies into fresh memory.
  trainer<M> t(layers, 32, std::max(1u, std::thread::hardware_concurrency()), 0);
  const std::size_t state_bytes = 3 * static_cast<std::size_t>(layers) * side * side * sizeof(float);
  std::vector<double> updates;
  for (int i = 0; i < 3; ++i) updates.push_back(t.step());
  fs::remove_all(dir);
  ckpt::checkpoint_manager manager(dir);
  const double c0 = now_s();
  manager.save_async(t.state.step, ckpt::training_state(t.params, t.state), {}, true);
  const double call = now_s() - c0;
  // The update that follows copies what the background has not yet.
  const double blocking = call + std::max(0.0, t.step() - median(updates));
  manager.wait();
  // The baseline: a memcpy of the state into fresh memory.
  std::vector<char> src(state_bytes, 5);
  const double m0 = now_s();
  auto fresh = std::make_unique_for_overwrite<char[]>(state_bytes);
  std::memcpy(fresh.get(), src.data(), state_bytes);
  const double copy = now_s() - m0;
  std::printf("first save_async: blocking %s (the call %s), a memcpy of the state into fresh memory %s: %.2fx\n",
              fmt_time(blocking).c_str(), fmt_time(call).c_str(), fmt_time(copy).c_str(), blocking / copy);
}

template <class M>
int measure(const args& a) {
  const fs::path dir = a.str("dir", "");
  if (dir.empty()) throw std::invalid_argument("--dir=DIR is required");
  const long model_mib = a.num("model-mib", 256);
  const long layers = std::max(1L, model_mib / 4);
  const char* order = M::IsRowMajor ? "row-major" : "column-major";
  if (a.num("first", 0) != 0) {
    fs::create_directories(dir);
    first_save<M>(dir / "first", layers);
    fs::remove_all(dir / "first");
    return 0;
  }
  const std::vector<long> intervals = list_of(a.str("intervals", "5"));
  const long pairs = a.num("pairs", 10);
  const double seconds = a.real("seconds", 20);
  const long batch = a.num("batch", 32);
  const bool eager = a.num("eager", 1) != 0;
  const bool normal = a.num("normal-priority", 0) != 0;
  const std::string update = a.str("update", "default");
  if (update != "default" && update != "one") throw std::invalid_argument("--update=default or --update=one");
  const bool split = a.num("split", model_mib <= 256 ? 1 : 0) != 0;
  const std::size_t threads = std::max(1u, std::thread::hardware_concurrency());
  fs::create_directories(dir);
  if (a.num("machine", 1) != 0) {
    bench::print_machine(dir, std::size_t{256} << 20, 3, false);
    std::printf("\n");
  }

  trainer<M> t(layers, batch, threads, update == "one" ? 1 : 0);
  const std::size_t state_bytes = 3 * static_cast<std::size_t>(layers) * side * side * sizeof(float);
  const double state_mib = static_cast<double>(state_bytes) / (1 << 20);
  const double copy = memcpy_s(state_bytes);

  // A few steps to warm up, and the update's usual time.
  std::vector<double> updates;
  const double s0 = now_s();
  for (int i = 0; i < 5; ++i) updates.push_back(t.step());
  const double step_s = (now_s() - s0) / 5;
  const double typical_update = median(updates);

  std::printf("# ckpt_bench_loop: model %ld MiB (%ld x 1024x1024 F32, %s), state %.0f MiB with Adam's moments; "
              "%zu training threads; adam::update on %s; batch %ld; step %.3f s (update %.3f s); memcpy of the state %.3f s "
              "(%.2f GB/s, one thread)\n",
              model_mib, layers, order, state_mib, threads, update == "one" ? "one thread" : "every usable CPU (its default)",
              batch, step_s, typical_update, copy, static_cast<double>(state_bytes) / copy / 1e9);
  std::fflush(stdout);
  if (split) update_figures(t, 15);
  writer_stages(dir, state_bytes);

  save_alone(t.params, t.state, dir / "alone", state_bytes, order);
  save_alone_other_order<M>(layers, dir / "alone", state_bytes);

  fs::remove_all(dir / "run");  // a run an interrupted harness left
  ckpt::checkpoint_manager manager(dir / "run", {.max_to_keep = 2});
  // The arena's first fill, untimed: the runs show later saves.
  manager.save_async(t.state.step, ckpt::training_state(t.params, t.state), {}, true);
  t.step();
  manager.wait();

  std::printf("\n| interval | throughput loss (median of %ld pairs) | pairs | blocking per save (median) | / memcpy | "
              "of which the call | CPU per save | saves |\n|---|---|---|---|---|---|---|---|\n",
              pairs);
  // The runs of one way of saving at one interval, against their pairs' runs without saves.
  struct tally {
    std::vector<double> losses, blocking, calls, cpu;
    long saves = 0;
    void add(const run_result& r, const run_result& base) {
      losses.push_back(1 - r.steps_per_s / base.steps_per_s);
      blocking.insert(blocking.end(), r.blocking.begin(), r.blocking.end());
      calls.insert(calls.end(), r.calls.begin(), r.calls.end());
      // The CPU beyond what training took for the same steps: the saves' (the writer's, the copies').
      const double base_cpu_per_step = base.cpu_s / static_cast<double>(base.steps);
      cpu.push_back((r.cpu_s - base_cpu_per_step * static_cast<double>(r.steps)) / static_cast<double>(std::max(1L, r.saves)));
      saves += r.saves;
    }
    void report(const std::string& label, double copy_s) const {
      std::string list;
      for (double l : losses) list += (list.empty() ? "" : " ") + pct(l);
      std::printf("| %s | %s | %s | %s | %.2fx | %s | %.3f s | %ld |\n", label.c_str(), pct(median(losses)).c_str(),
                  list.c_str(), fmt_time(median(blocking)).c_str(), median(blocking) / copy_s,
                  fmt_time(median(calls)).c_str(), median(cpu), saves);
      std::fflush(stdout);
    }
  };
  for (const long interval : intervals) {
    tally lazy_saves, eager_saves, normal_saves;
    for (long p = 0; p < pairs; ++p) {
      // Alternate the order inside a pair, so that a drift of the machine falls on both sides.
      run_result base, lazy, eager_run, normal_run;
      // Whole intervals, at least `seconds`.
      const double length = static_cast<double>(interval) * std::max(1.0, std::round(seconds / static_cast<double>(interval)));
      const auto one = [&](saving mode) { return run(t, manager, mode, static_cast<double>(interval), length, typical_update); };
      if (p % 2 == 0) {
        base = one(saving::none);
        lazy = one(saving::lazy);
        if (normal) normal_run = one(saving::lazy_normal_priority);
        if (eager) eager_run = one(saving::eager);
      } else {
        if (eager) eager_run = one(saving::eager);
        if (normal) normal_run = one(saving::lazy_normal_priority);
        lazy = one(saving::lazy);
        base = one(saving::none);
      }
      lazy_saves.add(lazy, base);
      if (normal) normal_saves.add(normal_run, base);
      if (eager) eager_saves.add(eager_run, base);
      log("interval " + std::to_string(interval) + " s, pair " + std::to_string(p + 1) + ": base " +
          std::to_string(base.steps_per_s) + " steps/s, lazy " + std::to_string(lazy.steps_per_s) +
          (normal ? ", lazy at normal priority " + std::to_string(normal_run.steps_per_s) : std::string()) +
          (eager ? ", eager " + std::to_string(eager_run.steps_per_s) : std::string()));
    }
    lazy_saves.report(std::to_string(interval) + " s, lazy copy (training_state)", copy);
    if (normal) normal_saves.report(std::to_string(interval) + " s, lazy copy, writer at normal priority", copy);
    if (eager) eager_saves.report(std::to_string(interval) + " s, copied in the call (sections by hand)", copy);
  }
  fs::remove_all(dir / "run");
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const args a(argc, argv);
  const std::string order = a.str("order", "col");
  if (order == "col") return measure<Eigen::MatrixXf>(a);
  if (order == "row") return measure<row_matrix>(a);
  throw std::invalid_argument("--order=col or --order=row");
} catch (const std::exception& e) {
  std::fprintf(stderr, "ckpt_bench_loop: %s\n", e.what());
  return 1;
}
