#include <ckpt/detail/transpose.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <system_error>
#include <thread>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ckpt::detail {
namespace {

// Square blocks of this many bytes a side (256 floats: 256 KiB a block) keep a source block and
// a destination block in L2. Blocks sized for L1 were much slower on matrices not in cache: a
// block's rows lie as many pages apart as it has rows, and small blocks come back to the same
// pages many times (bench/README.md, "Column-major").
constexpr std::size_t block_bytes = 1024;

// Matrices of at least this size are transposed on two threads.
constexpr std::size_t parallel_bytes = std::size_t{1} << 20;

template <class T>
void transpose_scalar(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
                      std::size_t r0, std::size_t r1, std::size_t c0, std::size_t c1) noexcept {
  for (std::size_t r = r0; r < r1; ++r)
    for (std::size_t c = c0; c < c1; ++c)
      std::memcpy(dst + (c * dst_stride + r) * sizeof(T), src + (r * src_stride + c) * sizeof(T), sizeof(T));
}

#if defined(__SSE2__)
// One register tile: a TILE x TILE square of elements, moved with unaligned loads and stores.
template <std::size_t Size>
struct tile;

template <>
struct tile<4> {
  static constexpr std::size_t side = 4;
  static void move(const std::byte* s, std::size_t s_stride, std::byte* d, std::size_t d_stride) noexcept {
    __m128 a = _mm_loadu_ps(reinterpret_cast<const float*>(s));
    __m128 b = _mm_loadu_ps(reinterpret_cast<const float*>(s + s_stride));
    __m128 c = _mm_loadu_ps(reinterpret_cast<const float*>(s + 2 * s_stride));
    __m128 e = _mm_loadu_ps(reinterpret_cast<const float*>(s + 3 * s_stride));
    _MM_TRANSPOSE4_PS(a, b, c, e);
    _mm_storeu_ps(reinterpret_cast<float*>(d), a);
    _mm_storeu_ps(reinterpret_cast<float*>(d + d_stride), b);
    _mm_storeu_ps(reinterpret_cast<float*>(d + 2 * d_stride), c);
    _mm_storeu_ps(reinterpret_cast<float*>(d + 3 * d_stride), e);
  }
};

template <>
struct tile<8> {
  static constexpr std::size_t side = 2;
  static void move(const std::byte* s, std::size_t s_stride, std::byte* d, std::size_t d_stride) noexcept {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + s_stride));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi64(a, b));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + d_stride), _mm_unpackhi_epi64(a, b));
  }
};

template <>
struct tile<2> {
  static constexpr std::size_t side = 8;
  static void move(const std::byte* s, std::size_t s_stride, std::byte* d, std::size_t d_stride) noexcept {
    __m128i r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * s_stride));
    // Three rounds of interleaving: 16-bit, then 32-bit, then 64-bit pairs.
    __m128i t[8];
    for (int i = 0; i < 4; ++i) {
      t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
    }
    __m128i u[8];
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        u[4 * i + 2 * j] = _mm_unpacklo_epi32(t[4 * i + j], t[4 * i + j + 2]);
        u[4 * i + 2 * j + 1] = _mm_unpackhi_epi32(t[4 * i + j], t[4 * i + j + 2]);
      }
    for (int j = 0; j < 4; ++j) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * j) * d_stride), _mm_unpacklo_epi64(u[j], u[j + 4]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(d + (2 * j + 1) * d_stride), _mm_unpackhi_epi64(u[j], u[j + 4]));
    }
  }
};

template <std::size_t Size>
void transpose_tiled(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
                     std::size_t rows, std::size_t cols) noexcept {
  using element = std::conditional_t<Size == 2, std::uint16_t, std::conditional_t<Size == 4, std::uint32_t, std::uint64_t>>;
  constexpr std::size_t side = tile<Size>::side;
  constexpr std::size_t block = std::max<std::size_t>(block_bytes / Size, side);
  // With a destination stride of a multiple of 1 KiB (a 2048-float row: 8 KiB), the rows a block
  // writes fall in the same L1 sets and evict each other before each line is filled: every store
  // misses (cachegrind: 7.7x a memcpy for 2048 x 2048 F32). Such blocks go through a small
  // contiguous buffer and leave it a destination row at a time. Other strides write directly,
  // which is faster for them.
  // The buffer is on the heap (a block is 256 KiB, too much for a thread's stack); without one,
  // the blocks are written directly.
  std::unique_ptr<std::byte[]> storage;
  if (dst_stride * Size % 1024 == 0) storage.reset(new (std::nothrow) std::byte[block * block * Size]);
  std::byte* const buffer = storage.get();
  const bool buffered = buffer != nullptr;
  for (std::size_t r0 = 0; r0 < rows; r0 += block) {
    const std::size_t r1 = std::min(rows, r0 + block), nr = r1 - r0;
    for (std::size_t c0 = 0; c0 < cols; c0 += block) {
      const std::size_t c1 = std::min(cols, c0 + block), nc = c1 - c0;
      const std::byte* s = src + (r0 * src_stride + c0) * Size;
      std::byte* d = buffered ? buffer : dst + (c0 * dst_stride + r0) * Size;
      const std::size_t d_stride = buffered ? block : dst_stride;
      const std::size_t r_tiled = nr / side * side, c_tiled = nc / side * side;
      for (std::size_t r = 0; r < r_tiled; r += side)
        for (std::size_t c = 0; c < c_tiled; c += side)
          tile<Size>::move(s + (r * src_stride + c) * Size, src_stride * Size, d + (c * d_stride + r) * Size, d_stride * Size);
      transpose_scalar<element>(s, src_stride, d, d_stride, r_tiled, nr, 0, nc);
      transpose_scalar<element>(s, src_stride, d, d_stride, 0, r_tiled, c_tiled, nc);
      if (buffered)
        for (std::size_t c = 0; c < nc; ++c)
          std::memcpy(dst + ((c0 + c) * dst_stride + r0) * Size, buffer + c * block * Size, nr * Size);
    }
  }
}
#endif

template <class T>
void transpose_blocked(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
                       std::size_t rows, std::size_t cols) noexcept {
  constexpr std::size_t block = std::max<std::size_t>(block_bytes / sizeof(T), 1);
  for (std::size_t r0 = 0; r0 < rows; r0 += block)
    for (std::size_t c0 = 0; c0 < cols; c0 += block)
      transpose_scalar<T>(src, src_stride, dst, dst_stride, r0, std::min(rows, r0 + block), c0, std::min(cols, c0 + block));
}

}  // namespace

void transpose(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
               std::size_t rows, std::size_t cols, std::size_t element_size) noexcept {
  if (rows == 0 || cols == 0) return;
  switch (element_size) {
#if defined(__SSE2__)
    case 2: return transpose_tiled<2>(src, src_stride, dst, dst_stride, rows, cols);
    case 4: return transpose_tiled<4>(src, src_stride, dst, dst_stride, rows, cols);
    case 8: return transpose_tiled<8>(src, src_stride, dst, dst_stride, rows, cols);
#else
    case 2: return transpose_blocked<std::uint16_t>(src, src_stride, dst, dst_stride, rows, cols);
    case 4: return transpose_blocked<std::uint32_t>(src, src_stride, dst, dst_stride, rows, cols);
    case 8: return transpose_blocked<std::uint64_t>(src, src_stride, dst, dst_stride, rows, cols);
#endif
    case 1: return transpose_blocked<std::uint8_t>(src, src_stride, dst, dst_stride, rows, cols);
    default:
      // Wider elements have no tile; move them whole.
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t c = 0; c < cols; ++c)
          std::memcpy(dst + (c * dst_stride + r) * element_size, src + (r * src_stride + c) * element_size, element_size);
  }
}

void transpose(const std::byte* src, std::byte* dst, std::size_t rows, std::size_t cols,
               std::size_t element_size) noexcept {
  if (rows == 1 || cols == 1) {
    // A row or a column reads the same in both orders.
    if (rows * cols != 0) std::memcpy(dst, src, rows * cols * element_size);
    return;
  }
  // One core does not use all of the memory bandwidth (bench/README.md, "Notes from the code"), so
  // a large matrix is split into two runs of source rows, the second transposed on a helper thread. The runs write disjoint columns of the destination.
  const std::size_t half = rows / 2 / 64 * 64;  // whole tiles on either side
  if (rows * cols * element_size >= parallel_bytes && half > 0 && std::thread::hardware_concurrency() > 1) {
    try {
      const std::jthread helper([=] {
        transpose(src + half * cols * element_size, cols, dst + half * element_size, rows, rows - half, cols,
                  element_size);
      });
      transpose(src, cols, dst, rows, half, cols, element_size);
      return;  // the helper joins here
    } catch (const std::system_error&) {
      // No thread to be had: the whole matrix on this one, below.
    }
  }
  transpose(src, cols, dst, rows, rows, cols, element_size);
}

}  // namespace ckpt::detail
