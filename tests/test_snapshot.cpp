// snapshot_arena: snapshots of live structures into memory reused from one snapshot to the next,
// and the manager's saves of live sections (straight from the leaves, or through its arena); the
// large buffers given back and kept for the next of their size (src/base/memory.hpp, kept_buffers).
#include <boost/test/unit_test.hpp>

#include "base/memory.hpp"    // src/: detail::kept_buffers, detail::tuning::heap_limit (tuning.hpp)
#include "run/background.hpp"  // src/: detail::background_write, the writer's priority
#include "io/io_hooks.hpp"       // src/: the background copy held back
#include "direct_writes.hpp"  // the writes of a background save, seen
#include "support.hpp"

#include <ckpt/ckpt.hpp>

#include <Eigen/Core>
#include <unsupported/Eigen/CXX11/Tensor>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_snapshot)

namespace {

using ckpt_test::message_of;
using ckpt_test::read_bytes;
using ckpt_test::temp_dir;

struct layer {
  Eigen::MatrixXf w;  // column-major: the snapshot holds it in C order
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> r;
  Eigen::Tensor<float, 3> t;  // column-major rank 3
  float scale;
};

layer make_layer(float seed, Eigen::Index rows = 5, Eigen::Index cols = 7) {
  layer l{};
  l.w = Eigen::MatrixXf::NullaryExpr(rows, cols, [seed, cols](Eigen::Index r, Eigen::Index c) {
    return seed + static_cast<float>(r * cols + c);
  });
  l.r = l.w.cast<double>() * 2.0;
  l.t.resize(2, 3, 4);
  for (Eigen::Index i = 0; i < l.t.size(); ++i) l.t.data()[i] = seed - static_cast<float>(i);
  l.scale = seed / 2;
  return l;
}

struct big_and_small {
  Eigen::MatrixXf big;
  Eigen::MatrixXf small;
};

bool same(const layer& a, const layer& b) {
  // Element by element: Eigen's Tensor operator== is ambiguous to C++20's reversed candidates.
  const bool tensors_equal = a.t.dimensions() == b.t.dimensions() &&
                             std::equal(a.t.data(), a.t.data() + a.t.size(), b.t.data());
  return a.w == b.w && a.r == b.r && tensors_equal && a.scale == b.scale;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_snapshot_holds_what_of_params_holds) {
  const layer live = make_layer(1);
  ckpt::snapshot_arena arena;
  const ckpt::checkpoint snap = arena.snapshot({{live, "model"}, {ckpt::of_int("step", 3)}}, {{"k", "v"}});
  const ckpt::checkpoint expected = ckpt::concat({ckpt::of_params(live, "model"), ckpt::of_int("step", 3)});
  BOOST_TEST(snap.names() == expected.names(), boost::test_tools::per_element());
  for (const auto& [name, x] : expected) BOOST_TEST((snap.get(name) == x), name);
  BOOST_TEST((snap.metadata() == ckpt::metadata_map{{"k", "v"}}));
  BOOST_TEST(same(ckpt::to_params(snap, make_layer(0), {.prefix = "model"}), live));
  // The sections as a range built at run time: the same snapshot.
  const std::vector<ckpt::section> sections{{live, "model"}, {ckpt::of_int("step", 3)}};
  const ckpt::checkpoint from_vector = arena.snapshot(sections, {{"k", "v"}});
  BOOST_TEST(from_vector.names() == expected.names(), boost::test_tools::per_element());
  for (const auto& [name, x] : expected) BOOST_TEST((from_vector.get(name) == x), name);
}

BOOST_AUTO_TEST_CASE(a_large_snapshot_copied_on_several_threads_is_whole) {
  // 144 MiB in 6 layers of 24 MiB: above the size at which the copy is split between threads,
  // and each column-major w (8 MiB) at the size at which its transpose is split too.
  std::vector<layer> live;
  for (int i = 0; i < 6; ++i) live.push_back(make_layer(static_cast<float>(i), 2048, 1024));
  ckpt::snapshot_arena arena;
  const ckpt::checkpoint snap = arena.snapshot({{live, "model"}});
  BOOST_TEST(snap.size() == 6u * 4u);
  // Leaf by leaf against a copy of each (no second copy of the whole).
  const auto entry = [](const auto& leaf) { return ckpt::of_params(leaf, "x").get("x"); };
  for (std::size_t i = 0; i < live.size(); ++i) {
    const std::string prefix = "model." + std::to_string(i) + ".";
    BOOST_TEST((snap.get(prefix + "w") == entry(live[i].w)), prefix << "w");
    BOOST_TEST((snap.get(prefix + "r") == entry(live[i].r)), prefix << "r");
    BOOST_TEST((snap.get(prefix + "t") == entry(live[i].t)), prefix << "t");
  }
}

BOOST_AUTO_TEST_CASE(the_leaves_may_change_once_the_snapshot_is_taken) {
  layer live = make_layer(1);
  const layer before = live;
  ckpt::snapshot_arena arena;
  const ckpt::checkpoint snap = arena.snapshot({live});
  live.w.setZero();
  live.t.setConstant(-1);
  BOOST_TEST(same(ckpt::to_params(snap, make_layer(0)), before));
}

BOOST_AUTO_TEST_CASE(a_released_snapshot_s_memory_serves_the_next_one) {
  // 1024 x 1024 floats, 4 MiB: a buffer of the huge-page kind.
  layer live = make_layer(1, 1024, 1024);
  ckpt::snapshot_arena arena;
  const std::byte* first_address = nullptr;
  {
    const ckpt::checkpoint snap = arena.snapshot({live});
    first_address = snap.get("w").bytes().data();
  }
  const std::size_t capacity = arena.capacity();
  BOOST_TEST(capacity >= live.w.size() * sizeof(float) + live.r.size() * sizeof(double));
  live = make_layer(2, 1024, 1024);
  const ckpt::checkpoint again = arena.snapshot({live});
  BOOST_TEST(again.get("w").bytes().data() == first_address);
  BOOST_TEST(arena.capacity() == capacity);
  BOOST_TEST(same(ckpt::to_params(again, make_layer(0, 1024, 1024)), live));
}

// Whether [address, address + 4 KiB) is mapped in this process: msync refuses memory that is not.
bool mapped(const std::byte* address) {
  return ::msync(const_cast<std::byte*>(address), 4096, MS_ASYNC) == 0 || errno != ENOMEM;
}

BOOST_AUTO_TEST_CASE(a_large_buffer_given_back_serves_the_next_of_params_of_its_size) {
  // 4096 x 2048 floats, 32 MiB: a mapped buffer (detail::tuning::heap_limit).
  static_assert(4096 * 2048 * sizeof(float) >= ckpt::detail::tuning::heap_limit);
  layer live = make_layer(1, 4096, 2048);
  const std::byte* first_address = nullptr;
  {
    const ckpt::checkpoint copy = ckpt::of_params(live);
    first_address = copy.get("w").bytes().data();
  }
  BOOST_TEST(mapped(first_address));  // kept, not unmapped
  live = make_layer(2, 4096, 2048);
  const ckpt::checkpoint again = ckpt::of_params(live);
  BOOST_TEST(again.get("w").bytes().data() == first_address);
  BOOST_TEST(same(ckpt::to_params(again, make_layer(0, 4096, 2048)), live));  // the new values, all of them
}

BOOST_AUTO_TEST_CASE(kept_buffers_are_reused_by_size_and_never_raise_the_peak) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  ckpt::detail::kept_buffers buffers;
  std::byte* a = buffers.take(64 * mib);
  std::fill_n(a, 64 * mib, std::byte{1});
  buffers.give(a, 64 * mib);
  BOOST_TEST(mapped(a));
  // Another size while the 64 MiB one is kept: 40 + 64 would exceed the 64 MiB peak, so the kept
  // one is unmapped first.
  std::byte* b = buffers.take(40 * mib);
  // A page of the old 64 MiB that the new 40 MiB (the kernel may place it there) does not cover.
  const std::byte* old_page = (a >= b && a < b + 40 * mib) ? b + 40 * mib : a;
  BOOST_TEST(!mapped(old_page));
  buffers.give(b, 40 * mib);
  // The same size again: the kept buffer, writable.
  std::byte* c = buffers.take(40 * mib);
  BOOST_TEST(c == b);
  std::fill_n(c, 40 * mib, std::byte{2});
  BOOST_TEST((c[0] == std::byte{2} && c[40 * mib - 1] == std::byte{2}));
  // Below the peak, two buffers may live and be kept at once: 40 taken + 16 new <= 64.
  std::byte* d = buffers.take(16 * mib);
  buffers.give(d, 16 * mib);
  buffers.give(c, 40 * mib);
  BOOST_TEST(mapped(c));
  BOOST_TEST(mapped(d));
  BOOST_TEST(buffers.take(16 * mib) == d);
  BOOST_TEST(buffers.take(40 * mib) == c);
  ::munmap(c, 40 * mib);  // this test's own instance: nothing else unmaps them
  ::munmap(d, 16 * mib);
}

BOOST_AUTO_TEST_CASE(a_staging_band_goes_back_to_the_pool_with_its_last_owner) {
  using ckpt::detail::staging_band;
  // Four bands held for the whole test: the pool (which keeps four) is empty meanwhile.
  const std::array<staging_band, 4> held{};
  std::shared_ptr<std::byte[]> view;  // what a tensor viewing the band holds
  const std::byte* first = nullptr;
  {
    const staging_band band;
    first = band.data();
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(first) % 64 == 0U);
    view = band.owner();
  }
  {
    const staging_band next;  // the first band is still viewed: not in the pool
    BOOST_TEST(next.data() != first);
  }
  view.reset();  // its last owner: the band goes back, the newest in the pool
  const staging_band again;
  BOOST_TEST(again.data() == first);
  for (const staging_band& b : held) BOOST_TEST(b.data() != first);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CKPT_SNAPSHOT_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CKPT_SNAPSHOT_SANITIZED 1
#endif
#endif

// A sanitizer's shadow memory cannot run under an address-space limit: the test is left to the
// plain build.
#ifndef CKPT_SNAPSHOT_SANITIZED
// The address space this process has mapped (VmSize in /proc/self/status), in bytes.
std::size_t address_space_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmSize:", 0) == 0) return std::stoul(line.substr(7)) * 1024;
  return 0;
}

BOOST_AUTO_TEST_CASE(a_failed_map_unmaps_every_kept_buffer_and_tries_again) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  // In a child process, which the address-space limit does not outlive.
  const pid_t child = ::fork();
  BOOST_TEST_REQUIRE(child >= 0);
  if (child == 0) {
    ckpt::detail::kept_buffers buffers;
    std::byte* a = buffers.take(40 * mib);
    std::byte* b = buffers.take(40 * mib);  // the peak: 80 MiB
    buffers.give(a, 40 * mib);
    buffers.give(b, 40 * mib);
    // 30 MiB below what is mapped now: unmapping `a` (the oldest, to stay within the peak) leaves
    // room for 10 MiB, so mapping 16 fails until `b` goes too, which the peak alone would keep.
    const auto limit = static_cast<rlim_t>(address_space_bytes() - 30 * mib);
    const rlimit as{limit, limit};
    if (::setrlimit(RLIMIT_AS, &as) != 0) ::_exit(3);
    std::byte* c = nullptr;
    try {
      c = buffers.take(16 * mib);
    } catch (const std::bad_alloc&) {
      ::_exit(2);  // not tried again
    }
    std::fill_n(c, 16 * mib, std::byte{7});
    // A page of `b` that the new mapping (the kernel may place it there) does not cover.
    const std::byte* b_page = (b >= c && b < c + 16 * mib) ? c + 16 * mib : b;
    ::_exit(!mapped(b_page) && c[16 * mib - 1] == std::byte{7} ? 0 : 1);
  }
  int status = 0;
  BOOST_TEST_REQUIRE(::waitpid(child, &status, 0) == child);
  BOOST_TEST_REQUIRE(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);  // 1: `b` still mapped; 2: bad_alloc; 3: no limit set
}
#endif

// The VmFlags of the mapping of this process that holds `address` (/proc/self/smaps), or "".
std::string vm_flags_at(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-' && line.find(' ') != std::string::npos &&
        line.find(':') > line.find(' ')) {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

BOOST_AUTO_TEST_CASE(large_leaves_to_params_allocates_are_advised_huge_pages) {
  // "hg" in VmFlags: the range was advised MADV_HUGEPAGE. 48 MiB leaves: malloc maps each on its
  // own, and the 2 MiB pages inside are advised before they are filled.
  const big_and_small saved{Eigen::MatrixXf::Constant(4096, 3072, 1.5f), Eigen::MatrixXf::Constant(64, 64, 2.5f)};
  const big_and_small loaded = ckpt::to_params(ckpt::of_params(saved), saved);
  const std::string big_flags = vm_flags_at(loaded.big.data() + loaded.big.size() / 2);
  BOOST_TEST_INFO("VmFlags: " << big_flags);
  BOOST_TEST(big_flags.find(" hg") != std::string::npos);
  BOOST_TEST((loaded.big == saved.big));
  BOOST_TEST(vm_flags_at(loaded.small.data()).find(" hg") == std::string::npos);  // the heap's
  BOOST_TEST((loaded.small == saved.small));
}

BOOST_AUTO_TEST_CASE(small_leaves_share_a_kept_slab_that_serves_the_next_of_params) {
  // 64 leaves of 64 KiB, 4 MiB in all: packed into one slab of heap_limit bytes.
  struct many {
    std::vector<Eigen::MatrixXf> layers;
  };
  const auto make = [](float seed) {
    many m;
    for (int i = 0; i < 64; ++i) m.layers.push_back(Eigen::MatrixXf::Constant(128, 128, seed + static_cast<float>(i)));
    return m;
  };
  // The entries' first bytes, lowest first.
  const auto starts = [](const ckpt::checkpoint& c) {
    std::vector<std::uintptr_t> out;
    for (const auto& [name, t] : c) out.push_back(reinterpret_cast<std::uintptr_t>(t.bytes().data()));
    std::ranges::sort(out);
    return out;
  };
  many live = make(1);
  std::vector<std::uintptr_t> first;
  {
    const ckpt::checkpoint copy = ckpt::of_params(live);
    first = starts(copy);
    BOOST_TEST_REQUIRE(first.size() == 64U);
    // ckpt's own mapping (advised huge pages), not the heap's.
    BOOST_TEST(vm_flags_at(reinterpret_cast<const void*>(first.front())).find(" hg") != std::string::npos);
    BOOST_TEST(first.back() + 128 * 128 * sizeof(float) <= first.front() + ckpt::detail::tuning::heap_limit);
    for (std::size_t i = 0; i < first.size(); ++i) {
      BOOST_TEST(first[i] % 64 == 0U);
      if (i > 0) BOOST_TEST(first[i] >= first[i - 1] + 128 * 128 * sizeof(float));  // no two overlap
    }
  }
  BOOST_TEST(mapped(reinterpret_cast<const std::byte*>(first.front())));  // kept, not unmapped
  live = make(100);
  const ckpt::checkpoint again = ckpt::of_params(live);
  BOOST_TEST(starts(again) == first, boost::test_tools::per_element());
  const many back = ckpt::to_params(again, make(0));
  for (std::size_t i = 0; i < 64; ++i) BOOST_TEST((back.layers[i] == live.layers[i]));
  // Under a mebibyte of small leaves, each stays on the heap, alone.
  const ckpt::checkpoint tiny = ckpt::of_params(make_layer(1));
  BOOST_TEST(vm_flags_at(tiny.get("w").bytes().data()).find(" hg") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_snapshot_still_in_use_is_never_overwritten) {
  ckpt::snapshot_arena arena;
  const layer one = make_layer(1);
  const ckpt::checkpoint held = arena.snapshot({one});
  const std::size_t capacity = arena.capacity();
  const ckpt::tensor kept = held.get("r");  // a tensor alone also keeps the buffer in use
  const layer two = make_layer(2);
  const ckpt::checkpoint next = arena.snapshot({two});
  BOOST_TEST(arena.capacity() == 2 * capacity);
  BOOST_TEST(next.get("r").bytes().data() != kept.bytes().data());
  BOOST_TEST(same(ckpt::to_params(held, make_layer(0)), one));
  BOOST_TEST(same(ckpt::to_params(next, make_layer(0)), two));
}

BOOST_AUTO_TEST_CASE(release_frees_only_the_buffers_no_snapshot_uses) {
  ckpt::snapshot_arena arena;
  const layer one = make_layer(1), two = make_layer(2);
  std::optional<ckpt::checkpoint> a = arena.snapshot({one});
  const ckpt::checkpoint b = arena.snapshot({two});
  const std::size_t both = arena.capacity();
  arena.release();
  BOOST_TEST(arena.capacity() == both);
  a.reset();
  arena.release();
  BOOST_TEST(arena.capacity() == both / 2);
  BOOST_TEST(same(ckpt::to_params(b, make_layer(0)), make_layer(2)));
}

BOOST_AUTO_TEST_CASE(bad_names_are_refused_before_anything_is_allocated) {
  ckpt::snapshot_arena arena;
  const layer l = make_layer(1);
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)arena.snapshot({{l, "m"}, {l, "m"}}); }) ==
             "ckpt: snapshot: two leaves are named 'm.r'");
  BOOST_TEST(message_of<std::invalid_argument>([&] { (void)arena.snapshot({{ckpt::of_int("__metadata__", 1)}}); }) ==
             "ckpt: '__metadata__' is reserved by the safetensors format and cannot name an entry");
  BOOST_TEST(arena.capacity() == 0u);
}

BOOST_AUTO_TEST_CASE(the_manager_saves_live_sections_with_or_without_a_snapshot) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager manager(s.path(), {.max_to_keep = 2});
  layer live = make_layer(1);
  BOOST_TEST(manager.save(10, {{live, "model"}, {ckpt::of_int("step", 10)}}, {{"loss", "0.5"}}));
  const ckpt::checkpoint direct = manager.load(10);
  BOOST_TEST(same(ckpt::to_params(direct, make_layer(0), {.prefix = "model"}), live));
  BOOST_TEST(ckpt::to_int("step", direct) == 10);
  BOOST_TEST(direct.metadata().at("loss") == "0.5");
  BOOST_TEST(direct.metadata().at("step") == "10");

  std::vector<layer> saved;
  for (int step = 11; step <= 13; ++step) {
    live = make_layer(static_cast<float>(step));
    saved.push_back(live);
    BOOST_TEST(manager.save_async(step, {{live, "model"}}));
    live.w.setConstant(-1);  // the trainer moves on at once
  }
  manager.wait();
  BOOST_TEST(manager.steps() == (std::vector<std::int64_t>{12, 13}));
  BOOST_TEST(same(ckpt::to_params(manager.load(13), make_layer(0), {.prefix = "model"}), saved[2]));
  BOOST_TEST(same(ckpt::to_params(manager.load(12), make_layer(0), {.prefix = "model"}), saved[1]));
}

BOOST_AUTO_TEST_CASE(the_manager_checks_a_live_save_before_copying_or_writing) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager manager(s.path(), {.save_interval_steps = 10});
  const layer live = make_layer(1);
  BOOST_TEST(!manager.save_async(5, {live}));  // not a multiple of 10: skipped
  BOOST_TEST(!manager.save(5, {live}));
  BOOST_TEST(manager.save(10, {live}));
  BOOST_TEST(message_of<std::invalid_argument>([&] { manager.save_async(0, {live}, {}, true); }).find(
                 "step 0 is not newer than the latest step") != std::string::npos);
  BOOST_TEST(manager.steps() == (std::vector<std::int64_t>{10}));
}

namespace {

// Parameters a training loop changes in two ways: the trained leaves through adam::update, which
// a background save copies lazily, and the others by hand, which it copies in its call.
struct trained {
  Eigen::MatrixXf big;  // column-major, 2 MiB: the background copy takes a while
  Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> rows;
  Eigen::VectorXf bias;
  ckpt::frozen<Eigen::VectorXf> running;  // the loop updates it itself
  std::int64_t seen = 0;
};

trained make_trained(float seed) {
  trained t;
  t.big = Eigen::MatrixXf::NullaryExpr(1024, 512, [seed](Eigen::Index r, Eigen::Index c) {
    return std::sin(seed + static_cast<float>(r) * 0.01f + static_cast<float>(c) * 0.003f);
  });
  t.rows = Eigen::MatrixXd::Constant(64, 64, seed);
  t.bias = Eigen::VectorXf::LinSpaced(33, seed, seed + 1);
  t.running.value = Eigen::VectorXf::Constant(8, seed);
  return t;
}

// Whether two checkpoints hold the same entries, byte for byte.
bool same_entries(const ckpt::checkpoint& a, const ckpt::checkpoint& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, x] : a) {
    const ckpt::tensor* y = b.find(name);
    if (y == nullptr || y->dtype() != x.dtype() || !std::ranges::equal(y->shape(), x.shape()) ||
        !std::ranges::equal(x.bytes(), y->bytes()))
      return false;
  }
  return true;
}

// Holds a background save's copies of the leaves until `release`: the loop's update copies them.
class held_copies {
 public:
  held_copies() : guard_(held()) {}
  held_copies(const held_copies&) = delete;
  held_copies& operator=(const held_copies&) = delete;
  ~held_copies() { release(); }
  static void release() {
    released().store(true);
    released().notify_all();
  }

 private:
  static std::atomic<bool>& released() {
    static std::atomic<bool> flag{false};
    return flag;
  }
  static ckpt::detail::io_hooks held() {
    released().store(false);
    ckpt::detail::io_hooks h = ckpt::detail::system_hooks();
    h.before_lazy_copies = [] { released().wait(false); };
    return h;
  }
  ckpt::detail::io_hooks_guard guard_;
};

// One step of a loop: the leaves it changes by hand, then Adam's update.
void train_step(const ckpt::adam& opt, trained& params, const trained& grads, ckpt::adam_state<trained>& state) {
  params.running.value.array() += 1;
  ++params.seen;
  opt.update(params, grads, state);
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_background_save_of_the_training_state_holds_the_values_of_its_call) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager manager(s.path(), {.max_to_keep = 2});
  const ckpt::adam opt{.lr = 1e-2};
  trained params = make_trained(1);
  const trained grads = make_trained(2);
  ckpt::adam_state<trained> state = opt.init(params);
  for (int save = 0; save < 6; ++save) {
    // Half the saves hold their background copy back: the update then copies every leaf itself.
    std::optional<held_copies> hold;
    if (save % 2 == 0) hold.emplace();
    train_step(opt, params, grads, state);
    // What the save must hold: a copy taken in the call (snapshot_arena copies every leaf).
    const ckpt::checkpoint expected = ckpt::snapshot_arena().snapshot(ckpt::training_state(params, state));
    const std::int64_t step = state.step;
    BOOST_TEST(manager.save_async(step, ckpt::training_state(params, state)));
    // The loop goes on at once: the update races the background copy leaf by leaf.
    for (int i = 0; i < 3; ++i) train_step(opt, params, grads, state);
    held_copies::release();
    manager.wait();
    BOOST_TEST(same_entries(manager.load(step), expected), "step " << step);
  }
}

BOOST_AUTO_TEST_CASE(the_state_and_parameters_may_end_right_after_a_background_save) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager manager(s.path());
  ckpt::checkpoint expected;
  const held_copies hold;
  {
    const ckpt::adam opt{.lr = 1e-2};
    trained params = make_trained(3);
    ckpt::adam_state<trained> state = opt.init(params);
    train_step(opt, params, make_trained(4), state);
    expected = ckpt::snapshot_arena().snapshot(ckpt::training_state(params, state));
    BOOST_TEST(manager.save_async(state.step, ckpt::training_state(params, state)));
  }  // the state, then the parameters end: the moments' end makes the copies still pending
  held_copies::release();
  manager.wait();
  BOOST_TEST(same_entries(manager.load(1), expected));
}

namespace {

// A manager in a fresh folder, and a model with its Adam state one step into training.
struct one_step_in {
  temp_dir s{temp_dir::absent};
  ckpt::checkpoint_manager manager{s.path()};
  ckpt::adam opt{.lr = 1e-2};
  trained params = make_trained(5);
  ckpt::adam_state<trained> state = opt.init(params);
  one_step_in() { train_step(opt, params, make_trained(6), state); }
};

}  // namespace

BOOST_AUTO_TEST_CASE(a_read_into_the_parameters_waits_for_the_copies_of_a_background_save) {
  one_step_in run;
  auto& [s, manager, opt, params, state] = run;
  const ckpt::checkpoint expected = ckpt::snapshot_arena().snapshot(ckpt::training_state(params, state));
  // Another state to read back, of other values and another step.
  trained other = make_trained(7);
  ckpt::adam_state<trained> other_state = opt.init(other);
  train_step(opt, other, make_trained(8), other_state);
  train_step(opt, other, make_trained(8), other_state);
  const ckpt::checkpoint replacement = ckpt::snapshot_arena().snapshot(ckpt::training_state(other, other_state));

  const held_copies hold;
  BOOST_TEST(manager.save_async(1, ckpt::training_state(params, state)));
  // The model alone: nothing else (no moments made and dropped) makes the copies first.
  const ckpt::read_report report = ckpt::read_params(replacement, ckpt::training_state(params), {.strict = false});
  BOOST_TEST(report.restored == 5u);
  BOOST_TEST(params.bias == other.bias);
  held_copies::release();
  manager.wait();
  BOOST_TEST(same_entries(manager.load(1), expected));
}

// A background save lowers its thread's priority (tuning::writer_nice) once its snapshot's
// copies are made, and only then: on its own thread, never the loop's; the loop's thread keeps
// its priority.
BOOST_AUTO_TEST_CASE(a_background_save_writes_at_the_lowest_priority_after_its_copies) {
  struct seen {
    std::mutex mutex;
    std::vector<std::string> events;
    std::vector<std::pair<id_t, int>> calls;
  };
  static seen record;
  {
    const std::lock_guard lock(record.mutex);
    record.events.clear();
    record.calls.clear();
  }
  ckpt::detail::io_hooks h = ckpt::detail::system_hooks();
  h.before_lazy_copies = [] {
    const std::lock_guard lock(record.mutex);
    record.events.emplace_back("copies");
  };
  h.setpriority = [](int which, id_t who, int priority) {
    const std::lock_guard lock(record.mutex);
    record.events.emplace_back("priority");
    record.calls.emplace_back(who, priority);
    return which == PRIO_PROCESS ? 0 : -1;
  };
  const ckpt::detail::io_hooks_guard guard(h);
  one_step_in run;
  auto& [s, manager, opt, params, state] = run;
  BOOST_TEST(manager.save_async(state.step, ckpt::training_state(params, state)));
  manager.wait();
  {
    const std::lock_guard lock(record.mutex);
    BOOST_TEST(record.events == (std::vector<std::string>{"copies", "priority"}), boost::test_tools::per_element());
    BOOST_REQUIRE(record.calls.size() == 1u);
    BOOST_TEST(record.calls[0].first != static_cast<id_t>(::gettid()));  // the writer's thread, not this one
    BOOST_TEST(record.calls[0].first != 0u);
    BOOST_TEST(record.calls[0].second == 19);
  }
  // A synchronous save changes no priority.
  manager.save(state.step + 1, ckpt::training_state(params, state));
  const std::lock_guard lock(record.mutex);
  BOOST_TEST(record.calls.size() == 1u);
}

// The niceness of a background write follows whether the writes end in time: each write still
// running when it is joined (the caller waits for it) halves the next ones', each that had ended
// raises it again, up to 19; a job's yield sets the niceness chosen when it started.
BOOST_AUTO_TEST_CASE(a_write_someone_waits_for_makes_the_next_writes_run_at_a_higher_priority) {
  static std::vector<int> set;  // written by the jobs' yield, read once they are joined
  set.clear();
  ckpt::detail::io_hooks h = ckpt::detail::system_hooks();
  h.setpriority = [](int, id_t, int priority) {
    set.push_back(priority);
    return 0;
  };
  const ckpt::detail::io_hooks_guard guard(h);
  ckpt::detail::background_write writer;
  BOOST_TEST(writer.niceness() == 19);
  // A write joined while it runs: it waits for a release that comes 300 ms after the join began.
  const auto joined_while_running = [&writer] {
    std::atomic<bool> release{false};
    writer.start([&writer, &release] {
      writer.yield();
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    std::jthread releaser([&release] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      release.store(true);
    });
    BOOST_TEST(!writer.join());
  };
  // A write that has ended before it is joined.
  const auto joined_after_its_end = [&writer] {
    writer.start([&writer] { writer.yield(); });
    while (writer.running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    BOOST_TEST(!writer.join());
  };
  std::vector<int> niceness;
  for (int i = 0; i < 6; ++i) {
    joined_while_running();
    niceness.push_back(writer.niceness());
  }
  for (int i = 0; i < 6; ++i) {
    joined_after_its_end();
    niceness.push_back(writer.niceness());
  }
  BOOST_TEST(niceness == (std::vector<int>{9, 4, 2, 1, 0, 0, 1, 3, 7, 15, 19, 19}), boost::test_tools::per_element());
  // Each job yielded at the niceness of its start.
  BOOST_TEST(set == (std::vector<int>{19, 9, 4, 2, 1, 0, 0, 1, 3, 7, 15, 19}), boost::test_tools::per_element());
}

// Through a manager: a save_async that waits for the previous write (slowed in its yield) makes
// the next write run at nice 9.
BOOST_AUTO_TEST_CASE(a_save_async_that_waits_for_the_previous_write_raises_the_next_writes_priority) {
  static std::vector<int> set;
  set.clear();
  ckpt::detail::io_hooks h = ckpt::detail::system_hooks();
  h.setpriority = [](int, id_t, int priority) {
    set.push_back(priority);
    if (set.size() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return 0;
  };
  const ckpt::detail::io_hooks_guard guard(h);
  one_step_in run;
  auto& [s, manager, opt, params, state] = run;
  BOOST_TEST(manager.save_async(1, ckpt::training_state(params, state)));
  BOOST_TEST(manager.save_async(2, ckpt::training_state(params, state)));  // waits for step 1's write
  manager.wait();
  BOOST_TEST(set == (std::vector<int>{19, 9}), boost::test_tools::per_element());
  BOOST_TEST(manager.steps() == (std::vector<std::int64_t>{1, 2}), boost::test_tools::per_element());
}

namespace {

// A model whose entries do not all fill whole blocks.
struct wide {
  Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> a, b;
  Eigen::MatrixXf c;  // column-major: reordered as it is copied
  Eigen::Vector3f v;
};

// A `wide` model with its Adam state one step into training.
struct wide_in_training {
  wide params;
  ckpt::adam opt{.lr = 1e-2};
  ckpt::adam_state<wide> state = opt.init(params);
  wide_in_training(Eigen::Index a_side, Eigen::Index c_rows, Eigen::Index c_cols)
      : params{.a = decltype(wide::a)::Random(a_side, a_side), .b = decltype(wide::b)::Random(700, 512),
               .c = Eigen::MatrixXf::Random(c_rows, c_cols), .v = Eigen::Vector3f(1, 2, 3)} {
    opt.update(params, params, state);
  }
  // Saves the training state in the background of `manager`, the next update racing the lazy
  // copies, and checks that the step (its digest verified) holds the state of the call; returns it.
  ckpt::checkpoint save_racing_an_update(ckpt::checkpoint_manager& manager) {
    const ckpt::checkpoint expected = ckpt::snapshot_arena().snapshot(ckpt::training_state(params, state));
    const std::int64_t step = state.step;
    BOOST_TEST(manager.save_async(step, ckpt::training_state(params, state)));
    opt.update(params, params, state);
    manager.wait();
    BOOST_TEST(same_entries(manager.load(step), expected));
    return expected;
  }
};

std::size_t bytes_of(const ckpt::checkpoint& t) {
  std::size_t bytes = 0;
  for (const auto& [name, x] : t) bytes += x.nbytes();
  return bytes;
}

}  // namespace

// A manager's background save lays its snapshot out as the file's data section, so that direct
// I/O writes it from where it is: only the blocks where the header or an entry of a few bytes
// meets the next entry go through the staging buffer.
BOOST_AUTO_TEST_CASE(a_background_save_writes_its_snapshot_in_place_with_direct_io) {
  const ckpt_test::direct_writes writes;
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager manager(s.path());
  wide_in_training run(1024, 333, 700);  // some 20 MB of state
  const ckpt::checkpoint saved = run.save_racing_an_update(manager);
  const ckpt_test::direct_writes::totals seen = writes.seen();
  if (seen.written == 0) {
    BOOST_WARN_MESSAGE(false, "the temporary folder's file system refuses direct I/O: nothing to check");
    return;
  }
  BOOST_TEST(seen.written >= bytes_of(saved));
  // At most two blocks for each of the 13 entries (3 of each leaf and the step).
  BOOST_TEST(seen.staged <= 2 * 13 * std::size_t{4096}, seen.staged << " bytes staged of " << seen.written);
}

namespace {

// A model of one storage order, its leaves' sizes not multiples of the digest's 1 MiB chunks (so
// that chunks span entries), with its Adam state one step into training.
template <class M>
struct one_order {
  struct model {
    M a, b, c;
    Eigen::VectorXf v;
  };
  model params{.a = M::Random(700, 1001), .b = M::Random(513, 333), .c = M::Random(1024, 1024),
               .v = Eigen::VectorXf::Random(4097)};
  ckpt::adam opt{.lr = 1e-2};
  ckpt::adam_state<model> state = opt.init(params);
  one_order() { opt.update(params, params, state); }
};

}  // namespace

// A manager's background save hashes the chunks of its snapshot's data section as it copies them
// (laid out as the file): the writer then hashes no byte of the data (it writes them from where
// they are with direct I/O, or through the page cache where the file system refuses direct I/O),
// and the digest the file records verifies, for either storage order, an update racing the copies.
BOOST_AUTO_TEST_CASE(a_background_save_hashes_its_snapshot_as_it_copies_it_and_the_writer_reads_it_once) {
  const auto check = [](auto run, const std::string& what, bool direct) {
    const ckpt_test::direct_writes writes;
    ckpt::detail::hooks().refuse_direct = !direct;  // until `writes` ends
    const temp_dir s(temp_dir::absent);
    ckpt::checkpoint_manager manager(s.path());
    const ckpt::checkpoint expected = ckpt::snapshot_arena().snapshot(ckpt::training_state(run.params, run.state));
    BOOST_TEST_REQUIRE(bytes_of(expected) >= std::size_t{8} << 20);  // laid out as the file
    BOOST_TEST(manager.save_async(1, ckpt::training_state(run.params, run.state)));
    run.opt.update(run.params, run.params, run.state);
    manager.wait();
    const ckpt_test::direct_writes::totals seen = writes.seen();
    BOOST_TEST(seen.hashed == 0u, what << ": the writer hashed " << seen.hashed << " bytes");
    // Read back whole and verified (a wrong digest is an integrity_error).
    BOOST_TEST(same_entries(ckpt::load(manager.path_of(1), {.verify_digest = true}), expected), what);
    if (direct && seen.written != 0)
      BOOST_TEST(seen.staged <= 2 * 13 * std::size_t{4096}, what << ": " << seen.staged << " bytes staged");
  };
  using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  for (const bool direct : {true, false}) {
    const std::string how = direct ? " with direct I/O" : " through the page cache";
    check(one_order<Eigen::MatrixXf>(), "column-major" + how, direct);
    check(one_order<row_major>(), "row-major" + how, direct);
  }
}

// A background save of a state of 128 MiB or more makes its lazy copies on several threads
// (snapshot_bytes_per_thread) while the update races them: the step holds the values of the call.
BOOST_AUTO_TEST_CASE(a_large_background_save_copies_on_helpers_and_holds_the_values_of_its_call) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager manager(s.path());
  wide_in_training run(3072, 1024, 1500);
  BOOST_TEST_REQUIRE(bytes_of(ckpt::snapshot_arena().snapshot(ckpt::training_state(run.params, run.state))) >=
                     std::size_t{128} << 20);
  static_cast<void>(run.save_racing_an_update(manager));
}

// An update on several threads (its leaves cut in ranges, adam::threads) racing the lazy copies of
// a background save: the step holds the values of the call, whether the background copies first
// or the update's threads copy each leaf (several at once, some waiting for another's copy)
// before its first range changes; and the update's results are those of one thread.
BOOST_AUTO_TEST_CASE(a_threaded_update_racing_a_background_save_leaves_it_the_values_of_its_call) {
  const temp_dir s(temp_dir::absent);
  ckpt::checkpoint_manager manager(s.path(), {.max_to_keep = 2});
  wide_in_training run(1024, 333, 700);  // 6.5 MB of parameters: cut in ranges
  ckpt::adam& threaded = run.opt;
  threaded.threads = 4;
  ckpt::adam single = threaded;
  single.threads = 1;
  wide replica = run.params;
  ckpt::adam_state<wide> replica_state = run.state;
  const wide grads{.a = decltype(wide::a)::Random(1024, 1024), .b = decltype(wide::b)::Random(700, 512),
                   .c = Eigen::MatrixXf::Random(333, 700), .v = Eigen::Vector3f(-1, 0, 1)};
  for (int save = 0; save < 4; ++save) {
    // Half the saves hold their background copy back: the update's threads copy every leaf.
    std::optional<held_copies> hold;
    if (save % 2 == 0) hold.emplace();
    const ckpt::checkpoint expected = ckpt::snapshot_arena().snapshot(ckpt::training_state(run.params, run.state));
    const std::int64_t step = run.state.step;
    BOOST_TEST(manager.save_async(step, ckpt::training_state(run.params, run.state)));
    threaded.update(run.params, grads, run.state);
    single.update(replica, grads, replica_state);
    held_copies::release();
    manager.wait();
    BOOST_TEST(same_entries(manager.load(step), expected), "step " << step);
    BOOST_TEST(same_entries(ckpt::snapshot_arena().snapshot(ckpt::training_state(run.params, run.state)),
                            ckpt::snapshot_arena().snapshot(ckpt::training_state(replica, replica_state))),
               "step " << step);
  }
}

BOOST_AUTO_TEST_SUITE_END()  // test_snapshot
