#pragma once
// A folder held by its descriptor. A manager opens its run folder once and does every listing,
// create, rename and removal in it relative to that descriptor (openat, renameat, unlinkat,
// fstatat without following links), so that a path that names another folder later (a symlink
// swapped, a folder moved away and a new one made in its place) never leads it into a folder it
// does not own. A symbolic link found in a folder is only ever read through (a forked run's step
// may point at another run's), renamed or unlinked: never followed for a write or a removal.
// The MPI layer holds its step folders the same way; ckpt::save of a path opens the path's
// folder once per save. Private to the build; the calls that tests make fail go through
// io_hooks.hpp.

#include "posix_file.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

class folder_handle {
 public:
  /// The working directory: names are paths, resolved as open(2) resolves them, each time.
  /// \throws nothing
  folder_handle() noexcept = default;

  /// Opens the folder `path` names now (symbolic links in `path` followed, this once); with
  /// `create`, creates it and its parents first.
  /// \throws io_error naming `path` if it cannot be created or opened, or is not a folder.
  [[nodiscard]] static folder_handle open(const std::filesystem::path& path, bool create = false);

  /// The folder `name` of this one, opened without following a symbolic link (a link there, or
  /// anything but a folder, is refused); with `create`, made first if it is absent.
  /// \throws io_error naming it: `ELOOP` or `ENOTDIR` for a link or a file of that name.
  [[nodiscard]] folder_handle subfolder(std::string_view name, bool create = false) const;
  /// The folder `name` of this one, a symbolic link followed: for reading only.
  /// \throws io_error naming it.
  [[nodiscard]] folder_handle subfolder_to_read(std::string_view name) const;

  /// The descriptor, or AT_FDCWD for the working directory.
  /// \throws nothing
  [[nodiscard]] int fd() const noexcept;
  /// The folder's path as messages show it (as given when it was opened; "" for the working
  /// directory).
  /// \throws nothing
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// `path() / name`, for messages.
  /// \throws std::bad_alloc
  [[nodiscard]] std::filesystem::path path_of(std::string_view name) const { return path_ / name; }

  /// The names in the folder, but for `.` and `..`, in the order the file system gives them.
  /// \throws io_error naming the folder.
  [[nodiscard]] std::vector<std::string> names() const;
  /// What `name` is, a symbolic link not followed (lstat); nothing if there is no such name.
  /// \throws io_error naming it for another failure.
  [[nodiscard]] std::optional<struct stat> status(std::string_view name) const;
  /// Opens `name` for reading, as `open_to_read` (posix_file.hpp) opens a path: a symbolic link
  /// is followed (reading through it changes nothing).
  /// \throws io_error naming it.
  [[nodiscard]] file_descriptor open_to_read(std::string_view name, struct stat& info) const;

  /// Removes `name`: a file or a symbolic link (the link, never its target), or a folder with
  /// everything in it, each level opened without following links, so that nothing outside it is
  /// touched. Files are unlinked through hooks().unlinkat. Returns false if there was no such name.
  /// \throws io_error naming what could not be removed (what was removed before stays removed).
  bool remove(std::string_view name) const;
  /// Renames `from` to `to` in this folder (a link is renamed as a link), replacing `to`, through
  /// hooks().renameat.
  /// \throws io_error naming `to` and `operation` ("rename a temporary file over").
  void rename(std::string_view from, std::string_view to, const std::string& operation) const;
  /// Renames `from` to `to` unless `to` exists; returns false, renaming nothing, if it does.
  /// \throws io_error naming `from`.
  bool rename_unless_taken(std::string_view from, std::string_view to) const;
  /// Makes the folder's entries durable: fsync of the folder, through hooks().fsync (of an opened
  /// folder: the working directory's stand-in has no descriptor to sync, and fails with EBADF).
  /// \throws io_error naming the folder.
  void sync() const;
  /// Opens (creating it) the lock file `name` without following a symbolic link, and takes its
  /// exclusive `flock`, held by the returned descriptor until it is closed. flock, not fcntl
  /// locks: it belongs to the open file description, so a second holder in this very process,
  /// which opens the file anew, is refused as well.
  /// \throws lock_error if another open description holds it; io_error on any other failure
  /// (`ELOOP`: the lock file is a symbolic link).
  [[nodiscard]] file_descriptor lock(std::string_view name) const;

 private:
  folder_handle(std::shared_ptr<const file_descriptor> fd, std::filesystem::path path) noexcept
      : fd_(std::move(fd)), path_(std::move(path)) {}
  std::shared_ptr<const file_descriptor> fd_;  // null: the working directory
  std::filesystem::path path_;
};

/// A file: a name in a folder, as the readers open it and messages show it.
struct file_at {
  folder_handle folder;
  std::string name;
  /// `folder.path_of(name)`, or the path itself for the working directory.
  [[nodiscard]] std::filesystem::path path() const { return folder.path_of(name); }
};

/// `path` as a file of the working directory: opened by its path, as given.
/// \throws std::bad_alloc
[[nodiscard]] inline file_at file_at_path(const std::filesystem::path& path) { return {folder_handle(), path.string()}; }

/// The file a save to `path` writes: `path`'s last component in its folder, opened once (symbolic
/// links in the folder's path followed), where the temporary, the rename and the folder's fsync
/// all happen.
/// \throws io_error naming `path` ("cannot create a temporary file beside") if the folder cannot
/// be opened.
[[nodiscard]] file_at target_in_folder(const std::filesystem::path& path);

}  // namespace ckpt::detail
