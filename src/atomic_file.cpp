#include "atomic_file.hpp"

#include "io_hooks.hpp"
#include "posix_file.hpp"
#include "temporary_name.hpp"

#include <ckpt/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

namespace ckpt::detail {

void drop_cached_pages(const std::filesystem::path& file) noexcept {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return;
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode)) static_cast<void>(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED));
  ::close(fd);
}

namespace {

std::string_view type_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "a special file";
}

// A save replaces a regular file (or a symlink to one, which the rename replaces by the new
// file) or creates one; anything else at the path is refused before a byte is written, so that
// `save(x, "/dev/null")` cannot replace the device node.
void require_replaceable(const std::filesystem::path& target) {
  struct stat info {};
  if (::stat(target.c_str(), &info) != 0 || S_ISREG(info.st_mode)) return;  // absent (or unreadable: the rename says)
  throw std::invalid_argument("ckpt: will not save over '" + target.string() + "': it is " +
                              std::string(type_of(info.st_mode)) +
                              ", not a regular file (a save replaces the file at its path)");
}

}  // namespace

atomic_file::atomic_file(std::filesystem::path target)
    : target_(std::move(target)), temporary_((require_replaceable(target_), temporary_pattern(target_))) {
  fd_ = ::mkostemp(temporary_.data(), O_CLOEXEC);
  if (fd_ < 0) throw io_error(target_, "create a temporary file beside", last_error());
  // mkstemp creates 0600; the file should get the usual permissions the umask allows.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  static_cast<void>(::fchmod(fd_, 0666 & ~mask));
  // The file being replaced gives its cached pages back first (clean ones: it was synced when it
  // was written), so that the replacement's pages are the ones just freed: without it an atomic
  // replace grows the page cache by a whole file.
  drop_cached_pages(target_);
}

atomic_file::~atomic_file() {
  if (fd_ >= 0) ::close(fd_);
  if (leftover_ == leftover::temporary) ::unlink(temporary_.c_str());
  else if (leftover_ == leftover::target) ::unlink(target_.c_str());
}

void atomic_file::write(std::vector<iovec>& pieces) {
  std::size_t first = 0;
  while (first < pieces.size()) {
    const int count = static_cast<int>(std::min<std::size_t>(pieces.size() - first, IOV_MAX));
    const ssize_t n = retry_interrupted([&] { return hooks().writev(fd_, pieces.data() + first, count); });
    if (n < 0) throw io_error(target_, "write", last_error());
    // Advance past what was written; a short write leaves part of one piece to go.
    auto left = static_cast<std::size_t>(n);
    while (first < pieces.size() && left >= pieces[first].iov_len) left -= pieces[first++].iov_len;
    if (left > 0) {
      pieces[first].iov_base = static_cast<char*>(pieces[first].iov_base) + left;
      pieces[first].iov_len -= left;
    }
  }
}

void atomic_file::write(std::string_view text) {
  std::vector<iovec> piece{{const_cast<char*>(text.data()), text.size()}};
  write(piece);
}

void atomic_file::write_at(std::string_view text, off_t offset) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = retry_interrupted([&] {
      return hooks().pwrite(fd_, text.data() + done, text.size() - done, offset + static_cast<off_t>(done));
    });
    if (n < 0) throw io_error(target_, "write", last_error());
    done += static_cast<std::size_t>(n);
  }
}

void atomic_file::commit(on_folder_sync_failure folder_failure) {
  // Durability: the data must be on disk before a name points at them (fsync, then rename), and
  // the rename itself is only durable once the folder is fsynced (see ckpt::save).
  if (hooks().fsync(fd_) != 0) throw io_error(target_, "fsync", last_error());
  if (::close(std::exchange(fd_, -1)) != 0) throw io_error(target_, "close", last_error());
  if (hooks().rename(temporary_.c_str(), target_.c_str()) != 0)
    throw io_error(target_, "rename a temporary file over", last_error());
  leftover_ = folder_failure == on_folder_sync_failure::remove_new_file ? leftover::target : leftover::none;
  const std::filesystem::path folder = target_.has_parent_path() ? target_.parent_path() : ".";
  file_descriptor dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) throw io_error(folder, "open folder", last_error());
  if (hooks().fsync(dir.get()) != 0) throw io_error(folder, "fsync folder", last_error());
  leftover_ = leftover::none;
}

void write_atomically(const std::filesystem::path& path, std::string_view text, on_folder_sync_failure folder_failure) {
  atomic_file file(path);
  file.write(text);
  file.commit(folder_failure);
}

}  // namespace ckpt::detail
