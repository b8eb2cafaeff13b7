#include "digest.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#include <vector>

namespace ckpt::detail {

std::uint64_t xxh3_of(std::span<const std::byte> bytes) noexcept { return XXH3_64bits(bytes.data(), bytes.size()); }

std::uint64_t file_digest(std::uint64_t header_hash, std::span<const std::uint64_t> chunk_hashes) {
  std::vector<unsigned char> bytes(8 * (1 + chunk_hashes.size()));
  const auto put = [&bytes](std::size_t i, std::uint64_t v) {
    for (std::size_t b = 0; b < 8; ++b) bytes[8 * i + b] = static_cast<unsigned char>(v >> (8 * b));
  };
  put(0, header_hash);
  for (std::size_t i = 0; i < chunk_hashes.size(); ++i) put(i + 1, chunk_hashes[i]);
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::string digest_hex(std::uint64_t value) {
  std::string out(file_digest_digits, '0');
  for (std::size_t i = file_digest_digits; i-- > 0; value >>= 4) out[i] = "0123456789abcdef"[value & 0xf];
  return out;
}

}  // namespace ckpt::detail
