#pragma once
// The digest `ckpt.xxh3_64_file` of a safetensors file, from its parts: the hash of the header
// (with the digest's 16 digits written as '0') and the hashes of the data section's 1 MiB chunks
// (the last one shorter). Whoever hashes the parts (one writer as the bytes go out, or several
// MPI ranks each reading back its share of the chunks) combines them here, so that every writer
// and the verifier compute the same value. This is the one unit that calls XXH3: every hash of
// the library (the parts, the digest, the chunks a verified mapping checks again) is taken here.

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ckpt::detail {

// The `__metadata__` key of ckpt's digest of the whole file, a fact of the file format
// (docs/guide.md, "File-format guarantees"; ckpt::save and ckpt::load document it). Its value is
// the digest below as 16 lowercase hex digits written plain between their quotes. A key that JSON
// spells with this key's length and one byte different, holding 16 hex digits, is a damaged
// digest entry (src/format/safetensors.hpp's is_damaged_digest_entry).
inline constexpr std::string_view digest_key = "ckpt.xxh3_64_file";

// The digest keys of earlier versions of ckpt, which hashed the data section only (per MiB as
// here, and the whole section at once): recognized, not verified. `load` keeps them as metadata,
// `save` drops them, and `ckpt verify` reports such a file as checked for its format only.
inline constexpr std::array<std::string_view, 2> earlier_digest_keys = {"ckpt.xxh3_64_per_mib", "ckpt.xxh3_64"};

// Whether `key` is one of ckpt's digest keys (digest_key or an earlier one), which describe one
// file's bytes: a save drops them (and writes a fresh digest_key when asked to).
[[nodiscard]] constexpr bool is_digest_key(std::string_view key) noexcept {
  return key == digest_key || key == earlier_digest_keys[0] || key == earlier_digest_keys[1];
}

// The digest's value (under digest_key) is written as this many lowercase hex digits.
inline constexpr std::size_t file_digest_digits = 16;
// The data section is hashed in chunks of this size.
inline constexpr std::size_t file_digest_chunk_bytes = std::size_t{1} << 20;

// XXH3-64 (seed 0) of `bytes`: the hash of the header, or of one chunk.
std::uint64_t xxh3_of(std::span<const std::byte> bytes) noexcept;

// The hash of a header as it was hashed when written: XXH3-64 (seed 0) of `header` (the file's
// first 8 + N bytes) with the file_digest_digits bytes at `digest_at`, the digest's digits, read
// as '0' (the placeholder the writer hashed). `digest_at + file_digest_digits` must not pass the
// end of `header`.
// Throws std::bad_alloc.
std::uint64_t header_hash(std::span<const std::byte> header, std::size_t digest_at);

// The digest: XXH3-64 of the little-endian 8-byte values [header_hash, chunk_hashes...].
// Throws std::bad_alloc.
std::uint64_t file_digest(std::uint64_t header_hash, std::span<const std::uint64_t> chunk_hashes);

// The digest of a file being written: the hash of its header (digits zeroed: xxh3_of of the
// header with its placeholder), then its data section, fed in pieces of any size, hashed per
// file_digest_chunk_bytes chunk as they arrive.
class chunked_digest {
 public:
  // Throws std::bad_alloc.
  explicit chunked_digest(std::uint64_t header_hash);
  chunked_digest(const chunked_digest&) = delete;
  chunked_digest& operator=(const chunked_digest&) = delete;
  ~chunked_digest();
  // Feeds the next bytes of the data section.
  // Throws std::bad_alloc.
  void update(std::span<const std::byte> bytes);
  // The digest of the header and the data fed so far (file_digest).
  // Throws std::bad_alloc.
  [[nodiscard]] std::uint64_t value() const;
  // The header's hash it was made with.
  [[nodiscard]] std::uint64_t header_hash() const noexcept { return header_; }

 private:
  struct stream;  // XXH3's streaming state, over the current chunk
  std::unique_ptr<stream> stream_;
  std::size_t filled_ = 0;  // bytes of the current chunk
  std::uint64_t header_;
  std::vector<std::uint64_t> chunks_;  // the hashes of the whole chunks
};

// XXH3-64 of `from` (a chunk), copied to `to` on the way: hashed first, which brings it into the
// cache, then copied from there around the caches (non-temporal stores, which do not read the
// destination's lines first; fenced before this returns). One read of `from` from memory, where a
// copy and then a hash of the copy would read and write it twice.
std::uint64_t xxh3_copy(std::byte* to, std::span<const std::byte> from) noexcept;

// The chunks' hashes of data sections hashed as they were copied into memory (a background save's
// snapshot, src/structures/snapshot.cpp), which the writer of those bytes takes instead of reading them
// again (src/format/writer.cpp). `remember_chunk_hashes` while the bytes at `data` stay as they were hashed
// (the data section's chunks: file_digest_chunk_bytes each, the last shorter), until
// `forget_chunk_hashes(data.data())`.
// Throws std::bad_alloc.
void remember_chunk_hashes(std::span<const std::byte> data, std::vector<std::uint64_t> hashes);
void forget_chunk_hashes(const std::byte* data) noexcept;
// The hashes remembered for exactly the bytes `data` (the same first byte and size), or none.
// Throws std::bad_alloc.
std::vector<std::uint64_t> remembered_chunk_hashes(std::span<const std::byte> data);

// `value` as 16 lowercase hex digits (src/base/hex.hpp).
// Throws std::bad_alloc.
std::string digest_hex(std::uint64_t value);

}  // namespace ckpt::detail
