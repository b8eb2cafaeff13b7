#pragma once
// The POSIX file plumbing the compiled parts share: the errno of the last call as an error_code,
// an owned file descriptor, opening a file to read, the one EINTR retry loop and a whole read.
// Folders held by their descriptor (and their lock) are folder.hpp's, atomic writes
// atomic_file.hpp's.

#include <ckpt/error.hpp>

#include "io_hooks.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <string_view>
#include <cstddef>
#include <system_error>
#include <utility>

namespace ckpt::detail {

inline std::error_code last_error() { return {errno, std::system_category()}; }

/// Owns a file descriptor.
class file_descriptor {
 public:
  explicit file_descriptor(int fd) noexcept : fd_(fd) {}
  file_descriptor(file_descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  file_descriptor& operator=(file_descriptor&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;
  ~file_descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  [[nodiscard]] int get() const noexcept { return fd_; }
  /// Closes now, reporting the error close() gives (a failed close may mean lost writes).
  int close() noexcept { return ::close(std::exchange(fd_, -1)); }
  /// Gives the descriptor up to the caller, who closes it.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

/// Opens `name` (a path, or a name in the folder `dir` when `dir` is a folder's descriptor) for
/// reading and fills `info` with its status; `shown` names it in errors. The open does not wait:
/// a FIFO (or a device) opens at once, non-blocking, for the caller to refuse by its type
/// (`S_ISREG`); a regular file is then switched back to blocking reads. Symlinks are followed.
/// \throws io_error naming `shown` if it cannot be opened or examined.
[[nodiscard]] inline file_descriptor open_to_read(int dir, const char* name, const std::filesystem::path& shown,
                                                  struct stat& info) {
  file_descriptor fd(::openat(dir, name, O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (fd.get() < 0) throw io_error(shown, "open", last_error());
  if (::fstat(fd.get(), &info) != 0) throw io_error(shown, "stat", last_error());
  if (S_ISREG(info.st_mode)) {
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) throw io_error(shown, "open", last_error());
  }
  return fd;
}

/// The file at `path`, opened as `open_to_read(AT_FDCWD, path, path, info)`.
/// \throws io_error naming `path`.
[[nodiscard]] inline file_descriptor open_to_read(const std::filesystem::path& path, struct stat& info) {
  return open_to_read(AT_FDCWD, path.c_str(), path, info);
}

/// Calls `call` again while it fails with EINTR (a signal arrived first): the one retry loop of
/// the library's system calls. Returns what the last call returned.
template <class Call>
auto retry_interrupted(Call&& call) {
  for (;;) {
    const auto result = call();
    if (!(result < 0 && errno == EINTR)) return result;
  }
}

/// Reads up to `size` bytes at `offset` of `fd` into `out`, resuming after short reads; returns
/// how many it read (fewer only at the end of the file). The reads go through hooks().pread.
/// \throws io_error naming `path`.
inline std::size_t read_fully(int fd, std::byte* out, std::size_t size, off_t offset, const std::filesystem::path& path) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = retry_interrupted([&] { return hooks().pread(fd, out + done, size - done, offset + static_cast<off_t>(done)); });
    if (n < 0) throw io_error(path, "read", last_error());
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  return done;
}

}  // namespace ckpt::detail
