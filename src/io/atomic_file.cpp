#include "atomic_file.hpp"

#include "io_hooks.hpp"
#include "posix_file.hpp"
#include "temporary_name.hpp"

#include <ckpt/error.hpp>

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

namespace ckpt::detail {

void drop_cached_pages(const file_at& file) noexcept {
  const int fd = ::openat(file.folder.fd(), file.name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
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
void require_replaceable(const file_at& target) {
  struct stat info {};
  if (::fstatat(target.folder.fd(), target.name.c_str(), &info, 0) != 0 || S_ISREG(info.st_mode))
    return;  // absent (or unreadable: the rename says)
  throw std::invalid_argument("ckpt: will not save over '" + target.path().string() + "': it is " +
                              std::string(type_of(info.st_mode)) +
                              ", not a regular file (a save replaces the file at its path)");
}

}  // namespace

std::string random_suffix() {
  static constexpr char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  unsigned char bytes[temporary_suffix_length] = {};
  if (::getrandom(bytes, sizeof bytes, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof bytes)) {
    // No entropy yet (early boot): the clock and a counter, enough to make a collision (retried) rare.
    static std::atomic<std::uint64_t> counter{0};
    std::uint64_t x = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                      (counter.fetch_add(1) * 0x9e3779b97f4a7c15ULL) ^ static_cast<std::uint64_t>(::getpid());
    for (unsigned char& b : bytes) {
      x ^= x >> 29;
      x *= 0xbf58476d1ce4e5b9ULL;
      b = static_cast<unsigned char>(x >> 56);
    }
  }
  std::string out(temporary_suffix_length, 'X');
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = alphabet[bytes[i] % (sizeof alphabet - 1)];
  return out;
}

atomic_file::atomic_file(file_at target) : target_(std::move(target)), shown_(target_.path()) {
  require_replaceable(target_);
  // O_EXCL creates a new file or fails: never opens an existing one, nor follows a link there.
  for (int attempt = 0; attempt < 100; ++attempt) {
    temporary_ = temporary_name(target_.name, random_suffix());
    fd_ = ::openat(target_.folder.fd(), temporary_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ >= 0 || errno != EEXIST) break;
  }
  if (fd_ < 0) throw io_error(shown_, "create a temporary file beside", last_error());
  // The file being replaced gives its cached pages back first (clean ones: it was synced when it
  // was written), so that the replacement's pages are the ones just freed: without it an atomic
  // replace grows the page cache by a whole file.
  drop_cached_pages(target_);
}

atomic_file::~atomic_file() {
  if (fd_ >= 0) ::close(fd_);
  if (leftover_ == leftover::temporary) ::unlinkat(target_.folder.fd(), temporary_.c_str(), 0);
  else if (leftover_ == leftover::target) ::unlinkat(target_.folder.fd(), target_.name.c_str(), 0);
}

bool atomic_file::start_direct() noexcept {
  if (hooks().refuse_direct) return false;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags | O_DIRECT) != 0) return false;
  direct_ = true;
  return true;
}

bool atomic_file::left_direct_after_refusal() noexcept {
  if (!direct_ || direct_written_ || errno != EINVAL) return false;
  const int saved = errno;
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) {
    errno = saved;  // the write's error is the one to report
    return false;
  }
  direct_ = false;
  return true;
}

void atomic_file::write(std::vector<iovec>& pieces) {
  std::size_t first = 0;
  while (first < pieces.size()) {
    const int count = static_cast<int>(std::min<std::size_t>(pieces.size() - first, IOV_MAX));
    const ssize_t n = retry_interrupted([&] { return hooks().writev(fd_, pieces.data() + first, count); });
    if (n < 0 && left_direct_after_refusal()) continue;
    if (n < 0) throw io_error(shown_, "write", last_error());
    direct_written_ = direct_written_ || direct_;
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
    if (n < 0 && left_direct_after_refusal()) continue;
    if (n < 0) throw io_error(shown_, "write", last_error());
    direct_written_ = direct_written_ || direct_;
    done += static_cast<std::size_t>(n);
  }
}

void atomic_file::truncate(off_t size) {
  if (retry_interrupted([&] { return ::ftruncate(fd_, size); }) != 0) throw io_error(shown_, "truncate", last_error());
}

void atomic_file::commit(on_folder_sync_failure folder_failure) {
  // Durability: the data must be on disk before a name points at them (fsync, then rename), and
  // the rename itself is only durable once the folder is fsynced (see ckpt::save).
  if (hooks().fsync(fd_) != 0) throw io_error(shown_, "fsync", last_error());
  if (::close(std::exchange(fd_, -1)) != 0) throw io_error(shown_, "close", last_error());
  target_.folder.rename(temporary_, target_.name, "rename a temporary file over");
  leftover_ = folder_failure == on_folder_sync_failure::remove_new_file ? leftover::target : leftover::none;
  target_.folder.sync();
  leftover_ = leftover::none;
}

void write_atomically(const file_at& target, std::string_view text, on_folder_sync_failure folder_failure) {
  atomic_file file(target);
  file.write(text);
  file.commit(folder_failure);
}

}  // namespace ckpt::detail
