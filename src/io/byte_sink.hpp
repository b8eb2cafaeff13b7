#pragma once
// Where the file writer (src/format/writer.cpp) sends a safetensors file's bytes, in file order: a
// temporary file that becomes the target when committed (atomic_file), or an upload to object
// storage that becomes the object when completed (src/s3/transfer.hpp). The writer does not
// commit: its caller does, once every byte is out.

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <string_view>
#include <vector>

namespace ckpt::detail {

class byte_sink {
 public:
  virtual ~byte_sink() = default;
  /// The file's size, told before the first write (an upload sizes its parts by it).
  virtual void begin(std::uint64_t /*total*/) {}
  /// Switches to direct I/O (see atomic_file::start_direct); false, changing nothing, where the
  /// sink takes no such writes.
  virtual bool start_direct() noexcept { return false; }
  /// Appends all of `pieces` (consumed).
  /// \throws io_error (or the sink's own error) naming the target.
  virtual void write(std::vector<iovec>& pieces) = 0;
  /// Rewrites `text` at `offset`, within what was written already (the digest's digits, in the
  /// header, once the data are out).
  virtual void write_at(std::string_view text, off_t offset) = 0;
  /// Cuts the file to `size` bytes (after direct writes padded to a whole block).
  virtual void truncate(off_t size) = 0;
};

}  // namespace ckpt::detail
