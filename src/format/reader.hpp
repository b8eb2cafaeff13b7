#pragma once
// The file reader (src/format/reader.cpp), as the rest of the library calls it: the safetensors
// format (src/format/safetensors.hpp) below it, the front door of a load (src/format/load.cpp), the
// sharded reader and the managers above. Its mirror is the writer (src/format/writer.hpp).

#include <ckpt/checkpoint.hpp>
#include <ckpt/file.hpp>

#include "io/folder.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <vector>

namespace ckpt::detail {

// Whether a load with `options` checks a file's digest: asked to (`verify_digest`), and reading
// the whole file (no `only`: a digest covers every byte).
[[nodiscard]] inline bool checks_digest(const load_options& options) noexcept {
  return options.verify_digest && !options.only;
}

// `t`, loaded with `options`, as they choose its entries: those `options.only` matches, or all.
// The one place ckpt::load, ckpt::parse, the managers' loads and ckpt::mpi::load choose them.
[[nodiscard]] checkpoint chosen(const checkpoint& t, const load_options& options);

// One safetensors file: mapped, parsed, its digest verified as `options` says (src/format/reader.cpp),
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
// The same, of bytes the checkpoint then keeps (`bytes`, `size` of them: a download), not copied;
// with `verified` (the header's hash, then each 1 MiB chunk's of the data section, as verify_file
// returns them: hashed as the bytes arrived), only the header is hashed here.
checkpoint parse_owned(std::shared_ptr<std::byte[]> bytes, std::size_t size, const std::filesystem::path& origin,
                       const load_options& options, std::span<const std::uint64_t> verified = {});

}  // namespace ckpt::detail
