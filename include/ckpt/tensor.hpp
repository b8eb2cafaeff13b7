#pragma once
/// \file
/// `ckpt::tensor`: one immutable checkpoint entry (dtype, shape, C-order little-endian bytes).

#include <ckpt/dtype.hpp>
#include <ckpt/detail/sizes.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace ckpt {

/// A tensor shape: one extent per dimension, outermost first (C order). `{}` is a scalar.
using dims = std::vector<std::int64_t>;

/// `"[2, 3]"`: how shapes appear in messages.
/// \throws std::bad_alloc
[[nodiscard]] std::string to_string(std::span<const std::int64_t> shape);

namespace detail {  // not part of the API; the tensor keeps the handle and does no I/O
class mapped_file;     // a loaded file's mapping, which a tensor's bytes may view
struct tensor_access;  // the library's access to them (ckpt/detail/pages.hpp, compiled in src/)
}  // namespace detail

/// One checkpoint entry: a dtype, a shape and the elements' bytes in C (row-major) order,
/// little-endian, exactly as they stand in a safetensors file.
///
/// A tensor is immutable and cheap to copy: copies share the bytes. The bytes are either
/// owned or a view into storage kept alive by the tensor (the mapping of a loaded file), and
/// are always aligned for `as<T>()`. A default-constructed tensor is an F32 tensor of shape [0].
class tensor {
 public:
  /// An empty F32 tensor of shape [0].
  /// \throws nothing
  tensor() noexcept = default;

  /// A tensor owning a copy of `bytes`.
  /// \throws std::invalid_argument if `bytes.size()` is not the size `type` and `shape` need.
  [[nodiscard]] static tensor copy_of(dtype type, dims shape, std::span<const std::byte> bytes);

  /// A tensor viewing `bytes` without copying them; `owner` keeps them alive (say, the
  /// `std::shared_ptr` of the buffer). Bytes that are misaligned for the dtype's scalar are
  /// copied into aligned storage instead.
  /// \throws std::invalid_argument if `bytes.size()` is not the size `type` and `shape` need.
  [[nodiscard]] static tensor view_of(dtype type, dims shape, std::span<const std::byte> bytes,
                                      std::shared_ptr<const void> owner);

  /// A tensor whose bytes `fill` writes: `fill(std::span<std::byte>)` receives the tensor's
  /// uninitialized storage (of the size `type` and `shape` need) and must write every byte.
  /// \throws std::invalid_argument on a bad shape; whatever `fill` throws.
  template <class Fill>
  [[nodiscard]] static tensor make(dtype type, dims shape, Fill&& fill) {
    const std::size_t size = detail::nbytes_of(type, detail::numel_of(shape));
    std::shared_ptr<std::byte[]> storage = allocate(size);
    const std::span<std::byte> bytes(storage.get(), size);
    std::forward<Fill>(fill)(bytes);
    return tensor(type, std::move(shape), bytes, std::move(storage));
  }

  /// The element type.
  /// \throws nothing
  [[nodiscard]] ckpt::dtype dtype() const noexcept { return dtype_; }
  /// The shape, outermost dimension first; empty for a scalar.
  /// \throws nothing
  [[nodiscard]] std::span<const std::int64_t> shape() const noexcept { return shape_; }
  /// The number of dimensions.
  /// \throws nothing
  [[nodiscard]] std::size_t rank() const noexcept { return shape_.size(); }
  /// The number of elements (1 for a scalar, 0 if an extent is 0).
  /// \throws nothing
  [[nodiscard]] std::int64_t numel() const noexcept { return numel_; }
  /// The elements' bytes, C order, little-endian.
  /// \throws nothing
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept { return bytes_; }
  /// The number of bytes of the elements.
  /// \throws nothing
  [[nodiscard]] std::size_t nbytes() const noexcept { return bytes_.size(); }

  /// The elements as a typed span, C order.
  /// \throws std::invalid_argument if `T` is not this tensor's dtype (the message names both).
  template <scalar T>
  [[nodiscard]] std::span<const T> as() const {
    if (dtype_of<T> != dtype_) throw_dtype_mismatch(dtype_of<T>);
    return {reinterpret_cast<const T*>(bytes_.data()), static_cast<std::size_t>(numel_)};
  }

  /// True if both tensors have the same dtype, shape and bytes.
  /// \throws nothing
  friend bool operator==(const tensor& a, const tensor& b) noexcept;

 private:
  friend struct detail::tensor_access;
  tensor(ckpt::dtype type, dims shape, std::span<const std::byte> bytes, std::shared_ptr<const void> owner);
  static std::shared_ptr<std::byte[]> allocate(std::size_t size);
  // The alignment a view of `type` needs (that of the scalar carrying it).
  static std::size_t alignment_of(ckpt::dtype type) noexcept;
  // The bytes a tensor of `type` and `shape` holds, checked against `given`.
  // Throws std::invalid_argument if they differ.
  static std::size_t checked_size(ckpt::dtype type, std::span<const std::int64_t> shape, std::size_t given);
  [[noreturn]] void throw_dtype_mismatch(ckpt::dtype requested) const;

  ckpt::dtype dtype_ = ckpt::dtype::f32;
  dims shape_{0};
  std::int64_t numel_ = 0;
  std::span<const std::byte> bytes_;
  std::shared_ptr<const void> owner_;
  // The loaded file whose mapping `bytes_` views (kept alive through `owner_`), or null.
  const detail::mapped_file* file_ = nullptr;
};

}  // namespace ckpt
