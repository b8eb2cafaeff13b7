// The replacements of operator new and delete that allocation_watch.hpp describes: linked into the
// one test executable whose suites watch allocations (ckpt_tests_allocations).
#include "allocation_watch.hpp"

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
