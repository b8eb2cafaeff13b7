#include "folder.hpp"

#include "io_hooks.hpp"
#include "remote_path.hpp"

#include <ckpt/error.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace ckpt::detail {

namespace {

constexpr int folder_flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;

// A folder tree deeper than this is not one ckpt made: removing it stops with ELOOP.
constexpr int max_removal_depth = 64;

std::string name_of(std::string_view name) { return std::string(name); }

// The names in the folder `fd`, read through a descriptor of its own (a directory stream's
// position belongs to its open file description, which a dup would share).
std::vector<std::string> names_in(int fd, const std::filesystem::path& shown) {
  const int own = ::openat(fd, ".", folder_flags);
  if (own < 0) throw io_error(shown, "list", last_error());
  DIR* stream = ::fdopendir(own);
  if (stream == nullptr) {
    const std::error_code code = last_error();
    ::close(own);
    throw io_error(shown, "list", code);
  }
  std::vector<std::string> out;
  errno = 0;
  while (const dirent* entry = ::readdir(stream)) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") out.emplace_back(name);
    errno = 0;
  }
  const std::error_code code = last_error();
  ::closedir(stream);
  if (code) throw io_error(shown, "list", code);
  return out;
}

// Removes everything in the folder `fd` (shown as `shown`), never through a link.
void empty_folder(int fd, const std::filesystem::path& shown, int depth) {
  if (depth > max_removal_depth) throw io_error(shown, "remove", {ELOOP, std::system_category()});
  for (const std::string& name : names_in(fd, shown)) {
    struct stat info {};
    if (::fstatat(fd, name.c_str(), &info, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      throw io_error(shown / name, "remove", last_error());
    }
    if (S_ISDIR(info.st_mode)) {
      const file_descriptor inner(::openat(fd, name.c_str(), folder_flags | O_NOFOLLOW));
      if (inner.get() >= 0) {
        empty_folder(inner.get(), shown / name, depth + 1);
        if (hooks().unlinkat(fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
          throw io_error(shown / name, "remove", last_error());
        continue;
      }
      // Replaced by a link or a file since the fstatat: unlinked below as what it is now.
      if (errno != ELOOP && errno != ENOTDIR) throw io_error(shown / name, "remove", last_error());
    }
    if (hooks().unlinkat(fd, name.c_str(), 0) != 0 && errno != ENOENT) throw io_error(shown / name, "remove", last_error());
  }
}

}  // namespace

folder_handle folder_handle::open(const std::filesystem::path& path, bool create) {
  if (is_remote(path))
    throw std::invalid_argument("ckpt: '" + path.string() +
                                "' is in object storage, and this takes a local folder (s3:// paths are taken by "
                                "ckpt::save, ckpt::load, ckpt::save_sharded, ckpt::checkpoint_manager, ckpt::mpi's "
                                "save, load and manager's shared tier, and the ckpt tool)");
  if (create) {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) throw io_error(path, "create the folder", ec);
  }
  const int fd = ::open(path.empty() ? "." : path.c_str(), folder_flags);
  if (fd < 0) throw io_error(path, "open the folder", last_error());
  return {std::make_shared<const file_descriptor>(fd), path};
}

folder_handle folder_handle::subfolder(std::string_view name, bool create) const {
  const std::string n = name_of(name);
  if (create && ::mkdirat(fd(), n.c_str(), 0777) != 0 && errno != EEXIST)
    throw io_error(path_of(name), "create the folder", last_error());
  const int sub = ::openat(fd(), n.c_str(), folder_flags | O_NOFOLLOW);
  if (sub < 0) {
    // O_DIRECTORY says ENOTDIR for a link: say what it is.
    std::error_code code = last_error();
    struct stat info {};
    if (code == std::errc::not_a_directory && ::fstatat(fd(), n.c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(info.st_mode))
      throw io_error(path_of(name), "open as a folder (never through a symbolic link)", {ELOOP, std::system_category()});
    throw io_error(path_of(name), "open the folder", code);
  }
  return {std::make_shared<const file_descriptor>(sub), path_of(name)};
}

folder_handle folder_handle::subfolder_to_read(std::string_view name) const {
  const int sub = ::openat(fd(), name_of(name).c_str(), folder_flags);
  if (sub < 0) throw io_error(path_of(name), "open the folder", last_error());
  return {std::make_shared<const file_descriptor>(sub), path_of(name)};
}

int folder_handle::fd() const noexcept { return fd_ ? fd_->get() : AT_FDCWD; }

std::vector<std::string> folder_handle::names() const { return names_in(fd(), path_); }

std::optional<struct stat> folder_handle::status(std::string_view name) const {
  struct stat info {};
  if (::fstatat(fd(), name_of(name).c_str(), &info, AT_SYMLINK_NOFOLLOW) == 0) return info;
  if (errno == ENOENT) return std::nullopt;
  throw io_error(path_of(name), "stat", last_error());
}

file_descriptor folder_handle::open_to_read(std::string_view name, struct stat& info) const {
  return detail::open_to_read(fd(), name_of(name).c_str(), path_of(name), info);
}

bool folder_handle::remove(std::string_view name) const {
  const std::string n = name_of(name);
  const std::optional<struct stat> info = status(name);
  if (!info) return false;
  if (S_ISDIR(info->st_mode)) {
    const file_descriptor inner(::openat(fd(), n.c_str(), folder_flags | O_NOFOLLOW));
    if (inner.get() >= 0) {
      empty_folder(inner.get(), path_of(name), 1);
      if (hooks().unlinkat(fd(), n.c_str(), AT_REMOVEDIR) == 0) return true;
      if (errno == ENOENT) return false;
      throw io_error(path_of(name), "remove", last_error());
    }
    if (errno == ENOENT) return false;
    if (errno != ELOOP && errno != ENOTDIR) throw io_error(path_of(name), "remove", last_error());
  }
  if (hooks().unlinkat(fd(), n.c_str(), 0) == 0) return true;
  if (errno == ENOENT) return false;
  throw io_error(path_of(name), "remove", last_error());
}

void folder_handle::rename(std::string_view from, std::string_view to, const std::string& operation) const {
  if (hooks().renameat(fd(), name_of(from).c_str(), fd(), name_of(to).c_str()) != 0)
    throw io_error(path_of(to), operation, last_error());
}

bool folder_handle::rename_unless_taken(std::string_view from, std::string_view to) const {
  const std::string f = name_of(from), t = name_of(to);
  if (::renameat2(fd(), f.c_str(), fd(), t.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno == EEXIST) return false;
  if (errno != EINVAL) throw io_error(path_of(from), "rename", last_error());
  // A file system without RENAME_NOREPLACE: look, then rename (a race with another writer of
  // the same folder, which the managers' lock excludes).
  if (status(to)) return false;
  if (::renameat(fd(), f.c_str(), fd(), t.c_str()) != 0) throw io_error(path_of(from), "rename", last_error());
  return true;
}

void folder_handle::sync() const {
  if (hooks().fsync(fd()) != 0) throw io_error(path_, "fsync folder", last_error());
}

file_descriptor folder_handle::lock(std::string_view name) const {
  file_descriptor held(::openat(fd(), name_of(name).c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666));
  if (held.get() < 0) throw io_error(path_of(name), "open the lock file", last_error());
  if (::flock(held.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) throw lock_error(path_, path_of(name));
    throw io_error(path_of(name), "lock", last_error());
  }
  return held;
}

file_at target_in_folder(const std::filesystem::path& path) {
  try {
    return {folder_handle::open(path.parent_path()), path.filename().string()};
  } catch (const io_error& e) {
    throw io_error(path, "create a temporary file beside", e.code());
  }
}

}  // namespace ckpt::detail
