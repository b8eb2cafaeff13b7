#include <ckpt/named.hpp>

#include <stdexcept>
#include <string>

namespace ckpt::detail {

void mismatch(const std::string& path, std::string_view what) {
  throw std::invalid_argument("ckpt: the structures differ at '" + path + "': " + std::string(what));
}

void size_mismatch(const std::string& path, std::string_view what, std::initializer_list<std::size_t> sizes) {
  std::string text(what);
  const char* separator = " (";
  for (const std::size_t size : sizes) {
    text += separator + std::to_string(size);
    separator = ", ";
  }
  mismatch(path, text + ")");
}

}  // namespace ckpt::detail
