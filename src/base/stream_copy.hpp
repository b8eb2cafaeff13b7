#pragma once
// The copy around the caches (non-temporal stores, where SSE2 has them), shared by the digest's
// hashing copy (src/base/digest.cpp, xxh3_copy) and the transpose's writes to memory
// (src/base/transpose_tiles.hpp). Internal linkage, as in transpose_tiles.hpp, so that each file's
// copy keeps its own instruction set (src/base/transpose_avx2.cpp is compiled for AVX2).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ckpt::detail {
namespace {

// Copies `n` bytes to `d` around the caches: the destination's lines are not read first, and do
// not evict what the caches hold; four 16-byte stores in flight a round. The caller fences
// (fence_stores) before the stores must be seen by another thread.
inline void copy_to_memory(std::byte* d, const std::byte* s, std::size_t n) noexcept {
#if defined(__SSE2__)
  const std::size_t head = std::min<std::size_t>(n, (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16);
  if (head != 0) std::memcpy(d, s, head);
  std::size_t i = head;
  for (; i + 64 <= n; i += 64) {
    const auto* from = reinterpret_cast<const __m128i*>(s + i);
    auto* to = reinterpret_cast<__m128i*>(d + i);
    const __m128i a = _mm_loadu_si128(from), b = _mm_loadu_si128(from + 1), c = _mm_loadu_si128(from + 2),
                  e = _mm_loadu_si128(from + 3);
    _mm_stream_si128(to, a);
    _mm_stream_si128(to + 1, b);
    _mm_stream_si128(to + 2, c);
    _mm_stream_si128(to + 3, e);
  }
  for (; i + 16 <= n; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  if (i != n) std::memcpy(d + i, s + i, n - i);
#else
  if (n != 0) std::memcpy(d, s, n);
#endif
}

// Orders the stores of copy_to_memory before the stores that follow (an sfence; nothing where
// there are no non-temporal stores).
inline void fence_stores() noexcept {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace
}  // namespace ckpt::detail
