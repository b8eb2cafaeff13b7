#pragma once
// Not part of the API: what the library does with the entries of a loaded file, which view the
// file's read-only mapping (mapped without read-ahead, so that loading reads only the header and
// extracting an entry reads only that entry). Extraction reads an entry in one pass: the
// entry's pages are read ahead for the pass, and dropped from the process once its leaf holds a
// copy (the page cache keeps them), so that loading a model does not hold it twice.

#include <ckpt/tensor.hpp>

#include <cstddef>
#include <memory>
#include <span>

namespace ckpt::detail {

struct tensor_access {
  // tensor::view_of, telling where the bytes live (a loaded file's entries: storage::file_mapping).
  static tensor view_of(dtype type, dims shape, std::span<const std::byte> bytes, std::shared_ptr<const void> owner,
                        storage where);
  static storage where(const tensor& x) noexcept { return x.storage_; }
  // Prepares an entry of a file mapping for one pass of reading: its pages are read ahead in
  // large blocks as the pass goes. Does nothing for memory, or for an entry too small to gain.
  static void prefetch_pages(const tensor& x) noexcept;
  // Drops the whole pages of the entry from the process (they are read again from the page
  // cache or the file the next time they are touched), and ends a prefetch_pages.
  static void release_pages(const tensor& x) noexcept;
};

}  // namespace ckpt::detail
