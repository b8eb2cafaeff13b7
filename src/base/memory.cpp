#include "memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>

namespace ckpt::detail {

std::byte* kept_buffers::take(std::size_t mapped) {
  std::array<slot, slots> unmap{};
  std::size_t n = 0;
  const auto release = [&] {
    for (std::size_t i = 0; i < n; ++i) ::munmap(unmap[i].address, unmap[i].size);
  };
  const auto map = [mapped] {
    return ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  };
  {
    const std::scoped_lock hold(lock_);
    live_ += mapped;
    for (std::size_t i = count_; i-- > 0;)
      if (kept_[i].size == mapped) return remove(i).address;
    peak_ = std::max(peak_, live_);
    // Unmapping kept buffers of other sizes, oldest first, keeps the peak where it was.
    while (count_ > 0 && live_ + kept_bytes_ > peak_) unmap[n++] = remove(0);
  }
  release();
  void* address = map();
  if (address == MAP_FAILED) {
    // Out of address space or of commit charge (vm.overcommit_memory=2 counts kept buffers too):
    // unmap every kept buffer and try once more.
    n = 0;
    {
      const std::scoped_lock hold(lock_);
      while (count_ > 0) unmap[n++] = remove(0);
    }
    release();
    if (n > 0) address = map();
  }
  if (address == MAP_FAILED) {
    const std::scoped_lock hold(lock_);
    live_ -= mapped;
    throw std::bad_alloc();
  }
  // Advice only: without huge pages (THP "never", or none free) the buffer works the same.
  static_cast<void>(::madvise(address, mapped, MADV_HUGEPAGE));
  return static_cast<std::byte*>(address);
}

void kept_buffers::give(std::byte* address, std::size_t mapped) noexcept {
  static_cast<void>(::madvise(address, mapped, MADV_FREE));
  slot evicted{};
  {
    const std::scoped_lock hold(lock_);
    live_ -= mapped;
    if (count_ == slots) evicted = remove(0);
    kept_[count_++] = {address, mapped};
    kept_bytes_ += mapped;
  }
  if (evicted.address != nullptr) ::munmap(evicted.address, evicted.size);
}

kept_buffers::slot kept_buffers::remove(std::size_t i) noexcept {
  const slot out = kept_[i];
  kept_bytes_ -= out.size;
  std::copy(kept_.begin() + static_cast<std::ptrdiff_t>(i + 1), kept_.begin() + static_cast<std::ptrdiff_t>(count_),
            kept_.begin() + static_cast<std::ptrdiff_t>(i));
  --count_;
  return out;
}

namespace {

// Trivially destructible, so that tensors freed while the program exits still find it.
static_assert(std::is_trivially_destructible_v<kept_buffers>);
constinit kept_buffers mapped_buffers;

}  // namespace

std::shared_ptr<std::byte[]> allocate_bytes(std::size_t size) {
  if (size < tuning::heap_limit) return std::make_shared_for_overwrite<std::byte[]>(size);
  // Rounded up to whole huge pages, so the last one can be huge too; the slack is at most 2 MiB
  // on a buffer of at least 32 MiB.
  const std::size_t mapped = (size + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  // Should the control block not be had, shared_ptr's constructor gives the buffer back itself.
  return {mapped_buffers.take(mapped), [mapped](std::byte* p) { mapped_buffers.give(p, mapped); }};
}

namespace {

// The bands given back, at most one for each of a few threads at a time (a load reads on two).
// Constinit and trivially destructible, as the kept buffers: a band whose last owner goes while
// the program exits still finds it.
class band_pool {
 public:
  // A band given back, or null if there is none.
  std::byte* take() noexcept {
    const std::scoped_lock hold(lock_);
    return count_ == 0 ? nullptr : free_[--count_];
  }
  // Keeps `band` for the next staging_band, or frees it if enough are kept.
  void give(std::byte* band) noexcept {
    {
      const std::scoped_lock hold(lock_);
      if (count_ < free_.size()) {
        free_[count_++] = band;
        return;
      }
    }
    std::free(band);
  }

 private:
  std::mutex lock_;
  std::array<std::byte*, 4> free_{};
  std::size_t count_ = 0;
};

static_assert(std::is_trivially_destructible_v<band_pool>);
constinit band_pool bands;

}  // namespace

staging_band::staging_band() {
  std::byte* band = bands.take();
  if (band == nullptr) band = static_cast<std::byte*>(std::aligned_alloc(64, tuning::staging_bytes));
  if (band == nullptr) throw std::bad_alloc();
  // Should the control block not be had, shared_ptr's constructor gives the band back itself.
  buffer_ = std::shared_ptr<std::byte[]>(band, [](std::byte* p) { bands.give(p); });
}

}  // namespace ckpt::detail
