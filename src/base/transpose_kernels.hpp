#pragma once
// The instruction sets of the transpose (src/base/transpose.cpp), chosen at run time: the x86-64
// baseline is SSE2, and AVX2 tiles are used where the CPU has them. Private to the build; the
// test of the transpose forces each kernel the CPU has in turn.

#include <cstddef>

namespace ckpt::detail {

enum class transpose_kernel {
  portable,  // blocked element copies: any CPU
  sse2,      // register tiles of 4 x 4 floats, 2 x 2 doubles, 8 x 8 halves
  avx2,      // 8 x 8 floats (the others as sse2)
};

// The widest kernel this CPU and this build have.
[[nodiscard]] transpose_kernel best_transpose_kernel() noexcept;

// The kernel in use: best_transpose_kernel() until a test sets another (one the CPU has). Not
// synchronized: set it while no transpose runs.
[[nodiscard]] transpose_kernel& active_transpose_kernel() noexcept;

// The AVX2 tiles (src/base/transpose_avx2.cpp, compiled for AVX2): false if `element_size` has none.
// `to_memory`: the destination is written around the caches (detail::destination::memory);
// `buffer`: the block buffer (transpose_tiles.hpp), or null.
bool transpose_avx2(const std::byte* src, std::size_t src_stride, std::byte* dst, std::size_t dst_stride,
                    std::size_t rows, std::size_t cols, std::size_t element_size, bool to_memory,
                    std::byte* buffer) noexcept;

}  // namespace ckpt::detail
