#include <ckpt/tensor.hpp>
#include <ckpt/detail/pages.hpp>

#include "mapped_file.hpp"
#include "memory.hpp"
#include "parallel.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

namespace ckpt {

std::string to_string(std::span<const std::int64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::int64_t numel_of(std::span<const std::int64_t> shape) {
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) {
    if (extent < 0) throw std::invalid_argument("ckpt: negative extent in shape " + to_string(shape));
    if (extent != 0 && count > std::numeric_limits<std::int64_t>::max() / extent)
      throw std::invalid_argument("ckpt: the element count of shape " + to_string(shape) +
                                  " overflows 64 bits");
    count *= extent;
  }
  return count;
}

std::size_t nbytes_of(dtype type, std::int64_t numel) {
  const auto bits = static_cast<std::uint64_t>(bit_width(type));
  const auto count = static_cast<std::uint64_t>(numel);
  if (count > std::numeric_limits<std::uint64_t>::max() / bits)
    throw std::invalid_argument("ckpt: " + std::to_string(numel) + " elements of " +
                                std::string(to_string(type)) + " overflow 64 bits");
  if (count * bits % 8 != 0)
    throw std::invalid_argument("ckpt: " + std::to_string(numel) + " elements of " +
                                std::string(to_string(type)) + " are not a whole number of bytes");
  return static_cast<std::size_t>(count * bits / 8);
}

namespace {
std::size_t checked_size(dtype type, std::span<const std::int64_t> shape, std::size_t given) {
  const std::size_t expected = nbytes_of(type, numel_of(shape));
  if (expected != given)
    throw std::invalid_argument("ckpt: a " + std::string(to_string(type)) + " tensor of shape " +
                                to_string(shape) + " needs " + std::to_string(expected) +
                                " bytes, got " + std::to_string(given));
  return expected;
}

std::size_t alignment_of(dtype type) {
  // The scalar carrying the dtype: C64 is two floats.
  if (type == dtype::c64) return alignof(float);
  return has_scalar(type) ? bit_width(type) / 8 : 1;
}
}  // namespace

std::shared_ptr<std::byte[]> tensor::allocate(std::size_t size) { return detail::allocate_bytes(size); }

tensor::tensor(ckpt::dtype type, dims shape, std::span<const std::byte> bytes,
               std::shared_ptr<const void> owner, const detail::mapped_file* file)
    : dtype_(type),
      shape_(std::move(shape)),
      numel_(numel_of(shape_)),
      bytes_(bytes),
      owner_(std::move(owner)),
      file_(file) {}

tensor tensor::copy_of(ckpt::dtype type, dims shape, std::span<const std::byte> bytes) {
  checked_size(type, shape, bytes.size());
  return make(type, std::move(shape), [&](std::span<std::byte> out) {
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  });
}

tensor tensor::view_of(ckpt::dtype type, dims shape, std::span<const std::byte> bytes,
                       std::shared_ptr<const void> owner) {
  return detail::tensor_access::view_of(type, std::move(shape), bytes, std::move(owner), nullptr);
}

tensor detail::tensor_access::view_of(ckpt::dtype type, dims shape, std::span<const std::byte> bytes,
                                      std::shared_ptr<const void> owner, const mapped_file* file) {
  checked_size(type, shape, bytes.size());
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignment_of(type) != 0)
    return tensor::copy_of(type, std::move(shape), bytes);
  return tensor(type, std::move(shape), bytes, std::move(owner), file);
}

namespace {

// The pages holding `bytes`, shared pages at either end included.
std::pair<void*, std::size_t> pages_of(std::span<const std::byte> bytes) noexcept {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::uintptr_t first = begin / page * page;
  const std::uintptr_t last = (begin + bytes.size() + page - 1) / page * page;
  return {reinterpret_cast<void*>(first), last - first};
}

}  // namespace

void detail::tensor_access::prefetch_pages(const tensor& x) noexcept {
  if (x.file_ != nullptr && x.bytes_.size() >= advised_bytes) prefetch_range(x.bytes_);
}

void detail::tensor_access::prefetch_range(std::span<const std::byte> mapped) noexcept {
  const auto [first, length] = pages_of(mapped);
  // The mapping is MADV_RANDOM (load reads the header only), and MADV_WILLNEED alone starts no
  // read on some kernels (bench/README.md, "Notes from the code"): marking the entry's pages
  // sequential until release_pages makes the faults of the copy read ahead in large blocks.
  ::madvise(first, length, MADV_SEQUENTIAL);
  ::madvise(first, length, MADV_WILLNEED);
}

void detail::tensor_access::release_pages(const tensor& x) noexcept {
  if (x.file_ != nullptr && x.bytes_.size() >= advised_bytes) release_range(x.bytes_);
}

void detail::tensor_access::release_range(std::span<const std::byte> mapped) noexcept {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(mapped.data());
  const std::uintptr_t first = (begin + page - 1) / page * page;
  const std::uintptr_t last = (begin + mapped.size()) / page * page;
  // Pages shared with a neighbouring range stay: it may still be in use.
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  // Back to the mapping's random access (prefetch_range made these pages sequential).
  const auto [pages, length] = pages_of(mapped);
  ::madvise(pages, length, MADV_RANDOM);
}

namespace {

// Entries of this many bytes or more are read from the file with pread rather than copied out of
// the mapping (a pread a tensor would cost more than the faults for small ones).
constexpr std::size_t pread_bytes = std::size_t{256} << 10;

// Copies of this many bytes or more are split between two threads: one core does not use all of
// the memory bandwidth (bench/README.md, "Library changes" 12).
constexpr std::size_t parallel_bytes = std::size_t{1} << 20;

}  // namespace

void detail::tensor_access::read_bytes(const tensor& x, std::span<std::byte> out) {
  const std::span<const std::byte> in = x.bytes_;
  if (in.empty()) return;
  const bool from_file = x.file_ != nullptr && in.size() >= pread_bytes;
  run_in_parallel(in.size() >= parallel_bytes ? 2 : 1, [&](std::size_t i, std::size_t n) {
    // Part i of n, cut on 4 KiB boundaries.
    const auto cut = [&](std::size_t k) { return k == n ? in.size() : in.size() / n * k / 4096 * 4096; };
    const std::size_t first = cut(i), count = cut(i + 1) - first;
    if (from_file) x.file_->read(in.subspan(first, count), out.data() + first);
    else std::memcpy(out.data() + first, in.data() + first, count);
  });
}

bool operator==(const tensor& a, const tensor& b) noexcept {
  return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ &&
         (a.bytes_.empty() || a.bytes_.data() == b.bytes_.data() ||
          std::memcmp(a.bytes_.data(), b.bytes_.data(), a.bytes_.size()) == 0);
}

void tensor::throw_dtype_mismatch(ckpt::dtype requested) const {
  throw std::invalid_argument("ckpt: tensor of dtype " + std::string(to_string(dtype_)) +
                              " viewed as " + std::string(to_string(requested)));
}

}  // namespace ckpt
