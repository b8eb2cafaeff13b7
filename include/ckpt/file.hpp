#pragma once
/// \file
/// Saving checkpoints as safetensors files and loading them back.

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>
#include <ckpt/name_pattern.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ckpt {

/// Options of `save`, of a checkpoint or of sections (ckpt/section.hpp), of `save_sharded`'s
/// shards and of `ckpt::mpi::save`.
struct save_options {
  /// Store the digest of the whole file (header and data) in `__metadata__` under the key
  /// `ckpt.xxh3_64_file` (see `save`), computed while the file is written (one pass), so that
  /// `load` detects corruption later. On by default, as in the managers (a save is checked at
  /// load unless the caller opts out): `{.digest = false}` writes none.
  bool digest = true;
  /// If set, called on the saving thread as the file is written, with the bytes written so far
  /// and the file's size: at least every 64 MiB and once with both equal, before the fsync. An
  /// exception it throws abandons the save (the file at `path` keeps its old contents): a way to
  /// cancel a long save.
  std::function<void(std::uint64_t written, std::uint64_t total)> progress = {};
};

/// Options of `load` and `parse`.
struct load_options {
  /// If the file records a digest (`ckpt.xxh3_64_file`, see `save`), hash the file and compare:
  /// this reads the whole file once at load time. False trusts the file (the header rules still
  /// apply, those of the digest entry's form included). The data-only digests of earlier versions
  /// of ckpt (`ckpt.xxh3_64_per_mib`, `ckpt.xxh3_64`) are never checked.
  /// Not checked by a load of part of a file (`only`): the digest covers the whole file.
  bool verify_digest = true;
  /// If set, only the entries whose names it matches are loaded: the result is
  /// `select(load(path), *only)`, and the other entries' bytes are never read. For a file on
  /// disk that saves little (only what is read is read); for an object in S3 it is what makes a
  /// partial load cheap: the header comes by one ranged GET, then the selected entries by ranged
  /// GETs in parallel (neighbours within 1 MiB fetched together), and nothing else is fetched.
  /// The header's rules apply to every entry; the file's digest, which covers every byte, is not
  /// checked. Every layout `load` opens takes it (a `torch.save` file, read whole, is selected
  /// after reading); of a sharded checkpoint only the shards that hold a chosen entry are read,
  /// and the metadata are those common to them.
  /// Two ways that agree: `load(path, {.only = p})` gives the entries `select(load(path), p)`
  /// gives (ckpt/name_pattern.hpp; `drop` is the complement, a pattern of what to leave out).
  /// Use `only` to read less (a part of a large file, of an object in S3); `select`/`drop` on a
  /// checkpoint you hold already, or to have the whole file's digest checked first.
  std::optional<name_pattern> only = {};
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
  /// If set, called once on the loading thread when the load returns, with what it fetched from
  /// object storage (`s3://`): the bytes of the answers' bodies the servers sent, and the requests
  /// it made (HEADs, GETs and LISTs, each retry counted), over every connection the load used,
  /// its parallel ones included; both 0 for a checkpoint on disk. It holds a partial load to
  /// account: `load(url, {.only = p})` of one 4 MiB entry of a 1 GiB object fetches its header
  /// and that entry (64 KiB + 4 MiB), nothing else. Not called when the load throws. The tool's
  /// `--stats` prints it (`ckpt inspect`, `verify`, `diff`, `convert`).
  std::function<void(std::uint64_t bytes, std::uint64_t requests)> fetched = {};
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
/// `t`'s metadata are written as given, with two exceptions. The digest keys below are ckpt's: a
/// stale value (say, from a loaded file) is dropped, and a fresh digest is written unless
/// `options.digest` is false. And `"format": "pt"` is added unless the metadata have a `format` key
/// already (the caller's value is kept): Hugging Face transformers' `from_pretrained` refuses a
/// safetensors file without it.
///
/// **The digest**: the `__metadata__` key `ckpt.xxh3_64_file` holds a digest of the whole file
/// (length prefix, header, data) as 16 lowercase hex digits, hashed as the bytes go out; `load`
/// verifies it, and any single changed byte of the file makes it throw. It is a fact of the file
/// format, specified byte for byte in one place: docs/guide.md, "File-format guarantees", "The
/// digest" (with the rule for a damaged digest key, which `save` refuses to write, and the
/// data-only digests of earlier versions, which `save` drops).
///
/// It is the one-section case of the save of sections (ckpt/section.hpp), through the same
/// writer: `save(path, t, options)` is `save(path, {t}, options)`, the same file byte for byte (a
/// section made from a checkpoint brings its metadata).
///
/// **Object storage.** A `path` of the form `s3://bucket/key` is saved as that object (the same
/// bytes), streamed as a multipart upload that makes the object appear whole or not at all;
/// credentials and endpoint come from the AWS environment (the guide's "Checkpoints in object
/// storage").
/// \throws io_error on an I/O error (the message names the file and the system error).
/// \throws remote_error if a request to object storage fails (naming the URL, quoting the
/// server); std::invalid_argument if an `s3://` path names no object, no credentials are set, or
/// ckpt was built without S3 support.
/// \throws std::invalid_argument if the header would exceed the format's 100,000,000 bytes, or a
/// metadata entry would read as a damaged digest entry (see "The digest" above).
void save(const std::filesystem::path& path, const checkpoint& t, const save_options& options = {});

/// The checkpoint stored in the safetensors file at `path`, whether written by `save` or by
/// another implementation. The file is mapped read-only and only its header is parsed: entries
/// are views onto the mapping, which lives, with the file's descriptor, as long as any tensor of
/// it (a file replaced by a later `save` is still read). Every copy out of the file (`to_params`,
/// `read_params`, `cast`, the adapters, a `save` of loaded entries, the digest check) reads it
/// with `pread`, not through the mapping, so a file truncated or unreadable meanwhile is a
/// `format_error` ("the file shrank while it was being read") or an `io_error` naming it; only
/// the views you take yourself (`tensor::bytes`, `as`, view.hpp) read the mapping, where a
/// truncated file raises SIGBUS. Where mapping is impossible the file is read instead.
///
/// The reader is strict: it rejects a file shorter than 8 bytes, a header length over
/// 100,000,000 or past the end of the file, a header that is not a UTF-8 JSON object, missing or
/// malformed `dtype`/`shape`/`data_offsets`, a byte count that does not match the shape, offsets
/// that are reversed, out of the buffer, overlapping or leave holes, trailing bytes, duplicate
/// names and a `__metadata__` that is not a string-to-string object. Entries of a dtype the
/// format does not define are skipped with a warning on stderr.
///
/// If `__metadata__` holds the digest `ckpt.xxh3_64_file` (see `save`) and
/// `options.verify_digest` is set, the whole file is read and hashed (so the load costs one pass
/// over the file, on two threads from 8 MiB of data), and a mismatch throws. The loaded metadata
/// keep the digest entry. The digests of earlier versions (`ckpt.xxh3_64_per_mib`,
/// `ckpt.xxh3_64`) are kept as metadata and not checked.
///
/// `load` opens every layout Hugging Face's `save_pretrained` and `torch.save` produce (the
/// guide's "Foreign checkpoints" gives the rules):
/// - a file, recognized by its content, not its name: a safetensors file as above, or a
///   `torch.save` file (it begins as a zip; one of PyTorch before 1.6, a bare pickle, is
///   recognized and refused), read as ckpt/torch.hpp says, its budgets through the overload
///   `load(path, options, torch_options)` there;
/// - a `path` whose name ends with `.safetensors.index.json`: a Hugging Face sharded checkpoint
///   (see ckpt/sharded.hpp), one checkpoint spanning every shard the index names, each shard
///   mapped as above and its digest checked per `options`; any other `*.index.json`
///   (`pytorch_model.bin.index.json`) is read the same way, each shard recognized by its content;
/// - a folder: its `model.safetensors` or `pytorch_model.bin` (each by content), or its one
///   `*.bin.index.json`, or else its one `*.safetensors.index.json`. A folder holding
///   checkpoints of both kinds (say `model.safetensors` and `pytorch_model.bin`), or a single
///   file beside an index of its kind, is refused naming both;
/// - `s3://bucket/key`: the object, a file as above, read whole with ranged GETs in parallel into
///   memory the checkpoint owns (see `save` and the guide's "Checkpoints in object storage"), or
///   in part (`load_options::only`); an object whose key ends with `.index.json`: a sharded
///   checkpoint whose shards are the objects beside it (ckpt/sharded.hpp's `save_sharded` writes
///   one), each recognized by its content.
///
/// **Sharded checkpoints.** The index must be a JSON object with a `weight_map` object of entry
/// names to shard file names; a `metadata` member, if present, must be an object (of its
/// contents only the save id `ckpt.save_id` that `save_sharded` writes is used). Shard names
/// must be plain file names in the index's folder (no `/`, not `.` or `..`). The index is the
/// truth: the result holds exactly the entries of `weight_map`, each keeping its shard's mapping
/// alive, and only the shards it names are opened (entries of a shard that the map does not
/// list, and shard files it does not name, are ignored, as Hugging Face's loaders select by
/// `weight_map`). The metadata are those common to every shard: the
/// keys present in all of them with the same value; digests, which describe one file's bytes,
/// are dropped, and so is the save id. An index with a save id is one save: every shard read
/// must give the same id (ckpt/sharded.hpp), else the index is read again once.
/// \throws format_error for a sharded checkpoint whose index breaks one of those rules, or
///   names an entry its shard does not hold; the message reads `ckpt: '<index>' is not a valid
///   sharded checkpoint index: <broken rule>`, the rule naming the entry and the shard file where
///   there is one.
/// \throws mixed_save_error (ckpt/error.hpp) if a shard is of another save than its index, twice
///   (the checkpoint was saved again while it was read).
/// \throws ckpt::error (the base class) naming the folder if a folder holds no checkpoint, two
///   checkpoints (see above, naming both files), or several indexes of one kind (naming the
///   first two).
/// \throws format_error for a `torch.save` file ckpt cannot read, as ckpt/torch.hpp says; the
///   message reads `ckpt: '<file>' is not a readable PyTorch file: <broken rule>`.
/// \throws io_error if the file, the index or a shard cannot be opened or read (the message
///   names it).
/// \throws integrity_error if the file (or a shard) does not match the recorded digest.
/// \throws remote_error, std::invalid_argument for an `s3://` path, as `save`.
/// \throws format_error if it (or a shard) is not a valid safetensors file (the message names
/// the file and the broken rule), including a digest value that is not 16 lowercase hex digits
/// written plain and a damaged digest entry (see `save`; both checked even when verification is
/// off).
[[nodiscard]] checkpoint load(const std::filesystem::path& path, const load_options& options = {});

/// The checkpoint in the bytes of a whole file held in memory, recognized by their content as
/// `load` recognizes a file: a safetensors file, read with the same rules as `load`, or a
/// `torch.save` file (it begins as a zip), read as ckpt/torch.hpp says, its budgets through the
/// overload `parse(file_bytes, origin, options, torch_options)` there. The tensors own a copy of
/// the data. `origin` names the bytes in error messages.
/// \throws integrity_error if the bytes do not match the recorded digest (see `load`).
/// \throws format_error if they are not a valid safetensors file, or a `torch.save` file ckpt
///   cannot read (the message then reads `ckpt: '<origin>' is not a readable PyTorch file: ...`).
[[nodiscard]] checkpoint parse(std::span<const std::byte> file_bytes,
                               const std::filesystem::path& origin = "<memory>",
                               const load_options& options = {});

}  // namespace ckpt
