// What the writer reads an entry from (ckpt/detail/entry_source.hpp): its rows, and the source of
// a tensor's entry.
#include <ckpt/detail/entry_source.hpp>

#include <ckpt/detail/pages.hpp>

#include "io/mapped_file.hpp"

#include <cstdint>
#include <utility>

namespace ckpt::detail {

std::size_t entry_source::row_size() const {
  return row_bytes != 0 ? row_bytes : nbytes / static_cast<std::size_t>(shape.front());
}

std::size_t entry_source::row_count() const { return nbytes / row_size(); }

entry_source tensor_source(std::string name, const tensor& x) {
  const std::span<const std::int64_t> shape = x.shape();
  entry_source out{.name = std::move(name), .dtype = x.dtype(), .shape = dims(shape.begin(), shape.end()),
                   .nbytes = x.nbytes(), .contiguous = x.bytes(), .write_rows = {}, .keep_alive = x, .global_shape = {}, .first = -1};
  const mapped_file* file = tensor_access::file_of(x);
  if (file == nullptr || x.nbytes() == 0) return out;
  // Rows of one byte: bands of the writer's size, however the entry is shaped.
  out.contiguous = {};
  out.row_bytes = 1;
  out.write_rows = [file, bytes = x.bytes()](std::size_t first, std::size_t count, std::byte* to) {
    file->read(bytes.subspan(first, count), to);
  };
  return out;
}

}  // namespace ckpt::detail
