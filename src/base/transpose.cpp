#include <ckpt/detail/transpose.hpp>

#include "parallel.hpp"
#include "transpose_kernels.hpp"
#include "transpose_tiles.hpp"
#include "tuning.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

namespace ckpt::detail {
namespace {

#if defined(__SSE2__)
// One register tile of elements of `Size` bytes: a `side` x `side` square, moved with unaligned
// loads and stores (4 x 4 floats, 2 x 2 doubles, 8 x 8 halves).
template <std::size_t Size>
struct tile {
  static constexpr std::size_t side = Size == 4 ? 4 : Size == 8 ? 2 : 8;
  static void move(const std::byte* s, std::size_t s_stride, std::byte* d, std::size_t d_stride) noexcept {
    if constexpr (Size == 4) {
      __m128 r[4];
      for (std::size_t i = 0; i < 4; ++i) r[i] = _mm_loadu_ps(reinterpret_cast<const float*>(s + i * s_stride));
      _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]);
      for (std::size_t i = 0; i < 4; ++i) _mm_storeu_ps(reinterpret_cast<float*>(d + i * d_stride), r[i]);
    } else if constexpr (Size == 8) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + s_stride));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi64(a, b));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + d_stride), _mm_unpackhi_epi64(a, b));
    } else {
      static_assert(Size == 2);
      __m128i r[8];
      for (std::size_t i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * s_stride));
      // Three rounds of interleaving: 16-bit, then 32-bit, then 64-bit pairs.
      __m128i t[8];
      for (std::size_t i = 0; i < 4; ++i) {
        t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
      }
      __m128i u[8];
      for (std::size_t i = 0; i < 2; ++i)
        for (std::size_t j = 0; j < 2; ++j) {
          u[4 * i + 2 * j] = _mm_unpacklo_epi32(t[4 * i + j], t[4 * i + j + 2]);
          u[4 * i + 2 * j + 1] = _mm_unpackhi_epi32(t[4 * i + j], t[4 * i + j + 2]);
        }
      for (std::size_t j = 0; j < 4; ++j) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * j) * d_stride), _mm_unpacklo_epi64(u[j], u[j + 4]));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * j + 1) * d_stride), _mm_unpackhi_epi64(u[j], u[j + 4]));
      }
    }
  }
};

#endif

template <class T>
void transpose_blocked(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
                       std::size_t rows, std::size_t cols) noexcept {
  constexpr std::size_t block = std::max<std::size_t>(tuning::block_bytes / sizeof(T), 1);
  for (std::size_t r0 = 0; r0 < rows; r0 += block)
    for (std::size_t c0 = 0; c0 < cols; c0 += block)
      transpose_scalar<T>(src, src_stride, dst, dst_stride, r0, std::min(rows, r0 + block), c0, std::min(cols, c0 + block));
}

}  // namespace

transpose_kernel best_transpose_kernel() noexcept {
#if defined(CKPT_HAVE_AVX2_KERNELS)
  if (__builtin_cpu_supports("avx2")) return transpose_kernel::avx2;
#endif
#if defined(__SSE2__)
  return transpose_kernel::sse2;
#else
  return transpose_kernel::portable;
#endif
}

transpose_kernel& active_transpose_kernel() noexcept {
  static transpose_kernel kernel = best_transpose_kernel();
  return kernel;
}

namespace {

// The calling thread's two block buffers (transpose_tiles.hpp), allocated at its first transpose
// and kept until it ends (1 MiB), or null where that allocation failed: fresh memory for each
// call would cost a page fault a page. The second buffer is lent to the helper thread of a split
// matrix, which lives for one call.
std::byte* block_buffer(std::size_t which) noexcept {
  thread_local std::unique_ptr<std::byte[]> buffers;
  thread_local bool failed = false;
  if (!buffers && !failed) try {
      buffers = std::make_unique_for_overwrite<std::byte[]>(2 * block_buffer_bytes);
    } catch (const std::bad_alloc&) {
      failed = true;  // every block written directly
    }
  return buffers ? buffers.get() + which * block_buffer_bytes : nullptr;
}

void transpose_with(std::byte* buffer, const std::byte* src, std::size_t src_stride, std::byte* dst,
                    std::size_t dst_stride, std::size_t rows, std::size_t cols, std::size_t element_size,
                    destination to) noexcept {
  if (rows == 0 || cols == 0) return;
  const transpose_kernel kernel = active_transpose_kernel();
  const bool to_memory = to == destination::memory;
#if defined(CKPT_HAVE_AVX2_KERNELS)
  if (kernel == transpose_kernel::avx2 &&
      transpose_avx2(src, src_stride, dst, dst_stride, rows, cols, element_size, to_memory, buffer))
    return;
#endif
#if defined(__SSE2__)
  if (kernel != transpose_kernel::portable) switch (element_size) {
      case 2: return transpose_tiled<tile<2>, 2>(src, src_stride, dst, dst_stride, rows, cols, to_memory, buffer);
      case 4: return transpose_tiled<tile<4>, 4>(src, src_stride, dst, dst_stride, rows, cols, to_memory, buffer);
      case 8: return transpose_tiled<tile<8>, 8>(src, src_stride, dst, dst_stride, rows, cols, to_memory, buffer);
      default: break;
    }
#else
  static_cast<void>(to_memory);
  static_cast<void>(buffer);
#endif
  switch (element_size) {
    case 2: return transpose_blocked<std::uint16_t>(src, src_stride, dst, dst_stride, rows, cols);
    case 4: return transpose_blocked<std::uint32_t>(src, src_stride, dst, dst_stride, rows, cols);
    case 8: return transpose_blocked<std::uint64_t>(src, src_stride, dst, dst_stride, rows, cols);
    case 1: return transpose_blocked<std::uint8_t>(src, src_stride, dst, dst_stride, rows, cols);
    default:
      // Wider elements have no tile; move them whole.
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c)
          std::memcpy(dst + (c * dst_stride + r) * element_size, src + (r * src_stride + c) * element_size, element_size);
  }
}

}  // namespace

void transpose(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
               std::size_t rows, std::size_t cols, std::size_t element_size, destination to) noexcept {
  if (rows == 0 || cols == 0) return;
  transpose_with(block_buffer(0), src, src_stride, dst, dst_stride, rows, cols, element_size, to);
}

void transpose(const std::byte* src, std::byte* dst, std::size_t rows, std::size_t cols,
               std::size_t element_size, destination to) noexcept {
  if (rows == 1 || cols == 1) {
    // A row or a column reads the same in both orders.
    if (rows * cols != 0) std::memcpy(dst, src, rows * cols * element_size);
    return;
  }
  // One core does not use all of the memory bandwidth, so a large matrix is split into two runs
  // of source rows, the second transposed on a helper thread. The runs write disjoint columns of
  // the destination.
  const std::size_t half = rows / 2 / 64 * 64;  // whole tiles on either side
  if (rows * cols * element_size < tuning::parallel_transpose_bytes || half == 0)
    return transpose(src, cols, dst, rows, rows, cols, element_size, to);
  std::byte* const lent = block_buffer(1);
  run_in_parallel(2, [&](std::size_t part, std::size_t parts) {
    if (parts == 1) transpose(src, cols, dst, rows, rows, cols, element_size, to);
    else if (part == 0) transpose(src, cols, dst, rows, half, cols, element_size, to);
    else transpose_with(lent, src + half * cols * element_size, cols, dst + half * element_size, rows, rows - half,
                        cols, element_size, to);
  });
}

}  // namespace ckpt::detail
