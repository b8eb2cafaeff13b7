// readahead_probe: how fast this machine reads a file that is not in the page cache through a
// read-only mapping, under each access advice ckpt could give. ckpt maps checkpoints MADV_RANDOM
// (so that loading reads the header only), and this shows why extraction and the digest check
// mark the range they read MADV_SEQUENTIAL instead of relying on MADV_WILLNEED.
//
//   readahead_probe FILE      (FILE of a few hundred MiB; its clean pages are dropped before each way)
//
// Each way touches one byte a page of the whole file in 64 MiB windows and prints MB/s.

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

enum class way { random, random_willneed, random_fadvise, random_readahead, random_sequential_window, normal, pread };

const char* name_of(way w) {
  switch (w) {
    case way::random: return "mapping, MADV_RANDOM";
    case way::random_willneed: return "MADV_RANDOM + MADV_WILLNEED per window";
    case way::random_fadvise: return "MADV_RANDOM + posix_fadvise(WILLNEED) per window";
    case way::random_readahead: return "MADV_RANDOM + readahead(2) per window";
    case way::random_sequential_window: return "MADV_RANDOM, window marked MADV_SEQUENTIAL (ckpt)";
    case way::normal: return "mapping, no advice";
    case way::pread: return "pread into a 64 MiB buffer";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: readahead_probe FILE\n");
    return 2;
  }
  const int fd = ::open(argv[1], O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::perror(argv[1]);
    return 2;
  }
  const auto size = static_cast<std::size_t>(::lseek(fd, 0, SEEK_END));
  constexpr std::size_t window = std::size_t{64} << 20, page = 4096;
  for (const way w : {way::random, way::random_willneed, way::random_fadvise, way::random_readahead,
                      way::random_sequential_window, way::normal, way::pread}) {
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    unsigned sum = 0;
    const double start = now();
    if (w == way::pread) {
      std::vector<char> buffer(window);
      for (std::size_t at = 0; at < size; at += window) {
        const ssize_t n = ::pread(fd, buffer.data(), window, static_cast<off_t>(at));
        for (ssize_t i = 0; i < n; i += page) sum += static_cast<unsigned char>(buffer[static_cast<std::size_t>(i)]);
      }
    } else {
      auto* base = static_cast<const char*>(::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0));
      if (base == MAP_FAILED) {
        std::perror("mmap");
        return 2;
      }
      void* whole = const_cast<char*>(base);
      if (w != way::normal) ::madvise(whole, size, MADV_RANDOM);
      for (std::size_t at = 0; at < size; at += window) {
        const std::size_t length = std::min(window, size - at);
        void* part = const_cast<char*>(base + at);
        if (w == way::random_willneed) ::madvise(part, length, MADV_WILLNEED);
        if (w == way::random_fadvise) ::posix_fadvise(fd, static_cast<off_t>(at), static_cast<off_t>(length), POSIX_FADV_WILLNEED);
        if (w == way::random_readahead) ::readahead(fd, static_cast<off_t>(at), length);
        if (w == way::random_sequential_window) ::madvise(part, length, MADV_SEQUENTIAL);
        for (std::size_t i = 0; i < length; i += page) sum += static_cast<unsigned char>(base[at + i]);
        if (w == way::random_sequential_window) ::madvise(part, length, MADV_RANDOM);
      }
      ::munmap(whole, size);
    }
    const double seconds = now() - start;
    std::printf("%-52s %7.3f s %8.0f MB/s   (%u)\n", name_of(w), seconds, static_cast<double>(size) / 1e6 / seconds, sum);
  }
  ::close(fd);
}
