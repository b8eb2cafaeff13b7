// The compiled parts of the leaf types (include/ckpt/leaf.hpp): the checks of a leaf's hooks and
// the text of a random engine's state.

#include <ckpt/leaf.hpp>

#include <locale>
#include <sstream>
#include <stdexcept>
#include <string>

namespace ckpt::detail {

void check_leaf_bytes(const char* hook, std::size_t given, std::size_t needed) {
  if (given != needed)
    throw std::invalid_argument("ckpt: leaf_traits::" + std::string(hook) + " gave " + std::to_string(given) +
                                " bytes for an entry of " + std::to_string(needed) + " bytes");
}

std::vector<std::uint64_t> printed_numbers(const std::function<void(std::ostream&)>& print) {
  std::ostringstream text;
  text.imbue(std::locale::classic());
  print(text);
  std::istringstream in(text.str());
  in.imbue(std::locale::classic());
  std::vector<std::uint64_t> numbers;
  for (std::uint64_t n = 0; in >> n;) numbers.push_back(n);
  return numbers;
}

bool scan_numbers(std::span<const std::uint64_t> numbers, const std::function<void(std::istream&)>& scan) {
  std::ostringstream text;
  text.imbue(std::locale::classic());
  for (const std::uint64_t n : numbers) text << n << ' ';
  std::istringstream in(text.str());
  in.imbue(std::locale::classic());
  scan(in);
  return !in.fail();
}

void throw_not_engine_state() {
  throw std::invalid_argument("ckpt: the entry does not hold a state of this random engine");
}

}  // namespace ckpt::detail
