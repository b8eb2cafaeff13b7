#pragma once
// The one test of whether a path names an object in object storage (`s3://bucket/key`) rather
// than a local file or folder: ckpt::save and ckpt::load take such paths (src/format/remote.hpp), the
// folder opener (src/io/folder.cpp) refuses them, the S3 client (src/s3/client.cpp) parses them and
// the ckpt tool lists runs by them, so that none is ever taken for a local folder called `s3:`.
// Schemes are case-insensitive: `S3://bucket/run`, and `s3:/bucket/run` with one slash, which
// would otherwise be local folders, are refused by name.

#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ckpt::detail {

// Whether `path` is an `s3://` URL.
// \throws std::invalid_argument if it starts with `s3:` in any case but not with `s3://`.
[[nodiscard]] inline bool is_remote(std::string_view path) {
  if (path.starts_with("s3://")) return true;
  if (path.size() >= 3 && (path[0] == 's' || path[0] == 'S') && path[1] == '3' && path[2] == ':')
    throw std::invalid_argument("ckpt: '" + std::string(path) +
                                "' starts with 's3:' but is not an s3:// URL: write s3://<bucket>/<key> (the "
                                "scheme in lower case, then two slashes)");
  return false;
}

[[nodiscard]] inline bool is_remote(const std::string& path) { return is_remote(std::string_view(path)); }
[[nodiscard]] inline bool is_remote(const std::filesystem::path& path) { return is_remote(std::string_view(path.native())); }

}  // namespace ckpt::detail
