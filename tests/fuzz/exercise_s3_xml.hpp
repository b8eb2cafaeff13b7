// What the readers of S3's XML answers (src/s3/xml.hpp) must do with arbitrary bytes, checked by
// the libFuzzer target fuzz_s3_xml and by test_s3_client's replay of tests/corpus/s3_xml/: read
// them or refuse them with a bad_answer, never crash, never recurse on nesting (the sanitizers
// see every byte touched), and hand back only what they promise.
#pragma once

#include "s3/xml.hpp"

#include <stdexcept>
#include <string_view>

namespace ckpt_fuzz {

// Thrown when an answer that was read breaks a rule the readers promise.
struct s3_xml_exercise_failure : std::logic_error {
  using std::logic_error::logic_error;
};

// True if `body` was read as at least one kind of answer; false if every reader refused it. Any
// other exception propagates (a finding).
inline bool exercise_s3_xml(std::string_view body) {
  namespace s3 = ckpt::detail::s3;
  const auto require = [](bool holds, const char* rule) {
    if (!holds) throw s3_xml_exercise_failure(rule);
  };
  // An error body is read or quoted: never an exception but bad_alloc.
  const s3::error_answer error = s3::error_in(body);
  require(error.code.empty() || body.find("Error") != std::string_view::npos, "an error code from a body without <Error>");
  require(error.message.size() <= body.size(), "an error message longer than its body");
  bool read = false;
  try {
    require(!s3::root_of(body).empty(), "a document without a root");
    read = true;
  } catch (const s3::bad_answer&) {
  }
  try {
    for (const ckpt::detail::s3::object_info& o : s3::list_page_in(body).objects) require(!o.key.empty(), "a listed object without a key");
    read = true;
  } catch (const s3::bad_answer&) {
  }
  try {
    for (const ckpt::detail::s3::upload_info& u : s3::uploads_page_in(body).uploads)
      require(!u.key.empty() && !u.upload_id.empty(), "a listed upload without a key or an id");
    read = true;
  } catch (const s3::bad_answer&) {
  }
  try {
    require(!s3::upload_id_in(body).empty(), "an empty UploadId");
    read = true;
  } catch (const s3::bad_answer&) {
  }
  return read;
}

}  // namespace ckpt_fuzz
