#pragma once
// Not part of the API: what the library does with the entries of a loaded file, which view the
// file's read-only mapping (mapped without read-ahead, so that loading reads only the header and
// extracting an entry reads only that entry). Extraction reads an entry in one pass: the
// entry's pages are read ahead for the pass, and dropped from the process once its leaf holds a
// copy (the page cache keeps them), so that loading a model does not hold it twice; a large
// C-order entry read into a built-in leaf does not touch the mapping at all (read_bytes).

#include <ckpt/tensor.hpp>

#include <cstddef>
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
  // Entries smaller than this get no page advice of their own: each madvise that changes the
  // mapping's access mode takes the process's mmap lock, which costs more than it saves on an
  // entry whose pages are cached. Runs of adjacent smaller entries are advised together
  // (prefetch_range).
  static constexpr std::size_t advised_bytes = std::size_t{2} << 20;
  // Prepares an entry of a file mapping for one pass of reading: its pages are read ahead in
  // large blocks as the pass goes. Does nothing for memory, or for an entry too small to gain.
  static void prefetch_pages(const tensor& x) noexcept;
  // The same for `mapped`, a range of a loaded file's mapping (say, the bytes of adjacent entries).
  static void prefetch_range(std::span<const std::byte> mapped) noexcept;
  // Drops the whole pages of the entry from the process (they are read again from the page
  // cache or the file the next time they are touched), and ends a prefetch_pages.
  static void release_pages(const tensor& x) noexcept;
  // The same for `mapped`, a range of a loaded file's mapping that prefetch_range prepared.
  static void release_range(std::span<const std::byte> mapped) noexcept;
  // Copies the bytes of `x` into `out` (of x.nbytes() bytes). An entry of 256 KiB or more of a
  // loaded file is read from the file (pread: no page faults, the file's read-ahead when cold);
  // 1 MiB or more is split between this thread and a helper.
  // Throws io_error naming the file if it cannot be read, format_error if it has been truncated
  // since it was loaded.
  static void read_bytes(const tensor& x, std::span<std::byte> out);
};

}  // namespace ckpt::detail
