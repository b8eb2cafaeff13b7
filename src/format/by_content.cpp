// A checkpoint file or its bytes, recognized by content (src/format/by_content.hpp): the first bytes
// decide between the torch reader (src/format/torch.hpp) and the safetensors file reader (src/format/reader.hpp),
// which are all it calls.
#include "by_content.hpp"

#include "io/folder.hpp"
#include "reader.hpp"
#include "torch.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>

namespace ckpt::detail {
namespace {

// True if `path` is a regular file that begins as a torch.save file does (a zip, or the pickled
// magic number of the format before PyTorch 1.6). Opened without waiting (a FIFO or a device is
// left to the safetensors reader, which refuses it by name); a file that cannot be opened is
// left to it too, so that its error names the file as before.
bool is_torch_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  std::array<std::byte, 32> start{};
  struct stat info {};
  ssize_t got = -1;
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode)) got = ::pread(fd, start.data(), start.size(), 0);
  ::close(fd);
  return got > 0 && looks_like_torch(std::span(start).first(static_cast<std::size_t>(got)));
}

}  // namespace

checkpoint load_by_content(const std::filesystem::path& path, const load_options& options, const torch_options& torch) {
  if (is_torch_file(path)) return load_torch(path, torch);
  return load_file(file_at_path(path), options);
}

checkpoint parse_by_content(std::span<const std::byte> file_bytes, const std::filesystem::path& origin,
                            const load_options& options, const torch_options& torch) {
  if (looks_like_torch(file_bytes)) return parse_torch(file_bytes, origin, torch);
  return parse_bytes(file_bytes, origin, options);
}

checkpoint parse_owned_by_content(std::shared_ptr<std::byte[]> bytes, std::size_t size,
                                  const std::filesystem::path& origin, const load_options& options,
                                  const torch_options& torch) {
  const std::span<const std::byte> file(bytes.get(), size);
  if (looks_like_torch(file)) return parse_torch(file, origin, torch);
  return parse_owned(std::move(bytes), size, origin, options);
}

}  // namespace ckpt::detail
