#pragma once
// The POSIX file plumbing the compiled parts share: the errno of the last call as an error_code,
// an owned file descriptor, and the atomic write of a small file (an index) as `save` writes a
// checkpoint.

#include <ckpt/detail/io_hooks.hpp>
#include <ckpt/error.hpp>

#include "temporary_name.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

namespace ckpt::detail {

inline std::error_code last_error() { return {errno, std::system_category()}; }

/// Owns a file descriptor.
class file_descriptor {
 public:
  explicit file_descriptor(int fd) noexcept : fd_(fd) {}
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;
  ~file_descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// Closes now, reporting the error close() gives (a failed close may mean lost writes).
  int close() noexcept { return ::close(std::exchange(fd_, -1)); }

 private:
  int fd_;
};

/// Opens (creating it) `lock_path` in `folder` and takes its exclusive `flock`, which the
/// returned descriptor holds until it is closed. flock, not fcntl locks: it belongs to the open
/// file description, so a second holder in this very process, which opens the file anew, is
/// refused as well.
/// \throws lock_error if another open description holds it; io_error on any other failure.
[[nodiscard]] inline int lock_exclusively(const std::filesystem::path& folder, const std::filesystem::path& lock_path) {
  const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) throw io_error(lock_path, "open the lock file", last_error());
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int code = errno;
    ::close(fd);
    if (code == EWOULDBLOCK) throw lock_error(folder, lock_path);
    throw io_error(lock_path, "lock", {code, std::system_category()});
  }
  return fd;
}

/// What `write_atomically` leaves at `path` when fsyncing the folder fails after the rename.
enum class on_folder_sync_failure {
  keep_new_file,    ///< the new file stays (as `save` does): it is complete, only not yet durable
  remove_new_file,  ///< the new file is removed, so that nothing names it as committed
};

/// Writes `text` to `path` as ckpt::save writes a checkpoint: a temporary file beside it (through
/// the io_hooks seam), fsynced, renamed over it, and the folder fsynced; on failure `path` is
/// unchanged (or, after a failed folder fsync, as `folder_failure` says) and the temporary gone.
/// Errors name `path` rather than the temporary's random name.
/// \throws io_error naming `path` or its folder and the system error.
inline void write_atomically(const std::filesystem::path& path, std::string_view text,
                             on_folder_sync_failure folder_failure = on_folder_sync_failure::keep_new_file) {
  const std::filesystem::path folder = path.has_parent_path() ? path.parent_path() : ".";
  std::string temporary = temporary_pattern(path);
  file_descriptor fd(::mkostemp(temporary.data(), O_CLOEXEC));
  if (fd.get() < 0) throw io_error(path, "create a temporary file beside", last_error());
  // The file to remove if this throws: the temporary, then (if asked) the renamed file.
  struct remover {
    const char* file;
    ~remover() {
      if (file != nullptr) ::unlink(file);
    }
  } cleanup{temporary.c_str()};
  const mode_t mask = ::umask(0);
  ::umask(mask);
  static_cast<void>(::fchmod(fd.get(), 0666 & ~mask));
  std::size_t done = 0;
  while (done < text.size()) {
    iovec piece{const_cast<char*>(text.data() + done), text.size() - done};
    const ssize_t n = hooks().writev(fd.get(), &piece, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_error(path, "write", last_error());
    done += static_cast<std::size_t>(n);
  }
  if (hooks().fsync(fd.get()) != 0) throw io_error(path, "fsync", last_error());
  if (fd.close() != 0) throw io_error(path, "close", last_error());
  if (hooks().rename(temporary.c_str(), path.c_str()) != 0)
    throw io_error(path, "rename a temporary file over", last_error());
  cleanup.file = folder_failure == on_folder_sync_failure::remove_new_file ? path.c_str() : nullptr;
  file_descriptor dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) throw io_error(folder, "open folder", last_error());
  if (hooks().fsync(dir.get()) != 0) throw io_error(folder, "fsync folder", last_error());
  cleanup.file = nullptr;
}

}  // namespace ckpt::detail
