#pragma once
// The test seam of the build, private to it (not installed): the system calls ckpt's writer
// makes, and the reads of loaded files, behind function pointers, so that tests can count them
// (the fsyncs that make a save durable, and their order around the rename) and make them fail
// part-way (EIO, ENOSPC at the k-th write; a file cut short at a read). The table is global, read without synchronisation by every save (background ones
// too), so swap it only while no save runs, and put it back (io_hooks_guard does). Tests reach it
// through a private include of src/ (tests/CMakeLists.txt).

#include <sys/types.h>
#include <sys/uio.h>

#include <cstddef>

namespace ckpt::detail {

struct io_hooks {
  // Every write of a save's bytes (header and data) goes through writev (the descriptor in
  // direct I/O, O_DIRECT, for a manager's background save: aligned whole blocks).
  ssize_t (*writev)(int fd, const iovec* pieces, int count);
  // The digest is patched into the header with pwrite once the data are out (with direct I/O,
  // the whole blocks that hold its digits, written again).
  ssize_t (*pwrite)(int fd, const void* data, std::size_t size, off_t offset);
  // Both the temporary file's fsync and the folder's (tell them apart with fstat).
  int (*fsync)(int fd);
  // Every rename that commits a file (the temporary over its target; a shard moved into place),
  // names relative to folders held by their descriptor (folder.hpp).
  int (*renameat)(int from_folder, const char* from, int to_folder, const char* to);
  // Every removal of the managers (the retention rules, a step folder's contents): a file, a
  // link, or with AT_REMOVEDIR an empty folder.
  int (*unlinkat)(int folder, const char* name, int flags);
  // Every read of a file's bytes after it is opened (read_fully, posix_file.hpp): a loaded
  // file's entries, its digest, the shards' index.
  ssize_t (*pread)(int fd, void* out, std::size_t size, off_t offset);
  // Every change of a thread's priority: a background save's, once its snapshot is complete
  // (manager_core.hpp, background_write::yield).
  int (*setpriority)(int which, id_t who, int priority);
  // Not a system call: called on a background save's thread before it copies the leaves of a
  // lazy snapshot the loop has not copied (tests hold it there, so that the loop copies first).
  void (*before_lazy_copies)() = nullptr;
  // Not a system call: when set, atomic_file::start_direct answers as a file system that refuses
  // O_DIRECT does (tests of the fallback to the page cache).
  bool refuse_direct = false;
  // Not a system call: called with the count of data bytes the file writer hashes as it writes
  // them, for a digest (none of a snapshot that hashed them as it copied them: tests see that a
  // background save reads its snapshot once).
  void (*writer_hashed)(std::size_t bytes) = nullptr;
};

// The table in use; initially the system calls themselves.
io_hooks& hooks() noexcept;

// The system calls, to restore or to forward to.
io_hooks system_hooks() noexcept;

// Installs a table for the lifetime of the guard, then restores the one before.
class io_hooks_guard {
 public:
  explicit io_hooks_guard(const io_hooks& replacement) noexcept : saved_(hooks()) { hooks() = replacement; }
  io_hooks_guard(const io_hooks_guard&) = delete;
  io_hooks_guard& operator=(const io_hooks_guard&) = delete;
  ~io_hooks_guard() { hooks() = saved_; }

 private:
  io_hooks saved_;
};

}  // namespace ckpt::detail
