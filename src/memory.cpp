#include "memory.hpp"

#include <sys/mman.h>

#include <new>

namespace ckpt::detail {
namespace {

constexpr std::size_t huge_page = std::size_t{2} << 20;
// Buffers below this come from the heap: once glibc has freed a block of their size, its mmap
// threshold follows (up to 32 MiB) and later blocks reuse the heap's memory without new page
// faults. Larger ones are mapped with huge pages asked for: 512 times fewer faults than 4 KiB
// pages.
constexpr std::size_t heap_limit = std::size_t{32} << 20;

}  // namespace

std::shared_ptr<std::byte[]> allocate_bytes(std::size_t size) {
  if (size < heap_limit) return std::make_shared_for_overwrite<std::byte[]>(size);
  // Rounded up to whole huge pages, so the last one can be huge too; the slack is at most 2 MiB
  // on a buffer of at least 2 MiB.
  const std::size_t mapped = (size + huge_page - 1) / huge_page * huge_page;
  void* address = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (address == MAP_FAILED) throw std::bad_alloc();
  // Advice only: without huge pages (THP "never", or none free) the buffer works the same.
  static_cast<void>(::madvise(address, mapped, MADV_HUGEPAGE));
  return {static_cast<std::byte*>(address), [mapped](std::byte* p) { ::munmap(p, mapped); }};
}

}  // namespace ckpt::detail
