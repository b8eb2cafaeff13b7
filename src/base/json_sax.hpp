#pragma once
// What the library's SAX handlers for boost::json::basic_parser share: the safetensors header's
// (src/format/safetensors.cpp) and the sharded index's (src/format/hf_index.cpp).

#include <boost/json/error.hpp>

#include <cstddef>

namespace ckpt::detail {

// The base of such a handler: no size limit of the parser's own (each reader caps the whole
// text by its format's rule instead), and nothing to do where the document starts and ends.
struct unlimited_sax_handler {
  static constexpr std::size_t max_object_size = std::size_t(-1);
  static constexpr std::size_t max_array_size = std::size_t(-1);
  static constexpr std::size_t max_key_size = std::size_t(-1);
  static constexpr std::size_t max_string_size = std::size_t(-1);

  bool on_document_begin(boost::json::error_code&) { return true; }
  bool on_document_end(boost::json::error_code&) { return true; }
};

}  // namespace ckpt::detail
