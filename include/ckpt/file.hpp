#pragma once
/// \file
/// Saving checkpoints as safetensors files and loading them back.

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace ckpt {

/// The `__metadata__` key under which ckpt stores the digest of a file's data section (every
/// byte after the 8 + N header bytes), as 16 lowercase hex digits: the data are cut into chunks
/// of 1 MiB (2^20 bytes; the last may be shorter, an empty section has none), each chunk is hashed
/// with XXH3-64 (seed 0), and the digest is the XXH3-64 (seed 0) of those chunk hashes written
/// one after the other as 8 little-endian bytes each. Chunks can be hashed in any order, so
/// `load` verifies a large file on two threads. It is an ordinary metadata entry, so other
/// safetensors readers load such files unchanged.
inline constexpr std::string_view digest_key = "ckpt.xxh3_64_per_mib";

/// The `__metadata__` key of the digest that earlier versions of ckpt wrote: the XXH3-64 hash
/// (seed 0) of the whole data section at once, as 16 lowercase hex digits. `load` verifies it
/// like `digest_key` (on one thread: the hash is one sequence); `save` never writes it.
inline constexpr std::string_view whole_digest_key = "ckpt.xxh3_64";

/// Options of `save`, of a checkpoint or of sections (ckpt/section.hpp).
struct save_options {
  /// Store the digest of the data section in `__metadata__` under `digest_key`, computed while
  /// the data are written (one pass), so that `load` detects corruption of the data later.
  bool digest = false;
  /// If set, called on the saving thread as the file is written, with the bytes written so far
  /// and the file's size: at least every 64 MiB and once with both equal, before the fsync. An
  /// exception it throws abandons the save (the file at `path` keeps its old contents): a way to
  /// cancel a long save.
  std::function<void(std::uint64_t written, std::uint64_t total)> progress = {};
};

/// Options of `load` and `parse`.
struct load_options {
  /// If the file records a digest (`digest_key`, or `whole_digest_key` of earlier versions), hash
  /// its data section and compare: this reads the whole file once at load time. False trusts the
  /// file (the header rules still apply).
  bool verify_digest = true;
  /// If set, called on the loading thread while a digest is verified, with the bytes of the data
  /// section hashed so far and their total: after each 64 MiB the loading thread hashes (a helper
  /// thread hashes the second half of a file of 8 MiB or more at the same time; the count
  /// includes its bytes), and once with both equal. A sharded checkpoint reports each shard in
  /// turn, each with its own total. An exception it throws abandons the load.
  std::function<void(std::uint64_t hashed, std::uint64_t total)> progress = {};
  /// Called for each entry left out because its dtype is not one this version knows (a later
  /// version of the format's), with the entry's name and the dtype as the file spells it. When
  /// unset, a warning naming the file, the entry and the dtype is written to stderr instead.
  std::function<void(std::string_view name, std::string_view dtype)> skipped = {};
};

/// Writes `t` to a safetensors file at `path`, replacing any existing file atomically: the data
/// goes to a temporary file in the same folder, which is flushed, fsynced and renamed over
/// `path`, and the folder is fsynced. Entries are written in name order, the header padded with
/// spaces so the data starts 8-byte aligned. If anything fails, `path` keeps its old contents
/// and no temporary file is left behind.
///
/// Durability (power loss, kernel crash), in the order the calls are issued:
///  1. `fsync` of the temporary file, after its last byte is written: its data and size reach
///     the disk before any name points at them;
///  2. `rename` of the temporary over `path`: atomic for other processes, which see the old or
///     the new file, never a mix, but only recorded in the folder's page cache;
///  3. `fsync` of the folder: makes the rename itself durable.
/// Without 1, a crash after the rename could leave `path` naming an empty or partial file (the
/// folder entry may reach the disk before the data); without 3, the rename may be lost and
/// `path` come back with its old contents after the crash (never torn). `save` returns after 3,
/// so a returned save survives power loss, as far as the disk honours flushes. A failure in 3
/// throws although the new file is already in place.
///
/// `t`'s metadata are written as given, except `digest_key` and `whole_digest_key`, which ckpt
/// owns: a stale value (say, from a loaded file) is dropped, and a fresh `digest_key` is written
/// when `options.digest` is set.
/// \throws io_error on an I/O error (the message names the file and the system error).
/// \throws std::invalid_argument if the header would exceed the format's 100,000,000 bytes.
void save(const std::filesystem::path& path, const checkpoint& t, const save_options& options = {});

/// The checkpoint stored in the safetensors file at `path`, whether written by `save` or by
/// another implementation. The file is mapped read-only and only its header is parsed: entries
/// are views onto the mapping, which lives, with the file's descriptor, as long as any tensor of
/// it (a file replaced by a later `save` is still read; do not truncate the file while you use
/// them: `read_params` and `to_params` refuse a truncated file, reading a tensor's bytes raises
/// SIGBUS). Extraction into row-major (C-order) Eigen leaves reads entries of 256 KiB and more
/// from the descriptor, not the mapping. Where mapping is impossible the file is read instead.
///
/// The reader is strict: it rejects a file shorter than 8 bytes, a header length over
/// 100,000,000 or past the end of the file, a header that is not a UTF-8 JSON object, missing or
/// malformed `dtype`/`shape`/`data_offsets`, a byte count that does not match the shape, offsets
/// that are reversed, out of the buffer, overlapping or leave holes, trailing bytes, duplicate
/// names and a `__metadata__` that is not a string-to-string object. Entries of a dtype the
/// format does not define are skipped with a warning on stderr.
///
/// If `__metadata__` holds `digest_key` (or `whole_digest_key`, written by earlier versions) and
/// `options.verify_digest` is set, the whole data section is read and hashed (so the load costs
/// one pass over the file, on two threads from 8 MiB), and a mismatch throws. The loaded
/// metadata keep the digest entry.
///
/// A `path` whose name ends with `.index.json`, or a folder, is a Hugging Face sharded checkpoint
/// instead: `load` returns `load_sharded(path, options)` (ckpt/sharded.hpp), one checkpoint
/// spanning every shard, each mapped as above and its digest checked per `options`.
/// \throws index_error, ckpt::error for a sharded checkpoint: see `load_sharded`.
/// \throws io_error if the file cannot be opened or read.
/// \throws integrity_error if the data do not match the recorded digest.
/// \throws format_error if it is not a valid safetensors file (the message names the file and the
/// broken rule), including a digest value that is not 16 lowercase hex digits (checked even when
/// verification is off).
[[nodiscard]] checkpoint load(const std::filesystem::path& path, const load_options& options = {});

/// Parses the bytes of a whole safetensors file held in memory, with the same rules as `load`.
/// The tensors own a copy of the data. `origin` names the bytes in error messages.
/// \throws integrity_error if the data do not match the recorded digest (see `load`).
/// \throws format_error if they are not a valid safetensors file.
[[nodiscard]] checkpoint parse(std::span<const std::byte> file_bytes,
                               const std::filesystem::path& origin = "<memory>",
                               const load_options& options = {});

}  // namespace ckpt
