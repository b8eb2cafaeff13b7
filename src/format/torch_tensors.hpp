#pragma once
// The tensor rebuild of the torch.save reader (src/format/torch_tensors.cpp), as src/format/torch.cpp hands it
// to the unpickler (src/format/pickle.hpp): its one job is to turn what the pickle refers to into
// tensors, the persistent ids into storages (the records `<name>/data/<key>` of the zip) and the
// calls of `_rebuild_tensor_v2` into tensors, each a view of the file where its bytes are C order
// and little-endian, else a copy in C order (strides gathered, big-endian bytes swapped). It calls
// the pickle's arena for its objects, the transpose kernel and the tensor's pages
// (ckpt/detail/pages.hpp); it reads no pickle and no zip itself.

#include <ckpt/tensor.hpp>

#include "pickle.hpp"
#include "torch_error.hpp"

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ckpt::detail {

class mapped_file;

/// The records of a torch.save zip, by name: where each one's bytes stand in the file's bytes.
using torch_records = std::map<std::string, std::span<const std::byte>, std::less<>>;

/// The pickle's tensor calls (pickle::tensor_calls) for the zip whose records are `records`, its
/// pickle `<prefix>data.pkl`, its byte order `big_endian`.
class torch_tensors final : public pickle::tensor_calls {
 public:
  /// \param origin names the file in messages; \param owner keeps the records' bytes alive;
  /// \param mapping the loaded file they are in (copies are read from it with pread), or null
  ///   for bytes in memory; \param objects the pickle's arena, which the storages and tensors
  ///   are made in and charged to; \param data the budget of tensor bytes, charged for copies.
  torch_tensors(const std::filesystem::path& origin, std::string_view prefix, const torch_records& records,
                bool big_endian, std::shared_ptr<const void> owner, const mapped_file* mapping, pickle::arena& objects,
                torch_budget& data);

  /// BINPERSID: ('storage', <storage type>, key, location, numel) names the record data/<key>.
  /// \throws torch_format_error if the id is not that, the record is missing or its size is not
  ///   numel elements.
  pickle::ref persistent_load(const pickle::ref& id) override;

  /// _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata]):
  /// the same view of the same storage, rebuilt again, is the same object (its names are tied).
  /// \throws torch_format_error if the arguments are not that, the view leaves its storage or
  ///   overflows, or a budget is spent.
  pickle::ref rebuild_tensor(const std::vector<pickle::ref>& args) override;

 private:
  struct strided_view;

  [[noreturn]] void fail(const std::string& rule) const;
  [[nodiscard]] std::vector<std::int64_t> int_tuple(const pickle::ref& x, std::string_view what) const;
  [[nodiscard]] strided_view checked_view(const pickle::storage_ref& s, std::int64_t offset, dims shape,
                                          std::vector<std::int64_t> stride) const;
  pickle::ref tensor_of(const pickle::storage_ref& s, const strided_view& v);

  const std::filesystem::path& origin_;
  std::string prefix_;
  const torch_records& records_;
  bool big_endian_;
  std::shared_ptr<const void> owner_;
  const mapped_file* mapping_;  // the loaded file the records are in, or null
  pickle::arena& objects_;      // the memory the objects built here take
  torch_budget& data_;          // tensor bytes: copies made here
  std::unordered_map<std::string, pickle::ref> views_;  // each tensor built, by storage, dtype, offset, shape and strides
};

}  // namespace ckpt::detail
