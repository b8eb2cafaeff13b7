// libFuzzer target: arbitrary bytes as a safetensors file (see exercise.hpp for what is checked).
// Built by tests/fuzz/fuzz.cmake with -DCKPT_BUILD_FUZZ=ON and clang; run by tests/fuzz/run.sh.

#include "exercise.hpp"

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <system_error>

namespace {

// A private scratch folder for the file path of the checks, on tmpfs when there is one so that
// the fsyncs of save cost nothing; removed at exit.
class scratch_folder {
 public:
  scratch_folder() {
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm")
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    path_ = base / ("ckpt-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path_);
  }
  scratch_folder(const scratch_folder&) = delete;
  scratch_folder& operator=(const scratch_folder&) = delete;
  ~scratch_folder() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span bytes(reinterpret_cast<const std::byte*>(data), size);
  // An exception escaping here (an exercise_failure, std::bad_alloc, ...) aborts: a finding.
  static const scratch_folder scratch;
  static_cast<void>(ckpt_fuzz::exercise(bytes, {.scratch = scratch.path()}));
  return 0;
}
