#pragma once
// The file reader and writer of src/format/file.cpp, as the rest of the library calls them: the
// safetensors format (src/format/safetensors.hpp) below them, ckpt::save and ckpt::load above.

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

// ckpt::save of a checkpoint, to a file in a folder held by its descriptor: the one-section case
// of save_sections (src/structures/section.hpp), defined with it in src/structures/section.cpp. `path` as write_file's.
void save_to(const file_at& target, const checkpoint& t, const save_options& options,
             write_path path = write_path::page_cache);

// Whether a load with `options` checks a file's digest: asked to (`verify_digest`), and reading
// the whole file (no `only`: a digest covers every byte).
[[nodiscard]] inline bool checks_digest(const load_options& options) noexcept {
  return options.verify_digest && !options.only;
}

// `t`, loaded with `options`, as they choose its entries: those `options.only` matches, or all.
// The one place ckpt::load, ckpt::parse, the managers' loads and ckpt::mpi::load choose them.
[[nodiscard]] checkpoint chosen(const checkpoint& t, const load_options& options);

// One safetensors file: mapped, parsed, its digest verified as `options` says (src/format/file.cpp),
// after which every copy out of it is checked against what was verified (mapped_file). With
// `verified` (what verify_file returned for this file in another process), only the header is
// hashed: the chunks' hashes are taken as given, combined with it and compared with the digest.
// `ckpt::load` (src/format/load.cpp) calls it for a file, `load_sharded` (src/format/sharded.hpp) for each
// shard, the managers for a step.
// \throws as ckpt::load.
checkpoint load_file(const file_at& file, const load_options& options, std::span<const std::uint64_t> verified = {});

// Verifies the digest of the safetensors file `file` (if it records one and `options` ask for
// it), for another process to load it with load_file(file, options, <these>): the hash of its
// header, then each 1 MiB chunk's of its data. None if nothing was checked.
// \throws as ckpt::load.
[[nodiscard]] std::vector<std::uint64_t> verify_file(const file_at& file, const load_options& options);

// The bytes of one safetensors file in memory: copied, parsed, their digest verified as
// `options` says. `ckpt::parse` (src/format/load.cpp) calls it for bytes that are not a torch.save file.
checkpoint parse_bytes(std::span<const std::byte> file_bytes, const std::filesystem::path& origin,
                       const load_options& options);
// The same, of bytes the checkpoint then keeps (`bytes`, `size` of them: a download), not copied.
checkpoint parse_owned(std::shared_ptr<std::byte[]> bytes, std::size_t size, const std::filesystem::path& origin,
                       const load_options& options);

}  // namespace ckpt::detail
