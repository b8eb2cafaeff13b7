// The transpose's AVX2 tile for 4-byte elements. This file alone is compiled with -mavx2
// (CMakeLists.txt); src/base/transpose.cpp calls it only on a CPU that has AVX2.
#include "transpose_kernels.hpp"
#include "transpose_tiles.hpp"

#include <immintrin.h>

namespace ckpt::detail {
namespace {

// 8 x 8 floats. Rows r and r + 4 are loaded into the two 128-bit lanes of one register, so that
// two in-lane 4 x 4 transposes (unpack, then shuffle) leave each output row whole: no lane-crossing
// permute, which would cost more than SSE2's 4 x 4 tile saves.
struct avx2_tile4 {
  static constexpr std::size_t side = 8;
  [[gnu::always_inline]] static void move(const std::byte* s, std::size_t s_stride, std::byte* d, std::size_t d_stride) noexcept {
    const auto half = [&](std::size_t row, std::size_t col) {
      return _mm_loadu_ps(reinterpret_cast<const float*>(s + row * s_stride + col * 4));
    };
    const auto rows = [&](std::size_t row, std::size_t col) {
      return _mm256_insertf128_ps(_mm256_castps128_ps256(half(row, col)), half(row + 4, col), 1);
    };
    __m256 t[8];
    for (std::size_t i = 0; i < 2; ++i) {  // columns 0-3, then 4-7
      const __m256 r0 = rows(0, 4 * i), r1 = rows(1, 4 * i), r2 = rows(2, 4 * i), r3 = rows(3, 4 * i);
      t[4 * i + 0] = _mm256_unpacklo_ps(r0, r1);
      t[4 * i + 1] = _mm256_unpackhi_ps(r0, r1);
      t[4 * i + 2] = _mm256_unpacklo_ps(r2, r3);
      t[4 * i + 3] = _mm256_unpackhi_ps(r2, r3);
    }
    const auto store = [&](std::size_t row, __m256 v) {
      _mm256_storeu_ps(reinterpret_cast<float*>(d + row * d_stride), v);
    };
    for (std::size_t i = 0; i < 2; ++i) {
      store(4 * i + 0, _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0)));
      store(4 * i + 1, _mm256_shuffle_ps(t[4 * i + 0], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2)));
      store(4 * i + 2, _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0)));
      store(4 * i + 3, _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2)));
    }
  }
};

}  // namespace

bool transpose_avx2(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
                    std::size_t rows, std::size_t cols, std::size_t element_size, bool to_memory,
                    std::byte* buffer) noexcept {
  if (element_size != 4) return false;
  transpose_tiled<avx2_tile4, 4>(src, src_stride, dst, dst_stride, rows, cols, to_memory, buffer);
  return true;
}

}  // namespace ckpt::detail
