#pragma once
// S3's XML answers (ListObjectsV2, ListMultipartUploads, InitiateMultipartUpload, the <Error>
// documents), read by expat within a size and a depth limit. expat keeps the elements it is in
// on the heap, not on the stack, and the reader stops at the first element nested too deep: no
// body a server sends exhausts the stack or the memory (a page of 1,000 keys of 1 KiB, the
// protocol's largest, is some 1.5 MB). A document type declaration (which S3 never sends, and
// which is where entity expansion would begin) is refused.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail::s3 {

// An object as a listing gives it.
struct object_info {
  std::string key;
  std::uint64_t size = 0;
  std::string etag;
};

// An upload in flight as a listing gives it.
struct upload_info {
  std::string key, upload_id;
};

// The largest answer read, and the deepest nesting (S3's answers are 3 levels deep).
inline constexpr std::size_t max_answer_bytes = std::size_t{16} << 20;
inline constexpr std::size_t max_answer_depth = 32;

// A body that is not the answer expected (not XML, too large or too deep, another document, a
// field missing or malformed): the client turns it into a remote_error naming the request.
struct bad_answer : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The code and message of an S3 error body (`<Error><Code>..</Code><Message>..</Message>`); for a
// body that is not one, no code and the body's first 200 bytes as the message.
// \throws std::bad_alloc only.
struct error_answer {
  std::string code, message;
};
error_answer error_in(std::string_view body);

// The name of the root element of `body`, read whole (leading whitespace skipped: S3 sends spaces
// while a long CompleteMultipartUpload or copy runs): "Error" for a failure reported in a 200.
// \throws bad_answer.
std::string root_of(std::string_view body);

// One page of a ListObjectsV2 answer.
struct list_page {
  std::vector<object_info> objects;
  bool truncated = false;
  std::string next_token;
};
// \throws bad_answer (a key missing, a size that is not a number, IsTruncated not true or false).
list_page list_page_in(std::string_view body);

// One page of a ListMultipartUploads answer.
struct uploads_page {
  std::vector<upload_info> uploads;
  bool truncated = false;
  std::string next_key_marker, next_upload_id_marker;
};
// \throws bad_answer.
uploads_page uploads_page_in(std::string_view body);

// The UploadId of an InitiateMultipartUpload answer.
// \throws bad_answer (none named).
std::string upload_id_in(std::string_view body);

}  // namespace ckpt::detail::s3
