#include <ckpt/tensor.hpp>

#include "base/memory.hpp"

#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

namespace ckpt {

std::string to_string(std::span<const std::int64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i != 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::int64_t detail::numel_of(std::span<const std::int64_t> shape) {
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) {
    if (extent < 0) throw std::invalid_argument("ckpt: negative extent in shape " + to_string(shape));
    if (extent != 0 && count > std::numeric_limits<std::int64_t>::max() / extent)
      throw std::invalid_argument("ckpt: the element count of shape " + to_string(shape) +
                                  " overflows 64 bits");
    count *= extent;
  }
  return count;
}

std::size_t detail::nbytes_of(dtype type, std::int64_t numel) {
  const auto bits = static_cast<std::uint64_t>(bit_width(type));
  const auto count = static_cast<std::uint64_t>(numel);
  if (count > std::numeric_limits<std::uint64_t>::max() / bits)
    throw std::invalid_argument("ckpt: " + std::to_string(numel) + " elements of " +
                                std::string(to_string(type)) + " overflow 64 bits");
  if (count * bits % 8 != 0)
    throw std::invalid_argument("ckpt: " + std::to_string(numel) + " elements of " +
                                std::string(to_string(type)) + " are not a whole number of bytes");
  return static_cast<std::size_t>(count * bits / 8);
}

std::size_t tensor::checked_size(ckpt::dtype type, std::span<const std::int64_t> shape, std::size_t given) {
  const std::size_t expected = detail::nbytes_of(type, detail::numel_of(shape));
  if (expected != given)
    throw std::invalid_argument("ckpt: a " + std::string(to_string(type)) + " tensor of shape " +
                                to_string(shape) + " needs " + std::to_string(expected) +
                                " bytes, got " + std::to_string(given));
  return expected;
}

std::size_t tensor::alignment_of(ckpt::dtype type) noexcept {
  // The scalar carrying the dtype: C64 is two floats.
  if (type == dtype::c64) return alignof(float);
  return detail::has_scalar(type) ? detail::bit_width(type) / 8 : 1;
}

std::shared_ptr<std::byte[]> tensor::allocate(std::size_t size) { return detail::allocate_bytes(size); }

tensor::tensor(ckpt::dtype type, dims shape, std::span<const std::byte> bytes,
               std::shared_ptr<const void> owner)
    : dtype_(type),
      shape_(std::move(shape)),
      numel_(detail::numel_of(shape_)),
      bytes_(bytes),
      owner_(std::move(owner)) {}

tensor tensor::copy_of(ckpt::dtype type, dims shape, std::span<const std::byte> bytes) {
  checked_size(type, shape, bytes.size());
  return make(type, std::move(shape), [&](std::span<std::byte> out) {
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  });
}

tensor tensor::view_of(ckpt::dtype type, dims shape, std::span<const std::byte> bytes,
                       std::shared_ptr<const void> owner) {
  checked_size(type, shape, bytes.size());
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignment_of(type) != 0)
    return copy_of(type, std::move(shape), bytes);
  return tensor(type, std::move(shape), bytes, std::move(owner));
}

bool operator==(const tensor& a, const tensor& b) noexcept {
  return a.dtype_ == b.dtype_ && a.shape_ == b.shape_ &&
         (a.bytes_.empty() || a.bytes_.data() == b.bytes_.data() ||
          std::memcmp(a.bytes_.data(), b.bytes_.data(), a.bytes_.size()) == 0);
}

void tensor::throw_dtype_mismatch(ckpt::dtype requested) const {
  throw std::invalid_argument("ckpt: tensor of dtype " + std::string(to_string(dtype_)) +
                              " viewed as " + std::string(to_string(requested)));
}

}  // namespace ckpt
