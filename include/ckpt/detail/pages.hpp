#pragma once
// Not part of the API: where a tensor's bytes live, and the library's one way to copy them out.
// The entries of a loaded file view the file's read-only mapping (mapped without read-ahead, so
// that loading reads only the header); that mapping is for what must be zero-copy, the header
// and the views a user asks for. Everything that copies an entry's bytes out (extraction into
// leaves, casts, transposes) reads them from the file's descriptor with pread, straight into the
// destination when the layouts match, else through a small staging band that is reordered or
// converted while it is in the cache: no bulk copy touches the mapping, so a file truncated or
// unreadable during a load is an io_error or format_error naming it, never a SIGBUS. The
// functions are compiled in src/tensor/pages.cpp: the templates of leaf.hpp call them and do no I/O of
// their own.

#include <ckpt/tensor.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <span>

namespace ckpt::detail {

struct tensor_access {
  // tensor::view_of, telling where the bytes live: in the mapping of the loaded file `file`
  // (kept alive by `owner`), or in memory (null).
  static tensor view_of(dtype type, dims shape, std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                        const mapped_file* file);
  // The loaded file whose mapping `x` views, or null for a tensor in memory.
  static const mapped_file* file_of(const tensor& x) noexcept { return x.file_; }

  // Copies the bytes of `x` into `out` (of x.nbytes() bytes): from a loaded file with pread, from
  // memory with memcpy; 1 MiB or more is split between this thread and a helper.
  // Throws io_error naming the file if it cannot be read, format_error if it has been truncated
  // since it was loaded.
  static void read_bytes(const tensor& x, std::span<std::byte> out);
  // Writes the entry `x`, a C-order rows x cols matrix of `element`-byte elements, transposed
  // into `out` (its column-major storage), around the caches. From a loaded file, bands of rows
  // are read with pread into a staging band and transposed from there. Throws as read_bytes.
  static void read_transposed(const tensor& x, std::byte* out, std::size_t rows, std::size_t cols,
                              std::size_t element);
  // Calls visit(first, rows) for the C-order rows of `x` (each of `row_bytes` bytes, which must
  // divide x.nbytes()) in bands, in order: `rows` holds whole rows from row `first` on. A tensor
  // in memory is one band; a loaded file's bands are read with pread, about a staging band each.
  // Throws as read_bytes, and what `visit` throws.
  static void for_each_band(const tensor& x, std::size_t row_bytes,
                            const std::function<void(std::size_t first, std::span<const std::byte> rows)>& visit);

  // `x` itself when its bytes are in memory; for an entry of a loaded file, a copy read with
  // read_bytes, for code that reorders the bytes with random access (the adapters, ckpt diff).
  // Throws as read_bytes, std::bad_alloc.
  static tensor in_memory(const tensor& x);
};

// Advice for `bytes`, memory just allocated (by Eigen, through malloc) that a load is about to
// fill: when it is 32 MiB or more (malloc then maps it on its own), the whole 2 MiB pages inside
// it are advised MADV_HUGEPAGE, so that filling it takes one page fault a 2 MiB page instead of
// 512. Advice only: nothing changes where the kernel grants no huge pages.
void advise_fresh(std::span<std::byte> bytes) noexcept;

}  // namespace ckpt::detail
