#include "utf8.hpp"

#include "hex.hpp"

#include <boost/locale/utf.hpp>

#include <stdexcept>

namespace ckpt::detail {

utf8_step next_utf8(std::string_view s) noexcept {
  const auto first = static_cast<unsigned char>(s.front());
  if (first < 0x80) return {first, 1};
  const char* p = s.data();
  const boost::locale::utf::code_point c = boost::locale::utf::utf_traits<char>::decode(p, s.data() + s.size());
  if (c == boost::locale::utf::illegal || c == boost::locale::utf::incomplete) return {std::nullopt, 1};
  return {static_cast<char32_t>(c), static_cast<std::size_t>(p - s.data())};
}

std::optional<std::size_t> invalid_utf8_at(std::string_view s) noexcept {
  for (std::size_t at = 0; at < s.size();) {
    if (static_cast<unsigned char>(s[at]) < 0x80) {  // ASCII, most names: a byte at a time
      ++at;
      continue;
    }
    const utf8_step step = next_utf8(s.substr(at));
    if (!step.code_point) return at;
    at += step.bytes;
  }
  return std::nullopt;
}

void append_byte_escape(std::string& out, unsigned char byte) {
  out += "\\x";
  append_hex(out, byte, 2);
}

std::string quote_bytes(std::string_view s) {
  std::string out = "'";
  for_each_utf8(
      s,
      [&out](std::string_view sequence, char32_t c) {
        if (sequence.size() > 1 || (c >= 0x20 && c < 0x7f)) out.append(sequence);
        else append_byte_escape(out, static_cast<unsigned char>(c));
      },
      [&out](unsigned char byte) { append_byte_escape(out, byte); });
  return out + "'";
}

void require_utf8_to_save(std::string_view what, std::string_view s, std::string_view why) {
  if (const std::optional<std::size_t> at = invalid_utf8_at(s))
    throw std::invalid_argument("ckpt: cannot save " + std::string(what) + " " + quote_bytes(s) +
                                ": it is not valid UTF-8 (byte " + std::to_string(*at) + " of " +
                                std::to_string(s.size()) + ") and " + std::string(why));
}

}  // namespace ckpt::detail
