#include "mapped_file.hpp"

#include "base/digest.hpp"
#include "base/memory.hpp"
#include "base/tuning.hpp"

#include <ckpt/error.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>

namespace ckpt::detail {

namespace {

// The descriptors of loaded files the process keeps open at most (see mapped_file).
constexpr std::size_t most_open = 1024;

// The loaded files holding a descriptor. constinit and trivially destructible, so that a file
// released during exit (a checkpoint held by a static) still finds it.
struct descriptor_pool {
  std::mutex lock;
  std::array<const mapped_file*, most_open> open{};
  std::size_t count = 0;
  std::uint64_t clock = 0;  // counts reads, for least-recently-read
};
constinit descriptor_pool pool;

std::atomic<std::uint64_t> next_serial{1};

// A quarter of the descriptor limit, from 16 to most_open.
std::size_t capacity_of_process() noexcept {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return most_open;
  return std::clamp<std::size_t>(static_cast<std::size_t>(limit.rlim_cur / 4), 16, most_open);
}

// A bad chunk: bytes read after the file's digest was verified differ from what was verified.
class changed_after_verification : public integrity_error {
 public:
  changed_after_verification(const std::filesystem::path& path, std::size_t chunk, const std::string& expected,
                             const std::string& computed)
      : integrity_error(path, expected, computed, rule(chunk, expected, computed),
                        "ckpt: '" + path.string() + "' is corrupted: " + rule(chunk, expected, computed)) {}

 private:
  static std::string rule(std::size_t chunk, const std::string& expected, const std::string& computed) {
    return "it changed after its digest was verified: chunk " + std::to_string(chunk) +
           " of its data (1 MiB) now hashes to " + computed + ", not " + expected;
  }
};

// The chunk a thread read last in part, checked, for its next reads of the same chunk.
struct kept_chunk {
  std::uint64_t serial = 0;  // of the mapped_file; 0: none
  std::size_t index = 0;
  std::optional<staging_band> band;
};
thread_local kept_chunk last_chunk;

static_assert(file_digest_chunk_bytes <= tuning::staging_bytes, "a chunk is kept in one staging band");

}  // namespace

// The descriptor of a mapped_file for one read: its own if open, else opened again from its folder
// (if it is still the same file); -1 if the file is gone or replaced (read the mapping).
class descriptor_lease {
 public:
  explicit descriptor_lease(const mapped_file& file) : file_(file) {
    {
      const std::scoped_lock guard(pool.lock);
      if (file.fd_ >= 0 || file.gone_) {
        fd_ = take();
        return;
      }
    }
    file_descriptor reopened = reopen();
    const std::scoped_lock guard(pool.lock);
    if (file.fd_ < 0 && !file.gone_) {
      if (reopened.get() >= 0) add(file, reopened.release());
      else file.gone_ = true;
    }
    fd_ = take();
    // `reopened` (if another thread reopened the file first) closes here.
  }
  descriptor_lease(const descriptor_lease&) = delete;
  descriptor_lease& operator=(const descriptor_lease&) = delete;
  ~descriptor_lease() {
    if (fd_ < 0) return;
    const std::scoped_lock guard(pool.lock);
    --file_.readers_;
  }
  [[nodiscard]] int fd() const noexcept { return fd_; }

  // Puts `file`'s descriptor `fd` among the open ones (the lock held), closing the least recently
  // read descriptors not being read over the capacity.
  static void add(const mapped_file& file, int fd) noexcept {
    // The limit as it is now (a program may lower it): a system call, against an open and a map.
    const std::size_t capacity = capacity_of_process();
    file.fd_ = fd;
    file.last_read_ = ++pool.clock;
    while (pool.count >= capacity) {
      std::size_t oldest = pool.count;
      for (std::size_t i = 0; i < pool.count; ++i)
        if (pool.open[i]->readers_ == 0 && (oldest == pool.count || pool.open[i]->last_read_ < pool.open[oldest]->last_read_))
          oldest = i;
      if (oldest == pool.count) break;  // every one is being read: over the capacity for a while
      ::close(std::exchange(pool.open[oldest]->fd_, -1));
      pool.open[oldest] = pool.open[--pool.count];
    }
    if (pool.count < most_open) {
      pool.open[pool.count++] = &file;
    } else {  // most_open files all being read at once: this one is not kept open
      ::close(std::exchange(file.fd_, -1));
    }
  }

  // Takes `file` out of the open ones (the lock held), and returns its descriptor (to close).
  static int remove(const mapped_file& file) noexcept {
    for (std::size_t i = 0; i < pool.count; ++i)
      if (pool.open[i] == &file) {
        pool.open[i] = pool.open[--pool.count];
        break;
      }
    return std::exchange(file.fd_, -1);
  }

 private:
  // The lock held: the descriptor to read, counted as being read.
  int take() noexcept {
    if (file_.fd_ < 0) return -1;
    ++file_.readers_;
    file_.last_read_ = ++pool.clock;
    return file_.fd_;
  }

  // The file opened again from its folder, or an invalid descriptor if it is gone or replaced.
  file_descriptor reopen() const {
    file_descriptor fd(::openat(file_.where_.folder.fd(), file_.where_.name.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
    if (fd.get() < 0) {
      if (errno == ENOENT || errno == ENOTDIR || errno == ELOOP) return file_descriptor(-1);
      throw io_error(file_.path_, "open", last_error());
    }
    struct stat info {};
    if (::fstat(fd.get(), &info) != 0) throw io_error(file_.path_, "stat", last_error());
    if (!S_ISREG(info.st_mode) || info.st_dev != file_.device_ || info.st_ino != file_.inode_) return file_descriptor(-1);
    const int flags = ::fcntl(fd.get(), F_GETFL);
    if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) throw io_error(file_.path_, "open", last_error());
    return fd;
  }

  const mapped_file& file_;
  int fd_ = -1;
};

mapped_file::mapped_file(void* address, std::size_t size, file_descriptor fd, const struct stat& info, file_at where,
                         std::filesystem::path shown)
    : address_(address), size_(size), path_(std::move(shown)), where_(std::move(where)), device_(info.st_dev),
      inode_(info.st_ino), serial_(next_serial.fetch_add(1)), fd_(-1) {
  const std::scoped_lock guard(pool.lock);
  descriptor_lease::add(*this, fd.release());
}

mapped_file::~mapped_file() {
  int fd = -1;
  {
    const std::scoped_lock guard(pool.lock);
    fd = descriptor_lease::remove(*this);
  }
  if (fd >= 0) ::close(fd);
  ::munmap(address_, size_);
}

void mapped_file::read_plain(std::size_t offset, std::size_t size, std::byte* out) const {
  const descriptor_lease lease(*this);
  if (lease.fd() < 0) {
    // Gone or replaced since it was loaded: the mapping still holds the file that was loaded.
    std::memcpy(out, static_cast<const std::byte*>(address_) + offset, size);
    return;
  }
  if (read_fully(lease.fd(), out, size, static_cast<off_t>(offset), path_) != size)
    throw format_error(path_, "the file shrank while it was being read");
}

void mapped_file::read(std::span<const std::byte> from, std::byte* out) const {
  std::size_t offset = static_cast<std::size_t>(from.data() - static_cast<const std::byte*>(address_));
  std::size_t size = from.size();
  if (chunk_hashes_.empty() || size == 0) return read_plain(offset, size, out);
  if (offset < data_start_) {  // the header, checked when the file was loaded
    const std::size_t part = std::min(size, data_start_ - offset);
    read_plain(offset, part, out);
    offset += part;
    size -= part;
    out += part;
  }
  constexpr std::size_t chunk_bytes = file_digest_chunk_bytes;
  // A chunk that no longer matches is not handed out: its bytes are cleared where they were read.
  const auto check = [&](std::size_t k, std::byte* bytes, std::size_t n) {
    if (const std::uint64_t hash = xxh3_of({bytes, n}); hash != chunk_hashes_.at(k)) {
      std::memset(bytes, 0, n);
      throw changed_after_verification(path_, k, digest_hex(chunk_hashes_[k]), digest_hex(hash));
    }
  };
  const std::size_t end = offset + size;
  for (std::size_t at = offset; at < end;) {
    const std::size_t k = (at - data_start_) / chunk_bytes;
    const std::size_t first = data_start_ + k * chunk_bytes;
    const std::size_t last = std::min(first + chunk_bytes, size_);
    const std::size_t until = std::min(last, end);
    std::byte* const to = out + (at - offset);
    if (at == first && until == last) {
      // A whole chunk: read into place and checked there.
      read_plain(first, last - first, to);
      check(k, to, last - first);
    } else {
      // Part of a chunk: the whole chunk read and checked once, kept for this thread's next reads.
      kept_chunk& kept = last_chunk;
      if (kept.serial != serial_ || kept.index != k) {
        if (!kept.band) kept.band.emplace();
        kept.serial = 0;
        read_plain(first, last - first, kept.band->data());
        check(k, kept.band->data(), last - first);
        kept.serial = serial_;
        kept.index = k;
      }
      std::memcpy(to, kept.band->data() + (at - first), until - at);
    }
    at = until;
  }
}

void mapped_file::check_size() const {
  const descriptor_lease lease(*this);
  if (lease.fd() < 0) return;  // gone or replaced: the mapping holds the loaded file whole
  struct stat info {};
  if (::fstat(lease.fd(), &info) != 0) throw io_error(path_, "stat", last_error());
  if (static_cast<std::size_t>(info.st_size) < size_) throw format_error(path_, "the file shrank since it was loaded");
}

void mapped_file::verified(std::size_t data_start, std::vector<std::uint64_t> chunk_hashes) noexcept {
  data_start_ = data_start;
  chunk_hashes_ = std::move(chunk_hashes);
}

file_contents map_file(const file_at& file) {
  const std::filesystem::path path = file.path();
  struct stat info {};
  file_descriptor fd = file.folder.open_to_read(file.name, info);
  if (!S_ISREG(info.st_mode)) throw format_error(path, "it is not a regular file");
  const auto size = static_cast<std::size_t>(info.st_size);

  void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (address != MAP_FAILED) {
    // No read-ahead: loading reads the header alone through the mapping; entries are copied out
    // with pread (ckpt/detail/pages.hpp), and only the views a user asks for read the mapping.
    ::madvise(address, size, MADV_RANDOM);
    std::shared_ptr<mapped_file> owner;
    try {
      // A path of the working directory is opened again (mapped_file) by its absolute path.
      file_at where = file;
      if (where.folder.fd() == AT_FDCWD) where.name = std::filesystem::absolute(path).string();
      owner = std::make_shared<mapped_file>(address, size, std::move(fd), info, std::move(where), path);
    } catch (...) {
      ::munmap(address, size);  // no owner took the mapping
      throw;
    }
    return {owner->bytes(), owner, owner.get()};
  }
  // Some files cannot be mapped (an empty one, or on some filesystems): read them instead.
  auto buffer = std::make_shared_for_overwrite<std::byte[]>(size);
  if (read_fully(fd.get(), buffer.get(), size, 0, path) != size)
    throw format_error(path, "the file shrank while it was being read");
  return {{buffer.get(), size}, std::shared_ptr<const std::byte[]>(std::move(buffer)), nullptr};
}

}  // namespace ckpt::detail
