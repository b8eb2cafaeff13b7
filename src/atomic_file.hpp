#pragma once
// The one writer of files that must appear whole or not at all: a checkpoint (src/file.cpp), a
// sharded index (src/sharded.cpp, src/mpi/step_folders.cpp), the manager's small files. A temporary beside
// the target, every byte written, fsynced, renamed over the target, the folder fsynced; the
// temporary removed if anything fails or the file is dropped uncommitted. Every name is resolved
// in the target's folder, held by its descriptor (folder.hpp), from the temporary's creation to
// the folder's fsync. Every call that can fail goes through the test seam (io_hooks.hpp). Errors
// name the target, the file the caller knows, not the temporary's random name.

#include "folder.hpp"

#include <sys/types.h>
#include <sys/uio.h>

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

/// What `commit` leaves at the target when fsyncing the folder fails after the rename.
enum class on_folder_sync_failure {
  keep_new_file,    ///< the new file stays (as `save` does): it is complete, only not yet durable
  remove_new_file,  ///< the new file is removed, so that nothing names it as committed
};

class atomic_file {
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
  ~atomic_file();

  /// Writes all of `pieces` at the current position, in writev calls of IOV_MAX pieces at most,
  /// resuming after short writes (`pieces` is consumed).
  /// \throws io_error naming the target.
  void write(std::vector<iovec>& pieces);
  /// Writes all of `text` at the current position.
  /// \throws io_error naming the target.
  void write(std::string_view text);
  /// Writes all of `text` at `offset`, leaving the position alone.
  /// \throws io_error naming the target.
  void write_at(std::string_view text, off_t offset);

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
  int fd_ = -1;
  // What the destructor removes: the temporary, the renamed target, or nothing once committed.
  enum class leftover { temporary, target, none } leftover_ = leftover::temporary;
};

/// Writes `text` to `target` through an atomic_file.
/// \throws io_error naming `target` or its folder.
void write_atomically(const file_at& target, std::string_view text,
                      on_folder_sync_failure folder_failure = on_folder_sync_failure::keep_new_file);

}  // namespace ckpt::detail
