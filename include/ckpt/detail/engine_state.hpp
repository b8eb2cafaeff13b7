#pragma once
// Not part of the API: what leaf.hpp's leaf_traits of the <random> engines use, which types are
// engines and an engine's state as the numbers of its text (compiled in src/structures/leaf.cpp).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <istream>
#include <ostream>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

namespace ckpt::detail {

// Whether E is one of the engine templates of <random> (adaptors of such engines included).
template <class E>
struct is_std_engine : std::false_type {};
template <class U, U a, U c, U m>
struct is_std_engine<std::linear_congruential_engine<U, a, c, m>> : std::true_type {};
template <class U, std::size_t w, std::size_t n, std::size_t m, std::size_t r, U a, std::size_t u, U d,
          std::size_t s, U b, std::size_t t, U c, std::size_t l, U f>
struct is_std_engine<std::mersenne_twister_engine<U, w, n, m, r, a, u, d, s, b, t, c, l, f>> : std::true_type {};
template <class U, std::size_t w, std::size_t s, std::size_t r>
struct is_std_engine<std::subtract_with_carry_engine<U, w, s, r>> : std::true_type {};
template <class E, std::size_t p, std::size_t r>
struct is_std_engine<std::discard_block_engine<E, p, r>> : is_std_engine<E> {};
template <class E, std::size_t w, class U>
struct is_std_engine<std::independent_bits_engine<E, w, U>> : is_std_engine<E> {};
template <class E, std::size_t k>
struct is_std_engine<std::shuffle_order_engine<E, k>> : is_std_engine<E> {};

// The numbers `print` writes to a stream in the classic locale, in order (src/structures/leaf.cpp).
std::vector<std::uint64_t> printed_numbers(const std::function<void(std::ostream&)>& print);
// Runs `scan` on a stream holding `numbers`, in the classic locale; false if the stream failed
// (src/structures/leaf.cpp).
bool scan_numbers(std::span<const std::uint64_t> numbers, const std::function<void(std::istream&)>& scan);
// Throws std::invalid_argument: the entry does not hold a state of the random engine.
[[noreturn]] void throw_not_engine_state();

// The numbers of an engine's textual representation (operator<<), in order.
template <class E>
std::vector<std::uint64_t> engine_words(const E& e) {
  return printed_numbers([&e](std::ostream& out) { out << e; });
}

}  // namespace ckpt::detail
