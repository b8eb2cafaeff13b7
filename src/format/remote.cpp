// The refusal of s3:// paths without S3 support (src/format/remote.hpp), and, in such a build, the save
// (save_remote, src/format/save.hpp) and load that make it.
#include "remote.hpp"
#include "save.hpp"

#include <stdexcept>
#include <string>

namespace ckpt::detail {

void refuse_without_s3(const std::filesystem::path& url) {
  throw std::invalid_argument("ckpt: '" + url.string() +
                              "' is in S3, and this build of ckpt has no S3 support (libcurl or expat was not found "
                              "when it was built; Debian: libcurl4-openssl-dev libexpat1-dev)");
}

#ifndef CKPT_HAVE_S3

void save_remote(const std::filesystem::path& url, entry_list, const metadata_map&,
                 const save_options&) {
  refuse_without_s3(url);
}

checkpoint load_remote(const std::filesystem::path& url, const load_options&, const torch_options&) { refuse_without_s3(url); }

description describe_remote(const std::filesystem::path& url, const load_options&, const torch_options&) {
  refuse_without_s3(url);
}

struct fetch_count::impl {};
fetch_count::fetch_count(const load_options& options) : options_(options) {}
fetch_count::~fetch_count() = default;
void fetch_count::report() const {
  if (options_.fetched) options_.fetched(0, 0);
}

struct remote_folder::impl {};
remote_folder::remote_folder(const std::filesystem::path& url) { refuse_without_s3(url); }
remote_folder::~remote_folder() = default;
// Unreachable: no remote_folder is ever made without S3 support.
std::optional<std::string> remote_folder::read(const std::string&) { return std::nullopt; }
void remote_folder::write(const std::string&, std::string_view) {}
std::vector<std::string> remote_folder::names() { return {}; }
void remote_folder::remove(const std::string&) {}
std::filesystem::path remote_folder::path_of(const std::string& name) const { return name; }
#endif

}  // namespace ckpt::detail
