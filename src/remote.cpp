// Whether a path names an object (src/remote.hpp); without S3 support, the refusals.
#include "remote.hpp"

#include <stdexcept>
#include <string>

namespace ckpt::detail {

bool is_remote(const std::filesystem::path& path) noexcept { return path.native().starts_with("s3://"); }

#ifndef CKPT_HAVE_S3
namespace {
[[noreturn]] void no_s3(const std::filesystem::path& url) {
  throw std::invalid_argument("ckpt: '" + url.string() +
                              "' is an object in S3, and this build of ckpt has no S3 support (libcurl was not "
                              "found when it was built; Debian: libcurl4-openssl-dev)");
}
}  // namespace

void save_remote(const std::filesystem::path& url, std::span<const entry_source>, const metadata_map&,
                 const save_options&) {
  no_s3(url);
}

checkpoint load_remote(const std::filesystem::path& url, const load_options&, const torch_options&) { no_s3(url); }
#endif

}  // namespace ckpt::detail
