// Without S3 support: the refusals of s3:// paths (src/remote.hpp).
#include "remote.hpp"

#include <stdexcept>
#include <string>

namespace ckpt::detail {

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
