#pragma once
// Every form of plain operator new and delete of the test executable that links
// allocation_watch.cpp is replaced (ckpt_tests_allocations, tests/CMakeLists.txt), so that a test
// can see how large an allocation the code under test asked for, or cap it, and how much the heap held at its peak. Tests of untrusted input use it: a
// file that claims a huge tensor or header must be refused on arithmetic alone, never by
// allocating what it claims; and a reader's memory must stay in proportion to what it reads.
// Consistent on malloc/free, so that sanitizers see matching pairs.
//
// This header declares what the replacements count; allocation_watch.cpp defines them.

#include <malloc.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <limits>
#include <new>

namespace ckpt_test {

/// The largest size asked of operator new since it was last reset (store 0 to reset).
inline std::atomic<std::size_t> largest_allocation{0};

/// Allocations larger than this fail with std::bad_alloc; see allocation_cap.
inline std::atomic<std::size_t> allocation_limit{std::numeric_limits<std::size_t>::max()};

/// While it lives, any operator new larger than `limit` fails with std::bad_alloc.
class allocation_cap {
 public:
  explicit allocation_cap(std::size_t limit) { allocation_limit.store(limit); }
  allocation_cap(const allocation_cap&) = delete;
  allocation_cap& operator=(const allocation_cap&) = delete;
  ~allocation_cap() { allocation_limit.store(std::numeric_limits<std::size_t>::max()); }
};

/// The bytes of the blocks operator new gave and operator delete has not taken back, each as
/// malloc_usable_size counts it (what the heap holds for it).
inline std::atomic<std::size_t> live_bytes{0};

/// The largest value live_bytes reached since the last peak_watch began.
inline std::atomic<std::size_t> peak_live_bytes{0};

/// While it lives, watches the heap's peak: peak() is how far live_bytes rose, at most, above
/// their value at its construction. One at a time.
class peak_watch {
 public:
  peak_watch() : base_(live_bytes.load()) { peak_live_bytes.store(base_); }
  peak_watch(const peak_watch&) = delete;
  peak_watch& operator=(const peak_watch&) = delete;
  [[nodiscard]] std::size_t peak() const {
    const std::size_t top = peak_live_bytes.load();
    return top > base_ ? top - base_ : 0;
  }

 private:
  std::size_t base_;
};

namespace detail {

// Raises `largest` to `value` if it is smaller.
inline void raise_to(std::atomic<std::size_t>& largest, std::size_t value) noexcept {
  std::size_t seen = largest.load(std::memory_order_relaxed);
  while (value > seen && !largest.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
  }
}

inline void* allocate(std::size_t size) noexcept {
  raise_to(largest_allocation, size);
  if (size > allocation_limit.load(std::memory_order_relaxed)) return nullptr;
  void* p = std::malloc(size == 0 ? 1 : size);
  if (p != nullptr) {
    const std::size_t held = ::malloc_usable_size(p);
    raise_to(peak_live_bytes, live_bytes.fetch_add(held, std::memory_order_relaxed) + held);
  }
  return p;
}

// Out of line, so that GCC's -Wmismatched-new-delete does not see free() meet operator new.
[[gnu::noinline]] inline void release(void* p) noexcept {
  if (p != nullptr) live_bytes.fetch_sub(::malloc_usable_size(p), std::memory_order_relaxed);
  std::free(p);
}

}  // namespace detail
}  // namespace ckpt_test
