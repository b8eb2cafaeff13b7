#include "io_hooks.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>

namespace ckpt::detail {

io_hooks system_hooks() noexcept {
  return {.writev = ::writev, .pwrite = ::pwrite, .fsync = ::fsync, .renameat = ::renameat, .unlinkat = ::unlinkat, .pread = ::pread,
          .setpriority = ::setpriority};
}

io_hooks& hooks() noexcept {
  static io_hooks table = system_hooks();
  return table;
}

}  // namespace ckpt::detail
