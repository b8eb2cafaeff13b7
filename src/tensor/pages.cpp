// The copies out of a tensor's bytes (ckpt/detail/pages.hpp): from memory with memcpy, from a
// loaded file with pread through staging bands, never through the mapping.
#include <ckpt/detail/pages.hpp>

#include <ckpt/detail/transpose.hpp>

#include "base/memory.hpp"
#include "base/parallel.hpp"
#include "base/tuning.hpp"
#include "io/mapped_file.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

namespace ckpt::detail {

tensor tensor_access::view_of(dtype type, dims shape, std::span<const std::byte> bytes,
                              std::shared_ptr<const void> owner, const mapped_file* file) {
  if (file == nullptr) return tensor::view_of(type, std::move(shape), bytes, std::move(owner));
  tensor::checked_size(type, shape, bytes.size());
  tensor out(type, std::move(shape), bytes, std::move(owner));
  out.file_ = file;
  // A misaligned entry cannot be viewed: it is read into memory, with pread like every copy.
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % tensor::alignment_of(type) != 0) return in_memory(out);
  return out;
}

namespace {

// Part `part` of `parts` of `size` units, cut on multiples of `grain`: [first, last).
std::pair<std::size_t, std::size_t> part_of(std::size_t size, std::size_t part, std::size_t parts,
                                            std::size_t grain) noexcept {
  const auto cut = [&](std::size_t k) { return k == parts ? size : size / parts * k / grain * grain; };
  return {cut(part), cut(part + 1)};
}

}  // namespace

void tensor_access::read_bytes(const tensor& x, std::span<std::byte> out) {
  const std::span<const std::byte> in = x.bytes_;
  if (in.empty()) return;
  run_in_parallel(in.size() >= tuning::parallel_copy_bytes ? 2 : 1, [&](std::size_t part, std::size_t parts) {
    const auto [first, last] = part_of(in.size(), part, parts, 4096);
    if (x.file_ != nullptr) x.file_->read(in.subspan(first, last - first), out.data() + first);
    else std::memcpy(out.data() + first, in.data() + first, last - first);
  });
}

void tensor_access::read_transposed(const tensor& x, std::byte* out, std::size_t rows, std::size_t cols,
                                    std::size_t element) {
  if (x.file_ == nullptr) return transpose(x.bytes_.data(), out, rows, cols, element, destination::memory);
  if (rows == 0 || cols == 0) return;
  if (rows == 1 || cols == 1) return read_bytes(x, {out, rows * cols * element});
  const std::size_t row_bytes = cols * element;
  // A band of `band_rows` rows by `band_cols` columns: whole rows when a staging band holds 64
  // of them (each band then one pread), else 64 rows of a part of the columns (a pread a row).
  // Bands of whole rows hold tuning::transpose_band_bytes, or 64 rows if those are more: 64 rows and
  // more write each page of the destination 256 bytes or more at a time.
  const std::size_t whole_rows = tuning::staging_bytes / row_bytes;
  const std::size_t band_rows = whole_rows >= 64 ? std::max<std::size_t>(64, tuning::transpose_band_bytes / row_bytes / 64 * 64)
                                                 : std::min<std::size_t>(64, rows);
  const std::size_t band_cols = whole_rows >= 64 ? cols : std::max<std::size_t>(1, tuning::staging_bytes / band_rows / element);
  // Two runs of rows on two threads, cut on whole tiles: they write disjoint columns of `out`.
  const std::size_t parts = x.nbytes() >= tuning::parallel_copy_bytes && rows >= 128 ? 2 : 1;
  run_in_parallel(parts, [&](std::size_t part, std::size_t count) {
    const auto [first, last] = part_of(rows, part, count, 64);
    const staging_band band;
    for (std::size_t r = first; r < last; r += band_rows) {
      const std::size_t n = std::min(band_rows, last - r);
      for (std::size_t c = 0; c < cols; c += band_cols) {
        const std::size_t m = std::min(band_cols, cols - c);
        if (m == cols) {
          x.file_->read(x.bytes_.subspan(r * row_bytes, n * row_bytes), band.data());
        } else {
          for (std::size_t i = 0; i < n; ++i)
            x.file_->read(x.bytes_.subspan((r + i) * row_bytes + c * element, m * element), band.data() + i * m * element);
        }
        transpose(band.data(), m, out + (c * rows + r) * element, rows, n, m, element, destination::memory);
      }
    }
  });
}

void tensor_access::for_each_band(const tensor& x, std::size_t row_bytes,
                                  const std::function<void(std::size_t, std::span<const std::byte>)>& visit) {
  const std::span<const std::byte> in = x.bytes_;
  if (in.empty()) return;
  if (x.file_ == nullptr) return visit(0, in);
  const staging_band band;
  // A row longer than a band is read into a buffer of its own.
  std::unique_ptr<std::byte[]> long_row;
  if (row_bytes > tuning::staging_bytes) long_row = std::make_unique_for_overwrite<std::byte[]>(row_bytes);
  std::byte* const buffer = long_row ? long_row.get() : band.data();
  const std::size_t band_rows = std::max<std::size_t>(1, tuning::staging_bytes / row_bytes);
  const std::size_t rows = in.size() / row_bytes;
  for (std::size_t r = 0; r < rows; r += band_rows) {
    const std::span<const std::byte> part = in.subspan(r * row_bytes, std::min(band_rows, rows - r) * row_bytes);
    x.file_->read(part, buffer);
    visit(r, {buffer, part.size()});
  }
}

tensor tensor_access::in_memory(const tensor& x) {
  if (x.file_ == nullptr) return x;
  const std::span<const std::int64_t> shape = x.shape();
  return tensor::make(x.dtype(), dims(shape.begin(), shape.end()), [&](std::span<std::byte> out) { read_bytes(x, out); });
}

void advise_fresh(std::span<std::byte> bytes) noexcept {
  if (bytes.size() < tuning::heap_limit) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data());
  const std::uintptr_t first = (begin + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
  const std::uintptr_t last = (begin + bytes.size()) / huge_page_bytes * huge_page_bytes;
  static_cast<void>(::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE));
}

}  // namespace ckpt::detail
