#pragma once
// Checkpoints in object storage (`s3://bucket/key`, src/io/remote_path.hpp), as ckpt::load reaches
// them: the load and description of one file there, a prefix taken as a folder (the save of one
// file is save_remote, src/format/save.hpp, which only the front door of a save calls). Built
// with the S3 client when libcurl was found (src/format/object_file.cpp), else refusing
// (src/format/remote.cpp), so that an `s3://` path is never taken for a local one.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/entry_source.hpp>
#include <ckpt/file.hpp>
#include <ckpt/torch.hpp>

#include "describe.hpp"
#include "io/remote_path.hpp"

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

// The checkpoint in the object `url` (a safetensors or torch.save file): its header by a ranged
// GET, then the rest by ranged GETs in parallel (those of the entries `options.only` chooses, if
// set), the data section's chunks hashed as they arrive when the digest is to be verified, so
// that the check costs no second pass over the bytes.
// \throws std::invalid_argument if `url` is not an object URL, no credentials are set, or this
// build has no S3 support; ckpt::error (the S3 client's remote_error) if a request fails; as
// ckpt::parse for the bytes.
[[nodiscard]] checkpoint load_remote(const std::filesystem::path& url, const load_options& options,
                                     const torch_options& torch);

// The object `url` described (src/format/describe.hpp) from its header alone, fetched by a ranged
// GET (a torch.save file is read whole).
// \throws as load_remote.
[[nodiscard]] description describe_remote(const std::filesystem::path& url, const load_options& options,
                                          const torch_options& torch);

// What a load with `options` fetches from object storage, counted while it lives if
// `options.fetched` is set (load_options::fetched): the requests and the bytes received of every
// client made for it on this thread, and of their helpers (src/s3/client.hpp, counting); nothing
// without S3 support.
class fetch_count {
 public:
  explicit fetch_count(const load_options& options);
  fetch_count(const fetch_count&) = delete;
  fetch_count& operator=(const fetch_count&) = delete;
  ~fetch_count();
  // Calls `options.fetched`, if set, with the count so far.
  // \throws what it throws.
  void report() const;

 private:
  struct impl;
  const load_options& options_;
  std::unique_ptr<impl> impl_;
};

// A prefix in a bucket taken as a folder (`s3://bucket/prefix`: its objects `prefix/<name>`), for
// the sharded layout there (src/format/sharded.cpp): small objects read and written whole, listed and
// deleted. Without S3 support, the constructor refuses.
class remote_folder {
 public:
  // \throws std::invalid_argument if `url` is not `s3://bucket[/prefix]`, no credentials are set,
  // or this build has no S3 support.
  explicit remote_folder(const std::filesystem::path& url);
  remote_folder(const remote_folder&) = delete;
  remote_folder& operator=(const remote_folder&) = delete;
  ~remote_folder();

  // The object `name`'s bytes, or nothing if there is none. \throws remote_error.
  std::optional<std::string> read(const std::string& name);
  // Writes `text` as the object `name` (one PUT). \throws remote_error.
  void write(const std::string& name, std::string_view text);
  // The names of the objects directly under the prefix, sorted. \throws remote_error.
  std::vector<std::string> names();
  // Deletes the object `name` (none there is fine). \throws remote_error.
  void remove(const std::string& name);
  // `s3://bucket/prefix/name`.
  [[nodiscard]] std::filesystem::path path_of(const std::string& name) const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Without S3 support: throws the std::invalid_argument that says so, naming `url`.
[[noreturn]] void refuse_without_s3(const std::filesystem::path& url);

}  // namespace ckpt::detail
