// A run's store in a local folder held by its descriptor (src/run/store.hpp): every name resolved
// relative to the folder opened once (src/io/folder.hpp), files written by the one atomic writer
// (src/io/atomic_file.hpp), read by the file reader (src/format/reader.hpp).
#include "store.hpp"

#include <ckpt/error.hpp>

#include "format/reader.hpp"
#include "format/remote.hpp"
#include "format/sharded.hpp"
#include "io/atomic_file.hpp"
#include "io/folder.hpp"
#include "io/remote_path.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <utility>

namespace ckpt::detail {

namespace {

store::kind kind_of(mode_t mode) noexcept {
  if (S_ISREG(mode)) return store::kind::file;
  if (S_ISDIR(mode)) return store::kind::folder;
  if (S_ISLNK(mode)) return store::kind::link;
  return store::kind::other;
}

// `name` split at its last '/': the folder part ("" for none) and the file's name.
std::pair<std::string_view, std::string_view> split(std::string_view name) noexcept {
  const std::size_t slash = name.rfind('/');
  if (slash == std::string_view::npos) return {{}, name};
  return {name.substr(0, slash), name.substr(slash + 1)};
}

class folder_file final : public store::file {
 public:
  folder_file(file_at target, store::existing rule) : file_(target), target_(std::move(target)), rule_(rule) {}
  byte_sink& sink() noexcept override { return file_; }
  // The lock keeps other writers out, so the look before the rename is not raced by a manager.
  bool commit() override {
    if (rule_ == store::existing::kept && target_.folder.status(target_.name)) return false;
    file_.commit();
    return true;
  }

 private:
  atomic_file file_;
  file_at target_;
  store::existing rule_;
};

class folder_store final : public store {
 public:
  explicit folder_store(folder_handle folder) : folder_(std::move(folder)) {}

  std::filesystem::path path_of(std::string_view name) const override {
    return name.empty() ? folder_.path() : folder_.path_of(name);
  }

  std::vector<entry> list(std::string_view folder) const override {
    const folder_handle in = folder.empty() ? folder_ : folder_.subfolder_to_read(folder);
    std::vector<entry> out;
    for (std::string& name : in.names()) {
      const std::optional<struct stat> info = in.status(name);
      if (info) out.push_back({std::move(name), kind_of(info->st_mode)});  // else gone since listed
    }
    return out;
  }

  std::optional<kind> find(std::string_view name, bool through_links) const override {
    struct stat info {};
    const std::string text(name);
    if (::fstatat(folder_.fd(), text.c_str(), &info, through_links ? 0 : AT_SYMLINK_NOFOLLOW) == 0)
      return kind_of(info.st_mode);
    if (errno == ENOENT || errno == ENOTDIR) return std::nullopt;
    throw io_error(path_of(name), "look at", last_error());
  }

  checkpoint load(std::string_view name, const load_options& options) const override {
    const auto [dir, base] = split(name);
    // A step read through a link (a forked run's step may point at another run's).
    const folder_handle in = dir.empty() ? folder_ : folder_.subfolder_to_read(dir);
    if (base.ends_with(".index.json")) return load_sharded(in, base, options);
    return load_file({in, std::string(base)}, options);
  }

  metadata_map metadata(std::string_view name) const override {
    return load(name, {.verify_digest = false}).metadata();
  }

  std::optional<std::string> read(std::string_view name, std::size_t limit) const override {
    const auto [dir, base] = split(name);
    const folder_handle in = dir.empty() ? folder_ : folder_.subfolder_to_read(dir);
    if (!in.status(base)) return std::nullopt;
    struct stat info {};
    const file_descriptor fd = in.open_to_read(base, info);
    // Read up to one byte past the size fstat gave, and on while the file grows, but never more
    // than one byte past the limit (which tells a file at the limit from a longer one): a buffer
    // of the limit's size (100 MB for an index) would cost more than the read of a small file.
    std::string text;
    std::size_t got = 0;
    std::size_t wanted = std::min(static_cast<std::size_t>(std::max<off_t>(info.st_size, 0)), limit) + 1;
    while (true) {
      text.resize(wanted);
      got += read_fully(fd.get(), reinterpret_cast<std::byte*>(text.data()) + got, wanted - got,
                        static_cast<off_t>(got), path_of(name));
      if (got < wanted || wanted > limit) break;
      wanted = std::min(2 * wanted, limit + 1);
    }
    text.resize(got);
    if (text.size() > limit)
      throw error(path_of(name), "ckpt: '" + path_of(name).string() + "' is longer than the " + std::to_string(limit) +
                                     " bytes such a file holds");
    return text;
  }

  std::unique_ptr<file> create(std::string_view name, existing rule, write_path) const override {
    // Direct I/O is the writer's to start (write_file, through the sink), and falls back by itself.
    return std::make_unique<folder_file>(target(name), rule);
  }

  bool write(std::string_view name, std::string_view text, existing rule) const override {
    const file_at at = target(name);
    if (rule == existing::kept && at.folder.status(at.name)) return false;
    write_atomically(at, text, on_folder_sync_failure::remove_new_file);
    return true;
  }

  bool remove(std::string_view name) const override {
    const auto [dir, base] = split(name);
    if (dir.empty()) return folder_.remove(base);
    if (!find(dir, false)) return false;
    return folder_.subfolder(dir).remove(base);
  }

  bool rename_unless_taken(std::string_view from, std::string_view to) const override {
    return folder_.rename_unless_taken(from, to);
  }

  std::optional<file_descriptor> hold(std::string_view name) const override { return folder_.lock(name); }

  bool direct_io() const noexcept override { return true; }
  // Advice on a file of the store's own: not through a link (a forked run's step is not ours).
  void drop_cache(std::string_view name) const noexcept override {
    try {
      const auto [dir, base] = split(name);
      drop_cached_pages({dir.empty() ? folder_ : folder_.subfolder(dir), std::string(base)});
    } catch (...) {  // advice only
    }
  }
  const folder_handle* local() const noexcept override { return &folder_; }

 private:
  // Where `name` is written: its folder (made if need be, never through a link) and its name.
  [[nodiscard]] file_at target(std::string_view name) const {
    const auto [dir, base] = split(name);
    return {dir.empty() ? folder_ : folder_.subfolder(dir, /*create=*/true), std::string(base)};
  }

  folder_handle folder_;
};

}  // namespace

namespace {

[[noreturn]] void only_a_bucket(const store& s, std::string_view what) {
  throw std::logic_error("ckpt: " + std::string(what) + " is a bucket's, and '" + s.path_of("").string() +
                         "' is a folder (reached through local())");
}

}  // namespace

std::shared_ptr<std::byte[]> store::fetch(std::string_view, std::size_t&) const { only_a_bucket(*this, "fetch"); }
std::string store::start_parts(std::string_view) const { only_a_bucket(*this, "a file of parts"); }
std::string store::put_part(std::string_view, const std::string&, int, std::span<const std::byte>) const {
  only_a_bucket(*this, "a file of parts");
}
bool store::finish_parts(std::string_view, const std::string&, const std::vector<std::string>&, std::uint64_t,
                         existing) const {
  only_a_bucket(*this, "a file of parts");
}
void store::abort_parts(std::string_view, const std::string&) const noexcept {}

std::unique_ptr<store> folder_store_of(const folder_handle& folder) { return std::make_unique<folder_store>(folder); }

std::unique_ptr<store> open_folder_store(const std::filesystem::path& path, bool create) {
  return folder_store_of(folder_handle::open(path, create));
}

#ifndef CKPT_HAVE_S3
std::unique_ptr<store> open_store(const std::filesystem::path& where, bool create) {
  if (is_remote(where)) refuse_without_s3(where);
  return open_folder_store(where, create);
}
#endif

}  // namespace ckpt::detail
