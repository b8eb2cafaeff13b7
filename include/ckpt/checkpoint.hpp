#pragma once
/// \file
/// `ckpt::checkpoint`: an immutable collection of tensors keyed by distinct non-empty names,
/// and the functions of Raven's `Kaun.Checkpoint` that build and query one without templates.

#include <ckpt/tensor.hpp>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ckpt {

/// A file's `__metadata__`: string keys to string values.
using metadata_map = std::map<std::string, std::string, std::less<>>;

/// An immutable collection of tensors keyed by distinct, non-empty names, with the string
/// metadata a safetensors file carries. Cheap to copy (copies share everything) and safe to
/// read from several threads at once. A default-constructed checkpoint is empty.
class checkpoint {
 public:
  /// One entry: its name and tensor.
  using entry = std::pair<std::string, tensor>;
  /// Iterates the entries in name order.
  using const_iterator = std::vector<entry>::const_iterator;

  /// The empty checkpoint (Kaun's `empty`).
  /// \throws nothing
  checkpoint() noexcept = default;

  /// A checkpoint holding `entries` and `metadata`.
  /// \throws std::invalid_argument if a name is empty, is `__metadata__`, or appears twice
  /// (the message quotes the name).
  explicit checkpoint(std::vector<entry> entries, metadata_map metadata = {});

  /// The names of the entries, sorted (byte-wise).
  /// \throws std::bad_alloc
  [[nodiscard]] std::vector<std::string> names() const;
  /// The entry named `name`, or null if there is none. The pointer lives as long as any copy of
  /// this checkpoint.
  /// \throws nothing
  [[nodiscard]] const tensor* find(std::string_view name) const noexcept;
  /// The entry named `name`.
  /// \throws std::invalid_argument if there is none (the message quotes `name`).
  [[nodiscard]] const tensor& get(std::string_view name) const;
  /// True if an entry is named `name`.
  /// \throws nothing
  [[nodiscard]] bool contains(std::string_view name) const noexcept { return find(name) != nullptr; }
  /// The number of entries.
  /// \throws nothing
  [[nodiscard]] std::size_t size() const noexcept;
  /// True if there are no entries.
  /// \throws nothing
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  /// The first entry in name order.
  /// \throws nothing
  [[nodiscard]] const_iterator begin() const noexcept;
  /// Past the last entry.
  /// \throws nothing
  [[nodiscard]] const_iterator end() const noexcept;

  /// The file's `__metadata__` (empty if none); `save` writes it and `load` keeps it.
  /// \throws nothing
  [[nodiscard]] const metadata_map& metadata() const noexcept;
  /// This checkpoint with its metadata replaced by `metadata` (the tensors are shared).
  /// \throws std::bad_alloc
  [[nodiscard]] checkpoint with_metadata(metadata_map metadata) const;

 private:
  struct contents;
  std::shared_ptr<const contents> contents_;
};

/// A checkpoint with the single entry `name` holding `x` (its bytes shared). For an Eigen object
/// or another leaf, `of_params(leaf, name)` (ckpt/params.hpp) makes the one entry `name`.
/// \throws std::invalid_argument if `name` is empty or `__metadata__`.
[[nodiscard]] checkpoint of_tensor(std::string_view name, const tensor& x);

/// A checkpoint with the single entry `name` holding `i`, for counters such as a training step.
/// A value that fits in 32 bits is stored as Raven's `Kaun.Checkpoint.of_int` stores it, a
/// one-element I32 tensor of shape [1], so that other implementations of Kaun read the file; a
/// larger one as a one-element I64 tensor of shape [1] rather than truncated. Read it back with
/// `to_int`.
/// \throws std::invalid_argument if `name` is empty or `__metadata__`.
[[nodiscard]] checkpoint of_int(std::string_view name, std::int64_t i);

/// The integer stored at `name` by `of_int`: a one-element I32 or I64 tensor.
/// \throws std::invalid_argument if `name` has no entry, or its entry is not a one-element I32
/// or I64 tensor (the message names the entry's dtype and shape).
[[nodiscard]] std::int64_t to_int(std::string_view name, const checkpoint& t);

/// The checkpoint with the entries of all `ts`. Metadata are merged.
/// \throws std::invalid_argument if a name appears in more than one checkpoint, or a metadata
/// key has different values in two of them (the message quotes it).
[[nodiscard]] checkpoint concat(std::span<const checkpoint> ts);
/// \copydoc concat(std::span<const checkpoint>)
[[nodiscard]] checkpoint concat(std::initializer_list<checkpoint> ts);

}  // namespace ckpt
