#pragma once
// Where a run's files live, as the managers use it (src/run/layout.hpp says what they are): a
// local folder held by its descriptor (folder_store), a bucket's prefix (bucket_store), a node's
// local tier (a folder_store under the run's id). The operations a run needs and no more: list,
// look at one name, read, write a file whole or not at all, remove, set aside, hold against other
// writers. Names are relative to the store, `/` between a folder and what it holds (a step
// folder's shard: "step-0000000042/model-00001-of-00002.safetensors").
//
// What differs between stores, and what each guarantees:
//   - a folder is held by its descriptor from open to close: every name is resolved relative to
//     it, nothing is followed through a symbolic link for a write or a removal (a link is read
//     through: a forked run's step may point at another run's), and `hold` takes the managers'
//     lock, so that no other manager writes the run meanwhile; a file's commit is a rename over
//     its name, fsynced with the folder;
//   - a bucket has no lock (`hold` answers nothing: two writers of one run are the caller's to
//     avoid, docs/guide.md, "Checkpoints in object storage"); a file's commit completes a
//     multipart upload, and one that must not replace a committed object is a conditional write.
// A store may be used from two threads at once (a manager's caller and its background save).

#include <ckpt/checkpoint.hpp>
#include <ckpt/file.hpp>

#include "io/atomic_file.hpp"
#include "io/byte_sink.hpp"
#include "io/posix_file.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

class folder_handle;

class store {
 public:
  // What a name is.
  enum class kind { file, folder, link, other };
  struct entry {
    std::string name;
    kind what = kind::file;
  };
  // Whether a file's commit may replace what is at its name.
  enum class existing { replaced, kept };
  // A file being written: its bytes go to `sink()` in order (the file writer's), then `commit`
  // makes it appear whole; dropped uncommitted, nothing of it is left.
  class file {
   public:
    virtual ~file() = default;
    virtual byte_sink& sink() noexcept = 0;
    // True once the file is there; false, nothing written, if it was created with
    // existing::kept and something is at its name.
    // \throws io_error, remote_error.
    virtual bool commit() = 0;
  };

  store() = default;
  store(const store&) = delete;
  store& operator=(const store&) = delete;
  virtual ~store() = default;

  // Where `name` is ("" for the store itself), for messages and statuses.
  [[nodiscard]] virtual std::filesystem::path path_of(std::string_view name) const = 0;
  // The names directly in the store, or in its folder `folder`, in no order.
  // \throws io_error, remote_error.
  [[nodiscard]] virtual std::vector<entry> list(std::string_view folder = {}) const = 0;
  // What `name` is, or nothing if there is no such name; with `through_links`, what a link there
  // leads to.
  // \throws io_error, remote_error for another failure than absence.
  [[nodiscard]] virtual std::optional<kind> find(std::string_view name, bool through_links = false) const = 0;

  // The checkpoint in the file `name` (by its content, as ckpt::load reads a file), or the sharded
  // checkpoint whose index `name` is (a name ending with `.index.json`): read through a link.
  // \throws as ckpt::load.
  [[nodiscard]] virtual checkpoint load(std::string_view name, const load_options& options) const = 0;
  // The `__metadata__` of the safetensors file `name`, read from its header alone.
  // \throws as ckpt::load.
  [[nodiscard]] virtual metadata_map metadata(std::string_view name) const = 0;
  // The small file `name` whole, or nothing if there is none.
  // \throws error naming it if it is longer than `limit` bytes; io_error, remote_error.
  [[nodiscard]] virtual std::optional<std::string> read(std::string_view name, std::size_t limit) const = 0;

  // A file `name` to write (its folder made first if need be). With direct I/O (`path`), where
  // the store takes it (direct_io()), the bytes go from aligned memory straight to the device.
  // \throws io_error, remote_error.
  [[nodiscard]] virtual std::unique_ptr<file> create(std::string_view name, existing rule,
                                                     write_path path = write_path::page_cache) const = 0;
  // Writes the small file `name` whole (an index that commits a step, a run id): true once it is
  // there, false if `rule` kept what was. A write that throws leaves nothing at `name` that it
  // wrote (in a folder, a file renamed into place whose folder's fsync then failed is removed
  // again), so that a commit that failed is not there.
  // \throws io_error, remote_error.
  virtual bool write(std::string_view name, std::string_view text, existing rule) const = 0;
  // Removes `name`: a file, a link (never what it leads to), or a folder with what it holds.
  // False if there was no such name.
  // \throws io_error, remote_error naming what could not be removed.
  virtual bool remove(std::string_view name) const = 0;
  // Renames `from` to `to` (a file or a folder) unless `to` is taken: false, nothing renamed, if it
  // is. \throws io_error with ENOENT if `from` is gone; io_error, remote_error.
  virtual bool rename_unless_taken(std::string_view from, std::string_view to) const = 0;
  // Takes the lock `name` against every other holder, held until the descriptor returned is
  // closed; nothing for a store that has no locks (a bucket).
  // \throws lock_error if another holds it; io_error.
  [[nodiscard]] virtual std::optional<file_descriptor> hold(std::string_view name) const = 0;

  // Whether create() takes direct I/O: a background save then lays its snapshot out as the file
  // (snapshot_layout::as_file).
  [[nodiscard]] virtual bool direct_io() const noexcept { return false; }
  // Advice: the cached pages of `name` are not needed (a file about to be replaced or deleted).
  virtual void drop_cache(std::string_view /*name*/) const noexcept {}
  // Abandons what writers killed mid-write left that only the store sees (a bucket's uploads
  // neither completed nor aborted), for the names `ours` accepts.
  // \throws remote_error.
  virtual void abandon_writes(const std::function<bool(std::string_view name)>& /*ours*/) const {}
  // The local folder, for what only a folder can do (MPI-IO, mapped shards, files sent between
  // ranks); null for a bucket.
  [[nodiscard]] virtual const folder_handle* local() const noexcept { return nullptr; }

  // What a bucket does where a folder has local(): an MPI job's step in a bucket.
  //
  // The file `name` whole in memory (an object fetched once, whose bytes a process hands to
  // others), read by ranged GETs in parallel; its size in `size`.
  // \throws io_error with ENOENT if there is no such file; remote_error; std::logic_error for a
  // folder (mapped through local() there).
  [[nodiscard]] virtual std::shared_ptr<std::byte[]> fetch(std::string_view name, std::size_t& size) const;
  // One file `name` put together from numbered parts (1, 2, ...) that several processes send (an
  // MPI job's step of slices: one multipart upload, started by one rank, its id handed to the
  // others, each part sent by the rank that holds its bytes, finished by the first). Nothing is
  // at `name` until `finish_parts`; `abort_parts` drops what was sent. A part is at least
  // `min_part_bytes` long, but for the last.
  // \throws remote_error; std::logic_error for a folder (written in place by MPI-IO there).
  static constexpr std::size_t min_part_bytes = std::size_t{5} << 20;
  [[nodiscard]] virtual std::string start_parts(std::string_view name) const;
  // The part's tag, for finish_parts.
  [[nodiscard]] virtual std::string put_part(std::string_view name, const std::string& id, int number,
                                             std::span<const std::byte> bytes) const;
  // Makes the file of the parts (`tags[i]`: part i + 1's), of `size` bytes in all: true once it is
  // there, false (nothing written) if `rule` kept what was.
  virtual bool finish_parts(std::string_view name, const std::string& id, const std::vector<std::string>& tags,
                            std::uint64_t size, existing rule) const;
  virtual void abort_parts(std::string_view name, const std::string& id) const noexcept;
};

// The store of the folder `path` (created with its parents if `create`).
// \throws io_error naming it if it cannot be created or opened; std::invalid_argument for an
// `s3://` path (see open_store).
[[nodiscard]] std::unique_ptr<store> open_folder_store(const std::filesystem::path& path, bool create);
// The store of a folder already held.
[[nodiscard]] std::unique_ptr<store> folder_store_of(const folder_handle& folder);
// The store of `where`: a bucket's prefix for `s3://bucket/prefix`, else the folder (created with
// its parents if `create`; a bucket's prefix needs no creating).
// \throws std::invalid_argument for a bad URL, missing credentials, or a build without S3
// support; io_error as open_folder_store.
[[nodiscard]] std::unique_ptr<store> open_store(const std::filesystem::path& where, bool create);

}  // namespace ckpt::detail
