#pragma once
// The one rule for merging `__metadata__` maps: a key given twice must have one value. `concat`
// (src/tensor/checkpoint.cpp) and the save of sections (src/structures/section.cpp, the metadata of its checkpoint
// sections) merge through it, with one message.

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ckpt::detail {

// ckpt::metadata_map (ckpt/checkpoint.hpp), spelled out: this header sits below the checkpoint.
using metadata_entries = std::map<std::string, std::string, std::less<>>;

// Adds `key` = `value` to `into`. A key `into` holds with another value throws
// std::invalid_argument "ckpt: <function>: metadata key '<key>' has two different values ('<the
// first>' and '<value>')<where>".
inline void add_metadata(metadata_entries& into, const std::string& key, const std::string& value,
                         std::string_view function, std::string_view where = {}) {
  const auto [it, inserted] = into.emplace(key, value);
  if (!inserted && it->second != value)
    throw std::invalid_argument("ckpt: " + std::string(function) + ": metadata key '" + key +
                                "' has two different values ('" + it->second + "' and '" + value + "')" +
                                std::string(where));
}

}  // namespace ckpt::detail
