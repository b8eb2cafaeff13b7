// The tiled transpose that reorders column-major leaves, against the definition, with each
// kernel this CPU has (portable, SSE2, AVX2) forced in turn through the build's private seam;
// and the split of work between threads that it, extraction and snapshots share.
#include <boost/test/unit_test.hpp>

#include <ckpt/detail/transpose.hpp>

#include "base/parallel.hpp"           // the build's private seams (src/)
#include "base/transpose_kernels.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

BOOST_AUTO_TEST_SUITE(test_transpose)

namespace {

// Element (r, c) of a row-major matrix of `size`-byte elements: every byte distinct enough to
// catch a misplaced element or a torn one.
std::vector<std::byte> pattern(std::size_t rows, std::size_t cols, std::size_t size) {
  std::vector<std::byte> out(rows * cols * size);
  for (std::size_t i = 0; i < rows * cols; ++i)
    for (std::size_t b = 0; b < size; ++b) out[i * size + b] = static_cast<std::byte>((i * 7 + b * 131 + i / 256) & 0xff);
  return out;
}

// Whether `dst` (cols x rows) holds the transpose of `src` (rows x cols), element by element.
bool is_transpose(const std::vector<std::byte>& src, const std::vector<std::byte>& dst, std::size_t rows,
                  std::size_t cols, std::size_t size) {
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      if (std::memcmp(dst.data() + (c * rows + r) * size, src.data() + (r * cols + c) * size, size) != 0) return false;
  return true;
}

using ckpt::detail::transpose_kernel;

// The kernels this CPU and build have, the widest last.
std::vector<transpose_kernel> kernels() {
  std::vector<transpose_kernel> out{transpose_kernel::portable};
#if defined(__SSE2__)
  out.push_back(transpose_kernel::sse2);
#endif
  if (ckpt::detail::best_transpose_kernel() == transpose_kernel::avx2) out.push_back(transpose_kernel::avx2);
  return out;
}

const char* name_of(transpose_kernel k) {
  return k == transpose_kernel::portable ? "portable" : k == transpose_kernel::sse2 ? "sse2" : "avx2";
}

using ckpt::detail::destination;

// Runs `check(name, to)` with each kernel in use and each destination (into the caches, and
// around them with non-temporal stores), then puts the best kernel back.
template <class F>
void with_each_kernel(F&& check) {
  for (const transpose_kernel k : kernels()) {
    ckpt::detail::active_transpose_kernel() = k;
    check(name_of(k), destination::cached);
    check((std::string(name_of(k)) + " to memory").c_str(), destination::memory);
  }
  ckpt::detail::active_transpose_kernel() = ckpt::detail::best_transpose_kernel();
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_widest_kernel_the_cpu_has_is_chosen) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  BOOST_TEST((ckpt::detail::best_transpose_kernel() ==
              (__builtin_cpu_supports("avx2") ? transpose_kernel::avx2 : transpose_kernel::sse2)));
#endif
  BOOST_TEST((ckpt::detail::active_transpose_kernel() == ckpt::detail::best_transpose_kernel()));
}

BOOST_AUTO_TEST_CASE(matches_the_definition_for_every_element_size_and_odd_extents) {
  with_each_kernel([&](const char* kernel, destination to) {
    for (const std::size_t size : {1u, 2u, 4u, 8u, 16u, 3u})
      for (const std::size_t rows : {1u, 2u, 3u, 7u, 8u, 17u, 64u, 129u, 300u})
        for (const std::size_t cols : {1u, 4u, 5u, 9u, 16u, 63u, 130u}) {
          const auto src = pattern(rows, cols, size);
          std::vector<std::byte> dst(src.size(), std::byte{0xEE});
          ckpt::detail::transpose(src.data(), dst.data(), rows, cols, size, to);
          BOOST_TEST(is_transpose(src, dst, rows, cols, size), kernel << ", size " << size << ", " << rows << " x " << cols);
        }
  });
}

BOOST_AUTO_TEST_CASE(power_of_two_strides_take_the_buffered_path) {
  with_each_kernel([&](const char* kernel, destination to) {
    // Destination rows of a multiple of 1 KiB go through the block buffer: check it too, with
    // partial blocks at the edges.
    for (const std::size_t size : {2u, 4u, 8u})
      for (const auto& [rows, cols] : {std::pair<std::size_t, std::size_t>{512, 256}, {1024, 130}, {2048, 67}}) {
        const auto src = pattern(rows, cols, size);
        std::vector<std::byte> dst(src.size());
        ckpt::detail::transpose(src.data(), dst.data(), rows, cols, size, to);
        std::vector<std::byte> back(src.size());
        ckpt::detail::transpose(dst.data(), back.data(), cols, rows, size, to);
        BOOST_TEST((back == src), kernel << ", size " << size << ", " << rows << " x " << cols);
        BOOST_TEST(is_transpose(src, dst, rows, cols, size), kernel << ", size " << size << ", " << rows << " x " << cols);
      }
  });
}

BOOST_AUTO_TEST_CASE(large_matrices_split_between_two_threads_come_out_whole) {
  with_each_kernel([&](const char* kernel, destination to) {
    // 8 MiB and more: two runs of rows, the second on a helper thread; odd row counts leave the
    // helper a partial tile.
    for (const auto& [rows, cols, size] :
         {std::tuple<std::size_t, std::size_t, std::size_t>{2048, 1024, 4}, {1031, 1000, 8}, {4099, 2050, 1}}) {
      const auto src = pattern(rows, cols, size);
      std::vector<std::byte> dst(src.size());
      ckpt::detail::transpose(src.data(), dst.data(), rows, cols, size, to);
      BOOST_TEST(is_transpose(src, dst, rows, cols, size), kernel << ", size " << size << ", " << rows << " x " << cols);
    }
  });
}

BOOST_AUTO_TEST_CASE(works_on_unaligned_buffers) {
  with_each_kernel([&](const char* kernel, destination to) {
    const std::size_t rows = 33, cols = 19, size = 4;
    const auto src = pattern(rows, cols, size);
    std::vector<std::byte> shifted_src(src.size() + 1), dst(src.size() + 3);
    std::memcpy(shifted_src.data() + 1, src.data(), src.size());
    ckpt::detail::transpose(shifted_src.data() + 1, dst.data() + 3, rows, cols, size, to);
    std::vector<std::byte> back(src.size());
    ckpt::detail::transpose(dst.data() + 3, back.data(), cols, rows, size, to);
    BOOST_TEST((back == src), kernel);
  });
}

BOOST_AUTO_TEST_CASE(empty_matrices_touch_nothing) {
  std::byte sentinel{0x5A};
  ckpt::detail::transpose(nullptr, &sentinel, 0, 5, 4);
  ckpt::detail::transpose(nullptr, &sentinel, 5, 0, 4, destination::memory);
  BOOST_TEST((sentinel == std::byte{0x5A}));
}

BOOST_AUTO_TEST_SUITE(parallel_parts)

BOOST_AUTO_TEST_CASE(every_part_runs_once_the_first_on_the_calling_thread) {
  const std::size_t n = std::thread::hardware_concurrency() > 1 ? 4 : 1;
  std::vector<std::atomic<int>> runs(4);
  std::atomic<bool> first_here = false;
  std::atomic<int> other_counts = 0;  // asserted after: Boost.Test's assertions are not thread-safe
  const auto caller = std::this_thread::get_id();
  ckpt::detail::run_in_parallel(4, [&](std::size_t k, std::size_t parts) {
    if (parts != n) ++other_counts;
    ++runs[k];
    if (k == 0) first_here = std::this_thread::get_id() == caller;
  });
  BOOST_TEST(other_counts == 0);
  for (std::size_t k = 0; k < 4; ++k) BOOST_TEST(runs[k] == (k < n ? 1 : 0), "part " << k);
  BOOST_TEST(first_here.load());
}

BOOST_AUTO_TEST_CASE(what_a_part_throws_is_rethrown_and_the_other_parts_still_run) {
  std::atomic<int> finished = 0;
  std::atomic<std::size_t> parts_seen = 0;
  BOOST_CHECK_EXCEPTION(ckpt::detail::run_in_parallel(3,
                                                      [&](std::size_t k, std::size_t parts) {
                                                        parts_seen = parts;
                                                        if (k == parts - 1) throw std::runtime_error("last part");
                                                        std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                                        ++finished;
                                                      }),
                        std::runtime_error, [](const std::runtime_error& e) { return std::string(e.what()) == "last part"; });
  // The part that threw ran on a helper (where there are helpers); every other part ran whole.
  BOOST_TEST(finished == static_cast<int>(parts_seen) - 1);
}

BOOST_AUTO_TEST_CASE(a_split_inside_a_part_runs_on_that_parts_thread) {
  // Extraction reads two runs of leaves in parallel, and each leaf's own transpose or read would
  // split again: nested calls stay on their thread, so no more threads run than parts.
  // (Boost.Test's assertions are not thread-safe: the parts count, the test asserts after.)
  std::atomic<int> nested_calls = 0, nested_elsewhere = 0;
  ckpt::detail::run_in_parallel(2, [&](std::size_t, std::size_t) {
    const auto outer = std::this_thread::get_id();
    ckpt::detail::run_in_parallel(2, [&](std::size_t k, std::size_t parts) {
      ++nested_calls;
      if (parts != 1 || k != 0 || std::this_thread::get_id() != outer) ++nested_elsewhere;
    });
  });
  BOOST_TEST(nested_calls == (std::thread::hardware_concurrency() > 1 ? 2 : 1));
  BOOST_TEST(nested_elsewhere == 0);
  // Outside any part, a call splits again.
  std::size_t seen = 0;
  ckpt::detail::run_in_parallel(2, [&](std::size_t k, std::size_t parts) {
    if (k == 0) seen = parts;
  });
  BOOST_TEST(seen == (std::thread::hardware_concurrency() > 1 ? 2u : 1u));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE_END()  // test_transpose
