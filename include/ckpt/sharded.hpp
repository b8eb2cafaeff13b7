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
/// `save_sharded` writes such a folder; `ckpt::load` (ckpt/file.hpp), given the index file or the
/// folder holding it, reads it back as one checkpoint spanning every shard, each shard mapped
/// lazily as `load` maps a single file (its documentation gives the index's rules).
///
/// **Metadata.** The checkpoint's `__metadata__` is written into every shard, so that each shard
/// is a self-describing safetensors file; the index keeps Hugging Face's shape (its `metadata`
/// holds `total_size`, and the save's id). Loading keeps the metadata common to every shard the
/// index names: the keys present in all of them with the same value. Keys whose values differ
/// between shards (a per-file digest, say) are dropped, and so is the save id. An empty
/// checkpoint is saved as an index alone (no shard), so its metadata is not kept.
///
/// **One save.** Each save writes an id of its own (12 random letters and digits) into the
/// index's `metadata` and every shard's `__metadata__`, as `"ckpt.save_id"`. A load checks that
/// every shard it reads gives its index's id, so that a checkpoint saved again over the same
/// shard names while it is read (in a folder or a bucket) never loads as half one save, half the
/// other: the load reads the index again once, and throws `mixed_save_error` (ckpt/error.hpp) if it meets a shard
/// of another save again. Indexes without an id (Hugging Face's, or written by ckpt before it
/// wrote ids) are read as they are.
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
///
/// `folder` may be `s3://bucket/prefix` (with S3 support: the guide's "Checkpoints in object
/// storage"): each shard is an object uploaded as `ckpt::save` uploads one, appearing whole when
/// its upload completes, and the index is written last, after the previous index if a shard
/// replaces one of the previous save's. A bucket has no staging folder: a save that fails
/// part-way leaves the shards it uploaded, which no index names when the previous one had to go
/// (then `load` of the index fails with HTTP 404) and are otherwise stale shards of no index.
/// `ckpt::load` of the index object loads it, reading only the shards that hold a chosen entry
/// under `load_options::only`.
/// \throws std::invalid_argument if `max_shard_bytes` is 0 or `options.base_name` is empty,
///   holds `/` or is not valid UTF-8 (the message names the value); as `save` for a shard (an
///   entry name that is not valid UTF-8), leaving `folder` as it was.
/// \throws io_error on an I/O error (the message names the file); remote_error for a request a
///   bucket refuses, and std::invalid_argument as `save` for an `s3://` path.
/// \returns the files written.
sharded_files save_sharded(const std::filesystem::path& folder, const checkpoint& t,
                           std::uint64_t max_shard_bytes, const shard_options& options = {});

}  // namespace ckpt
