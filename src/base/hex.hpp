#pragma once
// Hex digits in one place: every number the library and the tool `ckpt` spell in hex (the
// digest's 16 digits, the \xNN and \uNNNN escapes of messages and JSON, a pickle opcode's 0xNN,
// the %NN of S3 URLs) is written by append_hex, and every hex digit a reader checks is checked by
// is_hex_digit.

#include <cstddef>
#include <cstdint>
#include <string>

namespace ckpt::detail {

// Appends the low `digits` hex digits of `value` to `out`, lowercase unless `uppercase` (the
// percent-encoding of S3 URLs), the most significant first, zeros in front as needed
// (`append_hex(out, 0x5, 2)` appends "05").
// Throws std::bad_alloc.
inline void append_hex(std::string& out, std::uint64_t value, std::size_t digits, bool uppercase = false) {
  const char* const table = uppercase ? "0123456789ABCDEF" : "0123456789abcdef";
  for (std::size_t i = digits; i-- > 0;) out += table[(i < 16 ? value >> (4 * i) : 0) & 0xf];
}

// The low `digits` hex digits of `value`, as append_hex writes them.
// Throws std::bad_alloc.
[[nodiscard]] inline std::string to_hex(std::uint64_t value, std::size_t digits) {
  std::string out;
  out.reserve(digits);
  append_hex(out, value, digits);
  return out;
}

// Whether `c` is a hex digit: 0-9 or a-f, and A-F too unless `lowercase_only`.
[[nodiscard]] constexpr bool is_hex_digit(char c, bool lowercase_only) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (!lowercase_only && c >= 'A' && c <= 'F');
}

}  // namespace ckpt::detail
