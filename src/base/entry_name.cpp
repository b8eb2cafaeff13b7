#include "entry_name.hpp"

#include <stdexcept>
#include <string>

namespace ckpt::detail {

void entry_name_error(std::string_view name, std::string_view function) {
  const std::string quoted = "'" + std::string(name) + "'";
  if (name == metadata_key)
    throw std::invalid_argument("ckpt: " + quoted + " is reserved by the safetensors format and cannot name an entry");
  if (function.empty())
    throw std::invalid_argument(name.empty() ? std::string("ckpt: entry names must not be empty")
                                             : "ckpt: duplicate entry name " + quoted);
  const std::string at = "ckpt: " + std::string(function) + ": ";
  if (name.empty()) throw std::invalid_argument(at + "a leaf has an empty name (a bare leaf needs a prefix)");
  throw std::invalid_argument(at + "two leaves are named " + quoted);
}

}  // namespace ckpt::detail
