#pragma once
// The writes a save makes with direct I/O (its descriptor in O_DIRECT), seen through the I/O seam
// (src/io/io_hooks.hpp): the bytes written, and those of them written from the writer's staging
// buffer (the one address every staged write is from: that of the first, which holds the
// header); and the data bytes the writer hashes as it writes them (direct I/O or not). Shared by
// the tests of both managers' background saves.

#include "io/io_hooks.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace ckpt_test {

// Records the direct writes of this process while it lives.
class direct_writes {
 public:
  direct_writes() : guard_(recording_hooks()) {
    const std::lock_guard lock(log().mutex);
    log().writes.clear();
    log().hashed = 0;
  }

  struct totals {
    std::size_t written = 0;  // 0 if the file system refused direct I/O
    std::size_t staged = 0;
    std::size_t hashed = 0;  // by the writer
  };
  [[nodiscard]] totals seen() const {
    const std::lock_guard lock(log().mutex);
    totals out;
    out.hashed = log().hashed;
    for (const write& w : log().writes) {
      out.written += w.size;
      if (w.from == log().writes.front().from) out.staged += w.size;
    }
    return out;
  }

 private:
  struct write {
    std::uintptr_t from;
    std::size_t size;
  };
  struct record {
    std::mutex mutex;
    std::vector<write> writes;
    std::size_t hashed = 0;
  };
  static record& log() {
    static record r;
    return r;
  }
  static ckpt::detail::io_hooks recording_hooks() {
    ckpt::detail::io_hooks h = ckpt::detail::system_hooks();
    h.writev = [](int fd, const iovec* pieces, int count) {
      if ((::fcntl(fd, F_GETFL) & O_DIRECT) != 0) {
        const std::lock_guard lock(log().mutex);
        for (int i = 0; i < count; ++i)
          log().writes.push_back({reinterpret_cast<std::uintptr_t>(pieces[i].iov_base), pieces[i].iov_len});
      }
      return ::writev(fd, pieces, count);
    };
    h.writer_hashed = [](std::size_t bytes) {
      const std::lock_guard lock(log().mutex);
      log().hashed += bytes;
    };
    return h;
  }
  ckpt::detail::io_hooks_guard guard_;
};

}  // namespace ckpt_test
