// The file writer (src/format/writer.hpp): a safetensors file's header and data, in file order,
// to a temporary file committed atomically or to another byte sink (an upload).
#include <ckpt/file.hpp>
#include <ckpt/name_pattern.hpp>

#include "base/digest.hpp"
#include "base/memory.hpp"
#include "base/parallel.hpp"
#include "base/tuning.hpp"
#include "io/atomic_file.hpp"
#include "io/io_hooks.hpp"
#include "io/mapped_file.hpp"
#include "reordered_bands.hpp"
#include "safetensors.hpp"
#include "writer.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <vector>

namespace ckpt {

namespace detail {

namespace {

// Sends the bytes of a save (header, then data, in file order) to the temporary file, hashing
// the data when a digest is asked for and reporting progress when asked to, in one of two ways:
//   - through the page cache: the bytes go in large writev batches straight from where they live,
//     each slice hashed just before it is written; the digest's digits are then patched into the
//     header with one pwrite;
//   - with direct I/O (atomic_file::start_direct): bytes that sit at the same place in a memory
//     block as in a file block (a snapshot laid out as the file's data section, see
//     snapshot_layout::as_file in src/structures/snapshot.hpp) are hashed and written whole blocks at a time
//     from where they are; the others are copied into an aligned staging buffer, hashed there, and written a
//     whole buffer at a time. The tail is padded to a whole block and the file cut to its size at
//     the end. The blocks that hold the digest's digits are kept as they were written (digits
//     zero) and written again, patched, after everything else.
// Either way the digest is that of the same bytes fed in the same order (chunked_digest does not
// depend on how its updates are sliced), and every write goes through the test seam. Data whose
// chunks were hashed as they were copied (a background save's snapshot: `known` hashes, see
// remember_chunk_hashes in src/base/digest.hpp) are not hashed again: the writer then reads no byte of
// them, and direct I/O writes them from where they are.
class data_writer {
 public:
  // Takes `header` (the first 8 + N bytes, the digest's digits zeros at `digest_at` if a digest
  // is asked for; it must stay valid until the first flush) and hashes it when a digest is
  // asked for. `path` says how the bytes go; direct I/O is used only if the file takes it.
  data_writer(byte_sink& file, const save_options& options, std::uint64_t total, std::span<const std::byte> header,
              std::size_t digest_at, write_path path, std::vector<std::uint64_t> known)
      : file_(file), progress_(options.progress), total_(total), digest_at_(digest_at), known_(std::move(known)) {
    if (options.digest) digest_.emplace(detail::xxh3_of(header));
    if (path == write_path::direct && file_.start_direct()) {
      staging_ = aligned_buffer(detail::tuning::direct_write_bytes + kept_capacity);
      if (digest_) {
        kept_first_ = digest_at_ / direct_block_bytes * direct_block_bytes;
        kept_end_ = round_up(digest_at_ + file_digest_digits);
      }
      stage(header, false);
      return;
    }
    // Without a digest to hash or a progress report, nothing needs the pieces cut: the kernel gets
    // as many as one writev takes.
    slice_bytes_ = hashing() ? detail::tuning::hash_slice_bytes : progress_ ? progress_slice_bytes : 0;
    pieces_.push_back(as_iovec(header));
    pending_ += header.size();
  }
  // Takes data bytes. Through the page cache, they must stay valid until the next flush; with
  // direct I/O they are written or copied before this returns.
  void add(std::span<const std::byte> bytes) {
    if (staging_) {
      add_direct(bytes);
      return;
    }
    if (slice_bytes_ == 0) {
      pieces_.push_back(as_iovec(bytes));
      pending_ += bytes.size();
      return;
    }
    // Hash a slice just before writing it, so that writev finds it still in cache instead of
    // reading the whole section from memory a second time.
    for (std::size_t first = 0; first < bytes.size(); first += slice_bytes_) {
      const std::span<const std::byte> part = bytes.subspan(first, std::min(slice_bytes_, bytes.size() - first));
      hash(part);
      pieces_.push_back(as_iovec(part));
      pending_ += part.size();
      if (pending_ >= slice_bytes_) flush();
    }
  }
  // Writes what is queued, after which the bytes added so far may change (with direct I/O they
  // were copied already: nothing to do).
  void flush() {
    if (pieces_.empty()) return;
    file_.write(pieces_);
    pieces_.clear();
    written_ += pending_;
    pending_ = 0;
    if (progress_) progress_(written_, total_);
  }
  // Writes the rest and the digest's digits (if any); with direct I/O, cuts the file to its size.
  void finish() {
    if (!staging_) {
      flush();
      if (digest_) file_.write_at(detail::digest_hex(digest()), static_cast<off_t>(digest_at_));
      return;
    }
    if (staged_ > 0) {
      const std::size_t padded = round_up(staged_);
      std::memset(staging_.get() + staged_, 0, padded - staged_);
      write_staged(padded);
    }
    if (digest_) {
      std::byte* kept = staging_.get() + detail::tuning::direct_write_bytes;
      const std::string digits = detail::digest_hex(digest());
      std::memcpy(kept + (digest_at_ - kept_first_), digits.data(), digits.size());
      file_.write_at({reinterpret_cast<const char*>(kept), kept_end_ - kept_first_}, static_cast<off_t>(kept_first_));
    }
    file_.truncate(static_cast<off_t>(total_));
  }

 private:
  static constexpr std::size_t progress_slice_bytes = std::size_t{64} << 20;
  // The digest's digits span at most two blocks.
  static constexpr std::size_t kept_capacity = 2 * direct_block_bytes;
  static_assert(detail::tuning::direct_write_bytes % direct_block_bytes == 0);
  static_assert(file_digest_digits <= direct_block_bytes);

  struct free_bytes {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  using buffer = std::unique_ptr<std::byte[], free_bytes>;
  // `size` bytes (a multiple of direct_block_bytes) aligned to direct_block_bytes.
  static buffer aligned_buffer(std::size_t size) {
    auto* p = static_cast<std::byte*>(std::aligned_alloc(direct_block_bytes, size));
    if (p == nullptr) throw std::bad_alloc();
    return buffer(p);
  }
  static std::size_t round_up(std::size_t n) {
    return (n + direct_block_bytes - 1) / direct_block_bytes * direct_block_bytes;
  }
  static iovec as_iovec(std::span<const std::byte> bytes) {
    return {const_cast<std::byte*>(bytes.data()), bytes.size()};
  }

  // With direct I/O: writes the whole blocks of `bytes` that sit at their file offset's place in
  // a block from where they are, and stages the rest.
  void add_direct(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const std::uint64_t at = written_ + staged_;  // the file offset of bytes[0]
      const bool in_place = (reinterpret_cast<std::uintptr_t>(bytes.data()) - at) % direct_block_bytes == 0;
      if (in_place && at % direct_block_bytes == 0 && bytes.size() >= direct_block_bytes) {
        if (staged_ > 0) write_staged(staged_);  // whole blocks: `at` starts one
        const std::size_t n = std::min(bytes.size(), detail::tuning::direct_write_bytes) / direct_block_bytes *
                              direct_block_bytes;
        write_in_place(bytes.first(n));
        bytes = bytes.subspan(n);
        continue;
      }
      // Staged up to the next block boundary, from where the bytes can go in place.
      const std::size_t n = in_place ? std::min(bytes.size(), direct_block_bytes - at % direct_block_bytes) : bytes.size();
      stage(bytes.first(n), true);
      bytes = bytes.subspan(n);
    }
  }
  // Whether the data are hashed as they go out: a digest, and no known hashes.
  [[nodiscard]] bool hashing() const noexcept { return digest_ && known_.empty(); }
  // Feeds data bytes to the digest (when hashing).
  void hash(std::span<const std::byte> bytes) {
    if (!hashing()) return;
    digest_->update(bytes);
    if (detail::hooks().writer_hashed != nullptr) detail::hooks().writer_hashed(bytes.size());
  }
  // The digest of the header and the data.
  [[nodiscard]] std::uint64_t digest() const {
    return known_.empty() ? digest_->value() : detail::file_digest(digest_->header_hash(), known_);
  }

  // Hashes and writes `bytes` (whole blocks, aligned in memory, at written_) from where they are.
  void write_in_place(std::span<const std::byte> bytes) {
    if (hashing())
      for (std::size_t first = 0; first < bytes.size(); first += detail::tuning::hash_slice_bytes)
        hash(bytes.subspan(first, std::min(detail::tuning::hash_slice_bytes, bytes.size() - first)));
    keep(bytes.data(), bytes.size());
    std::vector<iovec> piece{as_iovec(bytes)};
    file_.write(piece);
    written_ += bytes.size();
    if (progress_) progress_(std::min(written_, total_), total_);
  }
  // Keeps a copy of what of the `size` bytes at `from`, bound for written_, falls in the kept blocks.
  void keep(const std::byte* from, std::size_t size) {
    const std::size_t first = std::max<std::size_t>(written_, kept_first_);
    const std::size_t end = std::min<std::size_t>(written_ + size, kept_end_);
    if (first < end)
      std::memcpy(staging_.get() + detail::tuning::direct_write_bytes + (first - kept_first_), from + (first - written_),
                  end - first);
  }

  // Copies `bytes` into the staging buffer (hashing the copy if they are data and a digest is
  // asked for), writing the buffer each time it is full.
  void stage(std::span<const std::byte> bytes, bool data) {
    const std::size_t capacity = detail::tuning::direct_write_bytes;
    while (!bytes.empty()) {
      // A slice at a time, hashed while the copy is still in the cache.
      const std::size_t n = std::min({bytes.size(), capacity - staged_, detail::tuning::hash_slice_bytes});
      std::byte* to = staging_.get() + staged_;
      std::memcpy(to, bytes.data(), n);
      if (data) hash({to, n});
      staged_ += n;
      bytes = bytes.subspan(n);
      if (staged_ == capacity) write_staged(capacity);
    }
  }
  // Writes the first `size` bytes of the staging buffer (whole blocks) at written_, keeping a
  // copy of what falls in the kept blocks.
  void write_staged(std::size_t size) {
    keep(staging_.get(), size);
    std::vector<iovec> piece{{staging_.get(), size}};
    file_.write(piece);
    written_ += size;
    staged_ = 0;
    if (progress_) progress_(std::min(written_, total_), total_);
  }

  byte_sink& file_;
  const std::function<void(std::uint64_t, std::uint64_t)>& progress_;
  std::uint64_t total_;
  std::uint64_t written_ = 0;
  std::size_t digest_at_;
  std::optional<detail::chunked_digest> digest_;
  std::vector<std::uint64_t> known_;  // the data's chunk hashes, if known
  // Through the page cache: the pieces queued and the slice they are hashed and written by.
  std::size_t slice_bytes_ = 0;
  std::vector<iovec> pieces_;
  std::size_t pending_ = 0;
  // With direct I/O: the staging buffer (direct_write_bytes, then the kept blocks' copy), the
  // bytes in it, and the file's range of the kept blocks (empty without a digest).
  buffer staging_;
  std::size_t staged_ = 0;
  std::size_t kept_first_ = 0, kept_end_ = 0;
};

// The chunk hashes remembered for the data section of `entries` (`data` bytes), where their bytes
// stand one after the other in memory (a snapshot laid out as a file): remember_chunk_hashes.
std::vector<std::uint64_t> known_hashes(entry_list entries, std::size_t data) {
  const std::byte* first = nullptr;
  const std::byte* end = nullptr;
  for (const entry_source* e : entries) {
    if (e->nbytes == 0) continue;
    if (e->write_rows || e->contiguous.size() != e->nbytes) return {};
    if (first == nullptr) first = end = e->contiguous.data();
    if (e->contiguous.data() != end) return {};
    end += e->nbytes;
  }
  if (first == nullptr) return {};
  std::vector<std::uint64_t> hashes = remembered_chunk_hashes({first, data});
  if (hashes.size() != (data + file_digest_chunk_bytes - 1) / file_digest_chunk_bytes) return {};
  return hashes;
}

}  // namespace

file_header make_file_header(entry_list entries, const metadata_map& metadata,
                             std::string_view digest) {
  // ckpt owns the digest keys: a value carried over from a loaded file would be stale.
  metadata_map fields = metadata;
  fields.erase(std::string(digest_key));
  for (const std::string_view key : earlier_digest_keys) fields.erase(std::string(key));
  // What transformers' from_pretrained asks of a safetensors file; the caller's value wins.
  fields.try_emplace("format", "pt");
  // A fixed-width placeholder, patched once the data are out.
  if (!digest.empty()) fields.insert_or_assign(std::string(digest), std::string(file_digest_digits, '0'));
  return make_header(entries, fields, digest);
}

void write_file(const file_at& target, entry_list entries, const metadata_map& metadata,
                const save_options& options, write_path path) {
  atomic_file file(target);
  write_file(file, entries, metadata, options, path);
  file.commit();
}

void write_file(byte_sink& file, entry_list entries, const metadata_map& metadata,
                const save_options& options, write_path path) {
  const file_header prepared = make_file_header(entries, metadata, options.digest ? digest_key : std::string_view());
  const std::string& header = prepared.bytes;
  const std::size_t digest_at = prepared.digest_at;
  std::uint64_t total = header.size();
  for (const entry_source* e : entries) total += e->nbytes;
  file.begin(total);
  data_writer out(file, options, total, std::as_bytes(std::span(header)), digest_at, path,
                  options.digest ? known_hashes(entries, total - header.size()) : std::vector<std::uint64_t>());
  // Entries that need reordering arrive in bands of whole rows, made one band ahead.
  reordered_bands bands(entries);
  for (std::size_t i = 0; i < entries.size();) {
    const entry_source& e = *entries[i];
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
  out.finish();
}

}  // namespace detail

}  // namespace ckpt
