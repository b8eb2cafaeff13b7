#pragma once
// The safetensors format itself, apart from how bytes reach or leave the disk.

#include <ckpt/checkpoint.hpp>
#include <ckpt/detail/entry_source.hpp>
#include <ckpt/error.hpp>

#include "base/digest.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

// The format's cap on the JSON header, as the reference implementation enforces it.
inline constexpr std::uint64_t max_header_size = 100'000'000;

// A parsed file: its checkpoint, and what checking its digest needs.
struct parsed_file {
  checkpoint contents;
  // 8 + N: where the data section starts.
  std::size_t data_start = 0;
  // Where the 16 digits of __metadata__'s digest_key value start in the file, if it records one:
  // the parser found them written plain between their quotes (no JSON escape), 16 lowercase hex
  // digits.
  std::optional<std::size_t> digest_at;
};

// A file's layout as its header gives it, after every rule of the header and the layout (those of
// parse_file): the entries of known dtypes in the header's order, their offsets within the data
// section, which starts at `data_start` (8 + N).
struct file_layout {
  struct entry {
    std::string name;
    dtype type;
    dims shape;
    std::uint64_t begin = 0, end = 0;
  };
  std::vector<entry> entries;
  metadata_map metadata;
  std::size_t data_start = 0;
  // As parsed_file's.
  std::optional<std::size_t> digest_at;
};

// The layout of a file of `file_size` bytes whose first bytes are `head`: at least the 8-byte
// length and, when that length is within the format's limit and the file, the whole header (a
// reader of part of a file reads the length first, then the header). Throws as parse_file;
// `skipped` hears of the entries of unknown dtypes, which are left out.
file_layout parse_layout(std::span<const std::byte> head, std::uint64_t file_size, const std::filesystem::path& origin,
                         const std::function<void(std::string_view, std::string_view)>& skipped);

// Builds a checkpoint from the bytes of a whole file. Tensors view `file`, kept alive by
// `owner`; `mapping` is the loaded file `file` maps, or null for bytes in memory. Throws
// format_error naming `origin` and the broken rule, including ckpt's rules for its digest entry
// (see digest_key, src/base/digest.hpp): a value that is not 16 lowercase hex digits written plain, or a
// `__metadata__` entry that reads as a damaged digest entry (is_damaged_digest_entry).
// `skipped` (load_options::skipped) hears of the entries of unknown dtypes, which are left out.
parsed_file parse_file(std::span<const std::byte> file, const std::filesystem::path& origin,
                      const std::shared_ptr<const void>& owner, const mapped_file* mapping,
                      const std::function<void(std::string_view, std::string_view)>& skipped);

// The `__metadata__` of the file whose first bytes are `head` (the 8-byte length and at least the
// header: what a ranged read of a stored object fetches when only its metadata are wanted), after
// the header's rules and the digest entry's. Throws format_error naming `origin`.
metadata_map header_metadata(std::span<const std::byte> head, const std::filesystem::path& origin);

// Whether a `__metadata__` entry other than digest_key reads as digest_key's entry with one byte
// of its key changed: its key as JSON spells it has digest_key's length and differs from it in
// exactly one byte, and its value is 16 hex digits. The reader refuses such an entry, and
// make_header too (a file with it could not be loaded).
bool is_damaged_digest_entry(std::string_view key, std::string_view value);

// The first 8 + N bytes of a file (`bytes`): the length prefix and the JSON header, padded with
// spaces so that the data that follows starts 8-byte aligned.
struct file_header {
  std::string bytes;
  // Where the value of the `__metadata__` key a writer was asked to record starts in `bytes`.
  std::size_t digest_at = 0;
};

// The header of `entries`, laid out in the order given, and `metadata`; `digest_at` is where the
// value of the key `digest` (if not empty and in `metadata`) starts, its quote excluded.
// Throws std::invalid_argument if the header would exceed max_header_size, if a name, a
// metadata key or value is not valid UTF-8 (JSON strings must be; nobody could read the file),
// or if a metadata entry is_damaged_digest_entry.
file_header make_header(entry_list entries, const metadata_map& metadata, std::string_view digest = {});

// The header `write_file` writes (src/format/writer.cpp), the one preparation of its metadata that every
// writer of whole files shares (ckpt::save, the MPI writer of sliced steps): `metadata` without
// the digest keys ckpt owns, plus, if `digest` names a key, that key with 16 '0' digits as a
// placeholder, which starts at byte `digest_at` of `bytes`. Throws as make_header.
file_header make_file_header(entry_list entries, const metadata_map& metadata, std::string_view digest);

}  // namespace ckpt::detail
