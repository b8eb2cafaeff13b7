#pragma once
// The cache-blocked loop of the transpose over a register tile (`Tile::side` x `Tile::side`
// elements of `Size` bytes, moved by `Tile::move`), shared by src/base/transpose.cpp (SSE2, the x86-64
// baseline) and src/base/transpose_avx2.cpp (compiled for AVX2). Everything here has internal
// linkage, so that each file's copy keeps its own instruction set.

#include "stream_copy.hpp"
#include "tuning.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace ckpt::detail {
namespace {

// The largest block buffer a transpose_tiled call uses: a square block of tuning::block_bytes a
// side, of 2-byte elements (512 x 512 of them).
constexpr std::size_t block_buffer_bytes = tuning::block_bytes * tuning::block_bytes / 2;

template <class T>
void transpose_scalar(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
                      std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) noexcept {
  for (std::size_t r = r0; r < r1; ++r)
    for (std::size_t c = c0; c < c1; ++c)
      std::memcpy(dst + (c * dst_stride + r) * sizeof(T), src + (r * src_stride + c) * sizeof(T), sizeof(T));
}

// `to_memory`: the destination is not read again soon (a leaf being loaded), and is written
// around the caches from the block buffer. `buffer`: block_buffer_bytes of scratch memory, or
// null to write every block directly.
template <class Tile, std::size_t Size>
void transpose_tiled(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
                     std::size_t rows, std::size_t cols, bool to_memory, std::byte* buffer) noexcept {
  using element = std::conditional_t<Size == 2, std::uint16_t, std::conditional_t<Size == 4, std::uint32_t, std::uint64_t>>;
  constexpr std::size_t side = Tile::side;
  constexpr std::size_t block = std::max<std::size_t>(tuning::block_bytes / Size, side);
  // With a destination stride of a multiple of 1 KiB (a 2048-float row: 8 KiB), the rows a block
  // writes fall in the same L1 sets and evict each other before each line is filled: every store
  // misses. Such blocks go through a small contiguous buffer and leave it a destination row at a
  // time. Other strides write directly, which costs them less (CHANGELOG.md, "Performance
  // history", "The first runs"), unless the destination is written around the caches, which only
  // the buffer's whole rows can be.
  const std::size_t buffer_stride = std::min(block, rows);
  const bool buffered = buffer != nullptr && (to_memory || dst_stride * Size % 1024 == 0);
  for (std::size_t r0 = 0; r0 < rows; r0 += block) {
    const std::size_t r1 = std::min(rows, r0 + block), nr = r1 - r0;
    for (std::size_t c0 = 0; c0 < cols; c0 += block) {
      const std::size_t c1 = std::min(cols, c0 + block), nc = c1 - c0;
      const std::byte* s = src + (r0 * src_stride + c0) * Size;
      std::byte* d = buffered ? buffer : dst + (c0 * dst_stride + r0) * Size;
      const std::size_t d_stride = buffered ? buffer_stride : dst_stride;
      const std::size_t r_tiled = nr / side * side, c_tiled = nc / side * side;
      for (std::size_t r = 0; r < r_tiled; r += side)
        for (std::size_t c = 0; c < c_tiled; c += side)
          Tile::move(s + (r * src_stride + c) * Size, src_stride * Size, d + (c * d_stride + r) * Size, d_stride * Size);
      transpose_scalar<element>(s, src_stride, d, d_stride, r_tiled, nr, 0, nc);
      transpose_scalar<element>(s, src_stride, d, d_stride, 0, r_tiled, c_tiled, nc);
      if (buffered)
        for (std::size_t c = 0; c < nc; ++c) {
          std::byte* const row = dst + ((c0 + c) * dst_stride + r0) * Size;
          const std::byte* const from = buffer + c * buffer_stride * Size;
          if (to_memory) copy_to_memory(row, from, nr * Size);
          else std::memcpy(row, from, nr * Size);
        }
    }
  }
  if (to_memory && buffered) fence_stores();
}
}  // namespace
}  // namespace ckpt::detail
