#include <ckpt/dtype.hpp>

#include <array>
#include <ostream>

namespace ckpt {
namespace {
// Indexed by the enumerator's value; the order is checked by the test of to_string.
constexpr std::array<std::string_view, detail::dtype_count> spellings{
    "BOOL", "U8",  "I8",  "U16", "I16",     "U32",     "I32",     "U64",         "I64",
    "F16",  "BF16", "F32", "F64", "C64",    "F8_E4M3", "F8_E5M2", "F8_E8M0",     "F8_E4M3FNUZ",
    "F8_E5M2FNUZ", "F6_E2M3", "F6_E3M2", "F4"};
}  // namespace

std::string_view to_string(dtype t) noexcept {
  const auto index = static_cast<std::size_t>(t);
  return index < spellings.size() ? spellings[index] : std::string_view("?");
}

std::ostream& operator<<(std::ostream& out, dtype t) { return out << to_string(t); }

std::optional<dtype> dtype_from_string(std::string_view s) noexcept {
  for (std::size_t i = 0; i < spellings.size(); ++i)
    if (spellings[i] == s) return static_cast<dtype>(i);
  return std::nullopt;
}

}  // namespace ckpt
