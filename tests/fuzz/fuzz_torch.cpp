// libFuzzer target: arbitrary bytes as a torch.save file (see exercise_torch.hpp for what is
// checked). Built by tests/fuzz/fuzz.cmake with -DCKPT_BUILD_FUZZ=ON and clang; run by
// `CKPT_FUZZ_TARGET=fuzz_torch tests/fuzz/run.sh SECONDS`.

#include "exercise_torch.hpp"

#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An exception escaping here (a torch_exercise_failure, std::bad_alloc, ...) aborts: a finding.
  static_cast<void>(ckpt_fuzz::exercise_torch({reinterpret_cast<const std::byte*>(data), size}));
  return 0;
}
