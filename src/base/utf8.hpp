#pragma once
// UTF-8 in one place: reading it a code point at a time, checking it, and quoting any bytes for
// a message. The safetensors header (src/format/safetensors.cpp), the sharded index (src/format/sharded.cpp),
// the torch reader's messages and the tool `ckpt` (what it prints of names and values read from
// files, tools/ckpt/common.cpp) use these.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ckpt::detail {

// The code point of the well-formed UTF-8 sequence that starts `s`, and its length in bytes; or
// nothing (and 1) where `s` does not start one: an overlong form, a surrogate, a code point past
// U+10FFFF, a stray or missing continuation byte. `s` must not be empty.
struct utf8_step {
  std::optional<char32_t> code_point;
  std::size_t bytes = 1;
};
[[nodiscard]] utf8_step next_utf8(std::string_view s) noexcept;

// Calls `valid(sequence, code_point)` for each well-formed sequence of `s` (its bytes and the
// code point they spell) and `invalid(byte)` for each byte that starts none (as next_utf8 reads
// them), in order.
// Throws whatever `valid` or `invalid` throws.
template <class Valid, class Invalid>
void for_each_utf8(std::string_view s, Valid valid, Invalid invalid) {
  for (std::size_t at = 0; at < s.size();) {
    const utf8_step step = next_utf8(s.substr(at));
    if (step.code_point) valid(s.substr(at, step.bytes), *step.code_point);
    else invalid(static_cast<unsigned char>(s[at]));
    at += step.bytes;
  }
}

// Appends `byte` as the four characters \xNN (two lowercase hex digits): how a message, or the
// tool, writes a byte it does not show as it is.
// Throws std::bad_alloc.
void append_byte_escape(std::string& out, unsigned char byte);

// The offset of the first byte of `s` that does not start a well-formed sequence, or nothing if
// `s` is valid UTF-8.
[[nodiscard]] std::optional<std::size_t> invalid_utf8_at(std::string_view s) noexcept;

// `s` in single quotes for a message: valid UTF-8 kept, control and invalid bytes written as
// \xNN, so that a message about a name read from an untrusted file can be printed and compared.
[[nodiscard]] std::string quote_bytes(std::string_view s);

// Throws std::invalid_argument "ckpt: cannot save <what> '<s>': it is not valid UTF-8 (byte N of
// M) and <why>" unless `s` is valid UTF-8.
void require_utf8_to_save(std::string_view what, std::string_view s, std::string_view why);

}  // namespace ckpt::detail
