// The refusal of s3:// paths without S3 support (src/remote.hpp), and, in such a build, the save and
// load that make it.
#include "remote.hpp"

#include <stdexcept>
#include <string>

namespace ckpt::detail {

void refuse_without_s3(const std::filesystem::path& url) {
  throw std::invalid_argument("ckpt: '" + url.string() +
                              "' is in S3, and this build of ckpt has no S3 support (libcurl was not found when it "
                              "was built; Debian: libcurl4-openssl-dev)");
}

#ifndef CKPT_HAVE_S3

void save_remote(const std::filesystem::path& url, std::span<const entry_source>, const metadata_map&,
                 const save_options&) {
  refuse_without_s3(url);
}

checkpoint load_remote(const std::filesystem::path& url, const load_options&, const torch_options&) { refuse_without_s3(url); }
#endif

}  // namespace ckpt::detail
