#include "mapped_file.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ckpt::detail {

mapped_file::~mapped_file() { ::munmap(address_, size_); }

void mapped_file::read(std::span<const std::byte> from, std::byte* out) const {
  const auto offset = static_cast<off_t>(from.data() - static_cast<const std::byte*>(address_));
  if (read_fully(fd_.get(), out, from.size(), offset, path_) != from.size())
    throw format_error(path_, "the file shrank while it was being read");
}

void mapped_file::check_size() const {
  struct stat info {};
  if (::fstat(fd_.get(), &info) != 0) throw io_error(path_, "stat", last_error());
  if (static_cast<std::size_t>(info.st_size) < size_) throw format_error(path_, "the file shrank since it was loaded");
}

}  // namespace ckpt::detail
