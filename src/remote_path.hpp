#pragma once
// The one test of whether a path names an object in object storage (`s3://bucket/key`) rather
// than a local file or folder: ckpt::save and ckpt::load take such paths (src/remote.hpp), the
// folder opener (src/folder.cpp) refuses them, so that none is ever taken for a local folder
// called `s3:`.

#include <filesystem>

namespace ckpt::detail {

[[nodiscard]] inline bool is_remote(const std::filesystem::path& path) noexcept {
  return path.native().starts_with("s3://");
}

}  // namespace ckpt::detail
