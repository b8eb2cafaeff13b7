#include "digest.hpp"

#include "hex.hpp"
#include "stream_copy.hpp"

// On x86, a libxxhash built with its dispatcher picks the widest vector unit (SSE2, AVX2, AVX-512) at run time
// through its *_dispatch entry points; this header maps the usual names onto them.
#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#else
#include <xxhash.h>
#endif

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <utility>

namespace ckpt::detail {

// A streaming XXH3-64 state (seed 0), reset. Not in an unnamed namespace: chunked_digest::stream
// derives from it.
class xxh3_stream {
 public:
  xxh3_stream() : state_(XXH3_createState()) {
    if (state_ == nullptr) throw std::bad_alloc();
    XXH3_64bits_reset(state_);
  }
  xxh3_stream(const xxh3_stream&) = delete;
  xxh3_stream& operator=(const xxh3_stream&) = delete;
  ~xxh3_stream() { XXH3_freeState(state_); }
  void update(const void* bytes, std::size_t size) noexcept { XXH3_64bits_update(state_, bytes, size); }
  [[nodiscard]] std::uint64_t value() const noexcept { return XXH3_64bits_digest(state_); }
  void reset() noexcept { XXH3_64bits_reset(state_); }

 private:
  XXH3_state_t* state_;
};

struct chunked_digest::stream : xxh3_stream {};

std::uint64_t xxh3_of(std::span<const std::byte> bytes) noexcept { return XXH3_64bits(bytes.data(), bytes.size()); }

std::uint64_t header_hash(std::span<const std::byte> header, std::size_t digest_at) {
  xxh3_stream hash;
  hash.update(header.data(), digest_at);
  const std::string zeros(file_digest_digits, '0');
  hash.update(zeros.data(), zeros.size());
  const std::span<const std::byte> rest = header.subspan(digest_at + file_digest_digits);
  hash.update(rest.data(), rest.size());
  return hash.value();
}

std::uint64_t file_digest(std::uint64_t header_hash, std::span<const std::uint64_t> chunk_hashes) {
  std::vector<unsigned char> bytes(8 * (1 + chunk_hashes.size()));
  const auto put = [&bytes](std::size_t i, std::uint64_t v) {
    for (std::size_t b = 0; b < 8; ++b) bytes[8 * i + b] = static_cast<unsigned char>(v >> (8 * b));
  };
  put(0, header_hash);
  for (std::size_t i = 0; i < chunk_hashes.size(); ++i) put(i + 1, chunk_hashes[i]);
  return XXH3_64bits(bytes.data(), bytes.size());
}

chunked_digest::chunked_digest(std::uint64_t header_hash) : stream_(std::make_unique<stream>()), header_(header_hash) {}

chunked_digest::~chunked_digest() = default;

void chunked_digest::update(std::span<const std::byte> bytes) {
  while (!bytes.empty()) {
    const std::size_t part = std::min(bytes.size(), file_digest_chunk_bytes - filled_);
    stream_->update(bytes.data(), part);
    bytes = bytes.subspan(part);
    filled_ += part;
    if (filled_ == file_digest_chunk_bytes) {
      chunks_.push_back(stream_->value());
      stream_->reset();
      filled_ = 0;
    }
  }
}

std::uint64_t chunked_digest::value() const {
  std::vector<std::uint64_t> chunks = chunks_;
  if (filled_ != 0) chunks.push_back(stream_->value());
  return file_digest(header_, chunks);
}

std::uint64_t xxh3_copy(std::byte* to, std::span<const std::byte> from) noexcept {
  const std::uint64_t hash = xxh3_of(from);
  copy_to_memory(to, from.data(), from.size());
  fence_stores();
  return hash;
}

namespace {

struct remembered {
  std::mutex mutex;
  // By the data's first byte: its size and its chunks' hashes.
  std::map<const std::byte*, std::pair<std::size_t, std::vector<std::uint64_t>>> hashes;

  static remembered& get() {
    static remembered instance;
    return instance;
  }
};

}  // namespace

void remember_chunk_hashes(std::span<const std::byte> data, std::vector<std::uint64_t> hashes) {
  remembered& r = remembered::get();
  const std::lock_guard lock(r.mutex);
  r.hashes.insert_or_assign(data.data(), std::pair(data.size(), std::move(hashes)));
}

void forget_chunk_hashes(const std::byte* data) noexcept {
  remembered& r = remembered::get();
  const std::lock_guard lock(r.mutex);
  r.hashes.erase(data);
}

std::vector<std::uint64_t> remembered_chunk_hashes(std::span<const std::byte> data) {
  remembered& r = remembered::get();
  const std::lock_guard lock(r.mutex);
  const auto it = r.hashes.find(data.data());
  if (it == r.hashes.end() || it->second.first != data.size()) return {};
  return it->second.second;
}

std::string digest_hex(std::uint64_t value) { return to_hex(value, file_digest_digits); }

}  // namespace ckpt::detail
