#pragma once
// The file writer (src/format/writer.cpp), as the rest of the library calls it: the safetensors
// format (src/format/safetensors.hpp) below it, the front door of a save (src/format/save.cpp)
// and the managers above. Its mirror is the reader (src/format/reader.hpp).

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/entry_source.hpp>
#include <ckpt/file.hpp>

#include "io/atomic_file.hpp"
#include "io/folder.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

namespace ckpt::detail {

// Writes a safetensors file of `entries` (already in the order they should be laid out, names
// valid and distinct) and `metadata` at `target`, atomically, as `options` say; see ckpt::save.
// `path` says how the bytes reach the disk: the same file either way. Direct I/O (what a
// manager's background save asks for, so as not to spend the writer's CPU filling the page
// cache) falls back to the page cache where the file system refuses it.
void write_file(const file_at& target, entry_list entries, const metadata_map& metadata,
                const save_options& options, write_path path = write_path::page_cache);
// The same bytes to `sink` (which the caller then commits: an upload, src/s3/transfer.hpp).
void write_file(byte_sink& sink, entry_list entries, const metadata_map& metadata,
                const save_options& options, write_path path = write_path::page_cache);

}  // namespace ckpt::detail
