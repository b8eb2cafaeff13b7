#pragma once
// The digest `ckpt.xxh3_64_file` of a safetensors file, from its parts: the hash of the header
// (with the digest's 16 digits written as '0') and the hashes of the data section's 1 MiB chunks
// (the last one shorter). Whoever hashes the parts (one writer as the bytes go out, or several
// MPI ranks each reading back its share of the chunks) combines them here, so that every writer
// and the verifier compute the same value.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace ckpt::detail {

// The digest's value (under ckpt::digest_key, file.hpp) is written as this many lowercase hex digits.
inline constexpr std::size_t file_digest_digits = 16;
// The data section is hashed in chunks of this size.
inline constexpr std::size_t file_digest_chunk_bytes = std::size_t{1} << 20;

// XXH3-64 (seed 0) of `bytes`: the hash of the header, or of one chunk.
std::uint64_t xxh3_of(std::span<const std::byte> bytes) noexcept;

// The digest: XXH3-64 of the little-endian 8-byte values [header_hash, chunk_hashes...].
std::uint64_t file_digest(std::uint64_t header_hash, std::span<const std::uint64_t> chunk_hashes);

// `value` as 16 lowercase hex digits.
std::string digest_hex(std::uint64_t value);

}  // namespace ckpt::detail
