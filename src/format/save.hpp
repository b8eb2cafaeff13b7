#pragma once
// The front door of a save (src/format/save.cpp), beside the one of a load (src/format/load.cpp):
// every ckpt::save, of a checkpoint or of sections (src/structures/section.cpp), picks here where
// its bytes go, a file in a folder or an object in S3, and hands them to the file writer
// (src/format/writer.hpp) or the upload (save_remote, below).

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/entry_source.hpp>
#include <ckpt/file.hpp>

#include "io/atomic_file.hpp"
#include "io/folder.hpp"

#include <filesystem>

namespace ckpt::detail {

// Saves `entries` (in file order, names checked) and `metadata` as the file or object `path`.
// \throws as ckpt::save.
void save_entries(const std::filesystem::path& path, entry_list entries, const metadata_map& metadata,
                  const save_options& options);
// save_entries to the object `url` (`s3://bucket/key`): a safetensors file streamed as a multipart
// upload, which appears whole once the upload completes, or not at all. Defined with the S3 client
// (src/format/object_file.cpp), else refusing (src/format/remote.cpp).
// \throws std::invalid_argument if `url` is not an object URL, no credentials are set, or this
// build has no S3 support; ckpt::error (the S3 client's remote_error) if a request fails.
void save_remote(const std::filesystem::path& url, entry_list entries, const metadata_map& metadata,
                 const save_options& options);

// ckpt::save of a checkpoint, to `target` (a file in a folder held by its descriptor): its entries
// and its metadata, as `save(path, t)` writes them. `path` says how the bytes reach the disk
// (detail::write_file).
// \throws as ckpt::save.
void save_checkpoint(const file_at& target, const checkpoint& t, const save_options& options,
                     write_path path = write_path::page_cache);
// The same bytes into `sink`, which the caller commits (a manager's step in its store).
void save_checkpoint(byte_sink& sink, const checkpoint& t, const save_options& options,
                     write_path path = write_path::page_cache);

}  // namespace ckpt::detail
