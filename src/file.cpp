#include <ckpt/file.hpp>

#include "safetensors.hpp"
#include "temporary_name.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

namespace ckpt {
namespace {

std::error_code last_error() { return {errno, std::system_category()}; }

// Owns a file descriptor.
class file_descriptor {
 public:
  explicit file_descriptor(int fd) noexcept : fd_(fd) {}
  file_descriptor(const file_descriptor&) = delete;
  file_descriptor& operator=(const file_descriptor&) = delete;
  ~file_descriptor() { reset(); }
  [[nodiscard]] int get() const noexcept { return fd_; }
  // Closes now, reporting the error close() gives (a failed close may mean lost writes).
  int close() noexcept {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd_;
};

// A read-only mapping of a whole file, shared by the tensors that view it.
class mapping {
 public:
  mapping(void* address, std::size_t size) noexcept : address_(address), size_(size) {}
  mapping(const mapping&) = delete;
  mapping& operator=(const mapping&) = delete;
  ~mapping() { ::munmap(address_, size_); }
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {static_cast<const std::byte*>(address_), size_};
  }

 private:
  void* address_;
  std::size_t size_;
};

std::shared_ptr<std::byte[]> read_whole(int fd, const std::filesystem::path& path, std::size_t size) {
  auto buffer = std::make_shared_for_overwrite<std::byte[]>(size);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::pread(fd, buffer.get() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_error(path, "read", last_error());
    if (n == 0) throw format_error(path, "the file shrank while it was being read");
    done += static_cast<std::size_t>(n);
  }
  return buffer;
}

// Writes every byte of `pieces` to `fd`, batching them into writev calls.
void write_all(int fd, std::vector<iovec>& pieces, const std::filesystem::path& path) {
  std::size_t first = 0;
  while (first < pieces.size()) {
    const int count = static_cast<int>(std::min<std::size_t>(pieces.size() - first, IOV_MAX));
    const ssize_t n = ::writev(fd, pieces.data() + first, count);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_error(path, "write", last_error());
    // Advance past what was written; a short write leaves part of one piece to go.
    auto left = static_cast<std::size_t>(n);
    while (first < pieces.size() && left >= pieces[first].iov_len) left -= pieces[first++].iov_len;
    if (left > 0) {
      pieces[first].iov_base = static_cast<char*>(pieces[first].iov_base) + left;
      pieces[first].iov_len -= left;
    }
  }
}

// Removes the temporary file unless the save went through.
class temporary_file {
 public:
  explicit temporary_file(std::string path) : path_(std::move(path)) {}
  temporary_file(const temporary_file&) = delete;
  temporary_file& operator=(const temporary_file&) = delete;
  ~temporary_file() {
    if (!committed_) ::unlink(path_.c_str());
  }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  void commit() noexcept { committed_ = true; }

 private:
  std::string path_;
  bool committed_ = false;
};

void fsync_folder(const std::filesystem::path& folder) {
  file_descriptor dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) throw io_error(folder, "open folder", last_error());
  if (::fsync(dir.get()) != 0) throw io_error(folder, "fsync folder", last_error());
}

}  // namespace

checkpoint load(const std::filesystem::path& path) {
  file_descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw io_error(path, "open", last_error());
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) throw io_error(path, "stat", last_error());
  if (!S_ISREG(info.st_mode)) throw format_error(path, "it is not a regular file");
  const auto size = static_cast<std::size_t>(info.st_size);

  void* address = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (address != MAP_FAILED) {
    // No read-ahead: loading reads the header alone, and an entry is read when it is extracted
    // (to_params asks for its pages then with MADV_WILLNEED).
    ::madvise(address, size, MADV_RANDOM);
    auto owner = std::make_shared<const mapping>(address, size);
    return detail::parse_file(owner->bytes(), path, owner, tensor::storage::file_mapping);
  }
  // Some files cannot be mapped (an empty one, or on some filesystems): read them instead.
  std::shared_ptr<const std::byte[]> buffer = read_whole(fd.get(), path, size);
  return detail::parse_file({buffer.get(), size}, path, buffer, tensor::storage::memory);
}

checkpoint parse(std::span<const std::byte> file_bytes, const std::filesystem::path& origin) {
  auto copy = std::make_shared_for_overwrite<std::byte[]>(file_bytes.size());
  if (!file_bytes.empty()) std::memcpy(copy.get(), file_bytes.data(), file_bytes.size());
  return detail::parse_file({copy.get(), file_bytes.size()}, origin, copy, tensor::storage::memory);
}

namespace detail {

void write_file(const std::filesystem::path& path, std::span<const entry_source> entries,
                const metadata_map& metadata) {
  std::string header = make_header(entries, metadata);
  const std::filesystem::path folder =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string pattern = detail::temporary_pattern(path);
  file_descriptor fd(::mkostemp(pattern.data(), O_CLOEXEC));
  if (fd.get() < 0) throw io_error(path, "create a temporary file beside", last_error());
  temporary_file temporary(pattern);
  // mkstemp creates 0600; a checkpoint should get the usual permissions the umask allows.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  static_cast<void>(::fchmod(fd.get(), 0666 & ~mask));

  // Bytes already in memory go out in large writev batches, straight from where they live;
  // entries that need reordering go through one bounded buffer, a run of whole rows at a time.
  std::vector<iovec> pieces;
  pieces.reserve(entries.size() + 1);
  pieces.push_back({header.data(), header.size()});
  std::vector<std::byte> buffer;
  for (const entry_source& e : entries) {
    if (e.nbytes == 0) continue;
    if (!e.write_rows) {
      pieces.push_back({const_cast<std::byte*>(e.contiguous.data()), e.nbytes});
      continue;
    }
    write_all(fd.get(), pieces, temporary.path());
    pieces.clear();
    const auto rows = static_cast<std::size_t>(e.shape.front());
    const std::size_t row_bytes = e.nbytes / rows;
    constexpr std::size_t buffer_bytes = std::size_t{8} << 20;
    const std::size_t rows_per_chunk = std::max<std::size_t>(1, buffer_bytes / row_bytes);
    buffer.resize(std::max(buffer.size(), std::min(rows, rows_per_chunk) * row_bytes));
    for (std::size_t first = 0; first < rows; first += rows_per_chunk) {
      const std::size_t count = std::min(rows_per_chunk, rows - first);
      e.write_rows(first, count, buffer.data());
      std::vector<iovec> chunk{{buffer.data(), count * row_bytes}};
      write_all(fd.get(), chunk, temporary.path());
    }
  }
  write_all(fd.get(), pieces, temporary.path());
  if (::fsync(fd.get()) != 0) throw io_error(temporary.path(), "fsync", last_error());
  if (fd.close() != 0) throw io_error(temporary.path(), "close", last_error());
  if (::rename(temporary.path().c_str(), path.c_str()) != 0)
    throw io_error(path, "rename a temporary file over", last_error());
  temporary.commit();
  fsync_folder(folder);
}

}  // namespace detail

void save(const std::filesystem::path& path, const checkpoint& t) {
  std::vector<detail::entry_source> entries;
  entries.reserve(t.size());
  for (const auto& [name, x] : t)
    entries.push_back({.name = name, .dtype = x.dtype(), .shape = dims(x.shape().begin(), x.shape().end()),
                       .nbytes = x.nbytes(), .contiguous = x.bytes(), .write_rows = {}, .keep_alive = {}});
  detail::write_file(path, entries, t.metadata());
}

}  // namespace ckpt
