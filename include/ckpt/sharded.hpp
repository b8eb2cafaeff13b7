#pragma once
/// \file
/// Sharded checkpoints exactly as the Hugging Face ecosystem writes them: several safetensors
/// files `model-00001-of-00003.safetensors`, ... beside an index `model.safetensors.index.json`
/// that maps every entry to its file:
///
/// ```json
/// {"metadata": {"total_size": 123456}, "weight_map": {"l1.b": "model-00001-of-00002.safetensors", ...}}
/// ```
///
/// `save_sharded` writes such a folder; `load_sharded`, and `ckpt::load` given an index file or a
/// folder holding one, read it back as one checkpoint spanning every shard, each shard mapped
/// lazily as `load` maps a single file.
///
/// **Metadata.** The checkpoint's `__metadata__` is written into every shard, so that each shard
/// is a self-describing safetensors file; the index keeps Hugging Face's shape (its `metadata`
/// holds `total_size` only). Loading keeps the metadata common to every shard the index names:
/// the keys present in all of them with the same value. Keys whose values differ between shards
/// (a per-file digest, say) are dropped. An empty checkpoint is saved as an index alone (no
/// shard), so its metadata is not kept.
///
/// **The index is the truth.** Loading reads exactly the entries of `weight_map` and opens only
/// the shards it names: entries of a shard that the map does not list, and shard files it does
/// not name, are ignored (as Hugging Face's loaders select by `weight_map`).

#include <ckpt/checkpoint.hpp>
#include <ckpt/error.hpp>
#include <ckpt/file.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ckpt {

/// A sharded checkpoint's index file is not valid (not JSON, no `weight_map`, a shard name that
/// leaves the folder, an entry its shard does not hold...). The message reads
/// `ckpt: '<index>' is not a valid sharded checkpoint index: <broken rule>`, the rule naming the
/// entry and the shard file where there is one. A shard that cannot be opened throws `io_error`
/// naming the shard instead, and a shard that is not a valid safetensors file `format_error`.
/// An `index_error` is a `format_error`: one handler catches a bad index and a bad shard.
class index_error : public format_error {
 public:
  /// \param index the index file; \param rule the rule it breaks, naming the entry if any.
  index_error(std::filesystem::path index, const std::string& rule)
      : format_error(index, rule, "ckpt: '" + index.string() + "' is not a valid sharded checkpoint index: " + rule) {}
};

/// How `save_sharded` names and writes its files.
struct shard_options {
  /// The files are `<base_name>-00001-of-0000N.safetensors` and the index
  /// `<base_name>.safetensors.index.json`. Must be a plain file name part (non-empty, no `/`).
  std::string base_name = "model";
  /// Passed on to `ckpt::save` for every shard (a per-shard digest, for instance).
  save_options save{};
  /// After the new index is in place, remove the shards of an earlier save with the same
  /// `base_name` that the new index does not name (files matching
  /// `<base_name>-NNNNN-of-NNNNN.safetensors` exactly), as `transformers`' `save_pretrained`
  /// cleans its folder. They are removed only once the new index no longer refers to them
  /// (a process that read the previous index but has not opened its shards yet then fails
  /// with an `io_error`; one that has loaded them keeps its mappings).
  bool remove_stale_shards = true;
};

/// The files `save_sharded` wrote.
struct sharded_files {
  std::filesystem::path index;                ///< `<folder>/<base_name>.safetensors.index.json`
  std::vector<std::filesystem::path> shards;  ///< in order: `...-00001-of-0000N.safetensors`, ...
};

/// Writes `t` into `folder` as a Hugging Face sharded checkpoint: shards of at most
/// `max_shard_bytes` bytes of tensor data each, then the index.
///
/// Entries are assigned to shards in name order, greedily, exactly as huggingface_hub's
/// `split_state_dict_into_shards` does: an entry goes into the current shard unless that would
/// take the shard's tensor bytes over `max_shard_bytes`, in which case the current shard is
/// closed and a new one starts; an entry larger than `max_shard_bytes` gets a shard of its own,
/// numbered when it is met (so the entries after it may still join the shard before it). The
/// limit counts tensor bytes, not the few bytes of each shard's header, as Hugging Face's
/// `max_shard_size` does. A non-empty checkpoint always gets an index, even if it all fits in
/// one shard (`save_pretrained` then writes an unsharded `model.safetensors` instead), so a
/// sharded folder always loads the same way.
///
/// All or nothing: every shard is first written with `ckpt::save` into a hidden staging folder
/// in `folder` (`.ckpt-staging-XXXXXX`); if any fails, the staging folder is removed and `folder`
/// is left exactly as it was (an earlier save there still loads whole). Then the shards are
/// renamed into place, the folder fsynced, and the index written last (temporary file, fsync,
/// rename, folder fsync), so a reader of the index never sees a shard that is not complete.
/// When a new shard takes the name of an existing file (a save over an earlier one with as many
/// shards), the earlier index is removed before the first rename: an interruption between the
/// renames and the new index (a crash, or a rename failing, which only a broken file system
/// does) leaves a folder without an index, which `load` refuses, never an index naming shards of
/// two saves. `metadata.total_size` is the sum of the entries' byte counts. The folder is
/// created if missing.
/// \throws std::invalid_argument if `max_shard_bytes` is 0 or `options.base_name` is empty,
///   holds `/` or is not valid UTF-8 (the message names the value); as `save` for a shard (an
///   entry name that is not valid UTF-8), leaving `folder` as it was.
/// \throws io_error on an I/O error (the message names the file).
/// \returns the files written.
sharded_files save_sharded(const std::filesystem::path& folder, const checkpoint& t,
                           std::uint64_t max_shard_bytes, const shard_options& options = {});

/// True if `ckpt::load` reads `path` as a sharded checkpoint: its name ends with `.index.json`,
/// or it is an existing folder (which may hold a single `model.safetensors` or
/// `pytorch_model.bin` instead: see `ckpt::load`). Looks at the file system only for the folder
/// test.
/// \throws nothing
[[nodiscard]] bool is_sharded_path(const std::filesystem::path& path) noexcept;

/// The sharded checkpoint whose index is `path`, or, if `path` is a folder, whose index is the
/// one `*.safetensors.index.json` file in it. Every shard the index names is loaded with
/// `ckpt::load(shard, options)` (mapped, lazily: only headers are read), and the result holds
/// the entries of `weight_map`, each keeping its shard's mapping alive.
///
/// The index must be a JSON object with a `weight_map` object of entry names to shard file
/// names; a `metadata` member, if present, must be an object (its contents are not used).
/// Shard names must be plain file names in the index's folder (no `/`, not `.` or `..`).
/// \throws index_error if the index breaks one of those rules, or an entry is missing from the
///   shard that `weight_map` names (the message names the entry and the shard).
/// \throws ckpt::error (the base class) if `path` is a folder holding no `*.safetensors.index.json`
///   or several (the message names the folder, and the first two indexes).
/// \throws io_error if the index or a shard cannot be opened or read (the message names it).
/// \throws format_error (or a class derived from it) if a shard is not a valid safetensors
///   file.
[[nodiscard]] checkpoint load_sharded(const std::filesystem::path& path,
                                      const load_options& options = {});

}  // namespace ckpt
