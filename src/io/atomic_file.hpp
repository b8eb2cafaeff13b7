#pragma once
// The one writer of files that must appear whole or not at all: a checkpoint (src/format/writer.cpp), a
// sharded index (src/format/sharded.cpp, src/mpi/step_folders.cpp), the manager's small files. A temporary beside
// the target, every byte written, fsynced, renamed over the target, the folder fsynced; the
// temporary removed if anything fails or the file is dropped uncommitted. Every name is resolved
// in the target's folder, held by its descriptor (folder.hpp), from the temporary's creation to
// the folder's fsync. Every call that can fail goes through the test seam (io_hooks.hpp). Errors
// name the target, the file the caller knows, not the temporary's random name.

#include "byte_sink.hpp"
#include "folder.hpp"

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

/// Asks the kernel to drop the cached pages of `file` (a regular file, not through a symbolic
/// link; anything else, or no file, is left alone), so that a file written next reuses them
/// instead of growing the page cache, whose fresh pages cost a fault each. Advice only: failures
/// change nothing.
void drop_cached_pages(const file_at& file) noexcept;

/// Six random characters of [A-Za-z0-9] (temporary_suffix_length), as mkstemp picks them: the
/// unique part of a temporary file's or folder's name.
/// \throws std::bad_alloc
[[nodiscard]] std::string random_suffix();

/// How a file's bytes reach the disk: through the page cache, or with direct I/O (O_DIRECT), from
/// aligned buffers straight to the device, no page cache filled (atomic_file::start_direct).
enum class write_path { page_cache, direct };

/// Direct I/O writes whole blocks of this many bytes, at offsets that are multiples of it, from
/// buffers aligned to it (a multiple of the logical block size of every common file system).
inline constexpr std::size_t direct_block_bytes = 4096;

/// What `commit` leaves at the target when fsyncing the folder fails after the rename.
enum class on_folder_sync_failure {
  keep_new_file,    ///< the new file stays (as `save` does): it is complete, only not yet durable
  remove_new_file,  ///< the new file is removed, so that nothing names it as committed
};

class atomic_file final : public byte_sink {
 public:
  /// Creates the temporary beside `target` in its folder (never through a symbolic link), with
  /// the permissions the umask gives a new file.
  /// \throws std::invalid_argument naming `target` if it exists and is not a regular file (nor
  /// a symlink to one): a folder, a device, a FIFO, a socket.
  /// \throws io_error naming `target`.
  explicit atomic_file(file_at target);
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;
  /// Removes the temporary (or, after a failed commit that asked for it, the renamed file) unless
  /// the file was committed.
  ~atomic_file() override;

  /// Switches the descriptor held to direct I/O (O_DIRECT, set with fcntl: no name is resolved
  /// again). From then on every write must start at a multiple of direct_block_bytes, from a
  /// buffer aligned to it, and be a whole number of blocks long (pad the tail, then `truncate`).
  /// Returns false, changing nothing, if the file system refuses direct I/O (or the test seam
  /// says it does: io_hooks::refuse_direct). If the first write after it is refused as invalid
  /// (EINVAL: a file system that accepts the flag but not the writes), the file goes back to the
  /// page cache and the write is retried there, silently: `direct()` then says false.
  bool start_direct() noexcept override;
  /// Whether writes go with direct I/O.
  [[nodiscard]] bool direct() const noexcept { return direct_; }

  /// Writes all of `pieces` at the current position, in writev calls of IOV_MAX pieces at most,
  /// resuming after short writes (`pieces` is consumed).
  /// \throws io_error naming the target.
  void write(std::vector<iovec>& pieces) override;
  /// Writes all of `text` at the current position.
  /// \throws io_error naming the target.
  void write(std::string_view text);
  /// Writes all of `text` at `offset`, leaving the position alone.
  /// \throws io_error naming the target.
  void write_at(std::string_view text, off_t offset) override;
  /// Cuts (or extends) the file to `size` bytes: after direct writes padded to a whole block.
  /// \throws io_error naming the target.
  void truncate(off_t size) override;

  /// The temporary's path, for a writer that fills it through another descriptor (the MPI-IO
  /// writer of sliced steps opens it on every rank, by this path).
  /// \throws std::bad_alloc
  [[nodiscard]] std::string temporary() const { return target_.folder.path_of(temporary_).string(); }

  /// Makes the file the target, durably: fsync, close, rename over the target, fsync the folder
  /// (the one held: not its path again).
  /// \throws io_error naming the target or its folder; the target is then as it was, except after
  /// a failed folder fsync, where `folder_failure` says.
  void commit(on_folder_sync_failure folder_failure = on_folder_sync_failure::keep_new_file);

 private:
  file_at target_;
  std::filesystem::path shown_;  // target_.path(), for messages
  std::string temporary_;        // its name in target_.folder
  // After a write that failed with `errno` EINVAL: if it was the first direct one, clears
  // O_DIRECT and returns true (retry the write through the page cache).
  bool left_direct_after_refusal() noexcept;
  int fd_ = -1;
  bool direct_ = false;          // O_DIRECT is set on fd_
  bool direct_written_ = false;  // a direct write succeeded: no fallback after it
  // What the destructor removes: the temporary, the renamed target, or nothing once committed.
  enum class leftover { temporary, target, none } leftover_ = leftover::temporary;
};

/// Writes `text` to `target` through an atomic_file.
/// \throws io_error naming `target` or its folder.
void write_atomically(const file_at& target, std::string_view text,
                      on_folder_sync_failure folder_failure = on_folder_sync_failure::keep_new_file);

}  // namespace ckpt::detail
