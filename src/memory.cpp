#include "memory.hpp"

#include <sys/mman.h>

#include <mutex>
#include <new>
#include <utility>
#include <vector>

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

namespace {

// The bands given back, at most one for each of a few threads at a time (a load reads on two).
struct band_pool {
  static constexpr std::size_t kept = 4;
  band_pool() { free.reserve(kept); }  // giving a band back allocates nothing
  std::mutex lock;
  std::vector<std::shared_ptr<std::byte[]>> free;
};

band_pool& pool() {
  static band_pool bands;
  return bands;
}

}  // namespace

staging_band::staging_band() {
  {
    band_pool& bands = pool();
    const std::scoped_lock hold(bands.lock);
    if (!bands.free.empty()) {
      buffer_ = std::move(bands.free.back());
      bands.free.pop_back();
      return;
    }
  }
  buffer_ = std::make_shared_for_overwrite<std::byte[]>(staging_bytes);
}

staging_band::~staging_band() {
  if (buffer_.use_count() != 1) return;  // a tensor still views it: it goes with that tensor
  band_pool& bands = pool();
  const std::scoped_lock hold(bands.lock);
  if (bands.free.size() < band_pool::kept) bands.free.push_back(std::move(buffer_));
}

}  // namespace ckpt::detail
