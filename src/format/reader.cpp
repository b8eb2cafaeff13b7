// The file reader (src/format/reader.hpp): a safetensors file mapped, parsed and its digest
// verified, or bytes in memory parsed.
#include <ckpt/file.hpp>
#include <ckpt/name_pattern.hpp>

#include "base/digest.hpp"
#include "base/memory.hpp"
#include "base/parallel.hpp"
#include "base/tuning.hpp"
#include "io/mapped_file.hpp"
#include "reader.hpp"
#include "safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

namespace ckpt {

namespace {

using detail::run_in_parallel;

using progress_function = std::function<void(std::uint64_t, std::uint64_t)>;

// The chunks of digest_key's digest (digest.hpp combines them).
constexpr std::size_t digest_chunk_bytes = detail::file_digest_chunk_bytes;

// The hashes of digest_key's digest of a file whose header hashes to `header` and whose data
// section is `data`: `header`, then each chunk's, the halves on two threads from
// tuning::parallel_hash_bytes. When `data` is part of the
// mapping of `file`, each chunk is read with pread into the thread's staging band and hashed
// there: no page of the mapping is touched (a file truncated meanwhile is a format_error, not a
// SIGBUS). Progress is reported by this thread after each 64 chunks, counting both halves.
std::vector<std::uint64_t> chunk_hashes_of(std::uint64_t header, std::span<const std::byte> data,
                                          const detail::mapped_file* file, const progress_function& progress) {
  static_assert(digest_chunk_bytes <= detail::tuning::staging_bytes, "a chunk is read into one staging band");
  constexpr std::size_t report_chunks = 64;
  const std::size_t chunks = (data.size() + digest_chunk_bytes - 1) / digest_chunk_bytes;
  std::vector<std::uint64_t> hashes(1 + chunks);
  hashes[0] = header;
  std::atomic<std::uint64_t> hashed{0};
  std::uint64_t reported = 0;
  bool any_report = false;
  const auto report = [&](std::uint64_t count) {
    progress(count, data.size());
    reported = count;
    any_report = true;
  };
  run_in_parallel(data.size() >= detail::tuning::parallel_hash_bytes ? 2 : 1, [&](std::size_t part, std::size_t parts) {
    const std::size_t first = chunks * part / parts, last = chunks * (part + 1) / parts;
    std::optional<detail::staging_band> band;
    if (file != nullptr) band.emplace();
    std::uint64_t pending = 0;
    for (std::size_t k = first; k < last; ++k) {
      std::span<const std::byte> chunk = data.subspan(k * digest_chunk_bytes);
      chunk = chunk.first(std::min(digest_chunk_bytes, chunk.size()));
      if (file != nullptr) {
        file->read(chunk, band->data());
        chunk = {band->data(), chunk.size()};
      }
      hashes[1 + k] = detail::xxh3_of(chunk);
      pending += chunk.size();
      if ((k + 1 - first) % report_chunks == 0 || k + 1 == last) {
        const std::uint64_t count = hashed += pending;
        pending = 0;
        if (part == 0 && progress) report(count);
      }
    }
  });
  if (progress && (!any_report || reported != data.size())) report(data.size());
  return hashes;
}

// Checks the digest `parsed` records (if any, and if `options` ask for it) against the bytes of
// `file` (the mapping of `mapped`, or bytes in memory if that is null), the chunks hashed anew or,
// if `verified` holds them (the header's hash first, as this returns them: another process read
// the file), only the header. The parser checked the entry's form. A mapped file is then told
// the hashes of its chunks, against which it checks every later read (mapped_file::verified).
// Returns the hashes, the header's first; none if nothing was checked.
std::vector<std::uint64_t> verify_digest(const detail::parsed_file& parsed, std::span<const std::byte> file,
                                        detail::mapped_file* mapped, const std::filesystem::path& origin,
                                        const load_options& options, std::span<const std::uint64_t> verified) {
  if (!parsed.digest_at || !detail::checks_digest(options)) return {};
  // The header as it was hashed when written: its digits still the placeholder's zeros.
  const std::uint64_t header = detail::header_hash(file.first(parsed.data_start), *parsed.digest_at);
  std::vector<std::uint64_t> hashes;
  if (verified.empty()) {
    hashes = chunk_hashes_of(header, file.subspan(parsed.data_start), mapped, options.progress);
  } else {
    hashes.assign(verified.begin(), verified.end());
    hashes[0] = header;
  }
  const std::string& expected = parsed.contents.metadata().find(detail::digest_key)->second;
  const std::size_t chunks = (file.size() - parsed.data_start + digest_chunk_bytes - 1) / digest_chunk_bytes;
  const std::string computed = detail::digest_hex(detail::file_digest(hashes[0], std::span(hashes).subspan(1)));
  if (computed != expected || hashes.size() != 1 + chunks)
    throw integrity_error(origin, std::string(detail::digest_key), expected, computed);
  if (mapped != nullptr) mapped->verified(parsed.data_start, {hashes.begin() + 1, hashes.end()});
  return hashes;
}

}  // namespace

namespace detail {

checkpoint load_file(const file_at& file, const load_options& options, std::span<const std::uint64_t> verified) {
  const file_contents contents = map_file(file);
  const std::filesystem::path path = file.path();
  parsed_file parsed = parse_file(contents.bytes, path, contents.owner, contents.file, options.skipped);
  static_cast<void>(verify_digest(parsed, contents.bytes, contents.file, path, options, verified));
  return std::move(parsed.contents);
}

std::vector<std::uint64_t> verify_file(const file_at& file, const load_options& options) {
  const file_contents contents = map_file(file);
  const std::filesystem::path path = file.path();
  const parsed_file parsed = parse_file(contents.bytes, path, contents.owner, contents.file, options.skipped);
  return verify_digest(parsed, contents.bytes, contents.file, path, options, {});
}

checkpoint parse_bytes(std::span<const std::byte> file_bytes, const std::filesystem::path& origin,
                       const load_options& options) {
  auto copy = std::make_shared_for_overwrite<std::byte[]>(file_bytes.size());
  if (!file_bytes.empty()) std::memcpy(copy.get(), file_bytes.data(), file_bytes.size());
  return parse_owned(std::move(copy), file_bytes.size(), origin, options);
}

checkpoint parse_owned(std::shared_ptr<std::byte[]> bytes, std::size_t size, const std::filesystem::path& origin,
                       const load_options& options, std::span<const std::uint64_t> verified) {
  // `bytes` stays held here until the digest is checked: a file without tensors keeps none.
  const std::span<const std::byte> file(bytes.get(), size);
  detail::parsed_file parsed = detail::parse_file(file, origin, bytes, nullptr, options.skipped);
  static_cast<void>(verify_digest(parsed, file, nullptr, origin, options, verified));
  return std::move(parsed.contents);
}

checkpoint chosen(const checkpoint& t, const load_options& options) {
  return options.only ? select(t, *options.only) : t;
}

}  // namespace detail

}  // namespace ckpt
