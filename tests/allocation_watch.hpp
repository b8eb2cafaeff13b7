#pragma once
// Replaces every form of plain operator new and delete of the test executable whose one source
// file includes this header, so that a test can see how large an allocation the code under test
// asked for, or cap it. Tests of untrusted input use it: a file that claims a huge tensor or header
// must be refused on arithmetic alone, never by allocating what it claims. Consistent on
// malloc/free, so that sanitizers see matching pairs.
//
// Include it in exactly one source file of an executable (the replacements are ordinary
// definitions).

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

namespace detail {

inline void* allocate(std::size_t size) noexcept {
  std::size_t seen = largest_allocation.load(std::memory_order_relaxed);
  while (size > seen && !largest_allocation.compare_exchange_weak(seen, size, std::memory_order_relaxed)) {
  }
  if (size > allocation_limit.load(std::memory_order_relaxed)) return nullptr;
  return std::malloc(size == 0 ? 1 : size);
}

// Out of line, so that GCC's -Wmismatched-new-delete does not see free() meet operator new.
[[gnu::noinline]] inline void release(void* p) noexcept { std::free(p); }

}  // namespace detail
}  // namespace ckpt_test

void* operator new(std::size_t size) {
  if (void* p = ckpt_test::detail::allocate(size)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t size) {
  if (void* p = ckpt_test::detail::allocate(size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return ckpt_test::detail::allocate(size); }
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return ckpt_test::detail::allocate(size); }
void operator delete(void* p) noexcept { ckpt_test::detail::release(p); }
void operator delete[](void* p) noexcept { ckpt_test::detail::release(p); }
void operator delete(void* p, std::size_t) noexcept { ckpt_test::detail::release(p); }
void operator delete[](void* p, std::size_t) noexcept { ckpt_test::detail::release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { ckpt_test::detail::release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { ckpt_test::detail::release(p); }
