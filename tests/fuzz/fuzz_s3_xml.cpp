// libFuzzer target: arbitrary bytes as an S3 server's XML answer (see exercise_s3_xml.hpp for what
// is checked). Built by tests/fuzz/fuzz.cmake with -DCKPT_BUILD_FUZZ=ON, clang and S3 support; run
// by `CKPT_FUZZ_TARGET=fuzz_s3_xml tests/fuzz/run.sh SECONDS`.

#include "exercise_s3_xml.hpp"

#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An exception escaping here (an s3_xml_exercise_failure, std::bad_alloc, ...) aborts: a finding.
  static_cast<void>(ckpt_fuzz::exercise_s3_xml({reinterpret_cast<const char*>(data), size}));
  return 0;
}
