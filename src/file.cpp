#include <ckpt/file.hpp>

#include "atomic_file.hpp"
#include "mapped_file.hpp"
#include "posix_file.hpp"
#include "reordered_bands.hpp"
#include "safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
// On x86, Debian's libxxhash picks the widest vector unit (SSE2, AVX2, AVX-512) at run time
// through its *_dispatch entry points; this header maps the usual names onto them.
#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace ckpt {


namespace {

using detail::file_descriptor;
using detail::last_error;

std::shared_ptr<std::byte[]> read_whole(int fd, const std::filesystem::path& path, std::size_t size) {
  auto buffer = std::make_shared_for_overwrite<std::byte[]>(size);
  if (detail::read_fully(fd, buffer.get(), size, 0, path) != size)
    throw format_error(path, "the file shrank while it was being read");
  return buffer;
}

// The streaming XXH3-64 state of a data section being written.
class digest_state {
 public:
  digest_state() : state_(XXH3_createState()) {
    if (state_ == nullptr) throw std::bad_alloc();
    XXH3_64bits_reset(state_.get());
  }
  void update(std::span<const std::byte> bytes) noexcept {
    XXH3_64bits_update(state_.get(), bytes.data(), bytes.size());
  }
  [[nodiscard]] XXH64_hash_t value() const noexcept { return XXH3_64bits_digest(state_.get()); }

 private:
  struct deleter {
    void operator()(XXH3_state_t* state) const noexcept { XXH3_freeState(state); }
  };
  std::unique_ptr<XXH3_state_t, deleter> state_;
};

constexpr std::size_t digest_digits = 16;

std::string to_hex(XXH64_hash_t value) {
  std::string out(digest_digits, '0');
  for (std::size_t i = digest_digits; i-- > 0; value >>= 4) out[i] = "0123456789abcdef"[value & 0xf];
  return out;
}

// Where the data section of a parsed (hence valid) file starts: after the length prefix and the
// header it gives.
std::span<const std::byte> data_section(std::span<const std::byte> file) {
  std::uint64_t header_size = 0;
  std::memcpy(&header_size, file.data(), sizeof header_size);
  return file.subspan(8 + static_cast<std::size_t>(header_size));
}

// The XXH3-64 of `data`. When `data` is part of a file mapping, it is read a window at a time:
// each window is read ahead (the mapping is MADV_RANDOM) and unmapped again once hashed, so that
// verifying a checkpoint of many GiB keeps one window resident, not the whole file (the pages
// stay in the page cache for the extraction that usually follows).
XXH64_hash_t hash_of(std::span<const std::byte> data, bool mapped,
                     const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  constexpr std::size_t window = std::size_t{64} << 20;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  digest_state state;
  for (std::size_t first = 0; first < data.size(); first += window) {
    const std::span<const std::byte> part = data.subspan(first, std::min(window, data.size() - first));
    if (!mapped) {
      state.update(part);
    } else {
      // madvise wants page-aligned ranges; the mapping itself starts on a page.
      const auto begin = reinterpret_cast<std::uintptr_t>(part.data()) / page * page;
      const auto length = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(part.data() + part.size()) - begin);
      // Sequential while it is hashed, as tensor::prefetch_pages does (the mapping is
      // MADV_RANDOM; WILLNEED alone reads nothing ahead on some kernels): cold, 15x faster.
      ::madvise(reinterpret_cast<void*>(begin), length, MADV_SEQUENTIAL);
      ::madvise(reinterpret_cast<void*>(begin), length, MADV_WILLNEED);
      state.update(part);
      ::madvise(reinterpret_cast<void*>(begin), length, MADV_DONTNEED);
      ::madvise(reinterpret_cast<void*>(begin), length, MADV_RANDOM);
    }
    if (progress) progress(first + part.size(), data.size());
  }
  if (data.empty() && progress) progress(0, 0);
  return state.value();
}

// Checks the digest `t` records, if any, against the data section of `file` (`mapped` if it is
// a file mapping).
void verify_digest(const checkpoint& t, std::span<const std::byte> file, bool mapped,
                   const std::filesystem::path& origin, const load_options& options) {
  const auto it = t.metadata().find(std::string(digest_key));
  if (it == t.metadata().end()) return;
  const std::string& expected = it->second;
  if (expected.size() != digest_digits ||
      !std::ranges::all_of(expected, [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
    throw format_error(origin, "the __metadata__ entry '" + std::string(digest_key) + "' is \"" + expected +
                                   "\", not 16 lowercase hex digits");
  if (!options.verify_digest) return;
  const std::span<const std::byte> data = data_section(file);
  const std::string computed = to_hex(hash_of(data, mapped, options.progress));
  if (computed != expected) throw integrity_error(origin, std::string(digest_key), expected, computed);
}

}  // namespace

namespace detail {

file_contents map_file(const std::filesystem::path& path) {
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
    auto owner = std::make_shared<const mapped_file>(address, size, std::move(fd), path);
    return {owner->bytes(), owner, owner.get()};
  }
  // Some files cannot be mapped (an empty one, or on some filesystems): read them instead.
  std::shared_ptr<const std::byte[]> buffer = read_whole(fd.get(), path, size);
  return {{buffer.get(), size}, buffer, nullptr};
}

mapped_file::~mapped_file() { ::munmap(address_, size_); }

void mapped_file::read(std::span<const std::byte> from, std::byte* out) const {
  const auto offset = static_cast<off_t>(from.data() - static_cast<const std::byte*>(address_));
  if (read_fully(fd_.get(), out, from.size(), offset, path_) != from.size())
    throw format_error(path_, "the file shrank while it was being read");
}

void mapped_file::check_size() const {
  struct stat info {};
  if (::fstat(fd_.get(), &info) != 0) throw io_error(path_, "stat", last_error());
  if (static_cast<std::size_t>(info.st_size) < size_) throw format_error(path_, "the file shrank since it was loaded");
}

checkpoint load_file(const std::filesystem::path& path, const load_options& options) {
  const file_contents file = map_file(path);
  checkpoint t = parse_file(file.bytes, path, file.owner, file.file, options.skipped);
  verify_digest(t, file.bytes, file.file != nullptr, path, options);
  return t;
}

}  // namespace detail

checkpoint parse(std::span<const std::byte> file_bytes, const std::filesystem::path& origin,
                 const load_options& options) {
  auto copy = std::make_shared_for_overwrite<std::byte[]>(file_bytes.size());
  if (!file_bytes.empty()) std::memcpy(copy.get(), file_bytes.data(), file_bytes.size());
  checkpoint t =
      detail::parse_file({copy.get(), file_bytes.size()}, origin, copy, nullptr, options.skipped);
  verify_digest(t, {copy.get(), file_bytes.size()}, false, origin, options);
  return t;
}

namespace detail {

namespace {

// Sends the bytes of a save to the temporary file in large writev batches, straight from where
// they live, hashing the data section on the way when a digest is asked for, and reporting
// progress when asked to.
class data_writer {
 public:
  data_writer(atomic_file& file, const save_options& options, std::uint64_t total)
      : file_(file), progress_(options.progress), total_(total) {
    if (options.digest) digest_.emplace();
    // Without a digest or a progress report, nothing needs the pieces cut: the kernel gets as
    // many as one writev takes.
    slice_bytes_ = options.digest ? hash_slice_bytes : progress_ ? progress_slice_bytes : 0;
  }
  // Queues bytes that are not part of the data section (the header).
  void add_unhashed(std::span<const std::byte> bytes) {
    pieces_.push_back(as_iovec(bytes));
    pending_ += bytes.size();
  }
  // Queues data bytes; they must stay valid until the next flush.
  void add(std::span<const std::byte> bytes) {
    if (slice_bytes_ == 0) {
      pieces_.push_back(as_iovec(bytes));
      pending_ += bytes.size();
      return;
    }
    // Hash a slice just before writing it, so that writev finds it still in cache instead of
    // reading the whole section from memory a second time.
    for (std::size_t first = 0; first < bytes.size(); first += slice_bytes_) {
      const std::span<const std::byte> part = bytes.subspan(first, std::min(slice_bytes_, bytes.size() - first));
      if (digest_) digest_->update(part);
      pieces_.push_back(as_iovec(part));
      pending_ += part.size();
      if (pending_ >= slice_bytes_) flush();
    }
  }
  void flush() {
    if (pieces_.empty()) return;
    file_.write(pieces_);
    pieces_.clear();
    written_ += pending_;
    pending_ = 0;
    if (progress_) progress_(written_, total_);
  }
  [[nodiscard]] std::optional<XXH64_hash_t> digest() const {
    return digest_ ? std::optional(digest_->value()) : std::nullopt;
  }

 private:
  static constexpr std::size_t hash_slice_bytes = std::size_t{2} << 20;
  static constexpr std::size_t progress_slice_bytes = std::size_t{64} << 20;
  static iovec as_iovec(std::span<const std::byte> bytes) {
    return {const_cast<std::byte*>(bytes.data()), bytes.size()};
  }
  atomic_file& file_;
  const std::function<void(std::uint64_t, std::uint64_t)>& progress_;
  std::uint64_t total_;
  std::uint64_t written_ = 0;
  std::size_t slice_bytes_ = 0;
  std::vector<iovec> pieces_;
  std::size_t pending_ = 0;
  std::optional<digest_state> digest_;
};

}  // namespace

void write_file(const std::filesystem::path& path, std::span<const entry_source> entries,
                const metadata_map& metadata, const save_options& options) {
  const bool digest = options.digest;
  // ckpt owns the digest key: a value carried over from a loaded file would be stale.
  metadata_map fields = metadata;
  fields.erase(std::string(digest_key));
  std::string header;
  std::size_t digest_at = 0;
  if (digest) {
    // A fixed-width placeholder, patched once the data are out. It sits where the headers with
    // two different placeholders differ, which does not depend on how the JSON escapes names.
    fields.insert_or_assign(std::string(digest_key), std::string(digest_digits, '0'));
    header = make_header(entries, fields);
    fields.insert_or_assign(std::string(digest_key), std::string(digest_digits, 'f'));
    const std::string other = make_header(entries, fields);
    digest_at = static_cast<std::size_t>(std::ranges::mismatch(header, other).in1 - header.begin());
  } else {
    header = make_header(entries, fields);
  }
  atomic_file file(path);
  std::uint64_t total = header.size();
  for (const entry_source& e : entries) total += e.nbytes;
  data_writer out(file, options, total);
  out.add_unhashed(std::as_bytes(std::span(header)));
  // Entries that need reordering arrive in bands of whole rows, made one band ahead.
  reordered_bands bands(entries);
  for (std::size_t i = 0; i < entries.size();) {
    const entry_source& e = entries[i];
    if (e.nbytes > 0 && e.write_rows) {
      out.flush();
      const reordered_bands::band band = bands.next();
      out.add(band.bytes);
      out.flush();
      i = band.next_entry;
      continue;
    }
    if (e.nbytes > 0) out.add({e.contiguous.data(), e.nbytes});
    ++i;
  }
  out.flush();
  if (const auto value = out.digest()) file.write_at(to_hex(*value), static_cast<off_t>(digest_at));
  file.commit();
}

}  // namespace detail

void save(const std::filesystem::path& path, const checkpoint& t, const save_options& options) {
  std::vector<detail::entry_source> entries;
  entries.reserve(t.size());
  for (const auto& [name, x] : t)
    entries.push_back({.name = name, .dtype = x.dtype(), .shape = dims(x.shape().begin(), x.shape().end()),
                       .nbytes = x.nbytes(), .contiguous = x.bytes(), .write_rows = {}, .keep_alive = {}});
  detail::write_file(path, entries, t.metadata(), options);
}

}  // namespace ckpt
